//! Picking the next token from the logits, in the order llama.cpp's common sampler applies
//! its default chain: repetition penalties over the last tokens of the context, top-k, top-p
//! (nucleus), min-p, the temperature, then a draw from a seeded generator, so that a seed
//! reproduces a run. At temperature 0 the draw is the most likely token after the penalties.
//! top-p and min-p judge the probabilities before the temperature, as llama.cpp's do.

use super::error::ModelError;
use super::penalties::{Penalties, Window};
use trine_ops::case::Rng;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0 is greedy.
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Keep the most likely tokens whose probabilities sum to at least p; 1 keeps all.
    pub top_p: f32,
    /// Keep the tokens at least p times as likely as the most likely one; 0 keeps all.
    pub min_p: f32,
    pub penalties: Penalties,
    pub seed: u64,
}

impl Default for Sampling {
    /// Greedy; llama.cpp's defaults for everything a temperature above 0 uses.
    fn default() -> Sampling {
        Sampling {
            temperature: 0.0,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            penalties: Penalties::default(),
            seed: 0,
        }
    }
}

impl Sampling {
    /// Whether the choice is the logits' own argmax, which a device can compute without
    /// reading the logits back.
    pub fn is_plain_greedy(&self) -> bool {
        self.temperature == 0.0 && self.penalties.off()
    }
}

pub struct Sampler {
    cfg: Sampling,
    rng: Rng,
    window: Window,
}

impl Sampler {
    pub fn new(cfg: Sampling) -> Result<Sampler, ModelError> {
        let bad = |what, value: f32, why| ModelError::Sampling {
            what,
            value: value.to_string(),
            why,
        };
        if !(cfg.temperature.is_finite() && cfg.temperature >= 0.0) {
            return Err(bad(
                "temperature",
                cfg.temperature,
                "must be finite and ≥ 0",
            ));
        }
        if !(cfg.top_p > 0.0 && cfg.top_p <= 1.0) {
            return Err(bad("top_p", cfg.top_p, "must be in (0, 1]"));
        }
        if !(0.0..=1.0).contains(&cfg.min_p) {
            return Err(bad("min_p", cfg.min_p, "must be in [0, 1]"));
        }
        let p = cfg.penalties;
        if !(p.repeat.is_finite() && p.repeat > 0.0 && (1.0 / p.repeat).is_finite()) {
            return Err(bad("repeat_penalty", p.repeat, "must be finite and > 0"));
        }
        if !p.frequency.is_finite() {
            return Err(bad("frequency_penalty", p.frequency, "must be finite"));
        }
        if !p.presence.is_finite() {
            return Err(bad("presence_penalty", p.presence, "must be finite"));
        }
        Ok(Sampler {
            cfg,
            rng: Rng::new(cfg.seed),
            window: Window::default(),
        })
    }

    pub fn config(&self) -> &Sampling {
        &self.cfg
    }

    /// Takes a token of the context (the prompt's and the generated ones, in order) into the
    /// penalties' window.
    pub fn accept(&mut self, id: u32) {
        self.window.push(id, self.cfg.penalties.last_n);
    }

    /// Empties the penalties' window, for a context that is rebuilt from its start.
    pub fn forget(&mut self) {
        self.window.clear();
    }

    /// The next token. NaN logits never win; the lowest id wins a tie, as in llama.cpp's
    /// greedy sampler. Logits that are all NaN (or none) name no token: that is
    /// [`ModelError::NanLogits`], not a token the model did not choose.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32, ModelError> {
        let cand = self.candidates(logits)?;
        if cand.len() == 1 {
            return Ok(cand[0].0);
        }
        // 53 random bits: a uniform draw in [0, 1).
        let unit = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let mut r = unit;
        for &(id, p) in &cand {
            r -= p;
            if r < 0.0 {
                return Ok(id);
            }
        }
        Ok(cand[cand.len() - 1].0)
    }

    /// The tokens the draw chooses from, most likely first, with their probabilities: the
    /// chain up to the draw.
    pub fn candidates(&self, logits: &[f32]) -> Result<Vec<(u32, f64)>, ModelError> {
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.is_nan())
            .map(|(i, &v)| (i as u32, v))
            .collect();
        if cand.is_empty() {
            return Err(ModelError::NanLogits);
        }
        self.window.apply(&self.cfg.penalties, &mut cand);
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if self.cfg.temperature == 0.0 {
            return Ok(vec![(cand[0].0, 1.0)]);
        }
        if self.cfg.top_k > 0 {
            cand.truncate(self.cfg.top_k);
        }
        if self.cfg.top_p < 1.0 {
            let probs = softmax(&cand, 1.0);
            let mut acc = 0.0;
            let keep = probs
                .iter()
                .position(|&p| {
                    acc += p;
                    acc >= self.cfg.top_p as f64
                })
                .map_or(probs.len(), |i| i + 1);
            cand.truncate(keep);
        }
        if self.cfg.min_p > 0.0 {
            // p_i ≥ min_p · p_max where logit_i ≥ logit_max + ln(min_p).
            let floor = cand[0].1 + self.cfg.min_p.ln();
            let keep = 1 + cand[1..].iter().take_while(|c| c.1 >= floor).count();
            cand.truncate(keep);
        }
        let probs = softmax(&cand, self.cfg.temperature as f64);
        Ok(cand.iter().map(|c| c.0).zip(probs).collect())
    }
}

/// The probabilities of candidates sorted most likely first, at temperature `t`.
fn softmax(cand: &[(u32, f32)], t: f64) -> Vec<f64> {
    let max = cand[0].1 as f64;
    let exps: Vec<f64> = cand
        .iter()
        .map(|c| ((c.1 as f64 - max) / t).exp())
        .collect();
    let total: f64 = exps.iter().sum();
    exps.into_iter().map(|e| e / total).collect()
}

/// The index of the largest non-NaN value, the lowest index on ties; `None` when all are NaN.
pub fn argmax(v: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &x) in v.iter().enumerate() {
        if !x.is_nan() && best.is_none_or(|(_, b)| x > b) {
            best = Some((i, x));
        }
    }
    best.map(|(i, _)| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_maximum_and_skips_nan() {
        assert_eq!(argmax(&[1.0, 3.0, f32::NAN, 3.0]), Some(1));
        assert_eq!(argmax(&[f32::NAN, -1.0]), Some(1));
        let mut s = Sampler::new(Sampling::default()).unwrap();
        assert_eq!(s.sample(&[0.5, 0.1, 2.0]).unwrap(), 2);
    }

    #[test]
    fn all_nan_logits_are_a_typed_error_at_every_temperature() {
        for temperature in [0.0, 0.8] {
            let mut s = Sampler::new(Sampling {
                temperature,
                ..Sampling::default()
            })
            .unwrap();
            for logits in [&[f32::NAN; 4][..], &[]] {
                assert!(
                    matches!(s.sample(logits), Err(ModelError::NanLogits)),
                    "temperature {temperature}, {} logits",
                    logits.len()
                );
            }
            // One number among the NaNs is the only choice there is.
            assert_eq!(s.sample(&[f32::NAN, -3.0, f32::NAN]).unwrap(), 1);
        }
    }

    #[test]
    fn top_k_one_is_greedy_and_a_seed_reproduces_a_draw() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 101) as f32 / 10.0).collect();
        let cfg = Sampling {
            temperature: 0.8,
            top_k: 1,
            top_p: 1.0,
            min_p: 0.0,
            seed: 7,
            ..Sampling::default()
        };
        assert_eq!(
            Sampler::new(cfg).unwrap().sample(&logits).ok(),
            argmax(&logits)
        );
        let cfg = Sampling { top_k: 0, ..cfg };
        let draw = |seed| {
            let mut s = Sampler::new(Sampling { seed, ..cfg }).unwrap();
            (0..20)
                .map(|_| s.sample(&logits).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }

    /// Five tokens whose probabilities are 1/2, 1/4, 1/8, 1/16, 1/16: each stage's survivors
    /// and the final probabilities, derived by hand.
    fn halves() -> Vec<f32> {
        [0.5f64, 0.25, 0.125, 0.0625, 0.0625]
            .iter()
            .map(|p| p.ln() as f32)
            .collect()
    }

    fn chain(cfg: Sampling, logits: &[f32]) -> Vec<(u32, f64)> {
        Sampler::new(cfg).unwrap().candidates(logits).unwrap()
    }

    fn assert_probs(got: &[(u32, f64)], want: &[(u32, f64)]) {
        assert_eq!(got.len(), want.len(), "{got:?} against {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.0, w.0, "{got:?} against {want:?}");
            assert!((g.1 - w.1).abs() < 1e-6, "{got:?} against {want:?}");
        }
    }

    #[test]
    fn top_k_top_p_and_min_p_keep_what_hand_derivation_keeps() {
        let at = |top_k, top_p, min_p, temperature| Sampling {
            temperature,
            top_k,
            top_p,
            min_p,
            ..Sampling::default()
        };
        let l = halves();
        // top-k 2: 1/2 and 1/4, renormalised.
        assert_probs(
            &chain(at(2, 1.0, 0.0, 1.0), &l),
            &[(0, 2.0 / 3.0), (1, 1.0 / 3.0)],
        );
        // top-p 0.8: 1/2 + 1/4 < 0.8 ≤ 1/2 + 1/4 + 1/8, so three stay: 4/7, 2/7, 1/7.
        assert_probs(
            &chain(at(0, 0.8, 0.0, 1.0), &l),
            &[(0, 4.0 / 7.0), (1, 2.0 / 7.0), (2, 1.0 / 7.0)],
        );
        // min-p 0.3: 0.3 · 1/2 = 0.15 keeps 1/2 and 1/4.
        assert_probs(
            &chain(at(0, 1.0, 0.3, 1.0), &l),
            &[(0, 2.0 / 3.0), (1, 1.0 / 3.0)],
        );
        // Temperature 0.5 squares the probabilities: 1/4 : 1/16 is 0.8 : 0.2.
        assert_probs(&chain(at(0, 1.0, 0.3, 0.5), &l), &[(0, 0.8), (1, 0.2)]);
        // min-p judges the probabilities before the temperature, as llama.cpp's chain does:
        // at temperature 2 the tempered probabilities (∝ √p) would all pass 0.3 of the
        // largest, but the untempered ones keep two, at √(1/2) : √(1/4).
        let r = 0.5f64.sqrt();
        assert_probs(
            &chain(at(0, 1.0, 0.3, 2.0), &l),
            &[(0, r / (r + 0.5)), (1, 0.5 / (r + 0.5))],
        );
        // Greedy keeps the largest alone.
        assert_probs(&chain(at(0, 1.0, 0.0, 0.0), &l), &[(0, 1.0)]);
    }

    /// llama.cpp's own chain (`scripts/reference/sampler_chain.cpp` against its libllama)
    /// keeps the same tokens with the same probabilities, penalties and greedy included.
    #[test]
    fn the_chain_keeps_what_llama_cpps_keeps() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/sampler_llama_cpp.json"
        );
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let f = |v: &serde_json::Value| v.as_f64().unwrap() as f32;
        let logits: Vec<f32> = r["logits"].as_array().unwrap().iter().map(f).collect();
        let cases = r["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 7);
        for c in cases {
            let mut s = Sampler::new(Sampling {
                temperature: f(&c["temp"]),
                top_k: c["top_k"].as_u64().unwrap() as usize,
                top_p: f(&c["top_p"]),
                min_p: f(&c["min_p"]),
                penalties: Penalties {
                    last_n: c["last_n"].as_u64().unwrap() as usize,
                    repeat: f(&c["repeat"]),
                    frequency: f(&c["frequency"]),
                    presence: f(&c["presence"]),
                },
                seed: 0,
            })
            .unwrap();
            for id in c["history"].as_array().unwrap() {
                s.accept(id.as_u64().unwrap() as u32);
            }
            let mut want: Vec<(u32, f64)> = c["kept"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| (k[0].as_u64().unwrap() as u32, k[1].as_f64().unwrap()))
                .collect();
            want.sort_by(|a, b| b.1.total_cmp(&a.1));
            let got = s.candidates(&logits).unwrap();
            assert_eq!(
                got.len(),
                want.len(),
                "{}: {got:?} against {want:?}",
                c["name"]
            );
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.0, w.0, "{}: {got:?} against {want:?}", c["name"]);
                assert!(
                    (g.1 - w.1).abs() < 1e-6,
                    "{}: {got:?} against {want:?}",
                    c["name"]
                );
            }
        }
    }

    #[test]
    fn penalties_come_first_and_apply_to_greedy_choice_too() {
        let cfg = Sampling {
            penalties: Penalties {
                last_n: 2,
                repeat: 1.1,
                ..Penalties::default()
            },
            ..Sampling::default()
        };
        assert!(!cfg.is_plain_greedy());
        let mut s = Sampler::new(cfg).unwrap();
        // 3.0 / 1.1 = 2.73 falls under token 1's 2.9.
        s.accept(0);
        assert_eq!(s.sample(&[3.0, 2.9]).unwrap(), 1);
        // Two more tokens push 0 out of the window of 2.
        s.accept(5);
        s.accept(6);
        assert_eq!(s.sample(&[3.0, 2.9]).unwrap(), 0);
        s.accept(0);
        s.forget();
        assert_eq!(s.sample(&[3.0, 2.9]).unwrap(), 0);
    }

    /// The draws follow the candidates' probabilities: 0.8 and 0.2 over 20,000 seeded draws,
    /// within 4 standard deviations (0.0113).
    #[test]
    fn draws_follow_the_probabilities() {
        let mut s = Sampler::new(Sampling {
            temperature: 0.5,
            top_p: 1.0,
            min_p: 0.3,
            seed: 11,
            ..Sampling::default()
        })
        .unwrap();
        let l = halves();
        let n = 20_000;
        let firsts = (0..n).filter(|_| s.sample(&l).unwrap() == 0).count();
        let share = firsts as f64 / n as f64;
        assert!(
            (share - 0.8).abs() < 4.0 * (0.8f64 * 0.2 / n as f64).sqrt(),
            "{share}"
        );
    }

    #[test]
    fn bad_options_are_typed_errors() {
        let bad = |cfg| matches!(Sampler::new(cfg), Err(ModelError::Sampling { .. }));
        assert!(bad(Sampling {
            temperature: -1.0,
            ..Sampling::default()
        }));
        assert!(bad(Sampling {
            top_p: 0.0,
            ..Sampling::default()
        }));
        assert!(bad(Sampling {
            min_p: 1.5,
            ..Sampling::default()
        }));
        for repeat in [0.0, -1.0, f32::INFINITY, f32::MIN_POSITIVE / 4.0] {
            assert!(bad(Sampling {
                penalties: Penalties {
                    repeat,
                    ..Penalties::default()
                },
                ..Sampling::default()
            }));
        }
        assert!(bad(Sampling {
            penalties: Penalties {
                presence: f32::NAN,
                ..Penalties::default()
            },
            ..Sampling::default()
        }));
    }
}

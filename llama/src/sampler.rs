//! Picking the next token from the logits: greedy at temperature 0, otherwise top-k, then
//! top-p (nucleus), then a draw at the temperature from a seeded generator, so that a seed
//! reproduces a run.

use super::error::ModelError;
use trine_ops::case::Rng;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0 is greedy.
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Keep the most likely tokens whose probabilities sum to at least p; 1 keeps all.
    pub top_p: f32,
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Sampling {
        Sampling {
            temperature: 0.0,
            top_k: 40,
            top_p: 0.95,
            seed: 0,
        }
    }
}

pub struct Sampler {
    cfg: Sampling,
    rng: Rng,
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
        Ok(Sampler {
            cfg,
            rng: Rng::new(cfg.seed),
        })
    }

    /// The next token. NaN logits never win; the lowest id wins a tie, as in llama.cpp's
    /// greedy sampler. Logits that are all NaN (or none) name no token: that is
    /// [`ModelError::NanLogits`], not a token the model did not choose.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32, ModelError> {
        if self.cfg.temperature == 0.0 {
            return argmax(logits).ok_or(ModelError::NanLogits);
        }
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.is_nan())
            .map(|(i, &v)| (i as u32, v))
            .collect();
        if cand.is_empty() {
            return Err(ModelError::NanLogits);
        }
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if self.cfg.top_k > 0 {
            cand.truncate(self.cfg.top_k);
        }
        let max = cand[0].1 as f64;
        let t = self.cfg.temperature as f64;
        let mut probs: Vec<f64> = cand
            .iter()
            .map(|c| ((c.1 as f64 - max) / t).exp())
            .collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
        let mut acc = 0.0;
        let keep = probs
            .iter()
            .position(|&p| {
                acc += p;
                acc >= self.cfg.top_p as f64
            })
            .map_or(probs.len(), |i| i + 1);
        probs.truncate(keep);
        let total: f64 = probs.iter().sum();
        // 53 random bits: a uniform draw in [0, 1).
        let unit = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let mut r = unit * total;
        for (c, p) in cand.iter().zip(&probs) {
            r -= p;
            if r <= 0.0 {
                return Ok(c.0);
            }
        }
        Ok(cand[keep - 1].0)
    }
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
            seed: 7,
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
    }
}

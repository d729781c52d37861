//! Repetition, frequency and presence penalties over the last tokens of the context, with
//! llama.cpp's arithmetic (`llama_sampler_penalties`): a token seen `c` times in the window has
//! its logit divided by the repetition penalty (multiplied where it is not positive, so that
//! the penalty always lowers it), then lowered by `c · frequency + presence`.

use std::collections::{HashMap, VecDeque};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Penalties {
    /// Tokens of the context the penalties look back on (llama.cpp's `penalty_last_n`); 0
    /// turns them off.
    pub last_n: usize,
    /// 1 is off.
    pub repeat: f32,
    /// 0 is off.
    pub frequency: f32,
    /// 0 is off.
    pub presence: f32,
}

impl Default for Penalties {
    /// llama.cpp's defaults: a window of 64, every penalty off.
    fn default() -> Penalties {
        Penalties {
            last_n: 64,
            repeat: 1.0,
            frequency: 0.0,
            presence: 0.0,
        }
    }
}

impl Penalties {
    /// Whether they change no logit, as llama.cpp decides it.
    pub fn off(&self) -> bool {
        self.last_n == 0 || (self.repeat == 1.0 && self.frequency == 0.0 && self.presence == 0.0)
    }
}

/// The window of tokens the penalties count, and their counts.
#[derive(Clone, Debug, Default)]
pub struct Window {
    last: VecDeque<u32>,
    counts: HashMap<u32, u32>,
}

impl Window {
    /// Takes `id` into a window of at most `last_n` tokens, the oldest leaving.
    pub fn push(&mut self, id: u32, last_n: usize) {
        if last_n == 0 {
            return;
        }
        while self.last.len() >= last_n {
            let Some(old) = self.last.pop_front() else {
                break;
            };
            if let Some(c) = self.counts.get_mut(&old) {
                *c -= 1;
                if *c == 0 {
                    self.counts.remove(&old);
                }
            }
        }
        self.last.push_back(id);
        *self.counts.entry(id).or_insert(0) += 1;
    }

    pub fn clear(&mut self) {
        self.last.clear();
        self.counts.clear();
    }

    /// Applies `p` to the logits of the candidates `(id, logit)` the window has seen.
    pub fn apply(&self, p: &Penalties, cand: &mut [(u32, f32)]) {
        if p.off() {
            return;
        }
        for (id, logit) in cand.iter_mut() {
            let Some(&count) = self.counts.get(id) else {
                continue;
            };
            if *logit <= 0.0 {
                *logit *= p.repeat;
            } else {
                *logit /= p.repeat;
            }
            *logit -= count as f32 * p.frequency + p.presence;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-derived, in values f32 holds exactly: the window of the last 4 of [9, 1, 3, 1, 1]
    /// is [1, 3, 1, 1], where 1 counts 3, 3 counts 1, and 9 has left.
    #[test]
    fn the_window_counts_the_last_n_and_the_math_is_llama_cpps() {
        let mut w = Window::default();
        for id in [9, 1, 3, 1, 1] {
            w.push(id, 4);
        }
        let p = Penalties {
            last_n: 4,
            repeat: 1.25,
            frequency: 0.5,
            presence: 0.25,
        };
        let mut cand = vec![(1, 2.5), (3, -2.0), (9, 4.0), (5, 1.0)];
        w.apply(&p, &mut cand);
        // 1: 2.5 / 1.25 − (3 · 0.5 + 0.25) = 2 − 1.75; 3: −2 · 1.25 − (1 · 0.5 + 0.25).
        assert_eq!(cand, vec![(1, 0.25), (3, -3.25), (9, 4.0), (5, 1.0)]);
    }

    #[test]
    fn penalties_at_their_neutral_values_or_an_empty_window_change_nothing() {
        let mut w = Window::default();
        w.push(2, 64);
        let mut cand = vec![(2, 3.0)];
        w.apply(&Penalties::default(), &mut cand);
        assert_eq!(cand, vec![(2, 3.0)]);
        let off = Penalties {
            last_n: 0,
            repeat: 2.0,
            ..Penalties::default()
        };
        assert!(off.off());
        let mut none = Window::default();
        none.push(2, 0);
        none.apply(
            &Penalties {
                repeat: 2.0,
                ..Penalties::default()
            },
            &mut cand,
        );
        assert_eq!(cand, vec![(2, 3.0)]);
    }
}

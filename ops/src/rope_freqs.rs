//! Rope's frequency table: what ggml's `ggml_rope_ext` turns pair `i` of a head by at position
//! `p`, for every frequency scaling a model file can ask for, reduced to one angle per position
//! unit per pair and one magnitude for all of them.
//!
//! ggml (ggml-cpu `ops.cpp`, `rope_yarn` and `ggml_rope_cache_init`) turns pair `i` by
//! `θ = p · base^(-2i/d) / ff_i` (`ff`: the optional frequency factors, the model's
//! `rope_freqs.weight`, into which Llama 3's `llama3` scaling is baked) and then, with
//! `s = freq_scale`:
//! - no extrapolation (`ext_factor` 0: scaling `none` with `s` = 1, or `linear`): `s·θ`;
//! - YaRN (`ext_factor` 1): `s·θ·(1 − r_i) + θ·r_i`, where the ramp `r_i` is 1 for the pairs
//!   below the correction dimension `low`, 0 above `high`, linear between
//!   (`rope_yarn_ramp`, the dimensions from `ggml_rope_yarn_corr_dims`).
//!
//! Either way the angle is `p` times a number that depends on `i` alone: the table's entry
//! `i`. `d` is the values of a head rope turns (`rot_dim`, ggml's `n_dims`: the head but for
//! partial rotary), for the angles, YaRN's correction dimensions and the factors' count. Both
//! cosine and sine are then multiplied by the magnitude `mscale`: llama.cpp's
//! `attn_factor` (the file's `rope.scaling.attn_factor`), times `1 + 0.1·ln(factor)` under YaRN
//! with a factor above 1 (llama.cpp divides its YaRN attention factor by that term and ggml
//! multiplies it back in, so it is what remains). The kernels read the table, `d/2` entries
//! and the magnitude after them, so every scaling runs the same kernels, and a file without
//! scaling turns exactly as before: its magnitude is 1.
//!
//! Entries are computed in f64 and rounded once to f32 (ggml multiplies `base^(-2/d)` up in
//! f32): a relative error in an entry is multiplied by the position, and one rounding keeps
//! every backend on the same f32 angle.

use super::shape::ShapeError;
use super::support::cos_sin;
use trine_ir::{BufferId, KernelBuilder, Scalar, Val};

const OP: &str = "rope";

/// YaRN's defaults in llama.cpp (`llama_hparams::yarn_beta_fast`, `yarn_beta_slow`), which it
/// uses for the Llama and Qwen2 architectures.
pub const YARN_BETA_FAST: f32 = 32.0;
pub const YARN_BETA_SLOW: f32 = 1.0;

/// How positions are scaled (llama.cpp's `rope.scaling.type` with its parameters).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    /// Positions as they are.
    None,
    /// Positions divided by `factor` (`freq_scale` = 1/factor).
    Linear { factor: f32 },
    /// YaRN: interpolation by `factor` for the low frequencies, extrapolation for the high
    /// ones, a ramp between, from the context the model was trained for.
    Yarn {
        factor: f32,
        original_context: u32,
        beta_fast: f32,
        beta_slow: f32,
    },
}

impl RopeScaling {
    /// ggml's `freq_scale`.
    fn freq_scale(&self) -> f64 {
        match *self {
            RopeScaling::None => 1.0,
            RopeScaling::Linear { factor } | RopeScaling::Yarn { factor, .. } => {
                1.0 / factor as f64
            }
        }
    }

    /// A short name for case names.
    fn label(&self) -> String {
        match *self {
            RopeScaling::None => String::new(),
            RopeScaling::Linear { factor } => format!("+linear{factor}"),
            RopeScaling::Yarn {
                factor,
                original_context,
                ..
            } => format!("+yarn{factor}x{original_context}"),
        }
    }
}

/// Everything that decides rope's angles and magnitude, as a model file gives it.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeFreqs {
    /// Frequency base (10000 for Llama 2, 100000 for SmolLM2, 500000 for Llama 3).
    pub base: f32,
    /// ggml's frequency factors, one per pair (each pair's angle is divided by its factor);
    /// empty where the model has none.
    pub factors: Vec<f32>,
    pub scaling: RopeScaling,
    /// llama.cpp's `rope.scaling.attn_factor`: a magnitude on every rotated value.
    pub attn_factor: f32,
}

impl RopeFreqs {
    /// `base^(-2i/d)` for every pair: rope without scaling.
    pub fn plain(base: f32) -> RopeFreqs {
        RopeFreqs {
            base,
            factors: vec![],
            scaling: RopeScaling::None,
            attn_factor: 1.0,
        }
    }

    /// Checks the table against the `rot_dim` values of a head rope turns.
    pub fn check(&self, rot_dim: u32) -> Result<(), ShapeError> {
        let half = rot_dim as usize / 2;
        if !self.factors.is_empty() && self.factors.len() != half {
            return Err(ShapeError::Mismatch {
                op: OP,
                what: "frequency factors (rot_dim/2)",
                expected: half,
                found: self.factors.len(),
            });
        }
        Ok(())
    }

    /// Pair `i`'s angle per position, in f64.
    pub fn pair(&self, rot_dim: u32, i: u32) -> f64 {
        let d = rot_dim as f64;
        let ff = self.factors.get(i as usize).map_or(1.0, |&f| f as f64);
        let theta = (self.base as f64).powf(-2.0 * i as f64 / d) / ff;
        let s = self.scaling.freq_scale();
        match self.scaling {
            RopeScaling::None | RopeScaling::Linear { .. } => theta * s,
            RopeScaling::Yarn {
                original_context,
                beta_fast,
                beta_slow,
                ..
            } => {
                let (low, high) =
                    corr_dims(rot_dim, original_context, self.base, beta_fast, beta_slow);
                let y = (i as f32 - low) / (high - low).max(0.001);
                let ramp = (1.0 - y.clamp(0.0, 1.0)) as f64;
                theta * (s * (1.0 - ramp) + ramp)
            }
        }
    }

    /// The magnitude every rotated value is multiplied by.
    pub fn magnitude(&self) -> f64 {
        let attn = self.attn_factor as f64;
        match self.scaling {
            RopeScaling::Yarn { factor, .. } if factor > 1.0 => {
                attn * (1.0 + 0.1 * (factor as f64).ln())
            }
            _ => attn,
        }
    }

    /// The `freq` input of the rope kernels: pair `i`'s angle per position at `i`, the
    /// magnitude at `rot_dim/2`.
    pub fn table(&self, rot_dim: u32) -> Vec<f32> {
        (0..rot_dim / 2)
            .map(|i| self.pair(rot_dim, i) as f32)
            .chain([self.magnitude() as f32])
            .collect()
    }

    /// What a case name says of the table beyond its base: nothing for plain rope.
    pub fn label(&self) -> String {
        let mut s = self.scaling.label();
        if !self.factors.is_empty() {
            s.push_str("+factors");
        }
        if self.attn_factor != 1.0 {
            s.push_str(&format!("+attn{}", self.attn_factor));
        }
        s
    }
}

/// The cosine and sine pair `i` of the `rot_dim` values of a head rope turns is turned by at
/// position `pos` (u32), from the `freq` table ([`RopeFreqs::table`]), both times the table's
/// magnitude: what every rope kernel rotates a pair by.
pub(crate) fn turn<'b>(
    k: &'b KernelBuilder,
    freq: BufferId,
    pos: Val<'b>,
    i: Val<'b>,
    rot_dim: u32,
) -> (Val<'b>, Val<'b>) {
    let theta = pos.cast(Scalar::F32) * k.load(freq, i);
    let (cos, sin) = cos_sin(k, theta);
    let magnitude = k.load(freq, k.u32(rot_dim / 2));
    (cos * magnitude, sin * magnitude)
}

/// ggml's `ggml_rope_yarn_corr_dims` in its f32 arithmetic: the first and last pair the ramp
/// moves over, which it floors and ceils, so its rounding decides whole pairs.
fn corr_dims(rot_dim: u32, original_context: u32, base: f32, fast: f32, slow: f32) -> (f32, f32) {
    let dim = |rot: f32| {
        rot_dim as f32 * (original_context as f32 / (rot * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * base.ln())
    };
    let start = dim(fast).floor();
    let end = dim(slow).ceil();
    (start.max(0.0), end.min(rot_dim as f32 - 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_table_is_base_powers_and_magnitude_one() {
        let t = RopeFreqs::plain(10_000.0).table(4);
        assert_eq!(t, vec![1.0, 0.01, 1.0]);
    }

    #[test]
    fn factors_and_linear_divide_the_angle() {
        let f = RopeFreqs {
            factors: vec![2.0, 8.0],
            scaling: RopeScaling::Linear { factor: 4.0 },
            attn_factor: 0.5,
            ..RopeFreqs::plain(10_000.0)
        };
        assert_eq!(f.table(4), vec![0.125, 0.01 / 32.0, 0.5]);
    }

    #[test]
    fn yarn_ramps_between_interpolation_and_extrapolation() {
        // head_dim 128, base 10000, trained for 4096, factor 4: ggml's correction dims are
        // floor(128·ln(4096/(32·2π))/(2·ln 10000)) = floor(20.94) = 20 and
        // ceil(128·ln(4096/(2π))/(2·ln 10000)) = ceil(45.02) = 46.
        assert_eq!(corr_dims(128, 4096, 10_000.0, 32.0, 1.0), (20.0, 46.0));
        let f = RopeFreqs {
            scaling: RopeScaling::Yarn {
                factor: 4.0,
                original_context: 4096,
                beta_fast: YARN_BETA_FAST,
                beta_slow: YARN_BETA_SLOW,
            },
            ..RopeFreqs::plain(10_000.0)
        };
        let plain = |i: u32| 10_000f64.powf(-2.0 * i as f64 / 128.0);
        // Below `low`: extrapolated (unscaled); above `high`: interpolated (÷4); between:
        // pair 33 is halfway, (33 − 20)/26, so its scale is 0.25·0.5 + 0.5.
        assert_eq!(f.pair(128, 20), plain(20));
        assert_eq!(f.pair(128, 46), plain(46) * 0.25);
        assert!((f.pair(128, 33) / plain(33) - 0.625).abs() < 1e-7);
        assert!((f.magnitude() - (1.0 + 0.1 * 4f64.ln())).abs() < 1e-15);
    }

    #[test]
    fn wrong_factor_count_is_a_typed_error() {
        let f = RopeFreqs {
            factors: vec![1.0; 3],
            ..RopeFreqs::plain(10_000.0)
        };
        assert!(matches!(f.check(4), Err(ShapeError::Mismatch { .. })));
        assert!(f.check(6).is_ok());
    }
}

//! Rotary position embedding on `[tokens × heads × head_dim]`, as ggml's `ggml_rope_ext` over
//! the whole head: its layouts and its plain-Rust reference, which the kernels that rotate
//! (rope with the KV-cache store, [`super::rope_store`], and in a QKV product's epilogue,
//! [`super::matvec_attn`]) are held to. What each pair turns by, for every frequency scaling,
//! is [`super::rope_freqs`]'s table.
//!
//! Token `t` sits at position `p = offset + t` (the offset is the number of tokens already in
//! the KV cache). Pair `i` of a head, `0 <= i < head_dim/2`, is rotated by `θ_i = p · f_i`
//! (`f_i` the table's entry; `base^(-2i/head_dim)` without scaling) and scaled by the table's
//! magnitude `m`: `(a, b) → (m·(a·cos θ − b·sin θ), m·(a·sin θ + b·cos θ))`. The layouts differ
//! in which two values form pair `i` (ggml-cpu `ops.cpp`, `rotate_pairs` as called from
//! `ggml_compute_forward_rope`):
//! - [`RopeMode::Normal`] (`GGML_ROPE_TYPE_NORMAL`, llama.cpp's `LLAMA_ROPE_TYPE_NORM`, used by
//!   the Llama architecture and so SmolLM2): `(x[2i], x[2i+1])`;
//! - [`RopeMode::Neox`] (`GGML_ROPE_TYPE_NEOX`, Qwen, Gemma, Phi, GPT-NeoX): `(x[i], x[i + d/2])`.
//!
//! The kernels take the table rather than calling `pow`: a relative error in a frequency is
//! multiplied by the position, and with `pow` in the kernel lavapipe's output at position 8191
//! differed from the interpreter's by an NMSE of 5e-8, half the bound; with the table both
//! compute the same f32 angle (NMSE 2e-15). The angle `p·f_i` is rounded to f32, an absolute
//! error up to `|θ|·2^-24` radians, which is also the output's relative error; at position
//! 8191 that makes an NMSE of 1e-9 against the f64 reference.

use super::rope_freqs::RopeFreqs;
use super::shape::ShapeError;
use super::support::{elements, expect_len, nonzero};

const OP: &str = "rope";

/// Positions must be exact in f32 (integers up to 2^24).
pub const MAX_POSITION: usize = 1 << 24;

/// Which two values of a head form a rotated pair (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeMode {
    /// `(x[2i], x[2i+1])`: ggml's `GGML_ROPE_TYPE_NORMAL`, the Llama layout.
    Normal,
    /// `(x[i], x[i + d/2])`: ggml's `GGML_ROPE_TYPE_NEOX`.
    Neox,
}

impl RopeMode {
    pub fn name(self) -> &'static str {
        match self {
            RopeMode::Normal => "normal",
            RopeMode::Neox => "neox",
        }
    }
}

/// Rope on `tokens × heads` heads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rope {
    pub tokens: u32,
    pub heads: u32,
    pub head_dim: u32,
    /// Position of the first token.
    pub offset: u32,
    pub mode: RopeMode,
}

impl Rope {
    /// Checks the shape; returns the element count of `x`.
    pub fn check(&self) -> Result<u32, ShapeError> {
        nonzero(OP, "tokens", self.tokens)?;
        nonzero(OP, "heads", self.heads)?;
        nonzero(OP, "head_dim", self.head_dim)?;
        if !self.head_dim.is_multiple_of(2) {
            return Err(ShapeError::NotMultiple {
                op: OP,
                what: "head_dim",
                value: self.head_dim as usize,
                multiple: 2,
            });
        }
        let last = self.offset as usize + self.tokens as usize - 1;
        if last >= MAX_POSITION {
            return Err(ShapeError::TooLarge {
                op: OP,
                what: "last position",
                value: last,
                limit: MAX_POSITION - 1,
            });
        }
        elements(
            OP,
            "tokens × heads × head_dim",
            &[self.tokens, self.heads, self.head_dim],
        )
    }
}

/// The plain-Rust reference in f64, on the values `x` holds (already rounded to the storage
/// type), turning each pair by `freqs` (its f64 angles, not the table's f32 ones); outputs are
/// not rounded.
pub fn reference(shape: &Rope, freqs: &RopeFreqs, x: &[f32]) -> Result<Vec<f64>, ShapeError> {
    let n = shape.check()?;
    expect_len(OP, "x", n as usize, x.len())?;
    freqs.check(shape.head_dim)?;
    let d = shape.head_dim as usize;
    let half = d / 2;
    let angles: Vec<f64> = (0..half as u32)
        .map(|i| freqs.pair(shape.head_dim, i))
        .collect();
    let m = freqs.magnitude();
    let mut y = vec![0f64; x.len()];
    for (row, (head_in, head_out)) in x.chunks(d).zip(y.chunks_mut(d)).enumerate() {
        let pos = (shape.offset as usize + row / shape.heads as usize) as f64;
        for (i, angle) in angles.iter().enumerate() {
            let theta = pos * angle;
            let (sin, cos) = theta.sin_cos();
            let (i0, i1) = match shape.mode {
                RopeMode::Normal => (2 * i, 2 * i + 1),
                RopeMode::Neox => (i, i + half),
            };
            let (a, b) = (head_in[i0] as f64, head_in[i1] as f64);
            head_out[i0] = m * (a * cos - b * sin);
            head_out[i1] = m * (a * sin + b * cos);
        }
    }
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(mode: RopeMode, offset: u32) -> Rope {
        Rope {
            tokens: 1,
            heads: 1,
            head_dim: 4,
            offset,
            mode,
        }
    }

    #[test]
    fn layouts_pair_different_values() {
        // Position 1: pair 0 turns by 1 radian, pair 1 by 10000^(-1/2) = 0.01 radian.
        let x = [1.0, 2.0, 3.0, 4.0];
        let plain = RopeFreqs::plain(10_000.0);
        let (s0, c0) = 1f64.sin_cos();
        let (s1, c1) = 0.01f64.sin_cos();
        let normal = reference(&shape(RopeMode::Normal, 1), &plain, &x).unwrap();
        let want = [
            c0 - 2.0 * s0,
            s0 + 2.0 * c0,
            3.0 * c1 - 4.0 * s1,
            3.0 * s1 + 4.0 * c1,
        ];
        for (a, b) in normal.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{normal:?} vs {want:?}");
        }
        let neox = reference(&shape(RopeMode::Neox, 1), &plain, &x).unwrap();
        let want = [
            c0 - 3.0 * s0,
            2.0 * c1 - 4.0 * s1,
            s0 + 3.0 * c0,
            2.0 * s1 + 4.0 * c1,
        ];
        for (a, b) in neox.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{neox:?} vs {want:?}");
        }
        // Position 0 rotates nothing.
        assert_eq!(
            reference(&shape(RopeMode::Neox, 0), &plain, &x).unwrap(),
            vec![1.0, 2.0, 3.0, 4.0]
        );
    }

    #[test]
    fn bad_shapes_are_typed_errors() {
        let odd = Rope {
            head_dim: 5,
            ..shape(RopeMode::Normal, 0)
        };
        assert!(matches!(odd.check(), Err(ShapeError::NotMultiple { .. })));
        let far = shape(RopeMode::Normal, u32::MAX);
        assert!(matches!(far.check(), Err(ShapeError::TooLarge { .. })));
        assert!(matches!(
            reference(
                &shape(RopeMode::Normal, 0),
                &RopeFreqs::plain(10_000.0),
                &[1.0; 3]
            ),
            Err(ShapeError::Mismatch { .. })
        ));
    }
}

//! Rotary position embedding on `[tokens × heads × head_dim]`, as ggml's `ggml_rope_ext`: its
//! layouts and its plain-Rust reference, which the kernels that rotate
//! (rope with the KV-cache store, [`super::rope_store`], and in a QKV product's epilogue,
//! [`super::matvec_attn`]) are held to. What each pair turns by, for every frequency scaling,
//! is [`super::rope_freqs`]'s table.
//!
//! Token `t` sits at position `p = offset + t` (the offset is the number of tokens already in
//! the KV cache). Rope turns the first `rot_dim` values of each head (llama.cpp's `n_rot`,
//! `{arch}.rope.dimension_count`: the whole head but for partial rotary, as Phi-4-mini's 96 of
//! 128) and passes the others through unchanged. Pair `i` of them, `0 <= i < rot_dim/2`, is
//! rotated by `θ_i = p · f_i` (`f_i` the table's entry; `base^(-2i/rot_dim)` without scaling)
//! and scaled by the table's magnitude `m`: `(a, b) → (m·(a·cos θ − b·sin θ), m·(a·sin θ +
//! b·cos θ))`. The layouts differ in which two values form pair `i` (ggml-cpu `ops.cpp`,
//! `rotate_pairs` as called from `ggml_compute_forward_rope`, with `n_dims` = `rot_dim`):
//! - [`RopeMode::Normal`] (`GGML_ROPE_TYPE_NORMAL`, llama.cpp's `LLAMA_ROPE_TYPE_NORM`, used by
//!   the Llama architecture and so SmolLM2): `(x[2i], x[2i+1])`;
//! - [`RopeMode::Neox`] (`GGML_ROPE_TYPE_NEOX`, Qwen, Gemma, Phi, GPT-NeoX):
//!   `(x[i], x[i + rot_dim/2])`.
//!
//! The kernels go over all `head_dim/2` pairs of a head; pairs `rot_dim/2..head_dim/2` are the
//! values past `rot_dim`, adjacent in both layouts (`(x[2i], x[2i+1])`), and are copied
//! ([`pair`]).
//!
//! The kernels take the table rather than calling `pow`: a relative error in a frequency is
//! multiplied by the position, and with `pow` in the kernel lavapipe's output at position 8191
//! differed from the interpreter's by an NMSE of 5e-8, half the bound; with the table both
//! compute the same f32 angle (NMSE 2e-15). The angle `p·f_i` is rounded to f32, an absolute
//! error up to `|θ|·2^-24` radians, which is also the output's relative error; at position
//! 8191 that makes an NMSE of 1e-9 against the f64 reference.

use super::rope_freqs::RopeFreqs;
use super::shape::ShapeError;
use super::support::{elements, expect_len, multiple_of, nonzero};
use trine_ir::{KernelBuilder, Val};

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

/// The two values of a head that pair `i` of its `head_dim/2` forms, where rope turns its
/// first `rot_dim` values: the pairs from `rot_dim/2` on are copied.
pub fn pair(mode: RopeMode, rot_dim: u32, i: u32) -> (u32, u32) {
    match mode {
        RopeMode::Neox if i < rot_dim / 2 => (i, i + rot_dim / 2),
        _ => (2 * i, 2 * i + 1),
    }
}

/// [`pair`] in a kernel for pair `i` of a head of `head_dim` values (`rot_dim`, `head_dim`
/// compile-time constants): the two indices, and where rope turns part of the head, whether
/// this pair turns. A whole head turns in the code it always had.
pub(crate) fn pair_in<'b>(
    k: &'b KernelBuilder,
    mode: RopeMode,
    (head_dim, rot_dim): (u32, u32),
    i: Val<'b>,
) -> (Val<'b>, Val<'b>, Option<Val<'b>>) {
    let turned = (rot_dim < head_dim).then(|| i.lt(k.u32(rot_dim / 2)));
    let (i0, i1) = match (mode, turned) {
        (RopeMode::Normal, _) => (i + i, i + i + k.u32(1)),
        (RopeMode::Neox, None) => (i, i + k.u32(rot_dim / 2)),
        (RopeMode::Neox, Some(turned)) => (
            k.select(turned, i, i + i),
            k.select(turned, i + k.u32(rot_dim / 2), i + i + k.u32(1)),
        ),
    };
    (i0, i1, turned)
}

/// Checks that rope turns `rot_dim` values of a head of `head_dim`: even, positive, at most
/// the head.
pub fn check_rot_dim(op: &'static str, head_dim: u32, rot_dim: u32) -> Result<(), ShapeError> {
    nonzero(op, "rot_dim", rot_dim)?;
    multiple_of(op, "rot_dim", rot_dim, 2)?;
    if rot_dim > head_dim {
        return Err(ShapeError::TooLarge {
            op,
            what: "rot_dim (the values of a head rope turns)",
            value: rot_dim as usize,
            limit: head_dim as usize,
        });
    }
    Ok(())
}

/// A label for kernel and case names where rope turns part of a head: nothing for a whole
/// head, so that those names stay as they were.
pub fn rot_label(head_dim: u32, rot_dim: u32) -> String {
    if rot_dim < head_dim {
        format!("_r{rot_dim}")
    } else {
        String::new()
    }
}

/// Rope on `tokens × heads` heads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rope {
    pub tokens: u32,
    pub heads: u32,
    pub head_dim: u32,
    /// The values of each head rope turns, from its first ([`check_rot_dim`]).
    pub rot_dim: u32,
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
        multiple_of(OP, "head_dim", self.head_dim, 2)?;
        check_rot_dim(OP, self.head_dim, self.rot_dim)?;
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
    freqs.check(shape.rot_dim)?;
    let d = shape.head_dim as usize;
    let angles: Vec<f64> = (0..shape.rot_dim / 2)
        .map(|i| freqs.pair(shape.rot_dim, i))
        .collect();
    let m = freqs.magnitude();
    let mut y: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for (row, (head_in, head_out)) in x.chunks(d).zip(y.chunks_mut(d)).enumerate() {
        let pos = (shape.offset as usize + row / shape.heads as usize) as f64;
        for (i, angle) in angles.iter().enumerate() {
            let theta = pos * angle;
            let (sin, cos) = theta.sin_cos();
            let (i0, i1) = pair(shape.mode, shape.rot_dim, i as u32);
            let (i0, i1) = (i0 as usize, i1 as usize);
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
            rot_dim: 4,
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
    fn partial_rotary_turns_the_first_values_and_copies_the_rest() {
        // Heads of 6, the first 4 turned at position 1: pair 0 by 1 radian, pair 1 by
        // 10000^(-2/4) = 0.01 radian (the exponent's denominator is rot_dim, not head_dim).
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let plain = RopeFreqs::plain(10_000.0);
        let (s0, c0) = 1f64.sin_cos();
        let (s1, c1) = 0.01f64.sin_cos();
        let partial = |mode| Rope {
            head_dim: 6,
            ..shape(mode, 1)
        };
        let neox = reference(&partial(RopeMode::Neox), &plain, &x).unwrap();
        let want = [
            c0 - 3.0 * s0,
            2.0 * c1 - 4.0 * s1,
            s0 + 3.0 * c0,
            2.0 * s1 + 4.0 * c1,
            5.0,
            6.0,
        ];
        for (a, b) in neox.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{neox:?} vs {want:?}");
        }
        let normal = reference(&partial(RopeMode::Normal), &plain, &x).unwrap();
        assert_eq!(&normal[4..], &[5.0, 6.0]);
        assert!((normal[2] - (3.0 * c1 - 4.0 * s1)).abs() < 1e-12);
        assert_eq!(pair(RopeMode::Neox, 4, 2), (4, 5));
    }

    #[test]
    fn bad_shapes_are_typed_errors() {
        for (rot_dim, head_dim) in [(0, 4), (3, 4), (6, 4)] {
            let s = Rope {
                rot_dim,
                head_dim,
                ..shape(RopeMode::Neox, 0)
            };
            assert!(s.check().is_err(), "rot_dim {rot_dim} of {head_dim}");
        }
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

//! A post-norm residual connection, per row: `y = x / sqrt(mean(x²) + eps) · w + r`. Gemma's
//! layers normalise each block's output before adding it to the residual stream
//! (`post_attention_norm`, `post_ffw_norm`: llama.cpp's `build_norm` then `ggml_add`); this is
//! [`crate::rms_norm`]'s kernel with the add in its store. One workgroup per row.
//!
//! Bound: the default 1e-7, [`crate::rms_norm`]'s reasoning with one more rounding for the add.

use super::rms_norm::{self, RmsNorm};
use super::shape::ShapeError;
use super::support::{expect_len, seed, Reduction};
use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, Scalar};

const OP: &str = "norm_add";

/// Buffers: `x` [rows × cols], `w` [cols], `r` [rows × cols], `y` [rows × cols], all f32.
/// Params: cols, eps ([`RmsNorm::params`]). Grid [`RmsNorm::grid`].
pub fn kernel(how: Reduction) -> Kernel {
    let k = KernelBuilder::new(&format!("norm_add_{}", how.name()), [rms_norm::WG, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let w = k.buffer("w", Scalar::F32, Access::Read);
    let r = k.buffer("r", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let cols = k.param("cols", Scalar::U32);
    let eps = k.param("eps", Scalar::F32);
    let (lid, base, scale) = rms_norm::row_scale(&k, how, x, cols, eps);
    k.for_range(lid, cols, rms_norm::WG, |c| {
        let normed = k.load(x, base + c) * scale * k.load(w, c);
        k.store(y, base + c, normed + k.load(r, base + c));
    });
    k.finish()
}

/// The plain-Rust reference, in f64.
pub fn reference(shape: &RmsNorm, x: &[f32], w: &[f32], r: &[f32]) -> Result<Vec<f64>, ShapeError> {
    let normed = rms_norm::reference(shape, x, w)?;
    expect_len(OP, "r", normed.len(), r.len())?;
    Ok(normed
        .iter()
        .zip(r)
        .map(|(n, &r)| n + f64::from(r))
        .collect())
}

/// A conformance case for `shape` with deterministic inputs. The subgroup kernel carries the
/// shared one as its fallback.
pub fn case(shape: RmsNorm, how: Reduction) -> Result<Case, ShapeError> {
    shape.check()?;
    let name = rms_norm::case_name(OP, &shape, how);
    let mut g = Rng::new(seed(&name));
    let n = (shape.rows * shape.cols) as usize;
    let x = g.f32s(n, -40.0, 40.0);
    let w = g.f32s(shape.cols as usize, -2.0, 6.0);
    let r = g.f32s(n, -3.0, 3.0);
    let want = reference(&shape, &x, &w, &r)?;
    let mut c = Case::new(name, kernel(how), shape.grid())
        .input("x", Scalar::F32, f32_bytes(&x))
        .input("w", Scalar::F32, f32_bytes(&w))
        .input("r", Scalar::F32, f32_bytes(&r))
        .output("y", Scalar::F32, vec![0; n * 4], want)
        .params(shape.params());
    if how == Reduction::Subgroup {
        c = c.fallback(kernel(Reduction::Shared));
    }
    Ok(c)
}

/// Gemma 3 270M's rows (640 wide, eps 1e-6) for a token and a prompt, an odd width, and the
/// shared reduction.
pub fn cases() -> Vec<Case> {
    let shapes = [
        (1, 640, Reduction::Subgroup),
        (7, 640, Reduction::Subgroup),
        (3, 1001, Reduction::Subgroup),
        (7, 640, Reduction::Shared),
    ];
    shapes
        .iter()
        .map(|&(rows, cols, how)| {
            let eps = 1e-6;
            case(RmsNorm { rows, cols, eps }, how)
        })
        .collect::<Result<_, _>>()
        .expect("the fixed shapes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_by_hand() {
        // Row [3, 4]: mean of squares 12.5, so y = x / sqrt(12.5) · w + r.
        let s = RmsNorm {
            rows: 1,
            cols: 2,
            eps: 0.0,
        };
        let y = reference(&s, &[3.0, 4.0], &[1.0, 2.0], &[10.0, -1.0]).unwrap();
        let d = 12.5f64.sqrt();
        assert_eq!(y, vec![3.0 / d + 10.0, 8.0 / d - 1.0]);
        assert!(matches!(
            reference(&s, &[3.0, 4.0], &[1.0, 2.0], &[1.0]),
            Err(ShapeError::Mismatch { .. })
        ));
    }
}

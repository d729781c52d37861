//! Scaled row softmax with an optional causal mask: `y = softmax(scale·x + mask)` per row, as
//! ggml's `ggml_soft_max_ext` with a causal mask. With [`Mask::Causal`], row `r` holds the
//! scores of the query at position `offset + r` against keys `0..cols`, and keys after the
//! query (columns `c > offset + r`) get probability exactly 0. No row is ever fully masked:
//! column 0 is always visible.
//!
//! One workgroup per row, strided loops for rows longer than the workgroup: the row maximum,
//! then the sum of `exp(v − max)`, then the normalised values (the exponentials are computed
//! again rather than stored, so the output is write-only).
//!
//! Bound: ggml's softmax bound, 1e-6. Each output carries the relative error of one `exp` (a
//! few ulp on every target, plus `|scale·x − max|·2^-24` from rounding its argument) and that
//! of the f32 row sum (`(cols/256 + 8)·2^-24` at most: sequential per invocation, then the
//! tree), about 1e-5 at worst for a 49152-wide row, so the NMSE stays below 1e-9.

use super::shape::ShapeError;
use super::support::{elements, expect_len, nonzero, seed, Combine, Reducer, Reduction};
use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const OP: &str = "softmax";

/// Invocations per workgroup (one row each).
pub const WG: u32 = 256;

/// Which scores a row sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mask {
    /// Every column.
    None,
    /// Row `r` sees columns `0..=offset + r` (query position `offset + r`).
    Causal { offset: u32 },
}

/// One softmax dispatch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Softmax {
    pub rows: u32,
    pub cols: u32,
    pub scale: f32,
    pub mask: Mask,
}

impl Softmax {
    /// Checks the shape; returns the element count of `x`.
    pub fn check(&self) -> Result<u32, ShapeError> {
        nonzero(OP, "rows", self.rows)?;
        nonzero(OP, "cols", self.cols)?;
        if let Mask::Causal { offset } = self.mask {
            // The last query position must fit the u32 arithmetic of the kernel.
            elements(OP, "offset + rows", &[offset.saturating_add(self.rows)])?;
        }
        elements(OP, "rows × cols", &[self.rows, self.cols])
    }

    pub fn causal(&self) -> bool {
        matches!(self.mask, Mask::Causal { .. })
    }

    pub fn grid(&self) -> [u32; 3] {
        [self.rows, 1, 1]
    }

    /// The kernel's parameters, in declaration order (the offset only for a causal mask).
    pub fn params(&self) -> Vec<ParamValue> {
        let mut p = vec![ParamValue::U32(self.cols), ParamValue::F32(self.scale)];
        if let Mask::Causal { offset } = self.mask {
            p.push(ParamValue::U32(offset));
        }
        p
    }
}

/// Buffers: `x`, `y` [rows × cols] f32. Params: cols, scale, and with `causal` the offset.
pub fn kernel(causal: bool, how: Reduction) -> Kernel {
    let mask = if causal { "causal" } else { "plain" };
    let k = KernelBuilder::new(&format!("softmax_{mask}_{}", how.name()), [WG, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let cols = k.param("cols", Scalar::U32);
    let scale = k.param("scale", Scalar::F32);
    let row = k.workgroup_id(0);
    // Columns `0..visible` take part; the rest are masked.
    let visible = if causal {
        let offset = k.param("offset", Scalar::U32);
        cols.min(offset + row + k.u32(1))
    } else {
        cols
    };
    let reducer = Reducer::new(&k, how);
    let lid = k.local_index();
    let base = row * cols;

    let m = k.var("max", Scalar::F32);
    m.set(k.f32(f32::NEG_INFINITY));
    k.for_range(lid, visible, WG, |c| {
        m.set(m.get().max(scale * k.load(x, base + c)))
    });
    let row_max = reducer.reduce(&k, lid, m.get(), Combine::Max);

    let s = k.var("sum", Scalar::F32);
    k.for_range(lid, visible, WG, |c| {
        s.set(s.get() + (scale * k.load(x, base + c) - row_max).exp())
    });
    let inv = k.f32(1.0) / reducer.reduce(&k, lid, s.get(), Combine::Sum);

    k.for_range(lid, cols, WG, |c| {
        let e = (scale * k.load(x, base + c) - row_max).exp() * inv;
        let v = if causal {
            k.select(c.lt(visible), e, k.f32(0.0))
        } else {
            e
        };
        k.store(y, base + c, v);
    });
    k.finish()
}

/// The plain-Rust reference in f64.
pub fn reference(shape: &Softmax, x: &[f32]) -> Result<Vec<f64>, ShapeError> {
    let n = shape.check()?;
    expect_len(OP, "x", n as usize, x.len())?;
    let scale = shape.scale as f64;
    Ok(x.chunks(shape.cols as usize)
        .enumerate()
        .flat_map(|(r, row)| {
            let visible = match shape.mask {
                Mask::None => row.len(),
                Mask::Causal { offset } => row.len().min(offset as usize + r + 1),
            };
            let v: Vec<f64> = row[..visible].iter().map(|&a| scale * a as f64).collect();
            let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = v.iter().map(|a| (a - m).exp()).sum();
            let masked = row.len() - visible;
            v.into_iter()
                .map(move |a| (a - m).exp() / sum)
                .chain(std::iter::repeat_n(0.0, masked))
        })
        .collect())
}

/// A conformance case for `shape` with deterministic inputs. The subgroup kernel carries the
/// shared one as its fallback.
pub fn case(shape: Softmax, how: Reduction) -> Result<Case, ShapeError> {
    let n = shape.check()?;
    let label = match how {
        Reduction::Subgroup => String::new(),
        Reduction::Shared => "shared/".into(),
    };
    let (mask, pos) = match shape.mask {
        Mask::None => ("", String::new()),
        Mask::Causal { offset } => ("causal/", format!("+pos{offset}")),
    };
    let name = format!(
        "{OP}/{mask}{label}f32/{}x{}{pos}+scale{}",
        shape.rows, shape.cols, shape.scale
    );
    let mut r = Rng::new(seed(&name));
    let x = r.f32s(n as usize, -8.0, 8.0);
    let want = reference(&shape, &x)?;
    let mut c = Case::new(name, kernel(shape.causal(), how), shape.grid())
        .input("x", Scalar::F32, f32_bytes(&x))
        .output("y", Scalar::F32, vec![0; x.len() * 4], want)
        .params(shape.params())
        .bound(NMSE_SOFTMAX);
    if how == Reduction::Subgroup {
        c = c.fallback(kernel(shape.causal(), Reduction::Shared));
    }
    Ok(c)
}

pub fn cases() -> Vec<Case> {
    let attn = 0.125; // 1/sqrt(64), SmolLM2-135M's attention scale
    let shapes = [
        (1, 1, 1.0, Mask::None, Reduction::Subgroup),
        (7, 1000, 0.5, Mask::None, Reduction::Subgroup),
        (2, 49152, 1.0, Mask::None, Reduction::Subgroup), // vocab-wide rows
        (
            9,
            300,
            attn,
            Mask::Causal { offset: 291 },
            Reduction::Subgroup,
        ), // last 9 of 300
        (
            7,
            20,
            attn,
            Mask::Causal { offset: 13 },
            Reduction::Subgroup,
        ),
        (
            64,
            64,
            attn,
            Mask::Causal { offset: 0 },
            Reduction::Subgroup,
        ),
        (
            3,
            700,
            attn,
            Mask::Causal { offset: 650 },
            Reduction::Subgroup,
        ),
        (7, 1000, 0.5, Mask::None, Reduction::Shared),
        (7, 20, attn, Mask::Causal { offset: 13 }, Reduction::Shared),
    ];
    shapes
        .iter()
        .map(|&(rows, cols, scale, mask, how)| {
            case(
                Softmax {
                    rows,
                    cols,
                    scale,
                    mask,
                },
                how,
            )
        })
        .collect::<Result<_, _>>()
        .expect("the fixed shapes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_rows_hide_later_columns() {
        let s = Softmax {
            rows: 2,
            cols: 3,
            scale: 2.0,
            mask: Mask::Causal { offset: 0 },
        };
        let y = reference(&s, &[0.0, 5.0, 5.0, 1.0, 0.0, 9.0]).unwrap();
        // Row 0 sees only column 0; row 1 sees columns 0 and 1 (scores 2 and 0).
        let e = 2f64.exp();
        assert_eq!(y[..3], [1.0, 0.0, 0.0]);
        assert!((y[3] - e / (e + 1.0)).abs() < 1e-15);
        assert!((y[4] - 1.0 / (e + 1.0)).abs() < 1e-15);
        assert_eq!(y[5], 0.0);
        // An offset past the row shows every column.
        let all = Softmax {
            mask: Mask::Causal { offset: 5 },
            ..s
        };
        let y = reference(&all, &[0.0; 6]).unwrap();
        assert!(y.iter().all(|&v| (v - 1.0 / 3.0).abs() < 1e-15));
    }

    #[test]
    fn bad_shapes_are_typed_errors() {
        let s = Softmax {
            rows: 2,
            cols: 0,
            scale: 1.0,
            mask: Mask::None,
        };
        assert!(matches!(s.check(), Err(ShapeError::Zero { .. })));
        let s = Softmax { cols: 4, ..s };
        assert!(matches!(
            reference(&s, &[0.0; 7]),
            Err(ShapeError::Mismatch { .. })
        ));
    }
}

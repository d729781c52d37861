//! RMS normalisation with weight, per row: `y = x / sqrt(mean(x²) + eps) * w`. This is
//! llama.cpp's `ggml_rms_norm` and the `ggml_mul` by the norm weight that always follows it,
//! fused. One workgroup per row; strided loops cover rows longer than the workgroup.
//!
//! Bound: the default 1e-7. The kernel's only approximations are the f32 sum of squares
//! (relative error at most `(cols/256 + 8)·2^-24`: sequential per invocation, then the
//! reduction) and `rsqrt` (a few ulp): a relative error of about 1e-5 per element at worst
//! for a 49152-wide row, an NMSE below 1e-9.

use super::shape::ShapeError;
use super::support::{elements, expect_len, nonzero, seed, Combine, Float, Reducer, Reduction};
use crate::case::*;
use trine_ir::{Access, BufferId, Kernel, KernelBuilder, ParamValue, Scalar, Val};

const OP: &str = "rms_norm";

/// Invocations per workgroup (one row each).
pub const WG: u32 = 256;

/// One rms_norm dispatch: `rows` rows of `cols` values, normalised independently.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsNorm {
    pub rows: u32,
    pub cols: u32,
    pub eps: f32,
}

impl RmsNorm {
    /// Checks the shape; returns the element count of `x`.
    pub fn check(&self) -> Result<u32, ShapeError> {
        nonzero(OP, "rows", self.rows)?;
        nonzero(OP, "cols", self.cols)?;
        elements(OP, "rows × cols", &[self.rows, self.cols])
    }

    pub fn grid(&self) -> [u32; 3] {
        [self.rows, 1, 1]
    }

    /// The kernel's parameters, in declaration order.
    pub fn params(&self) -> Vec<ParamValue> {
        vec![ParamValue::U32(self.cols), ParamValue::F32(self.eps)]
    }
}

/// What a norm writes: its rows in f32 (`y`), rounded to f16 (`y`, f16), or both (`y` f32 and
/// `y16` f16, for a layer whose f32 readers and f16 readers share them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NormOut {
    F32,
    Half,
    Both,
}

impl NormOut {
    fn suffix(self) -> &'static str {
        match self {
            NormOut::F32 => "",
            NormOut::Half => "f16_",
            NormOut::Both => "f32_f16_",
        }
    }
}

/// Buffers: `x` [rows × cols], `w` [cols], `y` [rows × cols], all f32. Params: cols, eps.
pub fn kernel(how: Reduction) -> Kernel {
    build(how, NormOut::F32)
}

/// [`kernel`] writing `out`: each value computed as there, then stored, rounded to f16 where
/// `out` asks (a prompt's products on f16 tiles read x so; written here, it needs no rounding
/// node of its own). Buffers `x`, `w`, then `y` (f16 for [`NormOut::Half`]) and for
/// [`NormOut::Both`] `y16` (f16).
pub fn out_kernel(how: Reduction, out: NormOut) -> Kernel {
    build(how, out)
}

fn build(how: Reduction, out: NormOut) -> Kernel {
    let name = format!("rms_norm_{}{}", out.suffix(), how.name());
    let k = KernelBuilder::new(&name, [WG, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let w = k.buffer("w", Scalar::F32, Access::Read);
    let y_elem = match out {
        NormOut::Half => Scalar::F16,
        NormOut::F32 | NormOut::Both => Scalar::F32,
    };
    let y = k.buffer("y", y_elem, Access::Write);
    let y16 = (out == NormOut::Both).then(|| k.buffer("y16", Scalar::F16, Access::Write));
    let cols = k.param("cols", Scalar::U32);
    let eps = k.param("eps", Scalar::F32);
    let (lid, base, scale) = row_scale(&k, how, x, cols, eps);
    k.for_range(lid, cols, WG, |c| {
        let v = k.load(x, base + c) * scale * k.load(w, c);
        let rounded = || v.cast(Scalar::F16);
        k.store(
            y,
            base + c,
            if y_elem == Scalar::F16 { rounded() } else { v },
        );
        if let Some(y16) = y16 {
            k.store(y16, base + c, rounded());
        }
    });
    k.finish()
}

/// The invocation's index in its workgroup, the start of the workgroup's row of `x`, and
/// `1 / sqrt(mean(x²) + eps)` over that row: what every kernel normalising rows computes
/// before its store.
pub(crate) fn row_scale<'b>(
    k: &'b KernelBuilder,
    how: Reduction,
    x: BufferId,
    cols: Val<'b>,
    eps: Val<'b>,
) -> (Val<'b>, Val<'b>, Val<'b>) {
    let reducer = Reducer::new(k, how);
    let lid = k.local_index();
    let base = k.workgroup_id(0) * cols;
    (lid, base, inv_rms(k, &reducer, (x, base), cols, eps))
}

/// `1 / sqrt(mean(x²) + eps)` over the `cols` values of `x` from `base`, split over the
/// workgroup's invocations (each sums its share in order, then `reducer` adds them).
pub(crate) fn inv_rms<'b>(
    k: &'b KernelBuilder,
    reducer: &Reducer,
    (x, base): (BufferId, Val<'b>),
    cols: Val<'b>,
    eps: Val<'b>,
) -> Val<'b> {
    let lid = k.local_index();
    let wg = k.workgroup_size()[0];
    // Four loads an iteration into four sums: a workgroup narrower than the row (a
    // quantizer's 32 invocations over a row of thousands) waits on four loads at a time, not
    // one. Columns past the row read its last one and add nothing.
    let sums: Vec<_> = (0..4).map(|_| k.var("sum_sq", Scalar::F32)).collect();
    let last = cols - k.u32(1);
    k.for_range(lid, cols, 4 * wg, |c| {
        let vs: Vec<_> = (0..4u32)
            .map(|j| {
                let at = if j == 0 { c } else { c + k.u32(j * wg) };
                let v = k.load(x, base + at.min(last));
                (at.lt(cols), v)
            })
            .collect();
        for (sum, (inside, v)) in sums.iter().zip(vs) {
            let v = k.select(inside, v, k.f32(0.0));
            sum.set(v.fma(v, sum.get()));
        }
    });
    let own = (sums[0].get() + sums[1].get()) + (sums[2].get() + sums[3].get());
    let total = reducer.reduce(k, lid, own, Combine::Sum);
    (total / cols.cast(Scalar::F32) + eps).rsqrt()
}

/// A case's name for `op` on `shape`: shared-memory reductions marked.
pub(crate) fn case_name(op: &str, shape: &RmsNorm, how: Reduction) -> String {
    let label = match how {
        Reduction::Subgroup => "",
        Reduction::Shared => "shared/",
    };
    format!(
        "{op}/{label}f32/{}x{}+eps{:e}",
        shape.rows, shape.cols, shape.eps
    )
}

/// The plain-Rust reference, in f64.
pub fn reference(shape: &RmsNorm, x: &[f32], w: &[f32]) -> Result<Vec<f64>, ShapeError> {
    let n = shape.check()?;
    expect_len(OP, "x", n as usize, x.len())?;
    expect_len(OP, "w", shape.cols as usize, w.len())?;
    Ok(x.chunks(shape.cols as usize)
        .flat_map(|row| {
            let ms = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / row.len() as f64;
            let scale = 1.0 / (ms + shape.eps as f64).sqrt();
            row.iter()
                .zip(w)
                .map(move |(&v, &w)| v as f64 * scale * w as f64)
        })
        .collect())
}

/// A conformance case for `shape` with deterministic inputs. The subgroup kernel carries the
/// shared one as its fallback.
pub fn case(shape: RmsNorm, how: Reduction) -> Result<Case, ShapeError> {
    out_case(shape, how, NormOut::F32)
}

/// [`case`] of [`out_kernel`] writing `out`: the rounded rows against the reference's values
/// rounded to f16, which the kernel's f32 values round to but where the two fall either side
/// of a halfway point (one f16 ulp, far inside the bound).
pub fn out_case(shape: RmsNorm, how: Reduction, out: NormOut) -> Result<Case, ShapeError> {
    shape.check()?;
    let mut name = case_name(OP, &shape, how);
    match out {
        NormOut::F32 => {}
        NormOut::Half => name = name.replacen("f32/", "f32->f16/", 1),
        NormOut::Both => name = name.replacen("f32/", "f32->f32,f16/", 1),
    }
    let mut r = Rng::new(seed(&name));
    let x = r.f32s((shape.rows * shape.cols) as usize, -2.0, 2.0);
    let w = r.f32s(shape.cols as usize, 0.5, 1.5);
    let want = reference(&shape, &x, &w)?;
    let rounded: Vec<f64> = want.iter().map(|&v| Float::F16.round(v)).collect();
    let mut c = Case::new(name, build(how, out), shape.grid())
        .input("x", Scalar::F32, f32_bytes(&x))
        .input("w", Scalar::F32, f32_bytes(&w));
    c = match out {
        NormOut::F32 => c.output("y", Scalar::F32, vec![0; x.len() * 4], want),
        NormOut::Half => c.output("y", Scalar::F16, vec![0; x.len() * 2], rounded),
        NormOut::Both => c
            .output("y", Scalar::F32, vec![0; x.len() * 4], want)
            .output("y16", Scalar::F16, vec![0; x.len() * 2], rounded),
    };
    c = c.params(shape.params());
    if how == Reduction::Subgroup {
        c = c.fallback(build(Reduction::Shared, out));
    }
    Ok(c)
}

pub fn cases() -> Vec<Case> {
    let eps = 1e-5;
    let shapes = [
        (1, 576, Reduction::Subgroup), // SmolLM2-135M decode
        (7, 576, Reduction::Subgroup), // SmolLM2-135M prefill
        (3, 1, Reduction::Subgroup),
        (5, 1000, Reduction::Subgroup),
        (2, 4099, Reduction::Subgroup),
        (7, 576, Reduction::Shared),
        (5, 1000, Reduction::Shared),
    ];
    let mut v: Vec<Case> = shapes
        .iter()
        .map(|&(rows, cols, how)| case(RmsNorm { rows, cols, eps }, how))
        .collect::<Result<_, _>>()
        .expect("the fixed shapes are valid");
    // A larger eps changes the result measurably for small rows.
    v.push(
        case(
            RmsNorm {
                rows: 4,
                cols: 17,
                eps: 0.5,
            },
            Reduction::Subgroup,
        )
        .expect("a valid shape"),
    );
    // Rounded to f16 as written (an 8B layout's width, and the shared reduction), and both
    // (a mixture of experts' layer, whose router reads f32 and its experts f16).
    for (rows, cols, how, out) in [
        (3, 4096, Reduction::Subgroup, NormOut::Half),
        (5, 1000, Reduction::Shared, NormOut::Half),
        (3, 2048, Reduction::Subgroup, NormOut::Both),
    ] {
        v.push(out_case(RmsNorm { rows, cols, eps }, how, out).expect("a valid shape"));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_matches_hand_computation() {
        // Row [3, 4]: mean of squares 12.5, so y = x / sqrt(12.5 + eps) * w.
        let s = RmsNorm {
            rows: 1,
            cols: 2,
            eps: 0.0,
        };
        let y = reference(&s, &[3.0, 4.0], &[1.0, 2.0]).unwrap();
        let r = 12.5f64.sqrt();
        assert_eq!(y, vec![3.0 / r, 8.0 / r]);
    }

    #[test]
    fn bad_shapes_are_typed_errors() {
        let s = RmsNorm {
            rows: 2,
            cols: 3,
            eps: 1e-5,
        };
        assert_eq!(
            reference(&s, &[0.0; 5], &[1.0; 3]),
            Err(ShapeError::Mismatch {
                op: OP,
                what: "x",
                expected: 6,
                found: 5
            })
        );
        let zero = RmsNorm { cols: 0, ..s };
        assert!(matches!(zero.check(), Err(ShapeError::Zero { .. })));
        assert!(case(zero, Reduction::Shared).is_err());
    }
}

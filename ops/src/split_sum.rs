//! The sum of a K-split product's slices ([`crate::matmul_tiles::TilesSpec::split`]):
//! `y[t, r] = add[t, r] + Σ_z parts[z, t, r]`, the slices added in order, one invocation per
//! element. `y` may be `add` itself (a residual stream updated in place).
//!
//! Bound: [`NMSE_DEFAULT`]: a few f32 sums per element, a relative error of a few ulp.

use crate::case::*;
use crate::shape::ShapeError;
use crate::support::{elements, expect_len, nonzero, seed};
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const OP: &str = "split_sum";

/// Invocations per workgroup, along a row.
pub const WG: u32 = 256;

/// One dispatch's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitSum {
    pub tokens: u32,
    /// Elements of a row.
    pub rows: u32,
    /// Slices of K summed.
    pub splits: u32,
}

impl SplitSum {
    pub fn check(&self) -> Result<(), ShapeError> {
        nonzero(OP, "tokens", self.tokens)?;
        nonzero(OP, "rows", self.rows)?;
        nonzero(OP, "splits", self.splits)?;
        elements(OP, "parts", &[self.splits, self.tokens, self.rows])?;
        Ok(())
    }

    /// `[row blocks, tokens, 1]`.
    pub fn grid(&self) -> [u32; 3] {
        [self.rows.div_ceil(WG), self.tokens, 1]
    }

    /// rows, tokens, splits.
    pub fn params(&self) -> Vec<ParamValue> {
        vec![
            ParamValue::U32(self.rows),
            ParamValue::U32(self.tokens),
            ParamValue::U32(self.splits),
        ]
    }
}

/// Buffers `parts` (f32 `[splits × tokens × rows]`), with `add` `add` (f32 `[tokens ×
/// rows]`), then `y` (f32 `[tokens × rows]`). Params [`SplitSum::params`]; grid
/// [`SplitSum::grid`].
pub fn kernel(add: bool) -> Kernel {
    let name = if add { "split_sum_add" } else { OP };
    let k = KernelBuilder::new(name, [WG, 1, 1]);
    let parts = k.buffer("parts", Scalar::F32, Access::Read);
    let add = add.then(|| k.buffer("add", Scalar::F32, Access::Read));
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let rows = k.param("rows", Scalar::U32);
    let tokens = k.param("tokens", Scalar::U32);
    let splits = k.param("splits", Scalar::U32);
    let r = k.global_id(0);
    k.if_(r.lt(rows), || {
        let at = k.workgroup_id(1) * rows + r;
        let slice = tokens * rows;
        let sum = k.var("sum", Scalar::F32);
        sum.set(k.load(parts, at));
        k.for_range(k.u32(1), splits, 1, |z| {
            sum.set(sum.get() + k.load(parts, z * slice + at))
        });
        let v = match add {
            Some(a) => k.load(a, at) + sum.get(),
            None => sum.get(),
        };
        k.store(y, at, v);
    });
    k.finish()
}

/// `add + Σ_z parts[z]` in f64.
pub fn reference(s: SplitSum, parts: &[f32], add: Option<&[f32]>) -> Result<Vec<f64>, ShapeError> {
    s.check()?;
    let n = (s.tokens * s.rows) as usize;
    expect_len(OP, "parts", n * s.splits as usize, parts.len())?;
    if let Some(a) = add {
        expect_len(OP, "add", n, a.len())?;
    }
    Ok((0..n)
        .map(|i| {
            let sum: f64 = parts.iter().skip(i).step_by(n).map(|&v| f64::from(v)).sum();
            sum + add.map_or(0.0, |a| f64::from(a[i]))
        })
        .collect())
}

/// A case of `s` on random slices, with a residual where `add`.
pub fn case(s: SplitSum, add: bool) -> Result<Case, ShapeError> {
    let name = format!(
        "{OP}/{}x{}/s{}{}",
        s.tokens,
        s.rows,
        s.splits,
        if add { "/add" } else { "" }
    );
    let mut rng = Rng::new(seed(&name));
    let n = (s.tokens * s.rows) as usize;
    let parts = rng.f32s(n * s.splits as usize, -4.0, 4.0);
    let residual = add.then(|| rng.f32s(n, -2.0, 2.0));
    let want = reference(s, &parts, residual.as_deref())?;
    let mut case =
        Case::new(name, kernel(add), s.grid()).input("parts", Scalar::F32, f32_bytes(&parts));
    if let Some(a) = &residual {
        case = case.input("add", Scalar::F32, f32_bytes(a));
    }
    Ok(case
        .output("y", Scalar::F32, vec![0; n * 4], want)
        .params(s.params()))
}

/// Gemma 3 1B's FFN down over a prompt in four slices, with its residual; a row past a
/// workgroup in two slices; one slice.
pub fn cases() -> Vec<Case> {
    [
        (
            SplitSum {
                tokens: 7,
                rows: 1152,
                splits: 4,
            },
            true,
        ),
        (
            SplitSum {
                tokens: 3,
                rows: 300,
                splits: 2,
            },
            false,
        ),
        (
            SplitSum {
                tokens: 2,
                rows: 64,
                splits: 1,
            },
            true,
        ),
    ]
    .into_iter()
    .map(|(s, add)| case(s, add))
    .collect::<Result<_, _>>()
    .expect("the fixed shapes are valid")
}

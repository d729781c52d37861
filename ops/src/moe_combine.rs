//! A mixture-of-experts layer's output from its pairs' rows: `out[t, r] = add[t, r] +
//! Σ_s weights[t, s]·y[t·used + s, r]`, each token's chosen experts' down products weighted
//! by the routing and summed onto the residual. A prompt's experts' products on tiles
//! ([`crate::matmul_tiles::TilesSpec::experts`]) write each pair's row of its own; this sums
//! them, slot by slot in order, one invocation per output element.
//!
//! Bound: [`NMSE_DEFAULT`]: `used` products and sums rounded in f32, a relative error of a
//! few ulp per element, an NMSE near 1e-14.

use crate::case::*;
use crate::shape::ShapeError;
use crate::support::{elements, expect_len, nonzero, seed};
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const OP: &str = "moe_combine";

/// Invocations per workgroup, along a row.
pub const WG: u32 = 256;

/// One dispatch's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeCombine {
    pub tokens: u32,
    /// Experts chosen per token.
    pub used: u32,
    /// Elements of a row.
    pub rows: u32,
}

impl MoeCombine {
    pub fn check(&self) -> Result<(), ShapeError> {
        nonzero(OP, "tokens", self.tokens)?;
        nonzero(OP, "experts used", self.used)?;
        nonzero(OP, "rows", self.rows)?;
        elements(OP, "pairs' rows", &[self.tokens, self.used, self.rows])?;
        Ok(())
    }

    /// `[row blocks, tokens, 1]`.
    pub fn grid(&self) -> [u32; 3] {
        [self.rows.div_ceil(WG), self.tokens, 1]
    }

    /// rows, used.
    pub fn params(&self) -> Vec<ParamValue> {
        vec![ParamValue::U32(self.rows), ParamValue::U32(self.used)]
    }
}

/// Buffers `y` (f32 `[tokens·used × rows]`), `weights` (f32 `[tokens × used]`), `add` (f32
/// `[tokens × rows]`), then `out` (f32 `[tokens × rows]`). Params [`MoeCombine::params`];
/// grid [`MoeCombine::grid`].
pub fn kernel() -> Kernel {
    let k = KernelBuilder::new(OP, [WG, 1, 1]);
    let y = k.buffer("y", Scalar::F32, Access::Read);
    let weights = k.buffer("weights", Scalar::F32, Access::Read);
    let add = k.buffer("add", Scalar::F32, Access::Read);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    let rows = k.param("rows", Scalar::U32);
    let used = k.param("used", Scalar::U32);
    let r = k.global_id(0);
    let t = k.workgroup_id(1);
    k.if_(r.lt(rows), || {
        let at = t * rows + r;
        let sum = k.var("sum", Scalar::F32);
        sum.set(k.load(add, at));
        k.for_range(k.u32(0), used, 1, |s| {
            let pair = t * used + s;
            sum.set(sum.get() + k.load(weights, pair) * k.load(y, pair * rows + r));
        });
        k.store(out, at, sum.get());
    });
    k.finish()
}

/// The f64 reference.
pub fn reference(
    s: &MoeCombine,
    y: &[f32],
    weights: &[f32],
    add: &[f32],
) -> Result<Vec<f64>, ShapeError> {
    s.check()?;
    let (t, k, r) = (s.tokens as usize, s.used as usize, s.rows as usize);
    expect_len(OP, "y", t * k * r, y.len())?;
    expect_len(OP, "weights", t * k, weights.len())?;
    expect_len(OP, "add", t * r, add.len())?;
    Ok((0..t * r)
        .map(|i| {
            let (tok, row) = (i / r, i % r);
            let pairs = (0..k).map(|slot| {
                let p = tok * k + slot;
                f64::from(weights[p]) * f64::from(y[p * r + row])
            });
            f64::from(add[i]) + pairs.sum::<f64>()
        })
        .collect())
}

/// A conformance case: pairs' rows in [-1, 1), weights as the routing normalises them, a
/// residual in [-2, 2).
pub fn case(s: MoeCombine) -> Result<Case, ShapeError> {
    s.check()?;
    let name = format!("{OP}/t{}k{}/{}", s.tokens, s.used, s.rows);
    let mut rng = Rng::new(seed(&name));
    let (t, k, r) = (s.tokens as usize, s.used as usize, s.rows as usize);
    let y = rng.f32s(t * k * r, -1.0, 1.0);
    let weights = crate::matvec_ids::draw_weights(&mut rng, t, k);
    let add = rng.f32s(t * r, -2.0, 2.0);
    let want = reference(&s, &y, &weights, &add)?;
    Ok(Case::new(name, kernel(), s.grid())
        .input("y", Scalar::F32, f32_bytes(&y))
        .input("weights", Scalar::F32, f32_bytes(&weights))
        .input("add", Scalar::F32, f32_bytes(&add))
        .output("out", Scalar::F32, vec![0; t * r * 4], want)
        .params(s.params()))
}

/// The tiny test model's (2 of 8 experts, rows past a workgroup) and Qwen3-30B-A3B's (8 of
/// 128, 2048 wide) over a few tokens.
pub fn cases() -> Vec<Case> {
    let shape = |tokens, used, rows| MoeCombine { tokens, used, rows };
    [shape(5, 2, 300), shape(3, 1, 64), shape(4, 8, 2048)]
        .into_iter()
        .map(case)
        .collect::<Result<_, _>>()
        .expect("the fixed shapes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One token, two slots: 1 + 0.25·2 + 0.75·4 = 4.5.
    #[test]
    fn reference_matches_hand_computation() {
        let s = MoeCombine {
            tokens: 1,
            used: 2,
            rows: 1,
        };
        let got = reference(&s, &[2.0, 4.0], &[0.25, 0.75], &[1.0]).unwrap();
        assert_eq!(got, [4.5]);
        assert!(reference(&s, &[2.0], &[0.25, 0.75], &[1.0]).is_err());
    }
}

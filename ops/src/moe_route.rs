//! A mixture-of-experts layer's routing, as llama.cpp's `build_moe_ffn` computes it for a
//! softmax gate with normalised weights (Qwen3-MoE): the router's logits softmaxed over all
//! experts, the `used` most probable chosen (`ggml_argsort_top_k`), and their probabilities
//! divided by their sum (clamped below at f16's smallest normal, as llama.cpp clamps it).
//!
//! Layout: `logits` [tokens × experts] (the router product's output); `ids` u32
//! [tokens × used], the chosen experts by falling probability (equal logits: the lower
//! index first); `weights` f32 [tokens × used]. One single-invocation workgroup per token:
//! a token's experts are a few hundred at most, and the products after it wait on far more.
//!
//! Bound: [`crate::case::NMSE_SOFTMAX`] for the weights (an `exp` and a few roundings each);
//! the ids exactly, as the reference picks them from the same f32 logits.

use super::shape::ShapeError;
use super::support::{elements, expect_len, nonzero, seed};
use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const OP: &str = "moe_route";

/// What llama.cpp clamps the chosen probabilities' sum to from below: 2⁻¹⁴
/// (6.103515625e-5), f16's smallest normal.
pub const MIN_SUM: f32 = 1.0 / 16384.0;

/// One dispatch's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeRoute {
    pub tokens: u32,
    pub experts: u32,
    /// Experts chosen per token (`expert_used_count`).
    pub used: u32,
}

impl MoeRoute {
    pub fn check(&self) -> Result<(), ShapeError> {
        nonzero(OP, "tokens", self.tokens)?;
        nonzero(OP, "experts", self.experts)?;
        nonzero(OP, "experts used", self.used)?;
        if self.used > self.experts {
            return Err(ShapeError::TooLarge {
                op: OP,
                what: "experts used",
                value: self.used as usize,
                limit: self.experts as usize,
            });
        }
        elements(OP, "logits", &[self.tokens, self.experts])?;
        Ok(())
    }

    /// `[tokens, 1, 1]`.
    pub fn grid(&self) -> [u32; 3] {
        [self.tokens, 1, 1]
    }

    /// experts, used.
    pub fn params(&self) -> Vec<ParamValue> {
        vec![ParamValue::U32(self.experts), ParamValue::U32(self.used)]
    }
}

/// Buffers: `logits` (read), `ids`, `weights` (read and written: the chosen probabilities,
/// then divided by their sum). Params: experts, used.
pub fn kernel() -> Kernel {
    let k = KernelBuilder::new(OP, [1, 1, 1]);
    let logits = k.buffer("logits", Scalar::F32, Access::Read);
    let ids = k.buffer("ids", Scalar::U32, Access::Write);
    let weights = k.buffer("weights", Scalar::F32, Access::ReadWrite);
    let experts = k.param("experts", Scalar::U32);
    let used = k.param("used", Scalar::U32);
    let t = k.workgroup_id(0);
    let row = t * experts;
    let out = t * used;

    let max = k.var("max", Scalar::F32);
    max.set(k.load(logits, row));
    k.for_range(k.u32(1), experts, 1, |e| {
        max.set(max.get().max(k.load(logits, row + e)))
    });
    let sum = k.var("sum", Scalar::F32);
    sum.set(k.f32(0.0));
    k.for_range(k.u32(0), experts, 1, |e| {
        sum.set(sum.get() + (k.load(logits, row + e) - max.get()).exp())
    });

    // Each slot takes the best expert ranked after the previous slot's, in the order
    // (logit falling, index rising), so no set of the chosen is needed.
    let prev_logit = k.var("prev_logit", Scalar::F32);
    let prev_id = k.var("prev_id", Scalar::U32);
    let best_logit = k.var("best_logit", Scalar::F32);
    let best_id = k.var("best_id", Scalar::U32);
    let chosen = k.var("chosen", Scalar::F32);
    chosen.set(k.f32(0.0));
    k.for_range(k.u32(0), used, 1, |s| {
        best_id.set(experts);
        best_logit.set(k.f32(0.0));
        k.for_range(k.u32(0), experts, 1, |e| {
            let v = k.load(logits, row + e);
            let after = s.eq(k.u32(0))
                | v.lt(prev_logit.get())
                | (v.eq(prev_logit.get()) & e.gt(prev_id.get()));
            let better = best_id.get().eq(experts) | v.gt(best_logit.get());
            k.if_(after & better, || {
                best_logit.set(v);
                best_id.set(e);
            });
        });
        prev_logit.set(best_logit.get());
        prev_id.set(best_id.get());
        let p = (best_logit.get() - max.get()).exp() / sum.get();
        k.store(ids, out + s, best_id.get());
        k.store(weights, out + s, p);
        chosen.set(chosen.get() + p);
    });
    let total = chosen.get().max(k.f32(MIN_SUM));
    k.for_range(k.u32(0), used, 1, |s| {
        k.store(weights, out + s, k.load(weights, out + s) / total)
    });
    k.finish()
}

/// The plain-Rust reference: the chosen ids and, in f64, their weights.
pub fn reference(s: &MoeRoute, logits: &[f32]) -> Result<(Vec<u32>, Vec<f64>), ShapeError> {
    s.check()?;
    let n = s.experts as usize;
    expect_len(OP, "logits", s.tokens as usize * n, logits.len())?;
    let (mut ids, mut weights) = (vec![], vec![]);
    for row in logits.chunks(n) {
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let p: Vec<f64> = row.iter().map(|&v| (v as f64 - max).exp()).collect();
        let sum: f64 = p.iter().sum();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        let chosen = &order[..s.used as usize];
        let total = chosen.iter().map(|&e| p[e] / sum).sum::<f64>();
        let total = total.max(MIN_SUM as f64);
        ids.extend(chosen.iter().map(|&e| e as u32));
        weights.extend(chosen.iter().map(|&e| p[e] / sum / total));
    }
    Ok((ids, weights))
}

/// A conformance case for `s` with logits in [-4, 4).
pub fn case(s: MoeRoute) -> Result<Case, ShapeError> {
    s.check()?;
    let name = format!("{OP}/t{}e{}k{}", s.tokens, s.experts, s.used);
    let mut r = Rng::new(seed(&name));
    let logits = r.f32s((s.tokens * s.experts) as usize, -4.0, 4.0);
    let (ids, weights) = reference(&s, &logits)?;
    let n = (s.tokens * s.used) as usize;
    Ok(Case::new(name, kernel(), s.grid())
        .input("logits", Scalar::F32, f32_bytes(&logits))
        .output_exact(
            "ids",
            Scalar::U32,
            u32_bytes(&vec![0; n]),
            ids.iter().map(|&i| i as f64).collect(),
        )
        .output("weights", Scalar::F32, f32_bytes(&vec![0.0; n]), weights)
        .params(s.params())
        .bound(NMSE_SOFTMAX))
}

pub fn cases() -> Vec<Case> {
    let shape = |tokens, experts, used| MoeRoute {
        tokens,
        experts,
        used,
    };
    [
        // Qwen3-30B-A3B's decode and a prompt: 8 of 128.
        shape(1, 128, 8),
        shape(5, 128, 8),
        // The tiny test model's, every expert chosen, and one.
        shape(3, 8, 2),
        shape(2, 4, 4),
        shape(2, 6, 1),
    ]
    .into_iter()
    .map(case)
    .collect::<Result<_, _>>()
    .expect("the fixed shapes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Logits [0, ln 3, ln 2, 0]: probabilities 1/7, 3/7, 2/7, 1/7; the top three are experts
    /// 1, 2 and 0 (tied with 3, the lower index first), weighted 3/6, 2/6 and 1/6.
    #[test]
    fn reference_matches_hand_computation() {
        let s = MoeRoute {
            tokens: 1,
            experts: 4,
            used: 3,
        };
        let logits = [0.0, 3f32.ln(), 2f32.ln(), 0.0];
        let (ids, w) = reference(&s, &logits).unwrap();
        assert_eq!(ids, vec![1, 2, 0]);
        let total = (3f32.ln() as f64).exp() + (2f32.ln() as f64).exp() + 1.0;
        let want = [
            (3f32.ln() as f64).exp() / total,
            (2f32.ln() as f64).exp() / total,
        ];
        assert!((w[0] - want[0]).abs() < 1e-15 && (w[1] - want[1]).abs() < 1e-15);
        assert!((w[2] - 1.0 / total).abs() < 1e-15);
    }

    #[test]
    fn more_experts_used_than_there_are_is_a_typed_error() {
        let s = MoeRoute {
            tokens: 1,
            experts: 4,
            used: 5,
        };
        assert!(matches!(s.check(), Err(ShapeError::TooLarge { .. })));
    }

    #[test]
    fn every_case_matches_its_reference_on_the_interpreter() {
        for c in cases() {
            if let Err(e) = c.check_reference() {
                panic!("{}: {e}", c.name);
            }
        }
    }
}

//! A mixture-of-experts layer's routing, as llama.cpp's `build_moe_ffn` computes it for a
//! softmax gate with normalised weights (Qwen3-MoE): the router's logits softmaxed over all
//! experts, the `used` most probable chosen (`ggml_argsort_top_k`), and their probabilities
//! divided by their sum (clamped below at f16's smallest normal, as llama.cpp clamps it).
//!
//! Layout: `logits` [tokens × experts] (the router product's output); `ids` u32
//! [tokens × used], the chosen experts by falling probability (equal logits, −0 and +0
//! among them: the lower index first; a NaN logit ranks last, as −inf); `weights` f32
//! [tokens × used]. A workgroup per token ([`kernel`]).
//!
//! Bound: [`crate::case::NMSE_SOFTMAX`] for the weights (an `exp` and a few roundings each);
//! the ids exactly, as the reference picks them from the same f32 logits.

use super::shape::ShapeError;
use super::support::{elements, expect_len, nonzero, seed};
use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar, Val};

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
        if self.experts > MAX_EXPERTS {
            return Err(ShapeError::TooLarge {
                op: OP,
                what: "experts",
                value: self.experts as usize,
                limit: MAX_EXPERTS as usize,
            });
        }
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

/// Invocations of a workgroup: one token's experts are spread over them.
pub const WG: u32 = 128;

/// The most experts a router may have: a token's logits are held in shared memory (2 KiB).
pub const MAX_EXPERTS: u32 = 512;

/// Buffers: `logits` (read), `ids`, `weights` (written). Params: experts, used.
///
/// A workgroup per token. Its logits go into shared memory; every invocation then takes the
/// maximum and the sum of the probabilities over all of them in expert order (the same
/// operations in the same order on every invocation and backend), and each ranks its own
/// experts in the order (logit falling, index rising) by counting those ranked before them:
/// an expert of rank below `used` takes that slot. Counting needs no rounds of selection,
/// which on one invocation took `used` passes over every logit.
pub fn kernel() -> Kernel {
    let k = KernelBuilder::new(OP, [WG, 1, 1]);
    let logits = k.buffer("logits", Scalar::F32, Access::Read);
    let ids = k.buffer("ids", Scalar::U32, Access::Write);
    let weights = k.buffer("weights", Scalar::F32, Access::Write);
    let experts = k.param("experts", Scalar::U32);
    let used = k.param("used", Scalar::U32);
    let s_logit = k.shared("logit", Scalar::F32, MAX_EXPERTS);
    let s_p = k.shared("p", Scalar::F32, MAX_EXPERTS);
    let s_slot = k.shared("slot", Scalar::F32, MAX_EXPERTS);
    let lid = k.local_index();
    let t = k.workgroup_id(0);
    let row = t * experts;
    let out = t * used;

    k.for_range(lid, experts, WG, |e| {
        k.store_shared(s_logit, e, k.load(logits, row + e))
    });
    k.barrier();
    let max = k.var("max", Scalar::F32);
    max.set(k.load_shared(s_logit, k.u32(0)));
    k.for_range(k.u32(1), experts, 1, |e| {
        max.set(max.get().max(k.load_shared(s_logit, e)))
    });
    k.for_range(lid, experts, WG, |e| {
        k.store_shared(s_p, e, (k.load_shared(s_logit, e) - max.get()).exp())
    });
    k.barrier();
    let sum = k.var("sum", Scalar::F32);
    sum.set(k.f32(0.0));
    k.for_range(k.u32(0), experts, 1, |e| {
        sum.set(sum.get() + k.load_shared(s_p, e))
    });

    // A NaN logit ranks as −inf, so that ranks stay distinct and every slot holds an expert.
    let key = |v: Val<'_>| k.select(v.eq(v), v, k.f32(f32::NEG_INFINITY));
    let rank = k.var("rank", Scalar::U32);
    k.for_range(lid, experts, WG, |e| {
        let v = key(k.load_shared(s_logit, e));
        rank.set(k.u32(0));
        k.for_range(k.u32(0), experts, 1, |j| {
            let w = key(k.load_shared(s_logit, j));
            let before = w.gt(v) | (w.eq(v) & j.lt(e));
            rank.set(rank.get() + k.select(before, k.u32(1), k.u32(0)));
        });
        k.if_(rank.get().lt(used), || {
            k.store(ids, out + rank.get(), e);
            k.store_shared(s_slot, rank.get(), k.load_shared(s_p, e) / sum.get());
        });
    });
    k.barrier();
    // The chosen probabilities' sum in slot order, then each slot's share of it.
    let chosen = k.var("chosen", Scalar::F32);
    chosen.set(k.f32(0.0));
    k.for_range(k.u32(0), used, 1, |s| {
        chosen.set(chosen.get() + k.load_shared(s_slot, s))
    });
    let total = chosen.get().max(k.f32(MIN_SUM));
    k.for_range(lid, used, WG, |s| {
        k.store(weights, out + s, k.load_shared(s_slot, s) / total)
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
        let key = |e: usize| {
            if row[e].is_nan() {
                f32::NEG_INFINITY
            } else {
                row[e]
            }
        };
        order.sort_by(|&a, &b| {
            key(b)
                .partial_cmp(&key(a))
                .expect("no NaN key")
                .then(a.cmp(&b))
        });
        let chosen = &order[..s.used as usize];
        let total = chosen.iter().map(|&e| p[e] / sum).sum::<f64>();
        let total = total.max(MIN_SUM as f64);
        ids.extend(chosen.iter().map(|&e| e as u32));
        weights.extend(chosen.iter().map(|&e| p[e] / sum / total));
    }
    Ok((ids, weights))
}

/// A conformance case for `s` with logits in [-4, 4), or with `ties` whole numbers in
/// [-2, 2) (most logits equal to others: the order by index decides).
pub fn case(s: MoeRoute, ties: bool) -> Result<Case, ShapeError> {
    s.check()?;
    let mut name = format!("{OP}/t{}e{}k{}", s.tokens, s.experts, s.used);
    if ties {
        name.push_str("/ties");
    }
    let mut r = Rng::new(seed(&name));
    let mut logits = r.f32s((s.tokens * s.experts) as usize, -4.0, 4.0);
    if ties {
        logits.iter_mut().for_each(|v| *v = (*v / 2.0).floor());
    }
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
        (shape(1, 128, 8), false),
        (shape(5, 128, 8), false),
        (shape(3, 128, 8), true),
        // More experts than invocations: two and a half each.
        (shape(2, 320, 8), false),
        (shape(2, 320, 8), true),
        // The tiny test model's, every expert chosen, and one.
        (shape(3, 8, 2), false),
        (shape(2, 4, 4), false),
        (shape(2, 6, 1), false),
    ]
    .into_iter()
    .map(|(s, ties)| case(s, ties))
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
        let s = MoeRoute {
            tokens: 1,
            experts: MAX_EXPERTS + 1,
            used: 8,
        };
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains(&(MAX_EXPERTS + 1).to_string()), "{e}");
    }

    /// NaN logits rank last, as −inf (ties among them by index): every slot holds a distinct
    /// expert, so the products after it never read an expert that does not exist.
    #[test]
    fn nan_logits_rank_last() {
        let s = MoeRoute {
            tokens: 1,
            experts: 6,
            used: 4,
        };
        let logits = [f32::NAN, 1.0, f32::NAN, -0.0, 0.0, f32::NAN];
        let (ids, _) = reference(&s, &logits).unwrap();
        assert_eq!(ids, vec![1, 3, 4, 0]);
        let c = Case::new("moe_route/nan", kernel(), s.grid())
            .input("logits", Scalar::F32, f32_bytes(&logits))
            .output_exact(
                "ids",
                Scalar::U32,
                u32_bytes(&[0; 4]),
                ids.iter().map(|&i| i as f64).collect(),
            )
            .input("weights", Scalar::F32, f32_bytes(&[0.0; 4]))
            .params(s.params());
        c.check_reference().unwrap();
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

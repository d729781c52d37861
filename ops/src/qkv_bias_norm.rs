//! What some architectures do to a QKV product's heads between the product and rope, in
//! place on the product's output: the projections' biases added (Qwen2's `attn_q.bias`,
//! `attn_k.bias`, `attn_v.bias`), and each query and key head rms-normalised over its
//! `head_dim` elements and scaled by the layer's `attn_q_norm` or `attn_k_norm` weight
//! (Qwen3), value heads left as they are. llama.cpp computes the same as a `ggml_add` after
//! each product and a `ggml_rms_norm` with its `ggml_mul` on the q and k heads.
//!
//! Layout: `x` [tokens × count × head_dim], the heads `first..first + count` of each token's
//! row of `heads` query, `kv_heads` key and `kv_heads` value heads (one QKV product's rows,
//! as [`crate::rope_store`] takes them); `bias` [count × head_dim], the part's rows of the
//! biases; `q_norm`, `k_norm` [head_dim]. One workgroup per (head, token); strided loops
//! cover heads longer than the workgroup.
//!
//! Bound: the default 1e-7, [`crate::rms_norm`]'s: one f32 sum of squares per head and an
//! `rsqrt`; the bias add is one rounding.

use super::rope_store::HeadSpan;
use super::shape::ShapeError;
use super::support::{elements, expect_len, nonzero, seed, Combine, Reducer, Reduction};
use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const OP: &str = "qkv_bias_norm";

/// Invocations per workgroup.
pub const WG: u32 = 64;

/// What the kernel applies: compile-time choices, each its own kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Apply {
    /// Adds `bias`.
    pub bias: bool,
    /// Normalises the query and key heads.
    pub norm: bool,
}

impl Apply {
    fn name(self) -> &'static str {
        match (self.bias, self.norm) {
            (true, true) => "bias_norm",
            (true, false) => "bias",
            (false, true) => "norm",
            (false, false) => "none",
        }
    }
}

/// One dispatch over the heads of one QKV product.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QkvBiasNorm {
    pub tokens: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    /// The heads of a token's row that `x` holds.
    pub part: HeadSpan,
    pub eps: f32,
    pub apply: Apply,
}

impl QkvBiasNorm {
    /// Checks the shape; returns the element count of `x`.
    pub fn check(&self) -> Result<u32, ShapeError> {
        nonzero(OP, "tokens", self.tokens)?;
        nonzero(OP, "heads", self.heads)?;
        nonzero(OP, "kv_heads", self.kv_heads)?;
        nonzero(OP, "head_dim", self.head_dim)?;
        nonzero(OP, "heads of the part", self.part.count)?;
        let row = self.heads as u64 + 2 * self.kv_heads as u64;
        let end = self.part.first as u64 + self.part.count as u64;
        if end > row {
            return Err(ShapeError::TooLarge {
                op: OP,
                what: "first + count heads of the part",
                value: end as usize,
                limit: row as usize,
            });
        }
        elements(OP, "x", &[self.tokens, self.part.count, self.head_dim])
    }

    /// `[count, tokens, 1]`.
    pub fn grid(&self) -> [u32; 3] {
        [self.part.count, self.tokens, 1]
    }

    /// The kernel's parameters, in declaration order.
    pub fn params(&self) -> Vec<ParamValue> {
        let u = ParamValue::U32;
        vec![
            u(self.head_dim),
            u(self.part.first),
            u(self.part.count),
            u(self.heads),
            u(self.heads + self.kv_heads),
            ParamValue::F32(self.eps),
        ]
    }
}

/// Buffers, reads first: `bias` where [`Apply::bias`], `q_norm` and `k_norm` where
/// [`Apply::norm`], then `x` (read and written). Params: head_dim, first, count, the query
/// heads, the query and key heads, eps.
pub fn kernel(apply: Apply, how: Reduction) -> Kernel {
    let name = format!("{OP}_{}_{}", apply.name(), how.name());
    let k = KernelBuilder::new(&name, [WG, 1, 1]);
    let bias = apply
        .bias
        .then(|| k.buffer("bias", Scalar::F32, Access::Read));
    let norms = apply.norm.then(|| {
        (
            k.buffer("q_norm", Scalar::F32, Access::Read),
            k.buffer("k_norm", Scalar::F32, Access::Read),
        )
    });
    let x = k.buffer("x", Scalar::F32, Access::ReadWrite);
    let head_dim = k.param("head_dim", Scalar::U32);
    let first = k.param("first", Scalar::U32);
    let count = k.param("count", Scalar::U32);
    let q_heads = k.param("q_heads", Scalar::U32);
    let qk_heads = k.param("qk_heads", Scalar::U32);
    let eps = k.param("eps", Scalar::F32);
    let lid = k.local_index();
    let h = k.workgroup_id(0);
    let base = (k.workgroup_id(1) * count + h) * head_dim;

    let ss = k.var("sum_sq", Scalar::F32);
    k.for_range(lid, head_dim, WG, |c| {
        let mut v = k.load(x, base + c);
        if let Some(b) = bias {
            v = v + k.load(b, h * head_dim + c);
            k.store(x, base + c, v);
        }
        if norms.is_some() {
            ss.set(v.fma(v, ss.get()));
        }
    });
    if let Some((qn, kn)) = norms {
        let reducer = Reducer::new(&k, how);
        let total = reducer.reduce(&k, lid, ss.get(), Combine::Sum);
        let scale = (total / head_dim.cast(Scalar::F32) + eps).rsqrt();
        let head = first + h;
        // The head's kind is the workgroup's, so the branches are uniform.
        k.if_else(
            head.lt(q_heads),
            || {
                k.for_range(lid, head_dim, WG, |c| {
                    k.store(x, base + c, k.load(x, base + c) * scale * k.load(qn, c));
                });
            },
            || {
                k.if_(head.lt(qk_heads), || {
                    k.for_range(lid, head_dim, WG, |c| {
                        k.store(x, base + c, k.load(x, base + c) * scale * k.load(kn, c));
                    });
                });
            },
        );
    }
    k.finish()
}

/// The plain-Rust reference, in f64: `x` after the kernel.
pub fn reference(
    s: &QkvBiasNorm,
    x: &[f32],
    bias: &[f32],
    q_norm: &[f32],
    k_norm: &[f32],
) -> Result<Vec<f64>, ShapeError> {
    let n = s.check()?;
    let d = s.head_dim as usize;
    expect_len(OP, "x", n as usize, x.len())?;
    if s.apply.bias {
        expect_len(OP, "bias", s.part.count as usize * d, bias.len())?;
    }
    if s.apply.norm {
        expect_len(OP, "q_norm", d, q_norm.len())?;
        expect_len(OP, "k_norm", d, k_norm.len())?;
    }
    let mut out = Vec::with_capacity(x.len());
    for (i, head) in x.chunks(d).enumerate() {
        let h = i % s.part.count as usize;
        let v: Vec<f64> = head
            .iter()
            .enumerate()
            .map(|(c, &v)| {
                v as f64
                    + if s.apply.bias {
                        bias[h * d + c] as f64
                    } else {
                        0.0
                    }
            })
            .collect();
        let kind = s.part.first as usize + h;
        let weight = if !s.apply.norm || kind >= (s.heads + s.kv_heads) as usize {
            None
        } else if kind < s.heads as usize {
            Some(q_norm)
        } else {
            Some(k_norm)
        };
        match weight {
            None => out.extend(v),
            Some(w) => {
                let ms = v.iter().map(|v| v * v).sum::<f64>() / d as f64;
                let scale = 1.0 / (ms + s.eps as f64).sqrt();
                out.extend(v.iter().zip(w).map(|(v, &w)| v * scale * w as f64));
            }
        }
    }
    Ok(out)
}

/// A conformance case for `s` with deterministic inputs; the subgroup kernel carries the
/// shared one as its fallback.
pub fn case(s: QkvBiasNorm, how: Reduction) -> Result<Case, ShapeError> {
    let n = s.check()?;
    let name = format!(
        "{OP}/{}/{}/t{}h{}kv{}d{}/part{}+{}",
        s.apply.name(),
        how.name(),
        s.tokens,
        s.heads,
        s.kv_heads,
        s.head_dim,
        s.part.first,
        s.part.count
    );
    let mut r = Rng::new(seed(&name));
    let d = s.head_dim as usize;
    let x = r.f32s(n as usize, -2.0, 2.0);
    let bias = r.f32s(s.part.count as usize * d, -1.0, 1.0);
    let q_norm = r.f32s(d, 0.5, 1.5);
    let k_norm = r.f32s(d, 0.5, 1.5);
    let want = reference(&s, &x, &bias, &q_norm, &k_norm)?;
    let mut c = Case::new(name, kernel(s.apply, how), s.grid());
    if s.apply.bias {
        c = c.input("bias", Scalar::F32, f32_bytes(&bias));
    }
    if s.apply.norm {
        c = c.input("q_norm", Scalar::F32, f32_bytes(&q_norm)).input(
            "k_norm",
            Scalar::F32,
            f32_bytes(&k_norm),
        );
    }
    c = c
        .output("x", Scalar::F32, f32_bytes(&x), want)
        .params(s.params());
    if how == Reduction::Subgroup {
        c = c.fallback(kernel(s.apply, Reduction::Shared));
    }
    Ok(c)
}

pub fn cases() -> Vec<Case> {
    let whole = |heads: u32, kv_heads: u32| HeadSpan {
        first: 0,
        count: heads + 2 * kv_heads,
    };
    let shape = |tokens, heads, kv_heads, head_dim, part, bias, norm| QkvBiasNorm {
        tokens,
        heads,
        kv_heads,
        head_dim,
        part,
        eps: 1e-6,
        apply: Apply { bias, norm },
    };
    let shapes = [
        // Qwen2.5-0.5B's decode and a prompt: biases, 14 heads and 2 of keys and values.
        (
            shape(1, 14, 2, 64, whole(14, 2), true, false),
            Reduction::Subgroup,
        ),
        (
            shape(5, 14, 2, 64, whole(14, 2), true, false),
            Reduction::Shared,
        ),
        // Qwen3-0.6B's: norms, heads of 128 (two strides of the workgroup).
        (
            shape(3, 16, 8, 128, whole(16, 8), false, true),
            Reduction::Subgroup,
        ),
        (
            shape(2, 16, 8, 128, whole(16, 8), false, true),
            Reduction::Shared,
        ),
        // Both, over parts of a row: q with some keys, then the rest of the keys and values.
        (
            shape(3, 4, 2, 16, HeadSpan { first: 0, count: 5 }, true, true),
            Reduction::Subgroup,
        ),
        (
            shape(3, 4, 2, 16, HeadSpan { first: 5, count: 3 }, true, true),
            Reduction::Subgroup,
        ),
        // A head shorter than a subgroup, and one that is not a whole number of strides.
        (
            shape(2, 2, 1, 6, whole(2, 1), true, true),
            Reduction::Subgroup,
        ),
        (
            shape(1, 2, 1, 100, whole(2, 1), false, true),
            Reduction::Shared,
        ),
    ];
    shapes
        .into_iter()
        .map(|(s, how)| case(s, how))
        .collect::<Result<_, _>>()
        .expect("the fixed shapes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One token of one query, one key and one value head of two elements, biases and norms:
    /// q [1, 2] + [2, 2] = [3, 4], mean square 12.5, so q = [3, 4] / √12.5 · [1, 2]; k [0, 2]
    /// + [0, 0], mean square 2, k = [0, 2] / √2 · [3, 1]; v [5, 6] + [1, 1] unnormalised.
    #[test]
    fn reference_matches_hand_computation() {
        let s = QkvBiasNorm {
            tokens: 1,
            heads: 1,
            kv_heads: 1,
            head_dim: 2,
            part: HeadSpan { first: 0, count: 3 },
            eps: 0.0,
            apply: Apply {
                bias: true,
                norm: true,
            },
        };
        let x = [1.0, 2.0, 0.0, 2.0, 5.0, 6.0];
        let bias = [2.0, 2.0, 0.0, 0.0, 1.0, 1.0];
        let y = reference(&s, &x, &bias, &[1.0, 2.0], &[3.0, 1.0]).unwrap();
        let (q, k) = (12.5f64.sqrt(), 2f64.sqrt());
        assert_eq!(y, vec![3.0 / q, 8.0 / q, 0.0, 2.0 / k, 6.0, 7.0]);
    }

    #[test]
    fn a_part_past_the_row_is_a_typed_error() {
        let s = QkvBiasNorm {
            tokens: 1,
            heads: 2,
            kv_heads: 1,
            head_dim: 4,
            part: HeadSpan { first: 3, count: 2 },
            eps: 1e-6,
            apply: Apply {
                bias: false,
                norm: true,
            },
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

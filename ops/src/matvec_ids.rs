//! The experts' products of a mixture-of-experts layer as one dispatch each, ggml's
//! `mul_mat_id`: the weights are all experts' matrices stacked (`[experts × rows × cols]`, a
//! GGUF `*_exps` tensor as stored), and each output row reads the slice of the expert that
//! [`crate::moe_route`] chose, by index from the small `ids` buffer, so nothing is copied and
//! nothing loops over experts on the host. Quantized experts are decoded inside the kernel
//! through their [`BlockFormat`], as the dense products decode theirs.
//!
//! Two forms ([`Out`]), the two ends of Qwen3-MoE's SwiGLU experts:
//! - [`Out::Swiglu`]: gate and up (two stacked tensors) against the token's one x
//!   [tokens × cols], stored as `silu(gate)·up` per chosen expert: y [tokens × used × rows].
//! - [`Out::WeightedSum`]: down against each chosen expert's own x [tokens × used × cols],
//!   the outputs weighted by the routing's `weights` [tokens × used], summed over the chosen,
//!   and added to the residual `r`: y [tokens × rows].
//!
//! One workgroup per output row (and chosen expert for [`Out::Swiglu`]); its invocations
//! stride over the columns and reduce across the workgroup.
//!
//! Bound: [`crate::matvec::NMSE`], the dense products': each output is f32 sums of `cols`
//! products (for [`Out::WeightedSum`], `used` of them weighted), and a weight decoded
//! differently is off by its quantization step, orders of magnitude past it.

use super::blocks::{self, BlockFormat};
use super::elementwise::{silu, silu_ir};
use super::shape::ShapeError;
use super::support::{elements, expect_len, nonzero, seed, Combine, Reducer, Reduction};
use crate::case::*;
use trine_gguf::quant::{dequantize, quantize, WeightType};
use trine_ir::{Access, BufferId, Kernel, KernelBuilder, ParamValue, Scalar, Val};

const OP: &str = "matvec_ids";

/// Invocations per workgroup.
pub const WG: u32 = 64;

/// What the product stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Out {
    Swiglu,
    WeightedSum,
}

impl Out {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Out::Swiglu => "swiglu",
            Out::WeightedSum => "weighted_sum",
        }
    }
}

/// One dispatch's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatvecIds {
    pub weights: WeightType,
    pub out: Out,
    pub tokens: u32,
    pub experts: u32,
    /// Experts chosen per token.
    pub used: u32,
    /// Rows of one expert's matrix.
    pub rows: u32,
    pub cols: u32,
}

impl MatvecIds {
    /// Checks the shape; returns the bytes of one expert's row.
    pub fn check(&self) -> Result<usize, ShapeError> {
        nonzero(OP, "tokens", self.tokens)?;
        nonzero(OP, "experts", self.experts)?;
        nonzero(OP, "experts used", self.used)?;
        nonzero(OP, "rows", self.rows)?;
        nonzero(OP, "cols", self.cols)?;
        if self.weights.is_quantized() {
            BlockFormat::require(OP, self.weights)?;
        }
        let row_bytes = self.weights.bytes(OP, "cols", self.cols as usize)?;
        // The kernel indexes the stacked weights by byte (by element for floats).
        let per_row = if self.weights.is_quantized() {
            row_bytes as u32
        } else {
            self.cols
        };
        elements(OP, "weights", &[self.experts, self.rows, per_row])?;
        elements(OP, "y", &[self.tokens, self.used, self.rows])?;
        elements(OP, "x", &[self.tokens, self.used, self.cols])?;
        Ok(row_bytes)
    }

    /// [`Out::Swiglu`]: `[rows, used, tokens]`; [`Out::WeightedSum`]: `[rows, tokens, 1]`.
    pub fn grid(&self) -> [u32; 3] {
        match self.out {
            Out::Swiglu => [self.rows, self.used, self.tokens],
            Out::WeightedSum => [self.rows, self.tokens, 1],
        }
    }

    /// rows, cols, used.
    pub fn params(&self) -> Vec<ParamValue> {
        let u = ParamValue::U32;
        vec![u(self.rows), u(self.cols), u(self.used)]
    }
}

/// Element `j` of row `row` of the stacked weights `w`, as f32.
fn element<'b>(
    k: &'b KernelBuilder,
    ty: WeightType,
    w: BufferId,
    (row, cols): (Val<'b>, Val<'b>),
    j: Val<'b>,
) -> Val<'b> {
    match BlockFormat::of(ty) {
        Some(f) => {
            let (elems, bytes) = (k.u32(f.elems()), k.u32(f.bytes()));
            let base = row * (cols / elems) * bytes + j / elems * bytes;
            f.element(k, w, base, j % elems)
        }
        None => k.load(w, row * cols + j).cast(Scalar::F32),
    }
}

/// Buffers, reads first. [`Out::Swiglu`]: `gate`, `up`, `ids`, `x`, then `y`.
/// [`Out::WeightedSum`]: `w`, `ids`, `weights`, `x`, `r`, then `y`. Params: rows, cols, used.
pub fn kernel(ty: WeightType, out: Out, how: Reduction) -> Kernel {
    let name = format!("{OP}_{ty}_{}_{}", out.name(), how.name());
    let k = KernelBuilder::new(&name, [WG, 1, 1]);
    let elem = blocks::buffer_elem(ty);
    let mats: Vec<BufferId> = match out {
        Out::Swiglu => vec![
            k.buffer("gate", elem, Access::Read),
            k.buffer("up", elem, Access::Read),
        ],
        Out::WeightedSum => vec![k.buffer("w", elem, Access::Read)],
    };
    let ids = k.buffer("ids", Scalar::U32, Access::Read);
    let route = (out == Out::WeightedSum).then(|| k.buffer("weights", Scalar::F32, Access::Read));
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let r = (out == Out::WeightedSum).then(|| k.buffer("r", Scalar::F32, Access::Read));
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let rows = k.param("rows", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let used = k.param("used", Scalar::U32);
    let lid = k.local_index();
    let row = k.workgroup_id(0);
    let reducer = Reducer::new(&k, how);
    let sums: Vec<_> = (0..mats.len())
        .map(|i| {
            let v = k.var(&format!("sum{i}"), Scalar::F32);
            v.set(k.f32(0.0));
            v
        })
        .collect();

    match out {
        Out::Swiglu => {
            let (slot, t) = (k.workgroup_id(1), k.workgroup_id(2));
            let e = k.load(ids, t * used + slot);
            let wrow = e * rows + row;
            k.for_range(lid, cols, WG, |j| {
                let xv = k.load(x, t * cols + j);
                for (m, s) in mats.iter().zip(&sums) {
                    s.set(element(&k, ty, *m, (wrow, cols), j).fma(xv, s.get()));
                }
            });
            let gate = reducer.reduce(&k, lid, sums[0].get(), Combine::Sum);
            let up = reducer.reduce(&k, lid, sums[1].get(), Combine::Sum);
            k.if_(lid.eq(k.u32(0)), || {
                k.store(y, (t * used + slot) * rows + row, silu_ir(&k, gate) * up)
            });
        }
        Out::WeightedSum => {
            let t = k.workgroup_id(1);
            let part = k.var("part", Scalar::F32);
            k.for_range(k.u32(0), used, 1, |slot| {
                let at = t * used + slot;
                let wrow = k.load(ids, at) * rows + row;
                part.set(k.f32(0.0));
                k.for_range(lid, cols, WG, |j| {
                    let xv = k.load(x, at * cols + j);
                    part.set(element(&k, ty, mats[0], (wrow, cols), j).fma(xv, part.get()));
                });
                let weight = k.load(route.expect("declared above"), at);
                sums[0].set(part.get().fma(weight, sums[0].get()));
            });
            let total = reducer.reduce(&k, lid, sums[0].get(), Combine::Sum);
            k.if_(lid.eq(k.u32(0)), || {
                let i = t * rows + row;
                k.store(y, i, k.load(r.expect("declared above"), i) + total)
            });
        }
    }
    k.finish()
}

/// The inputs of a product beside the weights.
pub struct Inputs<'a> {
    /// [tokens × used].
    pub ids: &'a [u32],
    /// [tokens × used], [`Out::WeightedSum`] only.
    pub weights: &'a [f32],
    /// [tokens × cols] ([`Out::Swiglu`]) or [tokens × used × cols].
    pub x: &'a [f32],
    /// [tokens × rows], [`Out::WeightedSum`] only.
    pub r: &'a [f32],
}

/// The plain-Rust reference, in f64 from the exactly dequantised weights: `mats` is gate and
/// up for [`Out::Swiglu`], down for [`Out::WeightedSum`].
pub fn reference(s: &MatvecIds, mats: &[&[u8]], a: &Inputs) -> Result<Vec<f64>, ShapeError> {
    let row_bytes = s.check()?;
    let (t, k, rows, cols) = (
        s.tokens as usize,
        s.used as usize,
        s.rows as usize,
        s.cols as usize,
    );
    expect_len(OP, "ids", t * k, a.ids.len())?;
    for m in mats {
        expect_len(
            OP,
            "weights",
            s.experts as usize * rows * row_bytes,
            m.len(),
        )?;
    }
    let e_max = s.experts;
    let dot = |m: &[u8], e: u32, r: usize, x: &[f32]| -> Result<f64, ShapeError> {
        if e >= e_max {
            return Err(ShapeError::OutOfRange {
                op: OP,
                what: "expert id",
                value: e as usize,
                bound: e_max as usize,
            });
        }
        let at = (e as usize * rows + r) * row_bytes;
        let w = dequantize(s.weights, &m[at..at + row_bytes], cols)?;
        Ok(w.iter().zip(x).map(|(&w, &x)| w * x as f64).sum())
    };
    let mut y = vec![];
    match s.out {
        Out::Swiglu => {
            expect_len(OP, "x", t * cols, a.x.len())?;
            for (i, &e) in a.ids.iter().enumerate() {
                let x = &a.x[i / k * cols..][..cols];
                for r in 0..rows {
                    y.push(silu(dot(mats[0], e, r, x)?) * dot(mats[1], e, r, x)?);
                }
            }
        }
        Out::WeightedSum => {
            expect_len(OP, "x", t * k * cols, a.x.len())?;
            expect_len(OP, "weights", t * k, a.weights.len())?;
            expect_len(OP, "r", t * rows, a.r.len())?;
            for tok in 0..t {
                for r in 0..rows {
                    let mut sum = a.r[tok * rows + r] as f64;
                    for slot in tok * k..(tok + 1) * k {
                        let x = &a.x[slot * cols..][..cols];
                        sum += a.weights[slot] as f64 * dot(mats[0], a.ids[slot], r, x)?;
                    }
                    y.push(sum);
                }
            }
        }
    }
    Ok(y)
}

/// Each of `tokens` tokens' `used` experts of `experts`, distinct, drawn from `rng`.
pub(crate) fn draw_ids(rng: &mut Rng, tokens: u32, experts: u32, used: u32) -> Vec<u32> {
    let mut ids = vec![];
    for _ in 0..tokens {
        let mut all: Vec<u32> = (0..experts).collect();
        for i in 0..used as usize {
            let j = i + (rng.u32() as usize) % (all.len() - i);
            all.swap(i, j);
        }
        ids.extend_from_slice(&all[..used as usize]);
    }
    ids
}

/// Routing weights for `tokens` tokens of `used` experts, each token's summing to 1.
pub(crate) fn draw_weights(rng: &mut Rng, tokens: usize, used: usize) -> Vec<f32> {
    let mut weights = rng.f32s(tokens * used, 0.1, 1.0);
    for w in weights.chunks_mut(used) {
        let sum: f32 = w.iter().sum();
        w.iter_mut().for_each(|v| *v /= sum);
    }
    weights
}

/// A conformance case: random experts, x and residual, each token's `used` experts distinct
/// and its weights summing to 1; the subgroup kernel carries the shared one as its fallback.
pub fn case(s: MatvecIds, how: Reduction) -> Result<Case, ShapeError> {
    s.check()?;
    let name = format!(
        "{OP}/{}/{}/{}/t{}e{}k{}/{}x{}",
        s.weights,
        s.out.name(),
        how.name(),
        s.tokens,
        s.experts,
        s.used,
        s.rows,
        s.cols
    );
    let mut rng = Rng::new(seed(&name));
    let n = (s.experts * s.rows * s.cols) as usize;
    let mats: Vec<Vec<u8>> = (0..if s.out == Out::Swiglu { 2 } else { 1 })
        .map(|_| quantize(s.weights, &rng.f32s(n, -1.0, 1.0)))
        .collect::<Result<_, _>>()?;
    let ids = draw_ids(&mut rng, s.tokens, s.experts, s.used);
    let (t, k) = (s.tokens as usize, s.used as usize);
    let x_len = match s.out {
        Out::Swiglu => t,
        Out::WeightedSum => t * k,
    } * s.cols as usize;
    let x = rng.f32s(x_len, -1.0, 1.0);
    let weights = draw_weights(&mut rng, t, k);
    let r = rng.f32s(t * s.rows as usize, -2.0, 2.0);
    let refs: Vec<&[u8]> = mats.iter().map(Vec::as_slice).collect();
    let inputs = Inputs {
        ids: &ids,
        weights: &weights,
        x: &x,
        r: &r,
    };
    let want = reference(&s, &refs, &inputs)?;
    let mut c = Case::new(name, kernel(s.weights, s.out, how), s.grid());
    let padded = |m: &Vec<u8>| blocks::pad_to_words(m.clone());
    c = match s.out {
        Out::Swiglu => c
            .input("gate", blocks::buffer_elem(s.weights), padded(&mats[0]))
            .input("up", blocks::buffer_elem(s.weights), padded(&mats[1]))
            .input("ids", Scalar::U32, u32_bytes(&ids)),
        Out::WeightedSum => c
            .input("w", blocks::buffer_elem(s.weights), padded(&mats[0]))
            .input("ids", Scalar::U32, u32_bytes(&ids))
            .input("weights", Scalar::F32, f32_bytes(&weights)),
    };
    c = c.input("x", Scalar::F32, f32_bytes(&x));
    if s.out == Out::WeightedSum {
        c = c.input("r", Scalar::F32, f32_bytes(&r));
    }
    let y = vec![0.0; want.len()];
    c = c
        .output("y", Scalar::F32, f32_bytes(&y), want)
        .params(s.params())
        .bound(crate::matvec::NMSE);
    if how == Reduction::Subgroup {
        c = c.fallback(kernel(s.weights, s.out, Reduction::Shared));
    }
    Ok(c)
}

pub fn cases() -> Vec<Case> {
    let shape = |weights, out, tokens, experts, used, rows, cols| MatvecIds {
        weights,
        out,
        tokens,
        experts,
        used,
        rows,
        cols,
    };
    let (sw, ws) = (Out::Swiglu, Out::WeightedSum);
    let (sg, sh) = (Reduction::Subgroup, Reduction::Shared);
    let shapes = [
        // The tiny test model's gate/up and down, decode and a prompt.
        (shape(WeightType::F32, sw, 1, 8, 2, 16, 64), sg),
        (shape(WeightType::F32, ws, 3, 8, 2, 64, 16), sh),
        (shape(WeightType::F16, sw, 3, 4, 2, 5, 96), sh),
        (shape(WeightType::F16, ws, 1, 4, 2, 96, 40), sg),
        // Quantized experts as Qwen3-30B-A3B's files hold them, rows of one and of three
        // blocks.
        (shape(WeightType::Q8_0, sw, 2, 6, 3, 7, 96), sg),
        (shape(WeightType::Q8_0, ws, 2, 6, 3, 9, 96), sh),
        (shape(WeightType::Q4_K, sw, 1, 5, 2, 6, 768), sg),
        (shape(WeightType::Q4_K, ws, 2, 5, 2, 6, 256), sg),
        (shape(WeightType::Q6_K, sw, 2, 4, 2, 4, 256), sh),
        (shape(WeightType::Q6_K, ws, 1, 4, 3, 5, 512), sg),
        (shape(WeightType::Q4_1, ws, 1, 4, 2, 3, 64), sg),
        (shape(WeightType::Q5_K, sw, 1, 3, 1, 3, 256), sg),
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

    /// Two experts of one row of two f32 weights: [1, 2] and [3, 4]. A token that chose
    /// expert 1 then expert 0 with weights 0.25 and 0.75, x [1, 1] for the first and [2, 0]
    /// for the second, residual 10: 10 + 0.25·(3 + 4) + 0.75·(1·2) = 13.25.
    #[test]
    fn reference_matches_hand_computation() {
        let s = MatvecIds {
            weights: WeightType::F32,
            out: Out::WeightedSum,
            tokens: 1,
            experts: 2,
            used: 2,
            rows: 1,
            cols: 2,
        };
        let w = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
        let a = Inputs {
            ids: &[1, 0],
            weights: &[0.25, 0.75],
            x: &[1.0, 1.0, 2.0, 0.0],
            r: &[10.0],
        };
        assert_eq!(reference(&s, &[&w], &a).unwrap(), vec![13.25]);
    }

    #[test]
    fn an_expert_id_past_the_experts_is_a_typed_error() {
        let s = MatvecIds {
            weights: WeightType::F32,
            out: Out::Swiglu,
            tokens: 1,
            experts: 2,
            used: 1,
            rows: 1,
            cols: 2,
        };
        let w = f32_bytes(&[0.0; 4]);
        let a = Inputs {
            ids: &[2],
            weights: &[],
            x: &[1.0, 1.0],
            r: &[],
        };
        let e = reference(&s, &[&w, &w], &a);
        assert!(matches!(e, Err(ShapeError::OutOfRange { value: 2, .. })));
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

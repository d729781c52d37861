//! Mixture-of-experts products for CPUs: [`crate::matvec_q8_rows`]'s product, 16 interleaved
//! rows a workgroup against 8-bit x, with each (token, slot) pair's rows taken from the
//! expert the routing chose for it ([`crate::matvec_q8_rows::experts_kernel`]). Each pair's
//! sums go to its own row of y: gate and up as the halves of that row, down whole, weighed and
//! summed by [`crate::moe_combine`]. The GPUs' kernel on the file's blocks
//! ([`crate::matvec_ids_blocks`]), a unit of 32 codes an invocation and a reduction across
//! the workgroup for every row, ran about twenty times slower a weight on a CPU than this
//! layout, whose rows are the lanes of one loop.
//!
//! Bound: [`crate::matvec::NMSE`], f32 rounding over exact integer dots.

use crate::case::*;
use crate::matvec_q8::{quantize_x, reference as row_reference, Q8Activations, XBlocks, OP};
use crate::matvec_q8_rows::{experts_kernel, interleave, takes, LANES};
use crate::moe_sort::MoeSort;
use crate::shape::ShapeError;
use crate::support::{elements, expect_len, nonzero, seed};
use trine_gguf::quant::{quantize, WeightType};
use trine_ir::{ParamValue, Scalar};

/// One product: `rows` rows of each of `experts` matrices over `pairs` (token, slot) pairs,
/// x's rows serving `per_x` pairs each, into `y_rows`-wide rows of y from `first`.
#[derive(Clone, Copy, Debug)]
pub struct IdsRows {
    pub weights: WeightType,
    pub rows: u32,
    pub cols: u32,
    pub pairs: u32,
    pub experts: u32,
    pub per_x: u32,
    pub y_rows: u32,
    pub first: u32,
}

impl IdsRows {
    pub fn check(&self) -> Result<(), ShapeError> {
        nonzero(OP, "pairs", self.pairs)?;
        nonzero(OP, "experts", self.experts)?;
        nonzero(OP, "pairs per x row", self.per_x)?;
        elements(OP, "every expert's rows", &[self.rows, self.experts])?;
        elements(OP, "y", &[self.pairs, self.y_rows])?;
        if !takes(self.weights, self.rows as usize, self.cols as usize)
            || self.first + self.rows > self.y_rows
        {
            return Err(ShapeError::Unsupported {
                op: OP,
                what: format!(
                    "{} experts' rows {}..{} of {} over {} columns",
                    self.weights,
                    self.first,
                    self.first + self.rows,
                    self.y_rows,
                    self.cols
                ),
            });
        }
        Ok(())
    }

    /// A workgroup per 16 rows and pair.
    pub fn grid(&self) -> [u32; 3] {
        [self.rows / LANES, self.pairs, 1]
    }

    /// rows, cols, pairs, per_x, y_rows, first.
    pub fn params(&self) -> Vec<ParamValue> {
        [
            self.rows,
            self.cols,
            self.pairs,
            self.per_x,
            self.y_rows,
            self.first,
        ]
        .map(ParamValue::U32)
        .to_vec()
    }
}

/// y `[pairs × y_rows]` in f64 (zero outside each pair's rows `first..first + rows`): pair
/// `p`'s rows of expert `ids[p]`'s matrix (`w`: every expert's in turn, GGUF blocks) against
/// x's row `p / per_x`.
pub fn reference(
    s: &IdsRows,
    w: &[u8],
    xs: &[Q8Activations],
    ids: &[u32],
) -> Result<Vec<f64>, ShapeError> {
    s.check()?;
    let (r, c) = (s.rows as usize, s.cols as usize);
    expect_len(OP, "ids", s.pairs as usize, ids.len())?;
    expect_len(OP, "x rows", (s.pairs / s.per_x) as usize, xs.len())?;
    let per_expert = s.weights.bytes(OP, "an expert's matrix", r * c)?;
    let mut y = vec![0f64; s.pairs as usize * s.y_rows as usize];
    for (p, out) in y.chunks_mut(s.y_rows as usize).enumerate() {
        let e = crate::moe_sort::expert(OP, ids[p], s.experts)?;
        let we = &w[e * per_expert..][..per_expert];
        let rows = row_reference(s.weights, we, r, c, &xs[p / s.per_x as usize])?;
        out[s.first as usize..][..r].copy_from_slice(&rows);
    }
    Ok(y)
}

/// A conformance case: random experts of `ty`, x quantized on the host, a routing drawn as
/// the prompt's ([`crate::moe_sort::drawn`]) over `tokens` tokens of `used` slots.
pub fn case(
    ty: WeightType,
    (rows, cols, tokens): (u32, u32, u32),
    (experts, used, per_x): (u32, u32, u32),
    (y_rows, first): (u32, u32),
) -> Result<Case, ShapeError> {
    let s = IdsRows {
        weights: ty,
        rows,
        cols,
        pairs: tokens * used,
        experts,
        per_x,
        y_rows,
        first,
    };
    s.check()?;
    let name = format!(
        "{OP}/{ty}/experts/{rows}x{cols}/t{tokens}e{experts}k{used}/x{per_x}/rows{first}of{y_rows}"
    );
    let mut rng = Rng::new(seed(&name));
    let (r, c) = (rows as usize, cols as usize);
    let w = quantize(ty, &rng.f32s(experts as usize * r * c, -1.0, 1.0))?;
    let xs: Vec<_> = (0..s.pairs / per_x)
        .map(|_| quantize_x(&rng.f32s(c, -1.0, 1.0), XBlocks::for_weights(ty)))
        .collect();
    let sort = MoeSort {
        tokens,
        experts,
        used,
    };
    let ids = crate::moe_sort::drawn(&mut rng, &sort)?.ids;
    let want = reference(&s, &w, &xs, &ids)?;
    let cat = |f: fn(&Q8Activations) -> &[u8]| xs.iter().flat_map(f).copied().collect::<Vec<u8>>();
    Ok(Case::new(name, experts_kernel(ty)?, s.grid())
        .input(
            "w",
            Scalar::U32,
            interleave(ty, &w, experts as usize * r, c)?,
        )
        .input("xq", Scalar::U32, cat(|x| bytemuck::cast_slice(&x.words)))
        .input("xd", Scalar::F32, cat(|x| bytemuck::cast_slice(&x.scales)))
        .input("xs", Scalar::F32, cat(|x| bytemuck::cast_slice(&x.sums)))
        .input("ids", Scalar::U32, u32_bytes(&ids))
        .output("y", Scalar::F32, vec![0; want.len() * 4], want)
        .params(s.params()))
}

/// Qwen3-MoE's products in small: gate's and up's halves of each pair's row over the tokens'
/// x (Q4_K), down over the pairs' own (Q6_K); a flat format.
pub fn cases() -> Vec<Case> {
    [
        (WeightType::Q4_K, (32, 256, 5), (8, 2, 2), (64, 0)),
        (WeightType::Q4_K, (32, 256, 5), (8, 2, 2), (64, 32)),
        (WeightType::Q6_K, (48, 256, 3), (4, 2, 1), (48, 0)),
        (WeightType::Q4_0, (16, 64, 7), (6, 1, 1), (16, 0)),
    ]
    .into_iter()
    .map(|(ty, shape, routing, part)| case(ty, shape, routing, part))
    .collect::<Result<_, _>>()
    .expect("the fixed shapes are valid")
}

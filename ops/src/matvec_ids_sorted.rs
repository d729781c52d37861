//! A prompt's experts' gate and up products by expert: each workgroup takes rows of one
//! expert and walks the (token, slot) pairs that chose it ([`crate::moe_sort`]'s lists) in
//! chunks of `tokens_per_chunk`, so that a unit of the expert's rows is read once a chunk from
//! memory, where [`crate::matvec_ids_blocks`]' workgroup per pair reads an expert's rows once
//! per token that chose it. Otherwise as [`crate::matvec_ids_blocks`]' [`Out::Swiglu`]: 8-bit
//! x, the file's blocks, `silu(gate)·up` stored at each pair's own place of y
//! `[tokens × used × rows]`.
//!
//! The chunk's tokens share the rows' codes: each token's unit sums
//! ([`unit_sums`]) load the same words, which the unit before left in the cache. A chunk
//! ends with a reduction per (row, token, matrix); the chunks an expert has are uniform over
//! its workgroup, so the reductions' barriers are too.
//!
//! Bound: [`crate::matvec::NMSE`], as [`crate::matvec_ids_blocks`]'.

use crate::blocks::UNIT;
use crate::case::*;
use crate::elementwise::silu_ir;
use crate::matvec_ids::{reference, Inputs, MatvecIds, Out};
use crate::matvec_ids_blocks::{dequantized, with_weights, X_BLOCKS};
use crate::matvec_q8::quantize_x;
use crate::matvec_q8_blocks::{format, unit_sums, UnitRow};
use crate::moe_sort::{self, MoeSort};
use crate::shape::ShapeError;
use crate::support::{nonzero, seed, Combine, Reducer, Reduction};
use trine_gguf::quant::{quantize, WeightType};
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar, Val};

const OP: &str = "matvec_ids_sorted";

/// Invocations of a workgroup.
pub const WORKGROUP: u32 = 128;

/// `[row blocks, experts, 1]`.
pub fn grid(s: &MatvecIds, rows_per_workgroup: u32) -> [u32; 3] {
    [s.rows.div_ceil(rows_per_workgroup.max(1)), s.experts, 1]
}

/// rows, cols, used, tokens.
pub fn params(s: &MatvecIds) -> Vec<ParamValue> {
    let mut p = s.params();
    p.push(ParamValue::U32(s.tokens));
    p
}

/// Buffers, reads first: `gate`, `up` (each as `U32` words, then its `F16` view where
/// `f16_view`), `counts`, `lists` ([`crate::moe_sort`]'s), `xq`, `xd` (the tokens' x in
/// [`X_BLOCKS`]), then `y`. Parameters [`params`]; grid [`grid`].
pub fn kernel(
    ty: WeightType,
    how: Reduction,
    (rows_per_workgroup, tokens_per_chunk): (u32, u32),
    f16_view: bool,
) -> Result<Kernel, ShapeError> {
    let (p, units) = format(OP, ty)?;
    let nrows = nonzero(OP, "rows per workgroup", rows_per_workgroup)?;
    let chunk = nonzero(OP, "tokens per chunk", tokens_per_chunk)?;
    let mut name = format!("{OP}_{ty}_{}_r{nrows}_t{chunk}", how.name());
    if f16_view {
        name.push_str("_h");
    }
    let k = KernelBuilder::new(&name, [WORKGROUP, 1, 1]);
    let matrix = |name: &str| {
        let w = k.buffer(name, Scalar::U32, Access::Read);
        let w16 = f16_view.then(|| k.buffer(&format!("{name}16"), Scalar::F16, Access::Read));
        (w, w16)
    };
    let mats = [matrix("gate"), matrix("up")];
    let counts = k.buffer("counts", Scalar::U32, Access::Read);
    let lists = k.buffer("lists", Scalar::U32, Access::Read);
    let xq = k.buffer("xq", Scalar::U32, Access::Read);
    let xd = k.buffer("xd", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let rows = k.param("rows", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let used = k.param("used", Scalar::U32);
    let tokens = k.param("tokens", Scalar::U32);
    let lid = k.local_index();
    let row0 = k.workgroup_id(0) * k.u32(nrows);
    let e = k.workgroup_id(1);
    let count = k.load(counts, e);
    let blocks = cols / k.u32(p.elems);
    let per_block = p.elems / UNIT;
    let row_units = blocks * k.u32(per_block);
    // Per row and chunk token, gate's and up's sums.
    let accs: Vec<Vec<[_; 2]>> = (0..nrows)
        .map(|_| {
            (0..chunk)
                .map(|_| [k.var("acc", Scalar::F32), k.var("acc", Scalar::F32)])
                .collect()
        })
        .collect();
    let reducer = Reducer::new(&k, how);
    let chunks = (count + k.u32(chunk - 1)) / k.u32(chunk);
    k.for_range(k.u32(0), chunks, 1, |c| {
        accs.iter()
            .flatten()
            .flatten()
            .for_each(|a| a.set(k.f32(0.0)));
        // The chunk's pairs; past the expert's count, its last pair again, not stored.
        let first = c * k.u32(chunk);
        let pairs: Vec<Val> = (0..chunk)
            .map(|j| {
                let at = (first + k.u32(j)).min(count - k.u32(1));
                k.load(lists, e * tokens + at)
            })
            .collect();
        k.for_range(lid, row_units * k.u32(nrows), WORKGROUP, |i| {
            let (rr, u) = (i / row_units, i % row_units);
            let row = (row0 + rr).min(rows - k.u32(1));
            let wrow = e * rows + row;
            let at_rows: Vec<UnitRow> = mats.iter().map(|&m| (m, wrow)).collect();
            let (b, unit) = (u / k.u32(per_block), u % k.u32(per_block));
            let zeros = [k.f32(0.0); 2];
            for (j, &pair) in pairs.iter().enumerate() {
                let x0 = pair / used * cols;
                let sums = unit_sums(
                    &k,
                    (p, units),
                    &at_rows,
                    (xq, xd, Some(x0)),
                    (blocks, b, &[unit]),
                    &zeros,
                );
                for (r, row_accs) in accs.iter().enumerate() {
                    // A row keeps only its own units' sums: an invocation's units span rows.
                    let mine = (nrows > 1).then(|| rr.eq(k.u32(r as u32)));
                    for (acc, &s) in row_accs[j].iter().zip(&sums) {
                        let s = mine.map_or(s, |m| k.select(m, s, k.f32(0.0)));
                        acc.set(acc.get() + s);
                    }
                }
            }
        });
        for (r, row_accs) in accs.iter().enumerate() {
            let row = row0 + k.u32(r as u32);
            for (j, [gate, up]) in row_accs.iter().enumerate() {
                let g = reducer.reduce(&k, lid, gate.get(), Combine::Sum);
                let u = reducer.reduce(&k, lid, up.get(), Combine::Sum);
                let live = (first + k.u32(j as u32)).lt(count);
                k.if_(lid.eq(k.u32(0)) & row.lt(rows) & live, || {
                    k.store(y, pairs[j] * rows + row, silu_ir(&k, g) * u);
                });
            }
        }
    });
    Ok(k.finish())
}

/// A conformance case: as [`crate::matvec_ids_blocks::case`]'s for [`Out::Swiglu`], the
/// pairs sorted on the host ([`moe_sort::reference`]).
pub fn case(
    s: MatvecIds,
    how: Reduction,
    (rows_per_workgroup, tokens_per_chunk): (u32, u32),
    f16_view: bool,
) -> Result<Case, ShapeError> {
    s.check()?;
    format(OP, s.weights)?;
    let view = if f16_view { "_h" } else { "" };
    let name = format!(
        "{OP}/{}/{}_r{rows_per_workgroup}_t{tokens_per_chunk}{view}/t{}e{}k{}/{}x{}",
        s.weights,
        how.name(),
        s.tokens,
        s.experts,
        s.used,
        s.rows,
        s.cols
    );
    let mut rng = Rng::new(seed(&name));
    let n = (s.experts * s.rows * s.cols) as usize;
    let mats: Vec<Vec<u8>> = (0..2)
        .map(|_| quantize(s.weights, &rng.f32s(n, -1.0, 1.0)))
        .collect::<Result<_, _>>()?;
    let sort = MoeSort {
        tokens: s.tokens,
        experts: s.experts,
        used: s.used,
    };
    let moe_sort::Sorted { ids, counts, lists } = moe_sort::drawn(&mut rng, &sort)?;
    let xq = quantize_x(&rng.f32s((s.tokens * s.cols) as usize, -1.0, 1.0), X_BLOCKS);
    let x = dequantized(&xq.words, &xq.scales);
    let refs: Vec<&[u8]> = mats.iter().map(Vec::as_slice).collect();
    let inputs = Inputs {
        ids: &ids,
        weights: &[],
        x: &x,
        r: &[],
    };
    let s = MatvecIds {
        out: Out::Swiglu,
        ..s
    };
    let want = reference(&s, &refs, &inputs)?;
    let per = (rows_per_workgroup, tokens_per_chunk);
    let mut c = Case::new(
        name,
        kernel(s.weights, how, per, f16_view)?,
        grid(&s, per.0),
    );
    c = with_weights(c, mats.iter().zip(["gate", "up"]), f16_view);
    c = c
        .input("counts", Scalar::U32, u32_bytes(&counts))
        .input("lists", Scalar::U32, u32_bytes(&lists))
        .input("xq", Scalar::U32, bytemuck::cast_slice(&xq.words).to_vec())
        .input("xd", Scalar::F32, f32_bytes(&xq.scales))
        .output("y", Scalar::F32, vec![0; want.len() * 4], want)
        .params(params(&s))
        .bound(crate::matvec::NMSE);
    if how == Reduction::Subgroup {
        c = c.fallback(kernel(s.weights, Reduction::Shared, per, f16_view)?);
    }
    Ok(c)
}

/// Each format with units: prompts whose experts' token counts leave chunks part full (and an
/// expert no token chose), one, two and four rows a workgroup with row counts they do not
/// divide, chunks of one and several tokens, both reductions, the scales read both ways, and
/// Qwen3-30B-A3B's gate/up (8 of 128 experts, rows of 2048) over 24 tokens.
pub fn cases() -> Vec<Case> {
    let shape = |weights, tokens, experts, used, rows, cols| MatvecIds {
        weights,
        out: Out::Swiglu,
        tokens,
        experts,
        used,
        rows,
        cols,
    };
    let (sg, sh) = (Reduction::Subgroup, Reduction::Shared);
    let (q4, q5, q6) = (WeightType::Q4_K, WeightType::Q5_K, WeightType::Q6_K);
    let shapes = [
        (shape(q4, 5, 8, 2, 6, 768), sg, (4, 4), true),
        (shape(q4, 9, 4, 3, 5, 256), sh, (2, 2), false),
        (shape(q5, 3, 3, 2, 3, 512), sg, (1, 1), true),
        (shape(q6, 6, 4, 2, 9, 256), sh, (4, 4), true),
        (shape(q4, 24, 128, 8, 4, 2048), sg, (2, 4), true),
    ];
    shapes
        .into_iter()
        .map(|(s, how, per, view)| case(s, how, per, view))
        .collect::<Result<_, _>>()
        .expect("the fixed shapes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_matches_its_reference_on_the_interpreter() {
        for c in cases() {
            if let Err(e) = c.check_reference() {
                panic!("{}: {e}", c.name);
            }
        }
    }
}

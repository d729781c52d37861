//! [`matvec_q8`](crate::matvec_q8)'s product for GPUs, on the blocks of the formats whose
//! codes come as words of bytes ([`IntUnits`]: Q4_K, Q5_K, Q6_K as the file holds them, Q4_0,
//! Q4_1 and Q8_0 in a GPU's groups of eight blocks, whose codes are signed for Q8_0). A decode
//! step's product reads every weight once; with f32 x, a GPU spent more instructions per byte
//! of weights (a run's codes decoded to floats, eight f32 values of x per word of nibbles)
//! than it has while the memory streams them. Here a unit of 32 codes is four words of each
//! of its two runs, multiplied with x's codes by packed integer dot products
//! ([`BinaryOp::Dot4I8`](trine_ir::BinaryOp::Dot4I8)), and each run's scales apply once.
//!
//! A workgroup takes `rows_per_workgroup` rows; invocation `l` takes units `l`, `l + 128`, …
//! of each, so that neighbouring invocations read neighbouring 16-byte runs of codes, and x's
//! words for a unit are loaded once for all the rows. x comes in blocks of 32 with one scale
//! each ([`XBlocks::Q8_0`](crate::matvec_q8::XBlocks), as llama.cpp's CUDA backend
//! quantizes it for every type): a run of 16 lies in one of them.
//!
//! Bound: as [`matvec_q8`](crate::matvec_q8)'s, f32 rounding over exact integer dots.

use crate::blocks::{BlockFormat, Bytes, IntUnits, Packed, UNIT};
use crate::case::*;
use crate::matvec_q8::{code_sum, quantize_x, reference, XBlocks, OP, X_BLOCK};
use crate::shape::ShapeError;
use crate::support::{prefetch_bytes, Combine, Reducer, Reduction};
use trine_gguf::quant::{quantize, WeightType};
use trine_ir::{Access, BufferId, Kernel, KernelBuilder, ParamValue, Scalar, Val};

/// Invocations of a workgroup. A row of 4096 is 128 units of Q4_K: one each.
pub const WORKGROUP: u32 = 128;

/// How x is quantized for this product: blocks of 32, one per run of 16 (a run never
/// straddles two).
pub const X_BLOCKS: XBlocks = XBlocks::Q8_0;

/// The format of `ty` where it has units of byte codes; else `op`'s refusal, naming the
/// formats that have them.
pub(crate) fn format(op: &'static str, ty: WeightType) -> Result<(Packed, IntUnits), ShapeError> {
    match BlockFormat::of(ty) {
        Some(BlockFormat::Packed(p)) => p.units.map(|u| (p, u)),
        _ => None,
    }
    .ok_or_else(|| {
        let names: Vec<&str> = BlockFormat::ALL
            .iter()
            .filter_map(|f| match f {
                BlockFormat::Packed(p) if p.units.is_some() => Some(p.ty.name()),
                _ => None,
            })
            .collect();
        ShapeError::Unsupported {
            op,
            what: format!(
                "{ty} weights on their own blocks (it takes {})",
                names.join(", ")
            ),
        }
    })
}

/// Whether the product takes `ty` weights in rows of `cols`: a format with units, and rows of
/// whole blocks.
pub fn takes(ty: WeightType, cols: u32) -> bool {
    format(OP, ty).is_ok_and(|(p, _)| cols > 0 && cols.is_multiple_of(p.elems))
}

/// The product of `ty` weights (the file's bytes, bound as `U32` words) and x quantized in
/// [`X_BLOCKS`]. Buffers `w`, with `f16_view` also `w16` (the same bytes bound as `F16`: the
/// blocks' f16 scales converted natively, where assembling one from bytes costs some twenty
/// integer operations, per run and row), `xq`, `xd`, with `add` also `r` (F32 `[rows]`,
/// added: a residual connection), then `y` (F32 `[rows]`); parameters `rows`, `cols`; grid
/// [`grid`].
pub fn kernel(
    ty: WeightType,
    reduce: Reduction,
    rows_per_workgroup: u32,
    add: bool,
    f16_view: bool,
) -> Result<Kernel, ShapeError> {
    let (p, units) = format(OP, ty)?;
    let nrows = crate::support::nonzero(OP, "rows per workgroup", rows_per_workgroup)?;
    let mut name = format!("matvec_q8_{ty}_blocks_{}_r{nrows}", reduce.name());
    if f16_view {
        name.push_str("_h");
    }
    if add {
        name.push_str("_add");
    }
    let k = KernelBuilder::new(&name, [WORKGROUP, 1, 1]);
    let w = k.buffer("w", Scalar::U32, Access::Read);
    let w16 = f16_view.then(|| k.buffer("w16", Scalar::F16, Access::Read));
    let xq = k.buffer("xq", Scalar::U32, Access::Read);
    let xd = k.buffer("xd", Scalar::F32, Access::Read);
    let r = add.then(|| k.buffer("r", Scalar::F32, Access::Read));
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let rows = k.param("rows", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let lid = k.local_index();
    let row0 = k.workgroup_id(0) * k.u32(nrows);
    // Rows past the end read the last row again, so that every invocation reaches the
    // reductions; their sums are not stored.
    let rows_at: Vec<Val> = (0..nrows)
        .map(|i| (row0 + k.u32(i)).min(rows - k.u32(1)))
        .collect();
    let blocks = cols / k.u32(p.elems);
    // The workgroup's rows stream into L2 while the dispatch before it (x's quantizer) runs.
    let row_bytes = blocks * k.u32(p.bytes);
    let end = (rows_at[rows_at.len() - 1] + k.u32(1)) * row_bytes;
    prefetch_bytes(&k, (w, 4), (rows_at[0] * row_bytes, end), WORKGROUP);
    let per_block = p.elems / UNIT;
    let accs: Vec<_> = (0..nrows).map(|_| k.var("acc", Scalar::F32)).collect();
    k.for_range(lid, blocks * k.u32(per_block), WORKGROUP, |u| {
        let (b, unit) = (u / k.u32(per_block), u % k.u32(per_block));
        let at: Vec<_> = rows_at.iter().map(|&row| ((w, w16), row)).collect();
        let start: Vec<_> = accs.iter().map(|a| a.get()).collect();
        let sums = unit_sums(
            &k,
            (p, units),
            &at,
            (xq, xd, None),
            (blocks, b, unit),
            &start,
        );
        accs.iter().zip(sums).for_each(|(acc, sum)| acc.set(sum));
    });
    let reducer = Reducer::new(&k, reduce);
    for (i, acc) in accs.iter().enumerate() {
        let total = reducer.reduce(&k, lid, acc.get(), Combine::Sum);
        let row = row0 + k.u32(i as u32);
        k.if_(lid.eq(k.u32(0)) & row.lt(rows), || {
            let v = r.map_or(total, |r| total + k.load(r, row));
            k.store(y, row, v);
        });
    }
    Ok(k.finish())
}

/// The weights a unit's product reads: the buffer of the file's bytes as `U32` words, its
/// `F16` view where bound, and the row.
pub(crate) type UnitRow<'b> = ((BufferId, Option<BufferId>), Val<'b>);

/// Unit `unit` of block `b` (of a row's `blocks`) of each of `rows` multiplied with x's
/// codes (`xq`, scales `xd`; the row of x starting at element `x0`, else at 0), added to `start`: the
/// new sums, one per row. The rows share x's loads, which depend on the unit alone.
pub(crate) fn unit_sums<'b>(
    k: &'b KernelBuilder,
    (p, units): (Packed, IntUnits),
    rows: &[UnitRow<'b>],
    (xq, xd, x0): (BufferId, BufferId, Option<Val<'b>>),
    (blocks, b, unit): (Val<'b>, Val<'b>, Val<'b>),
    start: &[Val<'b>],
) -> Vec<Val<'b>> {
    let codes: Vec<_> = rows
        .iter()
        .map(|&((w, _), row)| {
            let base = (row * blocks + b) * k.u32(p.bytes);
            (base, (units.words)(k, w, base, unit))
        })
        .collect();
    // Each run's x: its four words, its block's scale, and the sum of its codes. The
    // runs' first elements depend on the unit alone, the same for every row.
    let xs: Vec<_> = codes[0]
        .1
        .runs
        .iter()
        .map(|&(first, _)| {
            let e = b * k.u32(p.elems) + first;
            let e = x0.map_or(e, |x0| x0 + e);
            let xb = e / k.u32(X_BLOCK);
            // x's codes are a byte each and a run starts at a multiple of 16: its 16
            // bytes are one quad.
            let words = k.load_quad(xq, e / k.u32(16));
            let sum = code_sum(k, &words);
            (first, words, k.load(xd, xb), sum)
        })
        .collect();
    codes
        .iter()
        .zip(rows)
        .zip(start)
        .map(|(((base, unit_codes), &((w, w16), _)), &sum)| {
            let dots: Vec<Val> = unit_codes
                .runs
                .iter()
                .zip(&xs)
                .map(|(&(_, words), (_, x, _, _))| {
                    words
                        .iter()
                        .zip(x)
                        .map(|(&c, &v)| c.dot4_i8(v))
                        .reduce(|a, c| a + c)
                        .expect("four words")
                })
                .collect();
            // Each run's dot, or the unit's where its runs share their scales and x's.
            let terms: Vec<(Val, Val, Val, Val)> = if units.one_sub {
                let (first, _, dx, _) = xs[0];
                vec![(first, dots[0] + dots[1], dx, xs[0].3 + xs[1].3)]
            } else {
                dots.iter()
                    .zip(&xs)
                    .map(|(&dot, &(first, _, dx, xsum))| (first, dot, dx, xsum))
                    .collect()
            };
            let mut sum = sum;
            for (first, dot, dx, xsum) in terms {
                let dot = if units.centre == 0 {
                    dot
                } else {
                    dot - k.i32(units.centre) * xsum
                };
                let scales = (p.scales)(k, (Bytes::Words(w), w16), *base, first / k.u32(p.sub));
                sum = (scales.d * dx).fma(dot.cast(Scalar::F32), sum);
                if let Some(m) = scales.m {
                    sum = (m * dx).fma(xsum.cast(Scalar::F32), sum);
                }
            }
            sum
        })
        .collect()
}

/// The grid of [`kernel`]: a workgroup per `rows_per_workgroup` rows.
pub fn grid(rows: u32, rows_per_workgroup: u32) -> [u32; 3] {
    [rows.div_ceil(rows_per_workgroup.max(1)), 1, 1]
}

/// A conformance (and bench) case: random weights of `ty`, random x quantized on the host.
pub fn case(
    ty: WeightType,
    (rows, cols): (u32, u32),
    reduce: Reduction,
    rows_per_workgroup: u32,
    (add, f16_view): (bool, bool),
) -> Result<Case, ShapeError> {
    let (p, _) = format(OP, ty)?;
    if !takes(ty, cols) {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!(
                "rows of {cols} {ty} weights (whole blocks of {} only)",
                p.elems
            ),
        });
    }
    let (r, c) = (rows as usize, cols as usize);
    let mut rng = Rng::new(u64::from(rows) * 31 + u64::from(cols));
    let w = quantize(ty, &rng.f32s(r * c, -1.0, 1.0))?;
    let x = quantize_x(&rng.f32s(c, -1.0, 1.0), X_BLOCKS);
    let mut want = reference(ty, &w, r, c, &x)?;
    let resid = rng.f32s(r, -1.0, 1.0);
    let view = if f16_view { "_h" } else { "" };
    let suffix = if add { "_add" } else { "" };
    let w = crate::blocks::pad_to_words(w);
    let mut case = Case::new(
        format!(
            "{OP}/{ty}/{rows}x{cols}/blocks_{}_r{rows_per_workgroup}{view}{suffix}",
            reduce.name()
        ),
        kernel(ty, reduce, rows_per_workgroup, add, f16_view)?,
        grid(rows, rows_per_workgroup),
    )
    .input("w", Scalar::U32, w.clone());
    if f16_view {
        case = case.input("w16", Scalar::F16, w);
    }
    case = case
        .input("xq", Scalar::U32, bytemuck::cast_slice(&x.words).to_vec())
        .input("xd", Scalar::F32, bytemuck::cast_slice(&x.scales).to_vec());
    if add {
        want.iter_mut()
            .zip(&resid)
            .for_each(|(y, &v)| *y += f64::from(v));
        case = case.input("r", Scalar::F32, f32_bytes(&resid));
    }
    Ok(case
        .output("y", Scalar::F32, vec![0; r * 4], want)
        .params(vec![ParamValue::U32(rows), ParamValue::U32(cols)]))
}

/// Every format with units: a row of one block, rows of three blocks (every other Q6_K block
/// then starts mid-word) in a count the workgroups' rows do not divide, a row longer than a
/// workgroup's units, both reductions, the residual's variant and scales read both ways.
pub fn cases() -> Vec<Case> {
    let mut out = vec![];
    for ty in BlockFormat::ALL
        .map(BlockFormat::ty)
        .into_iter()
        .filter(|&t| format(OP, t).is_ok())
    {
        let mut push = |shape, reduce, per, how| {
            out.push(case(ty, shape, reduce, per, how).expect("valid shapes"));
        };
        push((4, 256), Reduction::Shared, 1, (false, false));
        push((7, 768), Reduction::Subgroup, 2, (false, true));
        push((9, 4608), Reduction::Subgroup, 1, (true, true));
        push((5, 768), Reduction::Shared, 2, (true, false));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A format without units, and rows that are not whole blocks, are refused by name.
    #[test]
    fn what_it_does_not_take_is_refused() {
        let e = kernel(WeightType::Q4_0, Reduction::Shared, 1, false, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("q4_0 weights")
                && e.contains("(it takes q4_k, q5_k, q6_k, q4_0x8, q4_1x8, q8_0x8)"),
            "{e}"
        );
        assert!(takes(WeightType::Q6_K, 512) && !takes(WeightType::Q6_K, 96));
        assert!(takes(WeightType::Q8_0x8, 512) && !takes(WeightType::Q8_0x8, 96));
        let e = case(
            WeightType::Q4_K,
            (1, 96),
            Reduction::Shared,
            1,
            (false, false),
        )
        .unwrap_err();
        assert!(e.to_string().contains("96"), "{e}");
    }
}

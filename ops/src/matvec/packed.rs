//! The walks over a row's weights in a packed format ([`Packed`]): each reads one run of
//! consecutive elements of a sub-block at a time through the format's decoder, its scales
//! once per run and row, and adds `d·Σ code·x` (plus `m·Σx`) to the row's sum.

use super::dot::accumulate;
use crate::blocks::{Bytes, Packed};
use crate::matvec_attn::Input;
use crate::matvec_fused::Norm;
use trine_ir::{BufferId, KernelBuilder, Val, Var};

/// The segments walk ([`super::MatvecSpec::segment`]) of a packed format: each invocation
/// takes segments `lid`, `lid + wg`, … of the row, a segment being runs of at most a
/// sub-block. `w` is bound as bytes or as words ([`super::MatvecSpec::word_codes`]).
pub(super) fn dot_packed<'b>(
    k: &'b KernelBuilder,
    p: Packed,
    (w, w16): (Bytes, Option<BufferId>),
    (input, norm): (&Input<'b>, Option<&Norm<'b>>),
    cols: Val<'b>,
    rows_accs: &[(Val<'b>, Var<'b>)],
    (wg, segment): (u32, u32),
) {
    let block_bytes = k.u32(p.bytes);
    let row_bytes = (cols / k.u32(p.elems)) * block_bytes;
    let bases: Vec<Val> = rows_accs.iter().map(|&(r, _)| r * row_bytes).collect();
    let run = segment.min(p.sub);
    let lid = k.local_index();
    k.for_range(lid, cols / k.u32(segment), wg, |s| {
        let per_block = k.u32(p.elems / segment);
        let block = s / per_block;
        let first = (s % per_block) * k.u32(segment);
        let xb = block * k.u32(p.elems);
        // Each row's runs are decoded before x is loaded: the weights come from memory, x
        // from a cache (as the flat walk orders them).
        let weights: Vec<Vec<_>> = bases
            .iter()
            .map(|base| {
                let blk = *base + block * block_bytes;
                (0..segment / run)
                    .map(|r| {
                        let e = first + k.u32(r * run);
                        let scales = (p.scales)(k, (w, w16), blk, e / k.u32(p.sub));
                        (scales, (p.codes)(k, w, blk, e, run))
                    })
                    .collect()
            })
            .collect();
        let xs: Vec<Val> = (0..segment)
            .map(|i| {
                let c = xb + first + k.u32(i);
                let v = input.load(k, c);
                norm.map_or(v, |n| n.scale(k, v, c))
            })
            .collect();
        let runs: Vec<&[Val]> = xs.chunks(run as usize).collect();
        let sums: Vec<Option<Val>> = runs.iter().map(|x| p.min.then(|| sum(x))).collect();
        for ((_, acc), row) in rows_accs.iter().zip(weights) {
            for (((scales, codes), x), &xsum) in row.into_iter().zip(&runs).zip(&sums) {
                accumulate(*acc, scales, (&codes, x), xsum);
            }
        }
    });
}

/// The blocked walk ([`super::MatvecSpec::blocked`]) of a packed format: a loop over the
/// row's sub-blocks with uniform bounds, invocation `lid` taking elements `lid + j·wg` of each,
/// so that consecutive invocations read consecutive x values; each row's scales once per
/// sub-block, its codes one element at a time.
pub(super) fn dot_packed_blocked<'b>(
    k: &'b KernelBuilder,
    p: Packed,
    (w, w16): (BufferId, Option<BufferId>),
    (input, norm): (&Input<'b>, Option<&Norm<'b>>),
    cols: Val<'b>,
    rows_accs: &[(Val<'b>, Var<'b>)],
    wg: u32,
) {
    let block_bytes = k.u32(p.bytes);
    let row_bytes = (cols / k.u32(p.elems)) * block_bytes;
    let bases: Vec<Val> = rows_accs.iter().map(|&(r, _)| r * row_bytes).collect();
    let lid = k.local_index();
    let w = Bytes::U8(w);
    let offsets: Vec<Val> = (0..p.sub / wg).map(|j| lid + k.u32(j * wg)).collect();
    let per_block = p.elems / p.sub;
    k.for_range(k.u32(0), cols / k.u32(p.sub), 1, |g| {
        let (block, sub) = (g / k.u32(per_block), g % k.u32(per_block));
        let xb = g * k.u32(p.sub);
        let xs: Vec<Val> = offsets
            .iter()
            .map(|&o| {
                let v = input.load_aligned(k, (xb, o), p.sub);
                norm.map_or(v, |n| n.scale(k, v, xb + o))
            })
            .collect();
        let xsum = p.min.then(|| sum(&xs));
        for (base, (_, acc)) in bases.iter().zip(rows_accs) {
            let blk = *base + block * block_bytes;
            let scales = (p.scales)(k, (w, w16), blk, sub);
            let first = sub * k.u32(p.sub);
            let codes: Vec<Val> = offsets
                .iter()
                .map(|&o| (p.codes)(k, w, blk, first + o, 1)[0])
                .collect();
            accumulate(*acc, scales, (&codes, &xs), xsum);
        }
    });
}

fn sum<'b>(xs: &[Val<'b>]) -> Val<'b> {
    xs[1..].iter().fold(xs[0], |a, &v| a + v)
}

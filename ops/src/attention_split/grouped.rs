//! The per-split kernel with the query heads that share a KV head in one workgroup
//! ([`grouped_kernel`]), for devices that run subgroups of [`WIDTH`].
//!
//! [`super::split_kernel`] gives each query head a workgroup of its own, each invocation a key
//! whose whole row it walks alone: a GQA model's K and V rows are read once per query head,
//! and a warp's loads of its keys' rows land a row apart. Here a workgroup takes one split
//! of one KV head for all `group` query heads that read it; each subgroup takes [`KEYS`] keys
//! a step, its lanes holding consecutive elements of each row (one load of a row across the
//! subgroup), the dot products summed across the subgroup, and each subgroup keeps its own
//! online softmax for every query head. The subgroups' partials are merged through shared
//! memory at the end, into the partials [`super::split_kernel`] writes, so the combine is
//! the same.
//!
//! Bound: [`crate::attention::NMSE`], the same sums in another order.

use super::kernel::{split_keys, PartsIo};
use super::shape::check_head_dim;
use super::OP;
use crate::kv_type::KvType;
use crate::shape::ShapeError;
use trine_ir::{Kernel, KernelBuilder, Scalar, Val};

/// The subgroup width the kernel is written for.
pub const WIDTH: u32 = 32;

/// Subgroups per workgroup: keys a workgroup walks at once.
pub const SUBGROUPS: u32 = 4;

/// Keys a subgroup takes a step: their rows' reads in flight together, where one key a step
/// waited on each row's read before the next was asked for.
pub const KEYS: u32 = 8;

/// The most query heads a KV head serves that the kernel takes (its accumulators are
/// registers: `group × head_dim / WIDTH` of them).
pub const MAX_GROUP: u32 = 8;

/// Whether the kernel takes heads of `head_dim`, `group` query heads a KV head, and a cache
/// of `kv`: a float cache, and a row a whole number of elements per lane, at most 8 each.
pub fn supports(head_dim: u32, group: u32, kv: KvType) -> bool {
    kv.float().is_some()
        && head_dim.is_multiple_of(WIDTH)
        && head_dim <= 8 * WIDTH
        && (1..=MAX_GROUP).contains(&group)
}

/// The kernel for heads of `head_dim`, `group` query heads a KV head, a cache of `kv` in rows.
/// Buffers and parameters as [`super::split_kernel`]'s; grid
/// [`SplitAttention::grouped_grid`](super::SplitAttention::grouped_grid):
/// `[splits, kv_heads, tokens]`.
pub fn grouped_kernel(head_dim: u32, group: u32, kv: KvType) -> Result<Kernel, ShapeError> {
    check_head_dim(head_dim)?;
    let k = KernelBuilder::new(
        &format!(
            "attention_split_grouped_d{head_dim}_g{group}_{}kv",
            kv.name()
        ),
        [WIDTH * SUBGROUPS, 1, 1],
    );
    build(&k, head_dim, group, kv)?;
    Ok(k.finish())
}

fn build<'b>(
    k: &'b KernelBuilder,
    head_dim: u32,
    group: u32,
    kv: KvType,
) -> Result<(), ShapeError> {
    if !supports(head_dim, group, kv) {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!(
                "{group} query heads a KV head of dimension {head_dim} in a {} cache on grouped splits",
                kv.name()
            ),
        });
    }
    k.require_subgroup_width(WIDTH);
    let PartsIo {
        q,
        step,
        k: kc,
        v: vc,
        part,
        tokens,
        heads,
        kv_heads,
    } = PartsIo::declare(k, kv);
    let splits = k.param("splits", Scalar::U32);
    let scale = k.param("scale", Scalar::F32);
    k.settled(step);
    let s = k.workgroup_id(0);
    let kvh = k.workgroup_id(1);
    let t = k.workgroup_id(2);
    let lane = k.subgroup_invocation_id();
    let sub = k.subgroup_id();
    let per_lane = head_dim / WIDTH;
    let d = k.u32(head_dim);
    let pos = k.load(step, k.u32(0));
    let (start, stop) = split_keys(k, (pos, tokens, splits), s);
    let end = stop.min(pos + t + k.u32(1));
    let neg_inf = k.f32(f32::NEG_INFINITY);

    // The lane's elements of each query head's row.
    let first_head = kvh * k.u32(group);
    let lane_at = lane * k.u32(per_lane);
    let qs: Vec<Vec<Val>> = (0..group)
        .map(|g| {
            let row = (t * heads + first_head + k.u32(g)) * d + lane_at;
            (0..per_lane).map(|e| k.load(q, row + k.u32(e))).collect()
        })
        .collect();
    let m: Vec<_> = (0..group)
        .map(|g| k.var(&format!("max{g}"), Scalar::F32))
        .collect();
    let l: Vec<_> = (0..group)
        .map(|g| k.var(&format!("sum{g}"), Scalar::F32))
        .collect();
    let acc: Vec<Vec<_>> = (0..group)
        .map(|g| {
            (0..per_lane)
                .map(|e| k.var(&format!("acc{g}_{e}"), Scalar::F32))
                .collect()
        })
        .collect();
    for g in 0..group as usize {
        m[g].set(neg_inf);
        l[g].set(k.f32(0.0));
        for a in &acc[g] {
            a.set(k.f32(0.0));
        }
    }
    let row_of = |j: Val<'b>| j * kv_heads * d + kvh * d + lane_at;
    // Every subgroup takes every step (the bounds are uniform), KEYS keys each, their rows
    // loaded before any is used so that their reads are in flight together: past the split's
    // last key, the last key again with no weight.
    let last = end - k.u32(1);
    k.for_range(start, end, SUBGROUPS * KEYS, |first| {
        let rows: Vec<(Val, Vec<Val>, Vec<Val>)> = (0..KEYS)
            .map(|u| {
                let j = first + k.u32(u * SUBGROUPS) + sub;
                let at = row_of(j.min(last));
                let keys = (0..per_lane)
                    .map(|e| kv.load(k, kc, at + k.u32(e)))
                    .collect();
                let values = (0..per_lane)
                    .map(|e| kv.load(k, vc, at + k.u32(e)))
                    .collect();
                (j.lt(end), keys, values)
            })
            .collect();
        for g in 0..group as usize {
            let scores: Vec<Val> = rows
                .iter()
                .map(|(visible, keys, _)| {
                    let dot = qs[g]
                        .iter()
                        .zip(keys)
                        .fold(k.f32(0.0), |sum, (&qe, &ke)| qe.fma(ke, sum));
                    k.select(*visible, dot.subgroup_sum() * scale, neg_inf)
                })
                .collect();
            let new_m = scores.iter().fold(m[g].get(), |top, &s| top.max(s));
            // Both −inf only before this subgroup's first visible key: nothing to rescale.
            let corr = k.select(new_m.eq(neg_inf), k.f32(1.0), (m[g].get() - new_m).exp());
            let ps: Vec<Val> = rows
                .iter()
                .zip(&scores)
                .map(|((visible, _, _), &s)| k.select(*visible, (s - new_m).exp(), k.f32(0.0)))
                .collect();
            l[g].set(ps.iter().fold(l[g].get() * corr, |sum, &p| sum + p));
            for (e, a) in acc[g].iter().enumerate() {
                let kept = a.get() * corr;
                a.set(
                    ps.iter()
                        .zip(&rows)
                        .fold(kept, |sum, (&p, (_, _, values))| p.fma(values[e], sum)),
                );
            }
            m[g].set(new_m);
        }
    });

    // Each subgroup's partials, merged: weights e^(m_sub − M), 0 for a subgroup that saw no
    // key (then M may be −inf too, and the split writes the empty partials).
    let rows = SUBGROUPS * group;
    let m_sh = k.shared("m_parts", Scalar::F32, rows);
    let l_sh = k.shared("l_parts", Scalar::F32, rows);
    let acc_sh = k.shared("acc_parts", Scalar::F32, rows * head_dim);
    for g in 0..group as usize {
        let r = sub * k.u32(group) + k.u32(g as u32);
        k.if_(lane.eq(k.u32(0)), || {
            k.store_shared(m_sh, r, m[g].get());
            k.store_shared(l_sh, r, l[g].get());
        });
        for (e, a) in acc[g].iter().enumerate() {
            k.store_shared(acc_sh, r * d + lane_at + k.u32(e as u32), a.get());
        }
    }
    k.barrier();
    let merged_max = |g: Val<'b>| {
        (0..SUBGROUPS).fold(neg_inf, |mx, w| {
            mx.max(k.load_shared(m_sh, k.u32(w * group) + g))
        })
    };
    let weight = |g: Val<'b>, w: u32, top: Val<'b>| {
        let mw = k.load_shared(m_sh, k.u32(w * group) + g);
        k.select(mw.eq(neg_inf), k.f32(0.0), (mw - top).exp())
    };
    let base = |g: Val<'b>| {
        let row = t * heads + first_head + g;
        (row * splits + s) * k.u32(head_dim + 2)
    };
    let lid = k.local_index();
    k.for_range(lid, k.u32(group * head_dim), WIDTH * SUBGROUPS, |o| {
        let g = o / d;
        let i = o % d;
        let top = merged_max(g);
        let sum = (0..SUBGROUPS).fold(k.f32(0.0), |sum, w| {
            let a = k.load_shared(acc_sh, (k.u32(w * group) + g) * d + i);
            weight(g, w, top).fma(a, sum)
        });
        k.store(part, base(g) + i, sum);
    });
    k.for_range(lid, k.u32(group), WIDTH * SUBGROUPS, |g| {
        let top = merged_max(g);
        let sum = (0..SUBGROUPS).fold(k.f32(0.0), |sum, w| {
            let lw = k.load_shared(l_sh, k.u32(w * group) + g);
            weight(g, w, top).fma(lw, sum)
        });
        k.store(part, base(g) + d, top);
        k.store(part, base(g) + d + k.u32(1), sum);
    });
    Ok(())
}

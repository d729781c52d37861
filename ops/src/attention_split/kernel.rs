//! Builds the two dispatches' IR: the per-split kernel ([`split_kernel`]), with the walk over a
//! split's keys and the partials' buffers it shares with the flash kernels, and the combine
//! ([`combine_kernel`]).

use super::shape::check_head_dim;
use super::OP;
use crate::attention::{attend, for_owned, stage_query, Attended, Keys, WG};
use crate::key_layout::{KeyIndex, KeyLayout};
use crate::kv_type::KvType;
use crate::shape::ShapeError;
use crate::support::{nonzero, Reduction, PREFETCH_LINE};
use trine_ir::{Access, BufferId, Kernel, KernelBuilder, Scalar, Val};

/// The per-split kernel for one head dimension (a compile-time constant), KV cache storage
/// type and reduction of each block's scores (`how`; the shared tree runs everywhere).
/// Buffers: `q` f32, `step` u32, `k` and `v` of `kv`, `part` f32. Params: tokens, heads,
/// kv_heads, splits, scale. Grid [`SplitAttention::grid`]: `[splits, heads, tokens]`.
///
/// [`SplitAttention::grid`]: super::SplitAttention::grid
pub fn split_kernel(
    head_dim: u32,
    kv: KvType,
    how: Reduction,
    keys: KeyLayout,
) -> Result<Kernel, ShapeError> {
    build(head_dim, kv, how, keys, (false, 1))
}

/// [`split_kernel`] with the `group` query heads that read one KV head in one workgroup, which
/// loads each key's elements of K and V once for all of them: for CPUs, whose caches then
/// serve a layer's keys to one workgroup where `group` workgroups each streamed them from
/// further out. Grid [`SplitAttention::grouped_grid`]: `[splits, kv_heads, tokens]`.
///
/// [`SplitAttention::grouped_grid`]: super::SplitAttention::grouped_grid
pub fn split_kernel_heads(
    head_dim: u32,
    kv: KvType,
    how: Reduction,
    keys: KeyLayout,
    group: u32,
) -> Result<Kernel, ShapeError> {
    nonzero(OP, "query heads a KV head", group)?;
    build(head_dim, kv, how, keys, (false, group))
}

/// [`split_kernel`] for a sliding-window layer: query token `t` (at position `q = pos + t`)
/// sees only the keys of the last `window` positions, `q + 1 - window..=q` (llama.cpp's
/// `LLAMA_SWA_TYPE_STANDARD` masks key `p` where `q - p >= window`). One more parameter,
/// `window`, after `scale`; a split whose keys all fall before the window writes the empty
/// partials `acc = 0, m = −inf, l = 0`, which the combine weighs as nothing.
pub fn split_kernel_windowed(
    head_dim: u32,
    kv: KvType,
    how: Reduction,
    keys: KeyLayout,
) -> Result<Kernel, ShapeError> {
    build(head_dim, kv, how, keys, (true, 1))
}

fn build(
    head_dim: u32,
    kv: KvType,
    how: Reduction,
    keys: KeyLayout,
    (windowed, group): (bool, u32),
) -> Result<Kernel, ShapeError> {
    check_head_dim(head_dim)?;
    kv.check(super::OP, keys, head_dim)?;
    let window_name = if windowed { "_window" } else { "" };
    let group_name = if group > 1 {
        format!("_heads{group}")
    } else {
        String::new()
    };
    let k = KernelBuilder::new(
        &format!(
            "attention_split{window_name}{group_name}_{}_d{head_dim}_{}kv{}",
            how.name(),
            kv.name(),
            keys.suffix()
        ),
        [WG, 1, 1],
    );
    let PartsIo {
        q,
        step,
        k: kc,
        v: vc,
        part,
        tokens,
        heads,
        kv_heads,
    } = PartsIo::declare(&k, kv);
    let splits = k.param("splits", Scalar::U32);
    let scale = k.param("scale", Scalar::F32);
    let window = windowed.then(|| k.param("window", Scalar::U32));
    let index = KeyIndex::declare(&k, keys, kv_heads, head_dim);
    k.settled(step);
    let s = k.workgroup_id(0);
    // The workgroup's first query head: its own, or its KV head's first.
    let h = k.workgroup_id(1) * k.u32(group);
    let t = k.workgroup_id(2);
    let one = k.u32(1);
    let rows: Vec<Val> = (0..group).map(|g| t * heads + h + k.u32(g)).collect();
    let d = k.u32(head_dim);
    let pos = k.load(step, k.u32(0));
    let (start, stop) = split_keys(&k, (pos, tokens, splits), s);
    let end = stop.min(pos + t + one);
    let start = window_start(&k, start, pos + t, window);
    let keys = Keys {
        kv,
        k: kc,
        v: vc,
        kv_heads,
        heads,
        scale,
        index,
    };
    prefetch_chunk(&k, &keys, head_dim, h, (start, end));
    let bases: Vec<Val> = rows.iter().map(|&row| row * d).collect();
    let q_sh = stage_query(&k, head_dim, q, &bases);
    k.barrier();
    let attended = attend(&k, (head_dim, how), (q_sh, group), h, keys, (start, end));
    let lid = k.local_index();

    for (&row, Attended { m, l, acc }) in rows.iter().zip(&attended) {
        let base = (row * splits + s) * k.u32(head_dim + 2);
        for_owned(&k, head_dim, lid, acc, |i, a| {
            k.store(part, base + i, a.get())
        });
        k.if_(lid.eq(k.u32(0)), || {
            k.store(part, base + d, m.get());
            k.store(part, base + d + one, l.get());
        });
    }
    Ok(k.finish())
}

/// The first key the query at position `q` sees from `start` on: with a `window`, not before
/// its window's first, `max(q + 1, window) - window` (0 while the window covers the cache).
pub(crate) fn window_start<'b>(
    k: &'b KernelBuilder,
    start: Val<'b>,
    q: Val<'b>,
    window: Option<Val<'b>>,
) -> Val<'b> {
    match window {
        Some(w) => start.max((q + k.u32(1)).max(w) - w),
        None => start,
    }
}

/// Prefetches the rows of K and V this workgroup's keys `start..end` hold for head `h`
/// ([`trine_ir::Stmt::Prefetch`]), a cache line at a time, one key per invocation. The kernel
/// reads the position from the settled `step` buffer, so on CUDA this runs before the wait for
/// the QKV product ahead: every key but the newest was written by an earlier step, and a decode
/// step's stream of weights has pushed them out of L2 since, so that the scores would otherwise
/// wait on memory twice, once for K and once for V. Caches in rows only: the columns layout is
/// the CPUs', where prefetches are dropped.
/// Split `s`'s keys of a step over `pos + tokens` keys cut into `splits` chunks, `start..stop`:
/// `[s·C, (s+1)·C)` with `C = ceil((pos + tokens) / splits)`, which each caller then clamps to
/// the keys its rows see. The chunk follows the position, so every split has work once the
/// cache holds `splits` keys.
pub(crate) fn split_keys<'b>(
    k: &'b KernelBuilder,
    (pos, tokens, splits): (Val<'b>, Val<'b>, Val<'b>),
    s: Val<'b>,
) -> (Val<'b>, Val<'b>) {
    let chunk = (pos + tokens + splits - k.u32(1)) / splits;
    let start = s * chunk;
    (start, start + chunk)
}

fn prefetch_chunk<'b>(
    k: &'b KernelBuilder,
    keys: &Keys<'b>,
    head_dim: u32,
    h: Val<'b>,
    (start, end): (Val<'b>, Val<'b>),
) {
    if keys.index.layout() != KeyLayout::Rows {
        return;
    }
    let line = keys.kv.per_line(PREFETCH_LINE);
    let kv_head = keys.kv_head(k, h, head_dim);
    k.for_range(start + k.local_index(), end, WG, |j| {
        for e in (0..head_dim).step_by(line as usize) {
            let e = kv_head + k.u32(e);
            k.prefetch(keys.k, keys.kv.held_at(k, keys.index.at(k, e, j)));
            k.prefetch(keys.v, keys.kv.held_at(k, keys.v_at(k, head_dim, e, j)));
        }
    });
}

/// The buffers of a kernel that writes split partials (this one, and
/// [`crate::attention_flash`]'s): the rotated queries, the step buffer, the caches, `part`;
/// and its first parameters: tokens, heads, kv_heads.
pub(crate) struct PartsIo<'b> {
    pub q: BufferId,
    pub step: BufferId,
    pub k: BufferId,
    pub v: BufferId,
    pub part: BufferId,
    pub tokens: Val<'b>,
    pub heads: Val<'b>,
    pub kv_heads: Val<'b>,
}

impl<'b> PartsIo<'b> {
    pub(crate) fn declare(k: &'b KernelBuilder, kv: KvType) -> PartsIo<'b> {
        Self::declare_out(k, kv, ("part", Scalar::F32))
    }

    /// [`PartsIo::declare`] with the output buffer (`part`'s place) named `out`.
    pub(crate) fn declare_out(
        k: &'b KernelBuilder,
        kv: KvType,
        (out, elem): (&str, Scalar),
    ) -> PartsIo<'b> {
        PartsIo {
            q: k.buffer("q", Scalar::F32, Access::Read),
            step: k.buffer("step", Scalar::U32, Access::Read),
            k: k.buffer("k", kv.scalar(), Access::Read),
            v: k.buffer("v", kv.scalar(), Access::Read),
            part: k.buffer(out, elem, Access::Write),
            tokens: k.param("tokens", Scalar::U32),
            heads: k.param("heads", Scalar::U32),
            kv_heads: k.param("kv_heads", Scalar::U32),
        }
    }
}

/// The combine kernel for one head dimension and split count (compile-time constants: the
/// loops over the splits have a constant trip count, so the compiler unrolls them and issues
/// their loads together instead of one round trip to memory per split, where a runtime count
/// measured far slower on a GPU). Buffers: `part` f32, `out` f32. Params:
/// heads. Grid [`SplitAttention::combine_grid`]: `[heads, tokens, 1]`.
///
/// [`SplitAttention::combine_grid`]: super::SplitAttention::combine_grid
pub fn combine_kernel(head_dim: u32, splits: u32) -> Result<Kernel, ShapeError> {
    check_head_dim(head_dim)?;
    nonzero(OP, "splits", splits)?;
    let k = KernelBuilder::new(
        &format!("attention_combine_d{head_dim}_s{splits}"),
        [WG, 1, 1],
    );
    let part = k.buffer("part", Scalar::F32, Access::Read);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    let heads = k.param("heads", Scalar::U32);
    let lid = k.local_index();
    let h = k.workgroup_id(0);
    let t = k.workgroup_id(1);
    let d = k.u32(head_dim);
    let row = t * heads + h;
    let combine = Combining::of(&k, part, (head_dim, splits), row);
    k.for_range(lid, d, WG, |i| {
        k.store(out, row * d + i, combine.element(&k, i))
    });
    Ok(k.finish())
}

/// One row of split attention's partials (a token's head) being combined: the largest of
/// its splits' maxima and the reciprocal of their weighted sums. Every invocation folds the
/// few (m, l) pairs itself: no shared memory, no barrier.
pub(crate) struct Combining<'b> {
    part: BufferId,
    first: Val<'b>,
    big_m: Val<'b>,
    inv: Val<'b>,
    head_dim: u32,
    splits: u32,
}

impl<'b> Combining<'b> {
    /// Folds row `row`'s splits of `part` (each `head_dim` accumulators, then m and l). The
    /// split count is a compile-time constant: the loops over it unroll, their loads issued
    /// together.
    pub(crate) fn of(
        k: &'b KernelBuilder,
        part: BufferId,
        (head_dim, splits): (u32, u32),
        row: Val<'b>,
    ) -> Combining<'b> {
        let (zero, one, d) = (k.u32(0), k.u32(1), k.u32(head_dim));
        let first = row * k.u32(splits);
        let width = k.u32(head_dim + 2);
        let max = k.var("max", Scalar::F32);
        max.set(k.f32(f32::NEG_INFINITY));
        k.for_range(zero, k.u32(splits), 1, |s| {
            max.set(max.get().max(k.load(part, (first + s) * width + d)))
        });
        let big_m = max.get();
        let sum = k.var("sum", Scalar::F32);
        k.for_range(zero, k.u32(splits), 1, |s| {
            let at = (first + s) * width + d;
            let w = (k.load(part, at) - big_m).exp();
            sum.set(k.load(part, at + one).fma(w, sum.get()));
        });
        Combining {
            part,
            first,
            big_m,
            inv: k.f32(1.0) / sum.get(),
            head_dim,
            splits,
        }
    }

    /// The combined attention at element `i` of the row: each split's accumulator weighted
    /// by `e^(m_s − M)`, over the weighted sum of the splits' `l`.
    pub(crate) fn element(&self, k: &'b KernelBuilder, i: Val<'b>) -> Val<'b> {
        let width = k.u32(self.head_dim + 2);
        let d = k.u32(self.head_dim);
        let o = k.var("acc", Scalar::F32);
        o.set(k.f32(0.0));
        k.for_range(k.u32(0), k.u32(self.splits), 1, |s| {
            let at = (self.first + s) * width;
            let w = (k.load(self.part, at + d) - self.big_m).exp();
            o.set(k.load(self.part, at + i).fma(w, o.get()));
        });
        o.get() * self.inv
    }
}

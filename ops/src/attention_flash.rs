//! Flash attention for prompt steps: [`super::attention`]'s causal grouped-query attention
//! with a block of query tokens per workgroup, so that each key and value is read from memory
//! once per block instead of once per query token.
//!
//! [`super::attention_split`]'s kernel with one split gives every (query token, head) its own
//! workgroup, which walks all the keys it sees one block at a time with two shared-memory tree
//! reductions per block: a 512-token SmolLM2 prompt spent a large share of its GPU step in
//! it, an order of magnitude more than its arithmetic needs (docs/bench/prefill.md has the
//! prompt before and after this kernel). Here a
//! workgroup takes [`QUERIES`] query tokens of one head and walks the keys in blocks of
//! [`FlashAttention::keys_per_block`], staged in shared memory with the queries; each query row
//! has [`LANES`] invocations, each computing a few of the block's scores and owning every
//! `LANES`th output dimension, and the row's maximum and sum come from the `LANES` partials in
//! shared memory (no tree). The online softmax is [`super::attention`]'s.
//!
//! The keys may be cut into [`FlashAttention::splits`] chunks as [`super::attention_split`]
//! cuts them (split `s` takes keys `[s·C, (s+1)·C)`, `C = ceil((pos + tokens) / splits)`), one
//! workgroup per (query block, head, split): a prompt's last query block walks all its keys
//! one block after another, and that chain, not the arithmetic, is how long the dispatch
//! takes, so the splits shorten it. The output ([`FlashOut`]) is either
//! [`super::attention_split`]'s `part`: per (token, head, split) the un-normalised accumulators
//! `acc = Σ e^(s_j − m)·v_j`, the maximum score `m` and the sum `l = Σ e^(s_j − m)` (a split
//! with no key a row sees: `0, −inf, 0`), for the executor's combine to follow, with
//! [`super::attention_split::reference_split`] as the reference; or, with one split, the
//! attention itself, `acc / l`, as the combine would write it, which saves the combine's
//! dispatch. Only the kernel of several splits ([`FlashOut::Chunks`]) works out its chunk and
//! masks keys past it; the others are the kernels of before, unchanged. Buffers and the `step`
//! buffer (element 0 = the position of the first query token) are the split kernel's.
//!
//! Rows of the last block past the step's tokens compute the last token's row again and store
//! nothing; keys past the block's last visible position are staged as zeros, so a cache holding
//! NaN there (as the cases make it) leaves no trace.
//!
//! Bound: [`super::attention::NMSE`], as for the other attention kernels (the same sums in
//! another grouping).

use super::attention;
use super::attention_split::{
    reference_split_windowed, split_keys, window_start, PartsIo, SplitAttention,
};
use super::key_layout::{KeyIndex, KeyLayout};
use super::kv_type::KvType;
use super::shape::ShapeError;
use super::support::{elements, nonzero, seed, Float};
use crate::case::*;
use trine_ir::{Kernel, KernelBuilder, ParamValue, Scalar, Val, Var};

const OP: &str = "attention_flash";

/// Query tokens per workgroup.
pub const QUERIES: u32 = 16;

/// Invocations per query row: each computes `keys_per_block / LANES` scores of a block and owns
/// output dimensions `lane, lane + LANES, …`.
pub const LANES: u32 = 8;

/// Largest head dimension whose blocks fit the 32 KiB of shared memory of the smallest device
/// tested (lavapipe): the queries, keys and values of a block are staged there.
pub const MAX_FLASH_HEAD_DIM: u32 = 128;

/// Largest head dimension: above [`MAX_FLASH_HEAD_DIM`], blocks of 8 keys, about 34 KiB of
/// shared memory, for devices that have it ([`fits`]; Gemma 3's heads of 256).
pub const MAX_WIDE_HEAD_DIM: u32 = 256;

/// What a flash attention kernel writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlashOut {
    /// `part` (`[tokens × heads × (head_dim + 2)]`): one split's partials, for a combine.
    Part,
    /// `out` (`[tokens × heads × head_dim]`): `acc / l`, the combine's output, of one split.
    Normalized,
    /// [`FlashOut::Normalized`] rounded to f16 as it is written, for a product on f16 tiles
    /// after it, which reads its x so.
    NormalizedHalf,
    /// `part` (`[tokens × heads × splits × (head_dim + 2)]`) of two splits or more: the
    /// partials a combine puts together.
    Chunks,
}

impl FlashOut {
    /// The output buffer's name.
    pub fn buffer(self) -> &'static str {
        match self {
            FlashOut::Part | FlashOut::Chunks => "part",
            FlashOut::Normalized | FlashOut::NormalizedHalf => "out",
        }
    }

    /// The output buffer's element type.
    pub fn elem(self) -> Scalar {
        match self {
            FlashOut::NormalizedHalf => Scalar::F16,
            _ => Scalar::F32,
        }
    }

    /// `v` as this output stores it: rounded to f16 for [`FlashOut::NormalizedHalf`].
    pub(super) fn written(self, v: Val<'_>) -> Val<'_> {
        match self {
            FlashOut::NormalizedHalf => v.cast(Scalar::F16),
            _ => v,
        }
    }

    /// Whether it writes the attention itself, not partials.
    pub fn normalized(self) -> bool {
        matches!(self, FlashOut::Normalized | FlashOut::NormalizedHalf)
    }

    /// The kernel name's suffix.
    pub fn suffix(self) -> &'static str {
        match self {
            FlashOut::Part => "",
            FlashOut::Normalized => "_norm",
            FlashOut::NormalizedHalf => "_norm_f16",
            FlashOut::Chunks => "_chunks",
        }
    }

    /// The output for `shape`'s split count: [`FlashOut::Chunks`] for several, else `self`.
    pub fn for_splits(self, splits: u32) -> FlashOut {
        if splits > 1 {
            FlashOut::Chunks
        } else {
            self
        }
    }

    /// The output's elements for `shape`. Errors: a split count this output does not take
    /// (several splits are [`FlashOut::Chunks`], which only a combine puts together).
    pub fn len(self, shape: &FlashAttention) -> Result<u32, ShapeError> {
        let part = shape.check()?;
        match (self, shape.splits > 1) {
            (FlashOut::Part, false) | (FlashOut::Chunks, true) => Ok(part),
            (FlashOut::Normalized | FlashOut::NormalizedHalf, false) => {
                Ok(part / (shape.head_dim + 2) * shape.head_dim)
            }
            _ => Err(ShapeError::Unsupported {
                op: OP,
                what: format!("{self:?} output from {} splits", shape.splits),
            }),
        }
    }

    /// The f64 reference of this output from [`reference_split`]'s `part` (one split for
    /// [`FlashOut::Normalized`]), rounded to f16 for [`FlashOut::NormalizedHalf`].
    pub fn reference(self, shape: &FlashAttention, part: Vec<f64>) -> Vec<f64> {
        if !self.normalized() {
            return part;
        }
        let d = shape.head_dim as usize;
        let normalized = part
            .chunks(d + 2)
            .flat_map(|row| row[..d].iter().map(move |a| a / row[d + 1]));
        match self {
            FlashOut::NormalizedHalf => normalized.map(|v| Float::F16.round(v)).collect(),
            _ => normalized.collect(),
        }
    }
}

/// One flash attention dispatch (a prompt step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlashAttention {
    /// Query tokens of the step.
    pub tokens: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    /// Chunks the keys are cut into, a workgroup each (the grid's third dimension).
    pub splits: u32,
    /// A sliding window: query token `t` (at position `q = pos + t`) sees only the keys of
    /// the last `window` positions, `q + 1 - window..=q`, as the split kernel's windowed
    /// variant ([`super::attention_split::split_kernel_windowed`]).
    pub window: Option<u32>,
}

impl FlashAttention {
    /// Checks the shape; returns the element count of `part`.
    pub fn check(&self) -> Result<u32, ShapeError> {
        check_head_dim(self.head_dim)?;
        if let Some(w) = self.window {
            nonzero(OP, "window", w)?;
        }
        self.split().check()
    }

    /// The split attention whose `part` this writes.
    pub fn split(&self) -> SplitAttention {
        SplitAttention {
            tokens: self.tokens,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            splits: self.splits,
        }
    }

    /// Keys staged per block: 32 for head dimensions up to 64, 16 up to 128, so that the
    /// block fits 32 KiB of shared memory; 8 above.
    pub fn keys_per_block(head_dim: u32) -> u32 {
        match head_dim {
            0..=64 => 32,
            65..=MAX_FLASH_HEAD_DIM => 16,
            _ => 8,
        }
    }

    /// Bytes of shared memory [`kernel`] takes for heads of `head_dim`: the block's queries
    /// and keys (rows padded by one), values, scores, and each row's maxima and sums.
    pub fn shared_bytes(head_dim: u32) -> u64 {
        let (d, bk) = (
            u64::from(head_dim),
            u64::from(Self::keys_per_block(head_dim)),
        );
        let (q, lanes) = (u64::from(QUERIES), u64::from(LANES));
        4 * (q * (d + 1) + bk * (d + 1) + bk * d + q * (bk + 1) + 2 * q * lanes)
    }

    /// `[query blocks, heads, splits]`.
    pub fn grid(&self) -> [u32; 3] {
        [self.tokens.div_ceil(QUERIES), self.heads, self.splits]
    }

    /// The kernel's parameters, in declaration order (the split count where there are
    /// several, which [`FlashOut::Chunks`] takes).
    pub fn params(&self) -> Vec<ParamValue> {
        let mut params = vec![
            ParamValue::U32(self.tokens),
            ParamValue::U32(self.heads),
            ParamValue::U32(self.kv_heads),
            ParamValue::F32(self.split().scale()),
        ];
        if self.splits > 1 {
            params.push(ParamValue::U32(self.splits));
        }
        params.extend(self.window.map(ParamValue::U32));
        params
    }
}

fn check_head_dim(d: u32) -> Result<(), ShapeError> {
    nonzero(OP, "head_dim", d)?;
    if d > MAX_WIDE_HEAD_DIM {
        return Err(ShapeError::TooLarge {
            op: OP,
            what: "head_dim",
            value: d as usize,
            limit: MAX_WIDE_HEAD_DIM as usize,
        });
    }
    Ok(())
}

/// Whether [`kernel`] takes heads of `head_dim`; larger ones (up to
/// [`attention::MAX_HEAD_DIM`]) keep the split kernel.
pub fn supports(head_dim: u32) -> bool {
    check_head_dim(head_dim).is_ok()
}

/// Whether [`kernel`] takes heads of `head_dim` on a device of `max_shared_bytes` of shared
/// memory per workgroup.
pub fn fits(head_dim: u32, max_shared_bytes: u64) -> bool {
    supports(head_dim) && FlashAttention::shared_bytes(head_dim) <= max_shared_bytes
}

/// The kernel for one head dimension (a compile-time constant) and KV cache storage type.
/// Buffers: `q` f32, `step` u32, `k` and `v` of `kv`, then `part` or `out` f32 ([`FlashOut`]).
/// Params: tokens, heads, kv_heads, scale, splits for [`FlashOut::Chunks`], and `window`
/// where `windowed` ([`FlashAttention::window`]). Grid [`FlashAttention::grid`].
/// With [`KeyLayout::Columns`] the K cache is in columns and the parameter `k_stride` follows.
pub fn kernel(
    head_dim: u32,
    kv: KvType,
    (keys, out): (KeyLayout, FlashOut),
    windowed: bool,
) -> Result<Kernel, ShapeError> {
    check_head_dim(head_dim)?;
    kv.check(OP, keys, head_dim)?;
    let bk = FlashAttention::keys_per_block(head_dim);
    let wg = QUERIES * LANES;
    let k = KernelBuilder::new(
        &format!(
            "attention_flash{}_d{head_dim}_{}kv{}{}",
            if windowed { "_window" } else { "" },
            kv.name(),
            keys.suffix(),
            out.suffix()
        ),
        [wg, 1, 1],
    );
    let (io, scale, index) = declare_io(&k, kv, (keys, out), (head_dim, windowed));
    let parts = &io.parts;
    let (q, step, kc, vc, part) = (parts.q, parts.step, parts.k, parts.v, parts.part);
    let (tokens, heads, kv_heads) = (parts.tokens, parts.heads, parts.kv_heads);

    // Rows of queries and keys are padded by one element, so that the LANES invocations of a
    // row, and the rows of a subgroup, read different shared-memory banks.
    let d = head_dim;
    let row = d + 1;
    let q_sh = k.shared("q_block", Scalar::F32, QUERIES * row);
    let k_sh = k.shared("k_block", Scalar::F32, bk * row);
    let v_sh = k.shared("v_block", Scalar::F32, bk * d);
    let p_sh = k.shared("p_block", Scalar::F32, QUERIES * (bk + 1));
    let max_sh = k.shared("row_max", Scalar::F32, wg);
    let sum_sh = k.shared("row_sum", Scalar::F32, wg);

    let lid = k.local_index();
    let qi = lid / k.u32(LANES);
    let lane = lid % k.u32(LANES);
    let t0 = k.workgroup_id(0) * k.u32(QUERIES);
    let h = k.workgroup_id(1);
    let one = k.u32(1);
    let pos = k.load(step, k.u32(0));
    let last_token = tokens - one;
    // A row past the step's tokens repeats the last token (and stores nothing).
    let t = (t0 + qi).min(last_token);
    let q_pos = pos + t;
    let chunk = Chunk::of(&k, (pos, tokens), (io.splits, io.window), (t0, QUERIES));
    let (start, end) = (chunk.start, chunk.end);
    let kv_stride = kv_heads * k.u32(d);
    let kv_head = h / (heads / kv_heads) * k.u32(d);

    k.for_range(lid, k.u32(QUERIES * d), wg, |e| {
        let (r, i) = (e / k.u32(d), e % k.u32(d));
        let src = ((t0 + r).min(last_token) * heads + h) * k.u32(d) + i;
        k.store_shared(q_sh, r * k.u32(row) + i, k.load(q, src));
    });

    let m = k.var("max", Scalar::F32);
    m.set(k.f32(f32::NEG_INFINITY));
    let l = k.var("sum", Scalar::F32);
    let per_lane = bk / LANES;
    let dots: Vec<Var> = (0..per_lane).map(|_| k.var("dot", Scalar::F32)).collect();
    let owned = d.div_ceil(LANES);
    let acc: Vec<Var> = (0..owned).map(|_| k.var("acc", Scalar::F32)).collect();
    let neg_inf = k.f32(f32::NEG_INFINITY);

    k.for_range(start, end, bk, |kb| {
        // Stage the block's keys and values; those past `end` as zeros.
        k.for_range(lid, k.u32(bk * d), wg, |e| {
            let (j, i) = (e / k.u32(d), e % k.u32(d));
            let key = kb + j;
            let seen = key.lt(end);
            let key = key.min(end - one);
            let zero = k.f32(0.0);
            let kv_k = k.select(seen, kv.load(&k, kc, index.at(&k, kv_head + i, key)), zero);
            let kv_v = k.select(seen, kv.load(&k, vc, key * kv_stride + kv_head + i), zero);
            k.store_shared(k_sh, j * k.u32(row) + i, kv_k);
            k.store_shared(v_sh, j * k.u32(d) + i, kv_v);
        });
        k.barrier();

        for dot in &dots {
            dot.set(k.f32(0.0));
        }
        k.for_range(k.u32(0), k.u32(d), 1, |i| {
            let qv = k.load_shared(q_sh, qi * k.u32(row) + i);
            for (n, dot) in dots.iter().enumerate() {
                let j = lane + k.u32(n as u32 * LANES);
                let kv_k = k.load_shared(k_sh, j * k.u32(row) + i);
                dot.set(qv.fma(kv_k, dot.get()));
            }
        });
        let visible = |n: usize| chunk.visible(kb + lane + k.u32(n as u32 * LANES), q_pos);
        let scores: Vec<Val> = dots
            .iter()
            .enumerate()
            .map(|(n, dot)| k.select(visible(n), dot.get() * scale, neg_inf))
            .collect();
        let local_max = scores[1..].iter().fold(scores[0], |a, &s| a.max(s));
        k.store_shared(max_sh, lid, local_max);
        k.barrier();

        let first = qi * k.u32(LANES);
        let row_max = (1..LANES).fold(k.load_shared(max_sh, first), |a, i| {
            a.max(k.load_shared(max_sh, first + k.u32(i)))
        });
        let new_m = m.get().max(row_max);
        let from = chunk.subtracted(new_m);
        let zero = k.f32(0.0);
        let mut local_sum = zero;
        for (n, &s) in scores.iter().enumerate() {
            let p = k.select(visible(n), (s - from).exp(), zero);
            let j = lane + k.u32(n as u32 * LANES);
            k.store_shared(p_sh, qi * k.u32(bk + 1) + j, p);
            local_sum = local_sum + p;
        }
        k.store_shared(sum_sh, lid, local_sum);
        k.barrier();

        let block_sum = (1..LANES).fold(k.load_shared(sum_sh, first), |a, i| {
            a + k.load_shared(sum_sh, first + k.u32(i))
        });
        let corr = (m.get() - from).exp();
        l.set(l.get().fma(corr, block_sum));
        for a in &acc {
            a.set(a.get() * corr);
        }
        k.for_range(k.u32(0), k.u32(bk), 1, |j| {
            let p = k.load_shared(p_sh, qi * k.u32(bk + 1) + j);
            for_lane_dims(&k, d, lane, &acc, |i, a| {
                a.set(p.fma(k.load_shared(v_sh, j * k.u32(d) + i), a.get()));
            });
        });
        m.set(new_m);
        // The next block rewrites the staged keys, values, scores and partials.
        k.barrier();
    });

    k.if_((t0 + qi).lt(tokens), || match out {
        FlashOut::Part | FlashOut::Chunks => {
            let base = chunk.part_row(t * heads + h) * k.u32(d + 2);
            for_lane_dims(&k, d, lane, &acc, |i, a| k.store(part, base + i, a.get()));
            k.if_(lane.eq(k.u32(0)), || {
                k.store(part, base + k.u32(d), m.get());
                k.store(part, base + k.u32(d + 1), l.get());
            });
        }
        FlashOut::Normalized | FlashOut::NormalizedHalf => {
            let base = (t * heads + h) * k.u32(d);
            let inv = k.f32(1.0) / l.get();
            for_lane_dims(&k, d, lane, &acc, |i, a| {
                k.store(part, base + i, out.written(a.get() * inv))
            });
        }
    });
    Ok(k.finish())
}

/// A flash kernel's buffers and parameters: [`PartsIo`] with `out`'s buffer, then the softmax
/// scale, the split count, the window and the K cache's index (with its stride parameter for
/// [`KeyLayout::Columns`]).
pub(super) fn declare_io<'b>(
    k: &'b KernelBuilder,
    kv: KvType,
    (keys, out): (KeyLayout, FlashOut),
    (head_dim, windowed): (u32, bool),
) -> (FlashIo<'b>, Val<'b>, KeyIndex<'b>) {
    let parts = PartsIo::declare_out(k, kv, (out.buffer(), out.elem()));
    let scale = k.param("scale", Scalar::F32);
    let splits = (out == FlashOut::Chunks).then(|| k.param("splits", Scalar::U32));
    let window = windowed.then(|| k.param("window", Scalar::U32));
    let index = KeyIndex::declare(k, keys, parts.kv_heads, head_dim);
    (
        FlashIo {
            parts,
            splits,
            window,
        },
        scale,
        index,
    )
}

/// [`PartsIo`] and, for [`FlashOut::Chunks`], the split count; for a windowed kernel, the
/// window.
pub(super) struct FlashIo<'b> {
    pub parts: PartsIo<'b>,
    pub splits: Option<Val<'b>>,
    pub window: Option<Val<'b>>,
}

/// The keys a workgroup walks, `start..end`: all those some row of its block of `queries`
/// tokens from `t0` sees, or with `splits` (a split count: [`FlashOut::Chunks`]) those of its
/// split `workgroup_id(2)` (empty where no row sees one); with a `window`, from the first key
/// of the block's first row's window.
pub(super) struct Chunk<'b> {
    k: &'b KernelBuilder,
    pub start: Val<'b>,
    pub end: Val<'b>,
    splits: Option<Val<'b>>,
    window: Option<Val<'b>>,
}

impl<'b> Chunk<'b> {
    pub(super) fn of(
        k: &'b KernelBuilder,
        (pos, tokens): (Val<'b>, Val<'b>),
        (splits, window): (Option<Val<'b>>, Option<Val<'b>>),
        (t0, queries): (Val<'b>, u32),
    ) -> Chunk<'b> {
        let one = k.u32(1);
        // Keys up to the block's last row are visible to some row of it.
        let seen = pos + (t0 + k.u32(queries - 1)).min(tokens - one) + one;
        let (start, end) = match splits {
            Some(splits) => {
                let (start, stop) = split_keys(k, (pos, tokens, splits), k.workgroup_id(2));
                (start, stop.min(seen))
            }
            None => (k.u32(0), seen),
        };
        // The block's first row sees the earliest keys.
        let start = window_start(k, start, pos + t0, window);
        Chunk {
            k,
            start,
            end,
            splits,
            window,
        }
    }

    /// Whether the row at `q_pos` sees `key` of a block being walked: at or before its
    /// position, (split) inside the chunk, where a block may reach into the next, and
    /// (windowed) less than a window before it.
    pub(super) fn visible(&self, key: Val<'b>, q_pos: Val<'b>) -> Val<'b> {
        let causal = match self.splits {
            Some(_) => key.le(q_pos) & key.lt(self.end),
            None => key.le(q_pos),
        };
        match self.window {
            Some(w) => causal & (key + w).gt(q_pos),
            None => causal,
        }
    }

    /// The maximum to subtract from a row's scores, `m` after the block. Without splits or a
    /// window the walk's first key is visible to every row, so `m` is finite after the first
    /// block and that block's correction e^(−inf) is 0. A split's row may see no key at all,
    /// and a windowed row none of the first blocks walked (`m = −inf`): it subtracts 0
    /// instead, so that its correction is e^(−inf − 0) = 0 and its p (all masked) stay 0,
    /// where e^(−inf − (−inf)) would be NaN.
    pub(super) fn subtracted(&self, m: Val<'b>) -> Val<'b> {
        let k = self.k;
        if self.splits.is_some() || self.window.is_some() {
            k.select(m.gt(k.f32(f32::NEG_INFINITY)), m, k.f32(0.0))
        } else {
            m
        }
    }

    /// The row of `part` that (token, head) row `row` writes: its split's.
    pub(super) fn part_row(&self, row: Val<'b>) -> Val<'b> {
        match self.splits {
            Some(splits) => row * splits + self.k.workgroup_id(2),
            None => row,
        }
    }
}

/// Runs `f(i, acc[n])` for each dimension `i = lane + n·LANES` below `head_dim`; only the last,
/// partial one needs a bounds check.
fn for_lane_dims<'b>(
    k: &'b KernelBuilder,
    head_dim: u32,
    lane: Val<'b>,
    acc: &[Var<'b>],
    f: impl Fn(Val<'b>, Var<'b>),
) {
    for (n, &a) in acc.iter().enumerate() {
        let i = lane + k.u32(n as u32 * LANES);
        if (n as u32 + 1) * LANES <= head_dim {
            f(i, a);
        } else {
            k.if_(i.lt(k.u32(head_dim)), || f(i, a));
        }
    }
}

/// Positions past the step's last token in a case's caches, holding NaN: a kernel that lets a
/// key or value it must not see into its sums fails the NaN pattern check.
const PAST_END: u32 = 3;

/// A conformance case for `shape` at position `pos` with the caches stored as `kv`, writing
/// `out`: against [`reference_split_windowed`] (the window `shape` has, or none), normalised
/// for [`FlashOut::Normalized`].
/// The K cache is in `keys`' layout.
pub fn case(
    shape: FlashAttention,
    pos: u32,
    kv: KvType,
    (keys, out): (KeyLayout, FlashOut),
) -> Result<Case, ShapeError> {
    case_with_queries(shape, pos, kv, (keys, out), QUERY_BOUND)
}

/// The queries' elements of a case lie in ±this: scores of a few units, as a model's are.
pub const QUERY_BOUND: f32 = 2.0;

/// [`case`] with the queries' elements in ±`query_bound`; a case of another bound than
/// [`QUERY_BOUND`] says so in its name. Wider queries give sharper softmaxes, whose rows'
/// maxima rise further from block to block.
pub fn case_with_queries(
    shape: FlashAttention,
    pos: u32,
    kv: KvType,
    (keys, out): (KeyLayout, FlashOut),
    query_bound: f32,
) -> Result<Case, ShapeError> {
    let out = out.for_splits(shape.splits);
    let n = out.len(&shape)?;
    let dtype = match kv {
        KvType::F32 => "f32",
        KvType::F16 => "f32+f16kv",
        KvType::Q8_0 => "f32+q8_0kv",
    };
    let name = format!(
        "{OP}/{dtype}/{}x{}x{}x{}+pos{pos}{}{}{}",
        shape.tokens,
        shape.heads,
        shape.kv_heads,
        shape.head_dim,
        match shape.splits {
            1 => String::new(),
            n => format!("/{n}splits"),
        },
        keys.suffix(),
        match out {
            FlashOut::Part | FlashOut::Chunks => "",
            FlashOut::Normalized => "+out",
            FlashOut::NormalizedHalf => "+out/f16",
        }
    ) + &shape
        .window
        .map_or(String::new(), |w| format!("/window{w}"))
        + &if query_bound == QUERY_BOUND {
            String::new()
        } else {
            format!("/q{query_bound}")
        };
    let mut r = Rng::new(seed(&name));
    let kv_len = pos + shape.tokens + PAST_END;
    let q = r.f32s(
        (shape.tokens * shape.heads * shape.head_dim) as usize,
        -query_bound,
        query_bound,
    );
    let row = (shape.kv_heads * shape.head_dim) as usize;
    elements(OP, "kv cache", &[kv_len, shape.kv_heads, shape.head_dim])?;
    let seen = (pos + shape.tokens) as usize * row;
    let mut cache = |bound: f32| {
        let mut c = kv.stored(&r.f32s(seen, -bound, bound));
        c.resize(kv_len as usize * row, f32::NAN);
        c
    };
    let kc = cache(2.0);
    let vc = cache(1.0);
    let want = out.reference(
        &shape,
        reference_split_windowed(&shape.split(), kv_len, pos, shape.window, &q, &kc, &vc)?,
    );
    // NaN where the kernel must write: an element it skips fails the NaN pattern check.
    let part0 = match out.elem() {
        Scalar::F16 => f16_bytes(&vec![half::f16::NAN; n as usize]),
        _ => f32_bytes(&vec![f32::NAN; n as usize]),
    };
    let k_cache = keys.arrange(&kc, (kv_len, shape.kv_heads, shape.head_dim), f32::NAN);
    let mut params = shape.params();
    params.extend(keys.params(kv_len));
    Ok(Case::new(
        name,
        kernel(shape.head_dim, kv, (keys, out), shape.window.is_some())?,
        shape.grid(),
    )
    .input("q", Scalar::F32, f32_bytes(&q))
    .input("step", Scalar::U32, u32_bytes(&[pos]))
    .input("k", kv.scalar(), kv.bytes(&k_cache))
    .input("v", kv.scalar(), kv.bytes(&vc))
    .output(out.buffer(), out.elem(), part0, want)
    .params(params)
    .bound(match out {
        FlashOut::NormalizedHalf => rounded_to_half(attention::NMSE),
        _ => attention::NMSE,
    }))
}

/// The cases' multi-query shape with heads of 128 dimensions (the kernels' largest).
pub(super) const MULTI_QUERY_128: FlashAttention = FlashAttention {
    tokens: 20,
    heads: 2,
    kv_heads: 1,
    head_dim: 128,
    splits: 1,
    window: None,
};

/// SmolLM2-135M's attention over `tokens` query tokens: 9 query heads, 3 KV heads, head_dim 64.
pub(super) fn smollm2(tokens: u32) -> FlashAttention {
    FlashAttention {
        tokens,
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
        splits: 1,
        window: None,
    }
}

/// Gemma 3's attention over `tokens` query tokens: 4 query heads of 256 over one KV head.
pub(super) fn gemma(tokens: u32) -> FlashAttention {
    FlashAttention {
        tokens,
        heads: 4,
        kv_heads: 1,
        head_dim: 256,
        splits: 1,
        window: None,
    }
}

/// [`smollm2`] with the keys in `splits` chunks.
pub(super) fn smollm2_split(tokens: u32, splits: u32) -> FlashAttention {
    FlashAttention {
        splits,
        ..smollm2(tokens)
    }
}

pub fn cases() -> Vec<Case> {
    use KvType::{F16, F32, Q8_0};
    let smol = smollm2;
    let shapes = [
        (smol(16), 0, F32),  // one full block of queries into an empty cache
        (smol(40), 0, F16),  // a partial last block, keys over two blocks
        (smol(5), 3, F32),   // a short second chunk
        (smol(33), 70, F16), // a later chunk: keys over four blocks, the diagonal inside one
        // Odd head dimension (a partial last lane), two query heads per KV head.
        (
            FlashAttention {
                tokens: 7,
                heads: 4,
                kv_heads: 2,
                head_dim: 17,
                splits: 1,
                window: None,
            },
            9,
            F32,
        ),
        // Multi-query, head dimension 128: blocks of 16 keys.
        (MULTI_QUERY_128, 13, F16),
        // Keys in chunks, as a GPU's prompt steps cut them: 40 keys in chunks of 10 (the
        // first rows see nothing of the later chunks, which start inside blocks), 103 in
        // chunks of 26 after a cache of 70, and more chunks than the block has rows.
        (smollm2_split(40, 4), 0, F16),
        (smollm2_split(33, 4), 70, F32),
        (smollm2_split(3, 8), 0, F32),
        (
            FlashAttention {
                splits: 3,
                ..MULTI_QUERY_128
            },
            13,
            F16,
        ),
        // A q8_0 cache (rows only): a later chunk, and head dimension 128 in chunks.
        (smol(33), 70, Q8_0),
        (
            FlashAttention {
                splits: 3,
                ..MULTI_QUERY_128
            },
            13,
            Q8_0,
        ),
    ];
    // Two of them with the K cache in columns, as an executor led by a CPU keeps it.
    let columns = [(smol(40), 0, F32), (smol(33), 70, F16)];
    // Two writing the attention itself, as a GPU's prompt steps take it.
    let normalized = [(smol(40), 0, F16), (smol(33), 70, F32)];
    // Sliding windows (Gemma 3's local layers): narrower than a block of keys, a window that
    // starts inside a later chunk's blocks, one in chunks, one wider than the keys (every key
    // seen), and heads of 128.
    let window = |shape: FlashAttention, w| FlashAttention {
        window: Some(w),
        ..shape
    };
    let windowed = [
        (window(smol(40), 5), 0, F16, FlashOut::Part),
        (window(smol(33), 20), 70, F32, FlashOut::Normalized),
        (window(smollm2_split(33, 4), 19), 70, F16, FlashOut::Part),
        (window(smol(16), 64), 0, F32, FlashOut::Normalized),
        (window(MULTI_QUERY_128, 9), 13, F16, FlashOut::Part),
        // Gemma 3's heads of 256 (blocks of 8 keys, more than lavapipe's 32 KiB), local and global.
        (window(gemma(21), 6), 4, F16, FlashOut::Normalized),
        (gemma(21), 4, F32, FlashOut::Part),
        // Rounded to f16 as written, for a product on widened weights after it.
        (smol(33), 70, F16, FlashOut::NormalizedHalf),
        (
            window(MULTI_QUERY_128, 9),
            13,
            F16,
            FlashOut::NormalizedHalf,
        ),
    ];
    shapes
        .into_iter()
        .map(|(shape, pos, kv)| case(shape, pos, kv, (KeyLayout::Rows, FlashOut::Part)))
        .chain(
            columns
                .into_iter()
                .map(|(shape, pos, kv)| case(shape, pos, kv, (KeyLayout::Columns, FlashOut::Part))),
        )
        .chain(
            normalized.into_iter().map(|(shape, pos, kv)| {
                case(shape, pos, kv, (KeyLayout::Rows, FlashOut::Normalized))
            }),
        )
        .chain(
            windowed
                .into_iter()
                .map(|(shape, pos, kv, out)| case(shape, pos, kv, (KeyLayout::Rows, out))),
        )
        .collect::<Result<_, _>>()
        .expect("the fixed shapes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel fits 32 KiB of shared memory (lavapipe's limit) up to heads of 128, 48 KiB
    /// (NVIDIA's without opting in) up to 256, as [`FlashAttention::shared_bytes`] counts it.
    #[test]
    fn blocks_fit_32_kib() {
        for head_dim in [1, 17, 64, 65, 128, 129, 256] {
            let layout = (KeyLayout::Rows, FlashOut::Part);
            let k = kernel(head_dim, KvType::F32, layout, true).unwrap();
            let bytes = k.shared_bytes();
            assert_eq!(bytes, FlashAttention::shared_bytes(head_dim), "d{head_dim}");
            let limit = if head_dim <= MAX_FLASH_HEAD_DIM {
                32
            } else {
                48
            };
            assert!(bytes <= limit * 1024, "d{head_dim}: {bytes}");
            assert!(fits(head_dim, limit * 1024), "d{head_dim}");
        }
        assert!(!fits(MAX_WIDE_HEAD_DIM, 32 * 1024));
    }

    #[test]
    fn bad_shapes_are_typed_errors() {
        assert!(matches!(
            kernel(
                MAX_WIDE_HEAD_DIM + 1,
                KvType::F32,
                (KeyLayout::Rows, FlashOut::Part),
                false
            ),
            Err(ShapeError::TooLarge { .. })
        ));
        assert!(matches!(
            kernel(0, KvType::F16, (KeyLayout::Rows, FlashOut::Part), false),
            Err(ShapeError::Zero { .. })
        ));
        let s = FlashAttention {
            tokens: 4,
            heads: 9,
            kv_heads: 2,
            head_dim: 64,
            splits: 1,
            window: None,
        };
        assert!(matches!(s.check(), Err(ShapeError::NotMultiple { .. })));
        let s = FlashAttention {
            window: Some(0),
            ..smollm2(4)
        };
        assert!(matches!(s.check(), Err(ShapeError::Zero { .. })));
        assert!(!supports(MAX_WIDE_HEAD_DIM + 1));
        // The attention itself from several splits needs their combine, and a kernel of
        // chunks takes several.
        assert!(matches!(
            FlashOut::Normalized.len(&smollm2_split(16, 2)),
            Err(ShapeError::Unsupported { .. })
        ));
        assert!(matches!(
            FlashOut::Chunks.len(&smollm2(16)),
            Err(ShapeError::Unsupported { .. })
        ));
    }
}

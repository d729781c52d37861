//! Flash attention for prompt steps on matrix tiles: [`super::attention_flash`]'s causal
//! grouped-query attention, its scores and its weighted sums of values as 16 × 16 tile
//! products ([`trine_ir::TileOp`]) instead of each invocation's dot products.
//!
//! A workgroup takes [`Layout::queries`] query tokens of one head, 16 for each of its
//! subgroups (32 wide: two lanes per query row), and walks the keys in blocks of
//! [`Layout::keys`], staged in shared memory as f16 with the queries (scaled by the softmax
//! scale before rounding). Each block's keys and values are loaded from memory during the
//! block before, as the tile products stage theirs (`matmul_stage`). Per block, each subgroup:
//! 1. multiplies its queries by the block's keys (S = Q·Kᵀ, f32 tiles) and stores S to a
//!    region of shared memory of its own;
//! 2. takes the online softmax of its rows there, each lane half of a row's scores (the row's
//!    maximum and sum from the lane pair by a shuffle): p = e^(s − m) rounded to f16, and the
//!    factor α = e^(m_old − m) by which the running sums shrink when m moves;
//! 3. multiplies P by the block's values into the running sums. Tiles keep their elements
//!    where each target chooses, so α is applied by the lanes on a copy in shared memory.
//!    With [`Sums::Tiles`] the sums are accumulator tiles held through the walk and m moves
//!    only when a block's maximum exceeds it by more than [`SLACK`], so that trip (stored,
//!    scaled, loaded back) is rare; with [`Sums::Lanes`] they are the lanes' registers, each
//!    block's P·V passing through the region to be added after they are scaled.
//!
//! Heads wider than [`MAX_FLASH_HEAD_DIM`] (Gemma 3's 256) take [`value_parts`] workgroups a
//! head: each computes the scores of all the head's dimensions and the weighted sums of
//! [`MAX_FLASH_HEAD_DIM`] of them, so that its values, sums and accumulators are those of a
//! head of 128 (its staged block of values, its region and its lanes' registers), and it
//! rereads the queries' tiles from shared memory each block instead of holding them. The
//! scores are worked out again by each part; at the short blocks such heads come in, that
//! costs less than the scalar kernel's walk ([`super::attention_flash`]).
//!
//! The output is [`super::attention_flash`]'s, either kind of it ([`FlashOut`]): the one-split
//! `part` a combine follows, or the attention itself. Keys past the block's last visible
//! position are staged as zeros and masked, so a cache holding NaN there leaves no trace; rows
//! past the step's tokens repeat the last token and store nothing.
//!
//! Bound: [`NMSE`], not [`super::attention`]'s: queries, keys, values and p are rounded to f16.

use super::attention_flash::{
    declare_io, gemma, smollm2, smollm2_split, Chunk, FlashAttention, FlashOut, MAX_FLASH_HEAD_DIM,
    MAX_WIDE_HEAD_DIM, MULTI_QUERY_128, QUERY_BOUND,
};
use super::key_layout::KeyLayout;
use super::shape::ShapeError;
use super::support::Float;
use crate::case::*;
use trine_ir::{
    BufferId, Kernel, KernelBuilder, Scalar, SharedId, Tile, TileLayout, TileMemory, TileRole, Val,
    Var, TILE,
};

const OP: &str = "attention_flash_tiles";

/// NMSE bound against the f64 reference: rounding the scaled queries, keys, values and p to f16
/// (relative 2⁻¹¹ each) gave 6.7e-8 and 1.3e-7 on the interpreter for the cases of head
/// dimension 64 and 128 (the conformance records, docs/conformance/README.md); 1e-5 leaves two
/// orders of magnitude, and stays far inside the 5e-4 that ggml's test-backend-ops allows
/// attention.
pub const NMSE: f64 = 1e-5;

/// How far (in the scores' natural-log units) a row's maximum may rise past the one its sums
/// are taken against before they are rescaled: p then stays below e⁸ ≈ 2,981, well inside
/// f16's range, and a block of it summed times a value stays far inside f32's.
pub const SLACK: f32 = 8.0;

/// The queries' bound in the cases of sharp softmaxes: scores spread over tens of units.
const SHARP_QUERIES: f32 = 12.0;

/// The subgroup width the kernel is written for: two lanes per row of a 16-row tile.
pub const WIDTH: u32 = 32;

/// Where a row's running weighted sums of values live between blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sums {
    /// In accumulator tiles through the walk, rescaled on a trip through shared memory only in
    /// the blocks where the row's maximum moves past [`SLACK`].
    Tiles,
    /// In each lane's registers (half a row's dimensions), every block's P·V added to them
    /// through shared memory after they are rescaled to that block's maximum.
    Lanes,
}

/// The workgroup's shape for a head dimension: its subgroups, the keys of a block and where the
/// sums live, chosen so that the staged queries, keys, values, scores and p fit NVIDIA's 48 KiB
/// of shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub subgroups: u32,
    pub keys: u32,
    pub sums: Sums,
}

impl Layout {
    pub fn for_head_dim(head_dim: u32) -> Layout {
        if head_dim <= MAX_FLASH_HEAD_DIM {
            // Blocks of 32 keys for 64 queries: with the sums in tiles the region holds a
            // block's scores only, and the queries' staging takes the keys after them, which
            // leaves room for four subgroups at 128 wide (docs/bench/prefill.md).
            Layout {
                subgroups: 4,
                keys: 32,
                sums: Sums::Tiles,
            }
        } else {
            // Four subgroups do not fit at 256 wide; on two, the sums held in tiles through
            // the walk came out wrong on NVIDIA's Vulkan driver (NaN and unrelated values,
            // where the interpreter and cuda agreed), so they stay in the lanes.
            Layout {
                subgroups: 2,
                keys: 16,
                sums: Sums::Lanes,
            }
        }
    }

    /// Query tokens per workgroup.
    pub fn queries(self) -> u32 {
        self.subgroups * TILE
    }

    /// Columns of each subgroup's region for parts of `dv` dimensions: a block's scores, and
    /// where the sums are the lanes' a block's P·V too. Sums held in tiles pass through it
    /// this many columns at a time.
    fn region_columns(self, dv: u32) -> u32 {
        match self.sums {
            Sums::Tiles => self.keys,
            Sums::Lanes => dv.max(self.keys),
        }
    }

    /// Row strides of the staged queries and keys, values, region and p for heads of `d`,
    /// `dv` of them a part, padded by 8 elements: tile loads stay 16-byte aligned and a
    /// tile's rows fall in different banks.
    fn strides(self, d: u32, dv: u32) -> (u32, u32, u32, u32) {
        (d + 8, dv + 8, self.region_columns(dv) + 8, self.keys + 8)
    }

    /// How far a row's maximum may rise before its sums are rescaled.
    fn slack(self) -> f32 {
        match self.sums {
            Sums::Tiles => SLACK,
            Sums::Lanes => 0.0,
        }
    }
}

/// Whether [`kernel`] takes heads of `head_dim`: whole tiles, up to [`MAX_FLASH_HEAD_DIM`],
/// or whole parts of it up to [`MAX_WIDE_HEAD_DIM`] ([`value_parts`]).
pub fn supports(head_dim: u32) -> bool {
    head_dim > 0
        && head_dim.is_multiple_of(TILE)
        && (head_dim <= MAX_FLASH_HEAD_DIM
            || (head_dim <= MAX_WIDE_HEAD_DIM && head_dim.is_multiple_of(MAX_FLASH_HEAD_DIM)))
}

/// Workgroups a head of `head_dim` takes, each computing [`MAX_FLASH_HEAD_DIM`] of its
/// output's dimensions (one for heads up to that).
pub fn value_parts(head_dim: u32) -> u32 {
    head_dim.div_ceil(MAX_FLASH_HEAD_DIM).max(1)
}

/// Bytes of shared memory [`kernel`] takes for heads of `head_dim`: the queries, a block of
/// keys and of one part's values, and each subgroup's region and p.
pub fn shared_bytes(head_dim: u32) -> u64 {
    let layout = Layout::for_head_dim(head_dim);
    let Layout {
        subgroups, keys, ..
    } = layout;
    let dv = head_dim / value_parts(head_dim);
    let (sq, sv, sr, sp) = layout.strides(head_dim, dv);
    let staged = if holds_queries(head_dim) {
        (subgroups * TILE).max(keys)
    } else {
        subgroups * TILE + keys
    };
    let halves = staged * sq + keys * sv + subgroups * TILE * sp;
    let flags = match layout.sums {
        Sums::Tiles => subgroups,
        Sums::Lanes => 0,
    };
    2 * u64::from(halves) + 4 * u64::from(subgroups * TILE * sr + flags)
}

/// Whether the queries' tiles stay in registers through the walk: up to 128 dimensions. Wider
/// heads reread them from shared memory each block, so that a lane's registers stay those of a
/// head of 128; where they are held, their staging array takes each block's keys after them.
fn holds_queries(head_dim: u32) -> bool {
    head_dim <= MAX_FLASH_HEAD_DIM
}

/// Whether [`kernel`] takes heads of `head_dim` on a device of `max_shared_bytes` of shared
/// memory per workgroup.
pub fn fits(head_dim: u32, max_shared_bytes: u64) -> bool {
    supports(head_dim) && shared_bytes(head_dim) <= max_shared_bytes
}

/// `[query blocks, heads × value parts, splits]` for `shape`.
pub fn grid(shape: &FlashAttention) -> [u32; 3] {
    let queries = Layout::for_head_dim(shape.head_dim).queries();
    [
        shape.tokens.div_ceil(queries),
        shape.heads * value_parts(shape.head_dim),
        shape.splits,
    ]
}

/// The kernel for one head dimension and KV cache storage type, the K cache in rows, writing
/// `out`. Buffers and parameters are [`super::attention_flash::kernel`]'s; grid [`grid`].
/// Errors: a head dimension [`supports`] refuses.
pub fn kernel(
    head_dim: u32,
    kv: Float,
    out: FlashOut,
    windowed: bool,
) -> Result<Kernel, ShapeError> {
    if !supports(head_dim) {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!(
                "head dimension {head_dim} (whole tiles up to {MAX_FLASH_HEAD_DIM}, or whole \
                 parts of {MAX_FLASH_HEAD_DIM} up to {MAX_WIDE_HEAD_DIM})"
            ),
        });
    }
    let d = head_dim;
    let layout = Layout::for_head_dim(d);
    let Layout {
        subgroups,
        keys,
        sums,
    } = layout;
    let parts = value_parts(d);
    let dv = d / parts;
    let queries = subgroups * TILE;
    let invocations = subgroups * WIDTH;
    let k = KernelBuilder::new(
        &format!(
            "attention_flash_tiles{}_d{d}_{}kv{}_sg{WIDTH}",
            if windowed { "_window" } else { "" },
            kv.name(),
            out.suffix()
        ),
        [invocations, 1, 1],
    );
    k.require_subgroup_width(WIDTH);
    // Keys in rows, as values are: a key's element and its value's share one index.
    let (io, scale, _) = declare_io(&k, kv.into(), (KeyLayout::Rows, out), (d, windowed));
    let parts_io = &io.parts;
    let (q, step, kc, vc, part_out) = (
        parts_io.q,
        parts_io.step,
        parts_io.k,
        parts_io.v,
        parts_io.part,
    );
    let (tokens, heads, kv_heads) = (parts_io.tokens, parts_io.heads, parts_io.kv_heads);

    let (sq, sv, sr, sp) = layout.strides(d, dv);
    let held = holds_queries(d);
    let (q_sh, k_sh) = if held {
        let both = k.shared("qk_block", Scalar::F16, queries.max(keys) * sq);
        (both, both)
    } else {
        (
            k.shared("q_block", Scalar::F16, queries * sq),
            k.shared("k_block", Scalar::F16, keys * sq),
        )
    };
    let v_sh = k.shared("v_block", Scalar::F16, keys * sv);
    let region = k.shared("s_block", Scalar::F32, subgroups * TILE * sr);
    let p_sh = k.shared("p_block", Scalar::F16, subgroups * TILE * sp);
    let flags = match sums {
        Sums::Tiles => Some(k.shared("moved", Scalar::F32, subgroups)),
        Sums::Lanes => None,
    };

    let lid = k.local_index();
    let w = k.subgroup_id();
    let lane = lid % k.u32(WIDTH);
    let (r, half) = (lane / k.u32(2), lane % k.u32(2));
    let t0 = k.workgroup_id(0) * k.u32(queries);
    let (h, part) = match parts {
        1 => (k.workgroup_id(1), k.u32(0)),
        _ => (
            k.workgroup_id(1) / k.u32(parts),
            k.workgroup_id(1) % k.u32(parts),
        ),
    };
    let one = k.u32(1);
    let pos = k.load(step, k.u32(0));
    let last_token = tokens - one;
    let chunk = Chunk::of(&k, (pos, tokens), (io.splits, io.window), (t0, queries));
    let (start, end) = (chunk.start, chunk.end);
    let kv_stride = kv_heads * k.u32(d);
    let kv_head = h / (heads / kv_heads) * k.u32(d);

    // Queries, scaled, rows past the step's tokens repeating the last.
    for j in 0..queries * d / invocations {
        let e = k.u32(j * invocations) + lid;
        let (row, i) = (e / k.u32(d), e % k.u32(d));
        let src = ((t0 + row).min(last_token) * heads + h) * k.u32(d) + i;
        let v = (k.load(q, src) * scale).cast(Scalar::F16);
        k.store_shared(q_sh, row * k.u32(sq) + i, v);
    }

    let staging = Staging {
        k: &k,
        kv,
        invocations,
        kv_stride,
        kv_head,
        end,
    };
    let keys_staged = staging.of("k", (kc, k_sh), (k.u32(0), d, sq), keys);
    let values_staged = staging.of("v", (vc, v_sh), (part * k.u32(dv), dv, sv), keys);

    let dims = d / TILE;
    let tile = |name: String, role| k.tile(&name, role);
    let qa: Vec<Tile> = (0..if held { dims } else { 1 })
        .map(|i| tile(format!("q{i}"), TileRole::A))
        .collect();
    let s: Vec<Tile> = (0..keys / TILE)
        .map(|i| tile(format!("s{i}"), TileRole::Acc))
        .collect();
    let pv: Vec<Tile> = (0..dv / TILE)
        .map(|i| tile(format!("pv{i}"), TileRole::Acc))
        .collect();
    let b = k.tile("b", TileRole::B);
    let pa = k.tile("p", TileRole::A);
    let load_q = |a: Tile, i: u32| {
        let at = w * k.u32(TILE * sq) + k.u32(i * TILE);
        a.load(
            TileMemory::Shared(q_sh),
            at,
            k.u32(sq),
            TileLayout::RowMajor,
        );
    };

    // The lane's row: the maximum its sums are taken against, its sum of p, and its true
    // maximum, against which the sums are stored.
    let m = k.var("max", Scalar::F32);
    m.set(k.f32(f32::NEG_INFINITY));
    let l = k.var("sum", Scalar::F32);
    let top = k.var("top", Scalar::F32);
    top.set(k.f32(f32::NEG_INFINITY));
    let lane_sums: Vec<Var> = match sums {
        Sums::Tiles => vec![],
        Sums::Lanes => (0..dv / 2)
            .map(|i| k.var(&format!("o{i}"), Scalar::F32))
            .collect(),
    };
    let t = (t0 + w * k.u32(TILE) + r).min(last_token);
    let q_pos = pos + t;
    let own = w * k.u32(TILE * sr);
    let own_p = w * k.u32(TILE * sp);
    let neg_inf = k.f32(f32::NEG_INFINITY);
    let zero = k.f32(0.0);
    // The sums pass through the region in rounds of as many tiles as its columns hold (sums
    // in the lanes, in one), each lane taking half of its row.
    let columns = layout.region_columns(dv);
    let per_round = (columns / TILE) as usize;
    let rounds: Vec<&[Tile]> = pv.chunks(per_round).collect();
    let round_trip = |round: usize, store: bool| {
        for (n, acc) in rounds[round].iter().enumerate() {
            let at = own + k.u32(n as u32 * TILE);
            let (memory, stride) = (TileMemory::Shared(region), k.u32(sr));
            if store {
                acc.store(memory, at, stride, TileLayout::RowMajor)
            } else {
                acc.load(memory, at, stride, TileLayout::RowMajor)
            }
        }
    };
    // The lane's elements of a round: (column in the region, dimension in the part).
    let lane_columns = |round: usize| -> Vec<(Val, Val)> {
        let half_width = rounds[round].len() as u32 * TILE / 2;
        (0..half_width)
            .map(|j| {
                let c = half * k.u32(half_width) + k.u32(j);
                (c, c + k.u32(round as u32 * columns))
            })
            .collect()
    };
    if sums == Sums::Tiles {
        for acc in &pv {
            acc.zero();
        }
    }

    keys_staged.load(start);
    values_staged.load(start);
    k.barrier();
    if held {
        for (i, &a) in qa.iter().enumerate() {
            load_q(a, i as u32);
        }
        // Every subgroup has its queries before the first keys take their place.
        k.barrier();
    }
    // The chunk's last block (its first when the chunk is empty and the loop never runs).
    let last_block = ((end - one).max(start) - start) / k.u32(keys) * k.u32(keys) + start;
    k.for_range(start, end, keys, |kb| {
        keys_staged.put(kb);
        values_staged.put(kb);
        k.barrier();
        // The next block's loads go out now (the last block loads itself again).
        let next = (kb + k.u32(keys)).min(last_block);
        keys_staged.load(next);
        values_staged.load(next);

        // S = Q·Kᵀ: the keys' rows are B's columns.
        for (n, acc) in s.iter().enumerate() {
            acc.zero();
            for i in 0..dims {
                let a = if held {
                    qa[i as usize]
                } else {
                    load_q(qa[0], i);
                    qa[0]
                };
                let at = k.u32(n as u32 * TILE * sq + i * TILE);
                b.load(
                    TileMemory::Shared(k_sh),
                    at,
                    k.u32(sq),
                    TileLayout::ColMajor,
                );
                acc.mma(a, b);
            }
            acc.store(
                TileMemory::Shared(region),
                own + k.u32(n as u32 * TILE),
                k.u32(sr),
                TileLayout::RowMajor,
            );
        }
        k.barrier();

        // The softmax of the lane's half row, against a maximum that moves only when the
        // block's exceeds it by more than [`SLACK`]: p stays below e^SLACK, and the sums held
        // in tiles are rescaled (through shared memory) only in the blocks where it moves.
        let cols: Vec<_> = (0..keys / 2)
            .map(|j| half * k.u32(keys / 2) + k.u32(j))
            .collect();
        let visible: Vec<_> = cols.iter().map(|&c| chunk.visible(kb + c, q_pos)).collect();
        let scores: Vec<_> = cols
            .iter()
            .zip(&visible)
            .map(|(&c, &seen)| {
                let v = k.load_shared(region, own + r * k.u32(sr) + c);
                k.select(seen, v, neg_inf)
            })
            .collect();
        let local = scores[1..].iter().fold(scores[0], |a, &v| a.max(v));
        let row_max = local.max(local.shuffle_xor(one));
        let moves = row_max.gt(m.get() + k.f32(layout.slack()));
        let new_m = k.select(moves, row_max, m.get());
        let from = chunk.subtracted(new_m);
        let mut local_sum = zero;
        for ((&c, &v), &seen) in cols.iter().zip(&scores).zip(&visible) {
            let p = k.select(seen, (v - from).exp(), zero);
            k.store_shared(p_sh, own_p + r * k.u32(sp) + c, p.cast(Scalar::F16));
            local_sum = local_sum + p;
        }
        let alpha = (m.get() - from).exp();
        l.set(l.get().fma(alpha, local_sum + local_sum.shuffle_xor(one)));
        m.set(new_m);
        top.set(top.get().max(row_max));
        // Whether any row of the workgroup moved, as one flag a subgroup.
        if let Some(flags) = flags {
            let moved = k.select(moves, k.f32(1.0), zero).subgroup_max();
            k.if_(lane.eq(k.u32(0)), || k.store_shared(flags, w, moved));
        }
        k.barrier();
        if let Some(flags) = flags {
            let any = (1..subgroups).fold(k.load_shared(flags, k.u32(0)), |a, i| {
                a.max(k.load_shared(flags, k.u32(i)))
            });
            k.if_(any.gt(zero), || {
                for round in 0..rounds.len() {
                    round_trip(round, true);
                    k.barrier();
                    for (c, _) in lane_columns(round) {
                        let at = own + r * k.u32(sr) + c;
                        k.store_shared(region, at, k.load_shared(region, at) * alpha);
                    }
                    k.barrier();
                    round_trip(round, false);
                    k.barrier();
                }
            });
        }

        // P·V, added to the running sums: the tiles' own, or fresh ones then the lanes'.
        if sums == Sums::Lanes {
            for acc in &pv {
                acc.zero();
            }
        }
        for n in 0..keys / TILE {
            let at = own_p + k.u32(n * TILE);
            pa.load(
                TileMemory::Shared(p_sh),
                at,
                k.u32(sp),
                TileLayout::RowMajor,
            );
            for (i, acc) in pv.iter().enumerate() {
                let at = k.u32(n * TILE * sv + i as u32 * TILE);
                b.load(
                    TileMemory::Shared(v_sh),
                    at,
                    k.u32(sv),
                    TileLayout::RowMajor,
                );
                acc.mma(pa, b);
            }
        }
        if sums == Sums::Lanes {
            round_trip(0, true);
            k.barrier();
            for ((c, _), sum) in lane_columns(0).into_iter().zip(&lane_sums) {
                let add = k.load_shared(region, own + r * k.u32(sr) + c);
                sum.set(sum.get().fma(alpha, add));
            }
        }
        // The next block restages keys, values, scores and p.
        k.barrier();
    });

    let stores = (t0 + w * k.u32(TILE) + r).lt(tokens);
    // Parts are taken against the row's true maximum, as the combine and every other kernel
    // of attention store them.
    let to_top = (m.get() - chunk.subtracted(top.get())).exp();
    let (row, factor) = match out {
        FlashOut::Part | FlashOut::Chunks => (d + 2, to_top),
        FlashOut::Normalized | FlashOut::NormalizedHalf => (d, k.f32(1.0) / l.get()),
    };
    let base = chunk.part_row(t * heads + h) * k.u32(row);
    let first = base + part * k.u32(dv);
    match sums {
        Sums::Tiles => {
            for round in 0..rounds.len() {
                round_trip(round, true);
                k.barrier();
                k.if_(stores, || {
                    for (c, dim) in lane_columns(round) {
                        let v = k.load_shared(region, own + r * k.u32(sr) + c);
                        k.store(part_out, first + dim, out.written(v * factor));
                    }
                });
                k.barrier();
            }
        }
        Sums::Lanes => k.if_(stores, || {
            for ((_, dim), sum) in lane_columns(0).into_iter().zip(&lane_sums) {
                k.store(part_out, first + dim, out.written(sum.get() * factor));
            }
        }),
    }
    // Every part works out the same maximum and sum; the first stores them.
    if !out.normalized() {
        k.if_(stores & half.eq(k.u32(0)) & part.eq(k.u32(0)), || {
            k.store(part_out, base + k.u32(d), top.get());
            k.store(part_out, base + k.u32(d + 1), l.get() * to_top);
        });
    }
    Ok(k.finish())
}

/// What every staged operand shares: the cache's type, the workgroup's invocations, the
/// cache's row of keys (`kv_stride`), the head's offset in it, and the chunk's end.
#[derive(Clone, Copy)]
struct Staging<'b> {
    k: &'b KernelBuilder,
    kv: Float,
    invocations: u32,
    kv_stride: Val<'b>,
    kv_head: Val<'b>,
    end: Val<'b>,
}

impl<'b> Staging<'b> {
    /// The block's keys (or values) from cache `cache` into `shared`: `width` dimensions of
    /// each key from `first`, in rows `stride` apart, `keys` a block.
    fn of(
        &self,
        name: &str,
        (cache, shared): (BufferId, SharedId),
        (first, width, stride): (Val<'b>, u32, u32),
        keys: u32,
    ) -> Staged<'b> {
        let k = self.k;
        let padded = width.next_power_of_two();
        let lid = k.local_index();
        let (lid_key, lid_dim) = (lid / k.u32(padded), lid % k.u32(padded));
        // Where the width is a power of two the invocation's dimension is in its offset;
        // else each element clamps its own.
        let own_dim = match padded == width {
            true => first + lid_dim,
            false => first,
        };
        let row = |key: Val<'b>| key * self.kv_stride + self.kv_head + own_dim;
        Staged {
            regs: (0..keys * padded / self.invocations)
                .map(|i| k.var(&format!("{name}{i}"), self.kv.scalar()))
                .collect(),
            base: row(lid_key),
            last: row(self.end - k.u32(1)),
            at: lid_key * k.u32(stride) + lid_dim,
            lid_key,
            lid_dim,
            width,
            padded,
            stride,
            cache,
            shared,
            common: *self,
        }
    }
}

/// One operand's block staged through registers: loaded from the cache during the block
/// before, then put in shared memory as f16. Element j of an invocation is the block's key
/// `j·invocations / padded + lid / padded` at dimension `j·invocations % padded + lid %
/// padded`, where `padded` is the width rounded up to a power of two as the invocations are,
/// so one divides the other: its index in the cache and in the staged block is an offset
/// worked out once plus a constant of j, where working out its key and dimension every block
/// took most of the kernel's integer work. A key past the chunk clamps to its last one's row
/// (and is staged as zero); dimensions past a width that is no power of two (heads of 80 or
/// 96) read the last one's and store nothing.
struct Staged<'b> {
    regs: Vec<Var<'b>>,
    base: Val<'b>,
    last: Val<'b>,
    at: Val<'b>,
    lid_key: Val<'b>,
    lid_dim: Val<'b>,
    width: u32,
    padded: u32,
    stride: u32,
    cache: BufferId,
    shared: SharedId,
    common: Staging<'b>,
}

impl<'b> Staged<'b> {
    /// Element j's key and dimension offsets from the invocation's own.
    fn element(&self, j: u32) -> (u32, u32) {
        let span = j * self.common.invocations;
        (span / self.padded, span % self.padded)
    }

    /// Loads block `kb` into the registers.
    fn load(&self, kb: Val<'b>) {
        let (k, kv_stride) = (self.common.k, self.common.kv_stride);
        let first = kb * kv_stride + self.base;
        for (j, reg) in self.regs.iter().enumerate() {
            let (jk, i) = self.element(j as u32);
            let row = (first + k.u32(jk) * kv_stride).min(self.last);
            let at = match self.padded == self.width {
                true => row + k.u32(i),
                false => row + (self.lid_dim + k.u32(i)).min(k.u32(self.width - 1)),
            };
            reg.set(k.load(self.cache, at));
        }
    }

    /// Stores block `kb`'s registers into shared memory as f16, keys past the chunk as zero.
    fn put(&self, kb: Val<'b>) {
        let k = self.common.k;
        let first = kb + self.lid_key;
        for (j, reg) in self.regs.iter().enumerate() {
            let (jk, i) = self.element(j as u32);
            let seen = (first + k.u32(jk)).lt(self.common.end);
            let at = self.at + k.u32(jk * self.stride + i);
            let value = match self.common.kv {
                Float::F32 => reg.get(),
                Float::F16 => reg.get().cast(Scalar::F32),
            };
            let value = k.select(seen, value, k.f32(0.0)).cast(Scalar::F16);
            match self.padded == self.width {
                true => k.store_shared(self.shared, at, value),
                false => k.if_((self.lid_dim + k.u32(i)).lt(k.u32(self.width)), || {
                    k.store_shared(self.shared, at, value)
                }),
            }
        }
    }
}

/// A conformance case: [`super::attention_flash::case`]'s inputs and reference, the tiled
/// kernel with the scalar one (and its grid) as the fallback of devices without tiles.
pub fn case(shape: FlashAttention, pos: u32, kv: Float, out: FlashOut) -> Result<Case, ShapeError> {
    case_with_queries(shape, pos, kv, out, QUERY_BOUND)
}

/// [`case`] on [`super::attention_flash::case_with_queries`]'s queries.
fn case_with_queries(
    shape: FlashAttention,
    pos: u32,
    kv: Float,
    out: FlashOut,
    query_bound: f32,
) -> Result<Case, ShapeError> {
    let out = out.for_splits(shape.splits);
    let scalar = super::attention_flash::case_with_queries(
        shape,
        pos,
        kv.into(),
        (KeyLayout::Rows, out),
        query_bound,
    )?;
    let name = scalar.name.replacen("attention_flash", OP, 1);
    let windowed = shape.window.is_some();
    let mut case = Case::new(
        name,
        kernel(shape.head_dim, kv, out, windowed)?,
        grid(&shape),
    )
    .fallback_on(scalar.kernel, scalar.grid)
    .params(scalar.params)
    .bound(NMSE);
    case.buffers = scalar.buffers;
    Ok(case)
}

/// SmolLM2-135M's heads over one block of queries, a partial one and a later chunk, writing
/// partials and the attention itself; keys in chunks (as a GPU's prompt steps cut them: a
/// 130-token prompt's 33-key chunks start inside blocks, and the first query block sees nothing
/// of the last ones); a head dimension of 128; Phi-3.5's 96, no power of two; Gemma 3's 256 in
/// two value parts, windowed and in chunks as its prompts run; and sharp softmaxes.
pub fn cases() -> Vec<Case> {
    use FlashOut::{Normalized, Part};
    use Float::{F16, F32};
    let smol = smollm2;
    let window = |shape: FlashAttention, w| FlashAttention {
        window: Some(w),
        ..shape
    };
    let split = |shape: FlashAttention, splits| FlashAttention { splits, ..shape };
    let phi = FlashAttention {
        tokens: 21,
        heads: 3,
        kv_heads: 1,
        head_dim: 96,
        splits: 1,
        window: None,
    };
    [
        (smol(64), 0, F16, Part),
        (smol(40), 0, F32, Part),
        (smol(33), 70, F16, Part),
        (smol(130), 5, F16, Normalized),
        (smol(40), 0, F32, Normalized),
        (MULTI_QUERY_128, 13, F16, Part),
        (smollm2_split(130, 4), 0, F16, Part),
        (smollm2_split(33, 3), 70, F32, Part),
        (split(MULTI_QUERY_128, 2), 13, F16, Part),
        (phi, 5, F16, Part),
        (split(phi, 2), 0, F32, Normalized),
        (gemma(40), 0, F16, Part),
        (gemma(20), 9, F32, Normalized),
        // Sliding windows: narrower than a block of keys, in a later chunk, in chunks.
        (window(smol(64), 7), 0, F16, Part),
        (window(smol(130), 40), 5, F16, Normalized),
        (window(smollm2_split(130, 4), 33), 0, F32, Part),
        (window(MULTI_QUERY_128, 9), 13, F16, Normalized),
        (window(split(gemma(70), 3), 24), 6, F16, Part),
        // Rounded to f16 as written, for a product on widened weights after it: heads of 64,
        // of 128 and of 96.
        (smol(130), 5, F16, FlashOut::NormalizedHalf),
        (MULTI_QUERY_128, 13, F16, FlashOut::NormalizedHalf),
        (phi, 5, F16, FlashOut::NormalizedHalf),
    ]
    .into_iter()
    .map(|(shape, pos, kv, out)| case(shape, pos, kv, out))
    .chain(
        // Sharp softmaxes, whose rows' maxima rise past the slack in later blocks, so that
        // sums held in tiles are rescaled with something in them.
        [
            (smol(130), 5, F16, Part),
            (window(smol(64), 40), 30, F32, Normalized),
            (window(MULTI_QUERY_128, 45), 70, F16, Part),
            (phi, 40, F16, Normalized),
            (window(gemma(40), 24), 30, F16, Part),
        ]
        .into_iter()
        .map(|(shape, pos, kv, out)| case_with_queries(shape, pos, kv, out, SHARP_QUERIES)),
    )
    .collect::<Result<_, _>>()
    .expect("the fixed shapes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The staged blocks fit NVIDIA's 48 KiB of shared memory at every supported dimension,
    /// and [`shared_bytes`] says what the kernel declares.
    #[test]
    fn blocks_fit_48_kib() {
        for d in [16, 64, 80, 96, 128, 256] {
            let k = kernel(d, Float::F16, FlashOut::Part, false).unwrap();
            assert_eq!(k.shared_bytes(), shared_bytes(d), "d{d}");
            assert!(fits(d, 48 * 1024), "d{d}: {}", k.shared_bytes());
        }
    }

    /// Gemma 3's heads take two workgroups a head, each half of the dimensions.
    #[test]
    fn wide_heads_take_value_parts() {
        assert_eq!(value_parts(128), 1);
        assert_eq!(value_parts(256), 2);
        assert_eq!(grid(&gemma(40)), [2, 8, 1]);
    }

    /// A device without tiles runs the scalar kernel over its own grid of 16-token blocks.
    #[test]
    fn the_fallback_has_its_own_grid() {
        let shape = smollm2(130);
        let c = case(shape, 5, Float::F16, FlashOut::Normalized).unwrap();
        assert_eq!(c.grid_for(&c.kernel), [3, 9, 1]);
        let fallback = c.fallback.as_ref().unwrap();
        assert_eq!(c.grid_for(fallback), shape.grid());
        assert_eq!(shape.grid(), [9, 9, 1]);
    }

    #[test]
    fn head_dims_off_the_tiles_are_refused() {
        for d in [
            0,
            17,
            72 + 1,
            MAX_FLASH_HEAD_DIM + 16,
            192,
            2 * MAX_WIDE_HEAD_DIM,
        ] {
            assert!(!supports(d));
            assert!(matches!(
                kernel(d, Float::F16, FlashOut::Normalized, false),
                Err(ShapeError::Unsupported { .. })
            ));
        }
    }
}

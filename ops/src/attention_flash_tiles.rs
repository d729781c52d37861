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
//!    factor α = e^(m_old − m) by which the running sums shrink;
//! 3. multiplies P by the block's values into fresh accumulators, stores them to its region,
//!    and adds them to its lanes' running sums (each lane half of a row's dimensions, in
//!    registers) after scaling those by α. Tiles keep their elements where each target
//!    chooses, so the rescaling happens on the lanes' own copies, not on the tiles.
//!
//! The output is [`super::attention_flash`]'s, either kind of it ([`FlashOut`]): the one-split
//! `part` a combine follows, or the attention itself. Keys past the block's last visible
//! position are staged as zeros and masked, so a cache holding NaN there leaves no trace; rows
//! past the step's tokens repeat the last token and store nothing.
//!
//! Bound: [`NMSE`], not [`super::attention`]'s: queries, keys, values and p are rounded to f16.

use super::attention_flash::{
    declare_io, smollm2, smollm2_split, Chunk, FlashAttention, FlashOut, MAX_FLASH_HEAD_DIM,
    MULTI_QUERY_128,
};
use super::key_layout::KeyLayout;
use super::shape::ShapeError;
use super::support::Float;
use crate::case::*;
use trine_ir::{
    Kernel, KernelBuilder, Scalar, Tile, TileLayout, TileMemory, TileRole, Val, Var, TILE,
};

const OP: &str = "attention_flash_tiles";

/// NMSE bound against the f64 reference: rounding the scaled queries, keys, values and p to f16
/// (relative 2⁻¹¹ each) gave 6.7e-8 and 1.3e-7 on the interpreter for the cases of head
/// dimension 64 and 128 (the conformance records, docs/conformance/README.md); 1e-5 leaves two
/// orders of magnitude, and stays far inside the 5e-4 that ggml's test-backend-ops allows
/// attention.
pub const NMSE: f64 = 1e-5;

/// The subgroup width the kernel is written for: two lanes per row of a 16-row tile.
pub const WIDTH: u32 = 32;

/// The workgroup's shape for a head dimension: its subgroups and the keys of a block, chosen
/// so that the staged queries, keys, values, scores and p fit NVIDIA's 48 KiB of shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub subgroups: u32,
    pub keys: u32,
}

impl Layout {
    pub fn for_head_dim(head_dim: u32) -> Layout {
        if head_dim <= 64 {
            Layout {
                subgroups: 4,
                keys: 32,
            }
        } else {
            Layout {
                subgroups: 2,
                keys: 16,
            }
        }
    }

    /// Query tokens per workgroup.
    pub fn queries(self) -> u32 {
        self.subgroups * TILE
    }
}

/// Whether [`kernel`] takes heads of `head_dim`: whole tiles, up to [`MAX_FLASH_HEAD_DIM`].
pub fn supports(head_dim: u32) -> bool {
    head_dim > 0 && head_dim.is_multiple_of(TILE) && head_dim <= MAX_FLASH_HEAD_DIM
}

/// `[query blocks, heads, splits]` for `shape`.
pub fn grid(shape: &FlashAttention) -> [u32; 3] {
    let queries = Layout::for_head_dim(shape.head_dim).queries();
    [shape.tokens.div_ceil(queries), shape.heads, shape.splits]
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
            what: format!("head dimension {head_dim} (whole tiles up to {MAX_FLASH_HEAD_DIM})"),
        });
    }
    let d = head_dim;
    let Layout { subgroups, keys } = Layout::for_head_dim(d);
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
    let parts = &io.parts;
    let (q, step, kc, vc, part) = (parts.q, parts.step, parts.k, parts.v, parts.part);
    let (tokens, heads, kv_heads) = (parts.tokens, parts.heads, parts.kv_heads);

    // Row strides padded by 8 elements: tile loads stay 16-byte aligned and a tile's rows
    // fall in different banks.
    let sq = d + 8;
    let sr = d.max(keys) + 8;
    let sp = keys + 8;
    let q_sh = k.shared("q_block", Scalar::F16, queries * sq);
    let k_sh = k.shared("k_block", Scalar::F16, keys * sq);
    let v_sh = k.shared("v_block", Scalar::F16, keys * sq);
    let region = k.shared("s_block", Scalar::F32, subgroups * TILE * sr);
    let p_sh = k.shared("p_block", Scalar::F16, subgroups * TILE * sp);

    let lid = k.local_index();
    let w = k.subgroup_id();
    let lane = lid % k.u32(WIDTH);
    let (r, half) = (lane / k.u32(2), lane % k.u32(2));
    let t0 = k.workgroup_id(0) * k.u32(queries);
    let h = k.workgroup_id(1);
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

    // The block's keys and values as loaded, element `j·invocations + lid` each.
    let staged = keys * d / invocations;
    let k_regs: Vec<Var> = (0..staged)
        .map(|i| k.var(&format!("k{i}"), kv.scalar()))
        .collect();
    let v_regs: Vec<Var> = (0..staged)
        .map(|i| k.var(&format!("v{i}"), kv.scalar()))
        .collect();
    // Element j of the invocation is the block's key `j·invocations / d + lid / d` at
    // dimension `j·invocations % d + lid % d` (invocations and d are powers of two, so one
    // divides the other): its index in the cache and in the staged block is an offset worked
    // out once plus a constant of j, where working out its key and dimension every block
    // took most of the kernel's integer work. A key past the context clamps to the last
    // one's row (and is staged as zero); an index that wraps there stays below that row.
    let (lid_key, lid_dim) = (lid / k.u32(d), lid % k.u32(d));
    let element = |j: u32| ((j * invocations) / d, (j * invocations) % d);
    let base = lid_key * kv_stride + kv_head + lid_dim;
    let last = (end - one) * kv_stride + kv_head + lid_dim;
    let staged_at = lid_key * k.u32(sq) + lid_dim;
    let load_block = |kb: Val<'_>| {
        let first = kb * kv_stride + base;
        for (j, (kr, vr)) in k_regs.iter().zip(&v_regs).enumerate() {
            let (jk, i) = element(j as u32);
            let at = (first + k.u32(jk) * kv_stride).min(last) + k.u32(i);
            kr.set(k.load(kc, at));
            vr.set(k.load(vc, at));
        }
    };
    let zero = k.f32(0.0);
    let put_block = |kb: Val<'_>| {
        let first = kb + lid_key;
        for (j, (kr, vr)) in k_regs.iter().zip(&v_regs).enumerate() {
            let (jk, i) = element(j as u32);
            let seen = (first + k.u32(jk)).lt(end);
            let at = staged_at + k.u32(jk * sq + i);
            for (reg, dst) in [(kr, k_sh), (vr, v_sh)] {
                let value = match kv {
                    Float::F32 => reg.get(),
                    Float::F16 => reg.get().cast(Scalar::F32),
                };
                k.store_shared(dst, at, k.select(seen, value, zero).cast(Scalar::F16));
            }
        }
    };

    let dims = d / TILE;
    let tile = |name: String, role| k.tile(&name, role);
    let qa: Vec<Tile> = (0..dims)
        .map(|i| tile(format!("q{i}"), TileRole::A))
        .collect();
    let s: Vec<Tile> = (0..keys / TILE)
        .map(|i| tile(format!("s{i}"), TileRole::Acc))
        .collect();
    let pv: Vec<Tile> = (0..dims)
        .map(|i| tile(format!("pv{i}"), TileRole::Acc))
        .collect();
    let b = k.tile("b", TileRole::B);
    let pa = k.tile("p", TileRole::A);

    // The lane's row: its running maximum and sum, and its half of the row's sums.
    let m = k.var("max", Scalar::F32);
    m.set(k.f32(f32::NEG_INFINITY));
    let l = k.var("sum", Scalar::F32);
    let o: Vec<Var> = (0..d / 2)
        .map(|i| k.var(&format!("o{i}"), Scalar::F32))
        .collect();
    let t = (t0 + w * k.u32(TILE) + r).min(last_token);
    let q_pos = pos + t;
    let own = w * k.u32(TILE * sr);
    let own_p = w * k.u32(TILE * sp);
    let neg_inf = k.f32(f32::NEG_INFINITY);
    // An accumulator into the subgroup's region, as its `n`th tile of columns.
    let to_region = |acc: &Tile, n: u32| {
        let at = own + k.u32(n * TILE);
        acc.store(
            TileMemory::Shared(region),
            at,
            k.u32(sr),
            TileLayout::RowMajor,
        );
    };

    load_block(start);
    k.barrier();
    for (i, a) in qa.iter().enumerate() {
        let at = w * k.u32(TILE * sq) + k.u32(i as u32 * TILE);
        a.load(
            TileMemory::Shared(q_sh),
            at,
            k.u32(sq),
            TileLayout::RowMajor,
        );
    }
    // The chunk's last block (its first when the chunk is empty and the loop never runs).
    let last_block = ((end - one).max(start) - start) / k.u32(keys) * k.u32(keys) + start;
    k.for_range(start, end, keys, |kb| {
        put_block(kb);
        k.barrier();
        // The next block's loads go out now (the last block loads itself again).
        load_block((kb + k.u32(keys)).min(last_block));

        // S = Q·Kᵀ: the keys' rows are B's columns.
        for (n, acc) in s.iter().enumerate() {
            acc.zero();
            for (i, a) in qa.iter().enumerate() {
                let at = k.u32(n as u32 * TILE * sq + i as u32 * TILE);
                b.load(
                    TileMemory::Shared(k_sh),
                    at,
                    k.u32(sq),
                    TileLayout::ColMajor,
                );
                acc.mma(*a, b);
            }
            to_region(acc, n as u32);
        }
        k.barrier();

        // The softmax of the lane's half row.
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
        let new_m = m.get().max(row_max);
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
        k.barrier();

        // P·V into fresh accumulators, then into the lanes' sums.
        for acc in &pv {
            acc.zero();
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
                let at = k.u32(n * TILE * sq + i as u32 * TILE);
                b.load(
                    TileMemory::Shared(v_sh),
                    at,
                    k.u32(sq),
                    TileLayout::RowMajor,
                );
                acc.mma(pa, b);
            }
        }
        for (i, acc) in pv.iter().enumerate() {
            to_region(acc, i as u32);
        }
        k.barrier();
        for (j, acc) in o.iter().enumerate() {
            let c = half * k.u32(d / 2) + k.u32(j as u32);
            let add = k.load_shared(region, own + r * k.u32(sr) + c);
            acc.set(acc.get().fma(alpha, add));
        }
        // The next block restages keys, values, scores and p.
        k.barrier();
    });

    k.if_((t0 + w * k.u32(TILE) + r).lt(tokens), || {
        let (row, inv) = match out {
            FlashOut::Part | FlashOut::Chunks => (d + 2, k.f32(1.0)),
            FlashOut::Normalized => (d, k.f32(1.0) / l.get()),
        };
        let base = chunk.part_row(t * heads + h) * k.u32(row);
        for (j, acc) in o.iter().enumerate() {
            let c = half * k.u32(d / 2) + k.u32(j as u32);
            let v = match out {
                FlashOut::Part | FlashOut::Chunks => acc.get(),
                FlashOut::Normalized => acc.get() * inv,
            };
            k.store(part, base + c, v);
        }
        if out != FlashOut::Normalized {
            k.if_(half.eq(k.u32(0)), || {
                k.store(part, base + k.u32(d), m.get());
                k.store(part, base + k.u32(d + 1), l.get());
            });
        }
    });
    Ok(k.finish())
}

/// A conformance case: [`super::attention_flash::case`]'s inputs and reference, the tiled
/// kernel with the scalar one (and its grid) as the fallback of devices without tiles.
pub fn case(shape: FlashAttention, pos: u32, kv: Float, out: FlashOut) -> Result<Case, ShapeError> {
    let out = out.for_splits(shape.splits);
    let scalar = super::attention_flash::case(shape, pos, kv.into(), (KeyLayout::Rows, out))?;
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
/// of the last ones); a head dimension of 128 (two subgroups, blocks of 16 keys).
pub fn cases() -> Vec<Case> {
    use FlashOut::{Normalized, Part};
    use Float::{F16, F32};
    let smol = smollm2;
    let window = |shape: FlashAttention, w| FlashAttention {
        window: Some(w),
        ..shape
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
        (
            FlashAttention {
                splits: 2,
                ..MULTI_QUERY_128
            },
            13,
            F16,
            Part,
        ),
        // Sliding windows: narrower than a block of keys, in a later chunk, in chunks.
        (window(smol(64), 7), 0, F16, Part),
        (window(smol(130), 40), 5, F16, Normalized),
        (window(smollm2_split(130, 4), 33), 0, F32, Part),
        (window(MULTI_QUERY_128, 9), 13, F16, Normalized),
    ]
    .into_iter()
    .map(|(shape, pos, kv, out)| case(shape, pos, kv, out))
    .collect::<Result<_, _>>()
    .expect("the fixed shapes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The staged blocks fit NVIDIA's 48 KiB of shared memory at every supported dimension.
    #[test]
    fn blocks_fit_48_kib() {
        for d in [16, 64, 80, 128] {
            let k = kernel(d, Float::F16, FlashOut::Part, false).unwrap();
            assert!(k.shared_bytes() <= 48 * 1024, "d{d}: {}", k.shared_bytes());
        }
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
        for d in [0, 17, 72 + 1, MAX_FLASH_HEAD_DIM + 16] {
            assert!(!supports(d));
            assert!(matches!(
                kernel(d, Float::F16, FlashOut::Normalized, false),
                Err(ShapeError::Unsupported { .. })
            ));
        }
    }
}

//! The tuning table: the kernel shapes and step splits the planner takes for a device, from
//! what the device reports (its type, 16-bit storage, matrix tiles, subgroup widths, and the
//! backend's [`trine_backends::Tuning`]). Each figure was chosen by measuring the executor's
//! own kernels; the measurements are in `docs/bench/`.

use crate::weights::{WeightId, Weights};
use trine_backends::{DeviceInfo, DeviceType};
use trine_gguf::quant::WeightType;
use trine_ops::blocks::BlockFormat;
use trine_ops::key_layout::KeyLayout;
use trine_ops::kv_type::KvType;
use trine_ops::matmul_tiles;
use trine_ops::matvec::{MatvecSpec, Reduce};
use trine_ops::matvec_q8::XBlocks;
use trine_ops::matvec_q8_blocks::{self, Teams};
use trine_ops::quantize::{self, XLoad};
use trine_ops::support::Reduction;

/// The KV cache type of an executor whose primary device is described by `info`, where none
/// is asked for: f16 halves the cache and matches llama.cpp's default cache type; f32 where
/// the device has no 16-bit storage, and on CPUs, whose attention loads keys at a stride (one
/// position per invocation), which x86 gathers only in 32-bit elements.
pub fn kv_type(info: &DeviceInfo) -> KvType {
    if info.f16 && info.device_type != DeviceType::Cpu {
        KvType::F16
    } else {
        KvType::F32
    }
}

/// The K cache layout of an executor whose primary device is described by `info` and whose
/// cache is `kv`: columns on CPUs, whose attention then loads consecutive keys as vectors
/// instead of gathering them ([`trine_ops::key_layout`]); rows on GPUs, whose kernels read a
/// key's elements together, and for q8_0, whose blocks lie along a key.
pub fn key_layout(info: &DeviceInfo, kv: KvType) -> KeyLayout {
    if info.device_type == DeviceType::Cpu && kv != KvType::Q8_0 {
        KeyLayout::Columns
    } else {
        KeyLayout::Rows
    }
}

/// The fewest splits of the keys in decode attention on a GPU, each a chunk of the cache in
/// a workgroup of its own (more splits mean a longer combine). A CPU's cores are busy with the
/// heads alone, and prompt steps have a workgroup per token and head already: they use one.
pub const GPU_SPLITS: u32 = 8;

/// Keys a decode split walks in a full cache: a split's workgroup walks its keys one block
/// after another, so a long context with few splits leaves most of a GPU idle while a few
/// workgroups walk thousands of keys each.
pub const KEYS_PER_SPLIT: u32 = 64;

/// The most splits of a GPU's decode attention: each adds a partial to the combine.
pub const MAX_GPU_SPLITS: u32 = 128;

/// Splits of a GPU's decode attention over a cache of `context` positions: enough that a full
/// cache gives each about [`KEYS_PER_SPLIT`] keys, between [`GPU_SPLITS`] and
/// [`MAX_GPU_SPLITS`]. The count is fixed for an executor, since a recorded step replays one
/// grid; the chunks follow the position (`trine_ops::attention_split`).
pub fn gpu_splits(context: u32) -> u32 {
    context
        .div_ceil(KEYS_PER_SPLIT)
        .clamp(GPU_SPLITS, MAX_GPU_SPLITS)
}

/// Whether a device's decode attention over a cache of `context` positions takes a KV head's
/// query heads in one workgroup: on a CPU always (`split_kernel_heads`: a layer's keys come
/// from its caches once for them all, docs/bench/scale.md; the same kernel and splits at
/// every context, so that a chat's long context decodes as a short run of the same
/// conversation does). On every GPU (`trine_ops::attention_split::grouped_kernel`) where
/// the context is longer than [`GROUPED_CONTEXT`]: over long caches the
/// reads of K and V dominate, which the grouped kernel shares between the query heads. Over
/// short ones it launches `group` times fewer workgroups, which lost on SmolLM2's 3 KV heads
/// of 64 (docs/bench/scale.md) and won on a GPU's nodes with [`GROUPED_KV_HEADS`] KV heads
/// of [`GROUPED_HEAD_DIM`] (docs/bench/decode.md): those still fill a few dozen workgroups,
/// and a subgroup's lanes share each key's row where the per-head kernel walks it in one
/// invocation.
pub fn grouped_attention(context: u32, gpu: bool, (kv_heads, head_dim): (u32, u32)) -> bool {
    !gpu || context > GROUPED_CONTEXT
        || (kv_heads >= GROUPED_KV_HEADS && head_dim >= GROUPED_HEAD_DIM)
}

/// Splits of a CPU's decode attention for `heads` query heads over `kv_heads`: where a
/// workgroup takes a KV head's query heads ([`grouped_attention`],
/// `trine_ops::attention_split::split_kernel_heads`), the fewest that give each of the
/// device's `workers` as many workgroups (SmolLM2's 3 KV heads on 2 workers: 2 splits, 6
/// workgroups, where one split left a worker idle for a third of the kernel); 1 where each KV
/// head serves one query head (a workgroup a head) or the workers are unknown.
pub fn cpu_splits(workers: Option<u32>, (heads, kv_heads): (u32, u32)) -> u32 {
    if heads <= kv_heads {
        return 1;
    }
    let gcd = |mut a: u32, mut b: u32| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    workers.map_or(1, |w| (w / gcd(w, kv_heads.max(1))).clamp(1, GPU_SPLITS))
}

/// See [`grouped_attention`].
pub const GROUPED_CONTEXT: u32 = 1024;
/// See [`grouped_attention`].
pub const GROUPED_KV_HEADS: u32 = 8;
/// See [`grouped_attention`].
pub const GROUPED_HEAD_DIM: u32 = 128;

/// Splits of a step of `tokens`' split attention: `decode` (the executor's
/// [`gpu_splits`], 1 on a CPU) for one token, one for prompts.
pub fn attention_splits(tokens: u32, decode: u32) -> u32 {
    if tokens == 1 {
        decode
    } else {
        1
    }
}

/// Keys per chunk of a prompt's flash attention where the device cuts them into chunks
/// ([`trine_backends::Tuning::flash_key_chunks`]): a query block walks its keys one block
/// after another, so the last block of a long prompt is the dispatch's length, and chunks
/// shorten it.
pub const FLASH_SPLIT_KEYS: u32 = 128;

/// The most chunks a prompt's flash attention takes ([`crate::graph::Tensor::Part`] holds
/// that many per token and head).
pub const MAX_FLASH_SPLITS: u32 = 4;

/// [`FLASH_SPLIT_KEYS`] and [`MAX_FLASH_SPLITS`] for heads wider than 128 (Gemma 3's 256) on
/// the scalar kernel, which walks 8 keys a block with few workgroups a head: twice the chunks,
/// half as long, measured faster on CUDA and no slower on NVIDIA's Vulkan
/// (docs/models/gemma.md). The kernel on tiles, which stages a block of 32 queries at every
/// dimension before its walk, measured faster on the usual chunks of 128 keys.
pub const WIDE_SPLIT_KEYS: u32 = 64;
/// See [`WIDE_SPLIT_KEYS`].
pub const MAX_WIDE_FLASH_SPLITS: u32 = 8;

/// The chunks of a `tokens`-token prompt step's flash attention over heads of `head_dim`, on
/// matrix `tiles` or not: one per [`FLASH_SPLIT_KEYS`] tokens, at most [`MAX_FLASH_SPLITS`]
/// ([`WIDE_SPLIT_KEYS`] and [`MAX_WIDE_FLASH_SPLITS`] for wider heads on the scalar kernel).
/// With one, flash attention can write the attention itself and no combine follows.
pub fn flash_splits(tokens: u32, head_dim: u32, tiles: bool) -> u32 {
    if !tiles && head_dim > trine_ops::attention_flash::MAX_FLASH_HEAD_DIM {
        tokens
            .div_ceil(WIDE_SPLIT_KEYS)
            .clamp(1, MAX_WIDE_FLASH_SPLITS)
    } else {
        tokens.div_ceil(FLASH_SPLIT_KEYS).clamp(1, MAX_FLASH_SPLITS)
    }
}

/// The subgroup width a device's kernels on tiles are written for: its one width, or 32 where
/// it has several and pins a kernel to the width it declares (RDNA3's WMMA's native width,
/// and the one the tiles' cases are measured at); `None` without tiles.
pub fn tile_width(info: &DeviceInfo) -> Option<u32> {
    const PINNED: u32 = 32;
    if !info.tiles {
        return None;
    }
    info.subgroup_size()
        .or_else(|| info.runs_subgroup_width(PINNED).then_some(PINNED))
}

/// How much work a float-x product has, which decides its GPU shape ([`matvec_spec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatvecSize {
    /// A decode step's small matrices.
    Small,
    /// Many short rows, as an output head's.
    Tall,
    /// A matrix of at least 4096 × 4096.
    Wide,
    /// A prompt of at least [`WIDE_TOKENS`] tokens: GPUs take the wide shape, CPUs several
    /// tokens per workgroup.
    Prompt,
}

impl MatvecSize {
    pub fn of(rows: u32, cols: u32, tokens: u32) -> MatvecSize {
        if tokens >= WIDE_TOKENS {
            MatvecSize::Prompt
        } else if rows >= 4096 && cols >= 4096 {
            MatvecSize::Wide
        } else if rows >= TALL_ROWS {
            MatvecSize::Tall
        } else {
            MatvecSize::Small
        }
    }
}

/// Rows from which a product that is not wide counts as tall: output heads (vocabularies of
/// 32000 and more), not a model's projections.
const TALL_ROWS: u32 = 16384;

/// Prompt steps from this many tokens use the wide shape.
pub const WIDE_TOKENS: u32 = 64;

/// The float-x product's shape for a device and a product's size. GPUs, quantized weights:
/// the scales read through an f16 view of the weights where the device has 16-bit storage
/// (and then Q4_1's codes as whole words); wide products share 8 rows among 128 invocations,
/// which leaves small matrices' GPUs mostly idle, so those take 2 rows, and tall ones 4 rows
/// on 32 invocations. Small float products (a mixture of experts' router) take two rows on 128
/// invocations; larger ones keep [`MatvecSpec::new`]'s 4 rows on 64 invocations.
/// CPUs take the blocked walk ([`MatvecSpec::blocked`]) on 8 rows, which the C compiler
/// vectorises across invocations, with the scales read through an f16 view (a native
/// conversion instead of some forty integer operations per scale), and Q4 weights that only
/// products read held in pairs of blocks.
pub fn matvec_spec(
    ty: WeightType,
    reduce: Reduce,
    info: &DeviceInfo,
    size: MatvecSize,
    pairable: bool,
) -> MatvecSpec {
    let mut spec = MatvecSpec::new(ty, reduce);
    if info.device_type == DeviceType::Cpu {
        spec.rows_per_workgroup = CPU_MATVEC_ROWS;
        spec.workgroup = cpu_matvec_lanes(ty);
        spec.f16_scales = info.f16;
        spec.blocked = true;
        if holds_pairs(info, ty, pairable) {
            (spec.rows_per_workgroup, spec.workgroup, spec.pairs) = CPU_PAIRS_MATVEC;
            if size == MatvecSize::Prompt {
                spec.tokens_per_workgroup = CPU_PROMPT_TOKENS;
            }
        }
    } else if !ty.is_quantized() && size == MatvecSize::Small {
        (spec.rows_per_workgroup, spec.workgroup) = GPU_SMALL_FLOAT_MATVEC;
    } else if ty.is_quantized() {
        (spec.rows_per_workgroup, spec.workgroup, spec.segment) = match size {
            MatvecSize::Wide | MatvecSize::Prompt => GPU_LARGE_MATVEC,
            MatvecSize::Tall => GPU_TALL_MATVEC,
            MatvecSize::Small => GPU_SMALL_MATVEC,
        };
        spec.f16_scales = info.f16;
        spec.word_codes = true;
    }
    spec
}

/// Rows per workgroup of a CPU's blocked product.
const CPU_MATVEC_ROWS: u32 = 8;

/// (rows per workgroup, invocations, pairs) of a CPU's product in pairs of Q4 blocks: 4 rows
/// keep the sums of a workgroup in registers where 8 spill.
const CPU_PAIRS_MATVEC: (u32, u32, bool) = (4, 32, true);

/// Tokens per workgroup of a CPU's prompt products (float x in pairs of blocks, and quantized
/// x): each block of weights is decoded once for this many tokens. 16 took more prompt
/// tokens a second than 8 on the 1B layouts, and as many as 32, whose kernels are twice as
/// long to compile and whose workgroups a short prompt leaves half empty (docs/bench/cpu.md).
const CPU_PROMPT_TOKENS: u32 = 16;

/// (rows per workgroup, invocations, segment) of a GPU's wide quantized product.
const GPU_LARGE_MATVEC: (u32, u32, u32) = (8, 128, 8);

/// (rows per workgroup, invocations, segment) of a GPU's small quantized product: a decode
/// step's small matrices are latency-bound, so fewer rows per workgroup (more workgroups)
/// finish sooner.
const GPU_SMALL_MATVEC: (u32, u32, u32) = (2, 128, 8);

/// (rows per workgroup, invocations) of a GPU's small float product: a router's few rows
/// (128 of 2,048) on 4 rows of 64 invocations left most of a GPU idle, each invocation
/// walking 32 columns of 4 rows one load at a time (docs/models/qwen3moe.md). Rows come in
/// pairs for a QKV product's rope.
const GPU_SMALL_FLOAT_MATVEC: (u32, u32) = (2, 128);

/// (rows per workgroup, invocations, segment) of a GPU's tall quantized product (an output
/// head): short rows, so fewer invocations share one.
const GPU_TALL_MATVEC: (u32, u32, u32) = (4, 32, 8);

/// Tokens a workgroup of a product with quantized x takes in a step of `tokens`: a prompt's
/// share one load of each block of codes.
pub fn q8_tokens_per_workgroup(tokens: u32) -> u32 {
    if tokens > 1 {
        CPU_PROMPT_TOKENS
    } else {
        1
    }
}

/// Rows a team of a GPU's decode product on the file's blocks takes
/// ([`trine_ops::matvec_q8_blocks`]) for `rows` rows: two, which share their loads of x, or
/// more where the rows would need more than the 65,535 workgroups a grid's first dimension
/// is guaranteed to reach on Vulkan. Two decoded an 8B Q4_K_M layout fastest of one, two and
/// four (docs/bench/scale.md).
pub fn q8_blocks_rows_per_team(rows: u32) -> u32 {
    rows.div_ceil(65_535).next_power_of_two().max(2)
}

/// How a workgroup of that product divides its rows among its invocations, for `rows` rows of
/// `cols` `ty` weights. Measured on each product of the 1B and 8B layouts (docs/bench/decode.md,
/// "Decode products"): teams of 32 taking pairs of units streamed Q4_K (whose pairs share
/// their scales) faster where a product has many rows of at most 4,096; the other formats
/// kept the whole workgroup's team, but for the many short rows (fewer units than
/// invocations) of a small model's gate/up and output head, where grouped Q8_0 did not gain.
/// A team takes two steps an iteration only where its rows' pairs fill both: a second step
/// past a row's end is loaded and thrown away.
pub fn q8_blocks_teams(ty: WeightType, rows: u32, cols: u32) -> Teams {
    let shares = matvec_q8_blocks::format_units(ty).is_some_and(|(_, u)| u.pairs_share);
    let short_rows = cols < 32 * matvec_q8_blocks::WORKGROUP;
    let teams = (shares && rows >= 4096 && cols <= 4096)
        || (short_rows && rows >= 8192 && ty != WeightType::Q8_0x8);
    let pairs = cols / 64;
    match teams {
        true if pairs.is_multiple_of(64) => Teams::pairs(2),
        true => Teams::pairs(1),
        false => Teams::WHOLE,
    }
}

/// Whether a GPU's decode product on the file's blocks of `ty` weights in rows of `cols` asks
/// L2 for each team's rows before it waits for the dispatch ahead
/// ([`trine_ops::matvec_q8_blocks::kernel`]). Not on the grouped Q4_0, Q4_1 and Q8_0 layouts
/// in rows of 4,096 and more, where the step measured faster without it; the K-quants, and
/// the grouped layouts' shorter rows, measured faster with it (docs/bench/decode.md).
pub fn q8_blocks_prefetch(ty: WeightType, cols: u32) -> bool {
    !(WeightType::GROUPED.contains(&ty) && cols >= 4096)
}

/// Whether a GPU's decode product on the file's blocks of `ty` weights (the file's type) in
/// rows of `cols` takes x·g quantized and scales its sums by the row's 1/rms itself
/// ([`crate::graph::Load::Rms`]), so that the quantizer before it waits on no reduction over
/// the row. Only where launches overlap, on Q4_0, Q4_1 and Q8_0 in rows of 4,096 and more:
/// there the step measured faster with it (Q8_0) or level (Q4_0); in rows of 2,048, on the
/// K-quants (whose products are bound by their instructions) and on Vulkan (whose dispatches
/// wait behind barriers) it measured slower (docs/bench/decode.md).
pub fn norm_in_product(ty: WeightType, cols: u32, launches_overlap: bool) -> bool {
    launches_overlap && ty.grouped().is_some() && cols >= 4096
}

/// Slices of K a prompt product on tiles in `block` sums apart ([`crate::graph::Store::Slices`])
/// over `rows × cols` and `tokens`, on a device of `compute_units` multiprocessors: where its
/// blocks fill at most half of the workgroups the device runs at once
/// ([`resident_blocks`] per multiprocessor), the most slices, up to [`MAX_K_SLICES`], that keep
/// the grid within one such wave and each slice at least [`MIN_SLICE_COLS`] columns; else one.
/// A device whose multiprocessors are unknown splits nothing.
pub fn k_splits(
    block: matmul_tiles::BlockSize,
    (rows, cols, tokens): (u32, u32, u32),
    compute_units: Option<u32>,
) -> u32 {
    let Some(units) = compute_units else {
        return 1;
    };
    let (bm, bn) = block.dims();
    let blocks = tokens.div_ceil(bm) * rows.div_ceil(bn);
    let resident = units * resident_blocks(block);
    if 2 * blocks > resident {
        return 1;
    }
    let mut splits = 1;
    while splits < MAX_K_SLICES
        && 2 * splits * blocks <= resident
        && cols / (2 * splits) >= MIN_SLICE_COLS
    {
        splits *= 2;
    }
    splits
}

/// The most slices [`k_splits`] cuts K into.
pub const MAX_K_SLICES: u32 = 4;

/// The fewest columns a slice of [`k_splits`] sums: 16 steps of the tiled kernels.
pub const MIN_SLICE_COLS: u32 = 1024;

/// Workgroups of `block` a multiprocessor runs at once, as their registers and shared memory
/// allow on the GPUs measured: the large block's fill one, the medium block's three.
pub fn resident_blocks(block: matmul_tiles::BlockSize) -> u32 {
    match block {
        matmul_tiles::BlockSize::Large => 1,
        matmul_tiles::BlockSize::Medium => 3,
        matmul_tiles::BlockSize::Small => 6,
    }
}

/// The reductions a quantizer may take on `info`'s device, best first: by subgroup on a GPU
/// with subgroup operations (measured faster on CUDA and NVIDIA's Vulkan, most on a norm
/// quantizer's row sum: docs/bench/decode.md); the shared-memory tree on a CPU, whose decode
/// measured no faster with the subgroups' emulation, and wherever subgroups are missing.
pub fn quantize_reductions(info: &DeviceInfo) -> &'static [Reduction] {
    if info.subgroup_ops && info.device_type != DeviceType::Cpu {
        &[Reduction::Subgroup, Reduction::Shared]
    } else {
        &[Reduction::Shared]
    }
}

/// Invocations a workgroup of a quantizer into `blocks` from `load` takes at least
/// ([`trine_ops::quantize::kernel`]): on a GPU's nodes, [`quantize::NORM_INVOCATIONS`] where
/// it folds the RMS norm in (every workgroup sums its row's squares, which more invocations
/// walked faster there), else one per element of its block (on the cpu backend the wider
/// workgroups decoded slower). Measured in docs/bench/decode.md.
pub fn quantize_invocations(blocks: XBlocks, load: XLoad, gpu_nodes: bool) -> u32 {
    if gpu_nodes && load == XLoad::Norm {
        quantize::NORM_INVOCATIONS
    } else {
        blocks.elems()
    }
}

/// The type an executor's kernels read weight `id` as. One that groups blocks (`grouped`, a
/// GPU's and its checkers: [`crate::planner::KernelShape::gpu_nodes`]) holds the Q4_0, Q4_1
/// and Q8_0 weights it may ([`Weights::groupable`]) in rows of whole groups in groups of
/// eight blocks ([`trine_gguf::quant::regroup`]), whose codes its decode products take as
/// byte-code units (on the file's blocks they multiplied float x at a fraction of the rate
/// memory streamed them: docs/bench/scale.md); every other weight as the file has it.
pub fn read_type(w: &Weights, id: WeightId, grouped: bool) -> WeightType {
    let t = &w.tensors[id];
    match t.ty.grouped() {
        Some(g)
            if grouped && w.groupable(id) && (t.cols as usize).is_multiple_of(g.block_elems()) =>
        {
            g
        }
        _ => t.ty,
    }
}

/// The block of pairs by rows a workgroup of a prompt's experts' product on tiles takes
/// ([`crate::graph::Op::ExpertRows`]): the medium one (64 pairs by 64 rows), whose steps carry
/// four times the small block's products for each barrier and whose workgroups read each
/// expert's rows once at Qwen3-30B-A3B's pp512 (32 pairs an expert on average); on a device
/// with warpgroup products, the large one on them for products of at least
/// [`EXPERTS_GROUP_COLS`] columns (`cols`).
pub fn experts_block(cols: u32, warpgroups: bool) -> matmul_tiles::BlockSize {
    if warpgroups && cols >= EXPERTS_GROUP_COLS {
        matmul_tiles::BlockSize::Large
    } else {
        matmul_tiles::BlockSize::Medium
    }
}

/// The fewest columns of an experts' product on warpgroup products. At Qwen3-30B-A3B's
/// pp512 the gate and up products (2,048 columns) ran faster on them than on the medium
/// block, and down (768 columns, x the pairs' own rows) slower, on widened weights and on the
/// file's blocks alike (docs/models/qwen3moe.md).
pub const EXPERTS_GROUP_COLS: u32 = 2048;

/// Tokens a prompt's experts' gate/up product by expert takes a chunk
/// ([`trine_ops::matvec_ids_sorted`]): an expert's rows are read from memory once per chunk,
/// and a chunk ends with a reduction per (row, token, matrix), 16 at Qwen3-30B-A3B's two rows
/// a workgroup. Not yet measured against other sizes.
pub const EXPERT_TOKENS_PER_CHUNK: u32 = 4;

/// Whether a device holds a weight of type `ty` in pairs of blocks
/// ([`trine_ops::blocks::pair_blocks`]): CPUs do for the Q4 weights only products read
/// (`pairable`); an embedding table is read row by row in the file's layout.
pub fn holds_pairs(info: &DeviceInfo, ty: WeightType, pairable: bool) -> bool {
    info.device_type == DeviceType::Cpu && pairable && trine_ops::blocks::pairs_apply(ty)
}

/// Invocations of a CPU product ([`MatvecSpec::blocked`]): the C compiler vectorises a loop
/// over invocations that loads bytes with vectors of as many bytes as the loop has
/// iterations; a block's bytes of codes (a packed format's sub-block), up to 32 (256-bit
/// float vectors), bound them. Plain floats take 8.
fn cpu_matvec_lanes(ty: WeightType) -> u32 {
    match BlockFormat::of(ty) {
        Some(BlockFormat::Flat(f)) => f.code_bytes().min(32),
        Some(BlockFormat::Packed(p)) => p.sub.min(32),
        None => 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use matmul_tiles::BlockSize::{Large, Medium};

    /// Qwen3-30B-A3B's experts: gate and up (2,048 columns) on warpgroup products where the
    /// device has them, down (768) and every product of a device without them on the medium
    /// block.
    #[test]
    fn experts_blocks_by_columns_and_device() {
        assert_eq!(experts_block(2048, true), Large);
        assert_eq!(experts_block(768, true), Medium);
        assert_eq!(experts_block(2048, false), Medium);
    }

    /// On a device of 132 multiprocessors: Gemma 3 1B's FFN down over 512 tokens (144 medium
    /// blocks of 396 resident) and the 1B layout's (64 large of 132) split in two; the 8B
    /// layout's (128 large blocks) and a short K do not; nor does a device whose
    /// multiprocessors are unknown.
    #[test]
    fn k_splits_where_blocks_leave_half_the_device_idle() {
        let units = Some(132);
        assert_eq!(k_splits(Medium, (1152, 6912, 512), units), 2);
        assert_eq!(k_splits(Large, (2048, 8192, 512), units), 2);
        assert_eq!(k_splits(Large, (4096, 14336, 512), units), 1);
        assert_eq!(k_splits(Medium, (1152, 1024, 512), units), 1);
        assert_eq!(k_splits(Medium, (1152, 6912, 512), None), 1);
        // A short prompt's few token blocks split more, up to four slices.
        assert_eq!(k_splits(Large, (2048, 8192, 128), units), 4);
    }
}

//! Which kernel runs each op of the graph, in order of preference for a device: the subgroup
//! variant where the device has subgroups, then the shared-memory one that every device runs.

use super::graph::{Epilogue, Op, Prologue};
use super::weights::Weights;
use trine_backends::{DeviceInfo, DeviceType};
use trine_gguf::quant::WeightType;
use trine_ir::Kernel;
use trine_ops::attention_flash::FlashOut;
use trine_ops::elementwise::{copy_kernel, swiglu_pairs_kernel};
use trine_ops::key_layout::KeyLayout;
use trine_ops::matvec::{
    Epilogue as MatvecEpilogue, MatvecSpec, Prologue as MatvecPrologue, Reduce,
};
use trine_ops::matvec_fused::{CombineShape, RopeShape};
use trine_ops::rope::RopeMode;
use trine_ops::shape::ShapeError;
use trine_ops::support::{Float, Reduction};
use trine_ops::{
    argmax, attention_flash, attention_flash_tiles, attention_split, embedding, matmul_tiles,
    matvec, matvec_q8, matvec_q8_rows, rms_norm, rope_store,
};

/// The kernel an op needs, up to its variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelKey {
    Embed(WeightType),
    /// The weights' type, the product's size class ([`MatvecSize::of`]), what is fused into
    /// it, and whether the weights are read only by products ([`Weights::pairable`]), so that
    /// a CPU holds them in pairs of blocks ([`MatvecSpec::pairs`]).
    Matvec(WeightType, MatvecSize, MatvecPrologue, MatvecEpilogue, bool),
    AttnSplit,
    /// Prompt attention, on matrix tiles where the device has them (`true`), and what it
    /// writes.
    AttnFlash(bool, FlashOut),
    /// The plain rms_norm of a step's rows (before a product with quantized x).
    RmsNorm,
    /// Attention's split partials combined (before a product with quantized x), by splits.
    Combine(u32),
    /// SwiGLU of gate/up pairs (after a product with quantized x).
    SwigluPairs,
    /// Rope and the KV-cache store (after a QKV product with quantized x).
    RopeStore,
    /// x quantized per block of 32.
    Quantize,
    /// A product with quantized x: its weights' type, whether it adds a residual, and the
    /// tokens each workgroup takes (one in decode steps, [`CPU_PROMPT_TOKENS`] in prompts).
    MatvecQ8(WeightType, bool, u32),
    /// A prompt's product on matrix tiles: its weights' type, whether it adds a residual,
    /// its block ([`matmul_tiles::BlockSize::for_product`]) and the blocks of K per step
    /// ([`matmul_tiles::TilesSpec::depth_for`]).
    MatmulTiles(TilesKey),
    PickLast,
    Argmax,
}

/// How notes and errors name the op: `matvec q4_1 (wide, rms_norm, add)`.
impl std::fmt::Display for KernelKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelKey::Embed(ty) => write!(f, "embedding {ty}"),
            KernelKey::Matvec(ty, size, pro, epi, _) => {
                let mut parts = vec![];
                match size {
                    MatvecSize::Small => {}
                    MatvecSize::Tall => parts.push("tall"),
                    MatvecSize::Wide => parts.push("wide"),
                    MatvecSize::Prompt => parts.push("prompt"),
                }
                match pro {
                    MatvecPrologue::None => {}
                    MatvecPrologue::RmsNorm => parts.push("rms_norm"),
                    MatvecPrologue::Combine(_) => parts.push("attention combine"),
                }
                match epi {
                    MatvecEpilogue::None => {}
                    MatvecEpilogue::Add => parts.push("add"),
                    MatvecEpilogue::Swiglu => parts.push("swiglu"),
                    MatvecEpilogue::RopeStore(_) => parts.push("rope, kv cache store"),
                }
                write!(f, "matvec {ty}")?;
                if !parts.is_empty() {
                    write!(f, " ({})", parts.join(", "))?;
                }
                Ok(())
            }
            KernelKey::AttnSplit => f.write_str("attention (split)"),
            KernelKey::AttnFlash(tiles, out) => {
                let tiles = if *tiles { ", on tiles" } else { "" };
                let out = match out {
                    FlashOut::Part => "",
                    FlashOut::Normalized => ", normalised",
                    FlashOut::Chunks => ", keys in chunks",
                };
                write!(f, "attention (flash{tiles}{out})")
            }
            KernelKey::RmsNorm => f.write_str("rms_norm"),
            KernelKey::Combine(splits) => write!(f, "attention combine ({splits} splits)"),
            KernelKey::SwigluPairs => f.write_str("swiglu"),
            KernelKey::RopeStore => f.write_str("rope, kv cache store"),
            KernelKey::Quantize => f.write_str("x quantized to q8"),
            KernelKey::MatvecQ8(ty, add, tokens) => {
                let add = if *add { ", add" } else { "" };
                write!(f, "matvec {ty} × q8 ({tokens} tokens{add})")
            }
            KernelKey::MatmulTiles(t) => {
                let out = match (t.add, t.swiglu) {
                    (true, _) => ", add",
                    (false, true) => ", swiglu",
                    (false, false) => "",
                };
                let block = match t.block {
                    matmul_tiles::BlockSize::Small => ", small",
                    matmul_tiles::BlockSize::Medium => "",
                    matmul_tiles::BlockSize::Large => ", large",
                };
                let (ty, depth) = (t.weights, t.depth);
                write!(f, "matmul {ty} on tiles{block}{out}, {depth} blocks a step")
            }
            KernelKey::PickLast => f.write_str("last-token copy"),
            KernelKey::Argmax => f.write_str("argmax"),
        }
    }
}

/// The KV cache type of an executor whose primary device is described by `info`: f16 halves
/// the cache and matches llama.cpp's default cache type; f32 where the device has no 16-bit
/// storage, and on CPUs, whose attention loads keys at a stride (one position per
/// invocation), which x86 gathers only in 32-bit elements: on 2 EPYC cores SmolLM2-135M Q4_1's
/// pp512 went from 140 to 165 tokens/s (2026-11-25).
pub fn kv_type(info: &DeviceInfo) -> Float {
    if info.f16 && info.device_type != DeviceType::Cpu {
        Float::F16
    } else {
        Float::F32
    }
}

/// The K cache layout of an executor whose primary device is described by `info`: columns on
/// CPUs, whose attention then loads consecutive keys as vectors instead of gathering them
/// ([`trine_ops::key_layout`]); rows on GPUs, whose kernels read a key's elements together.
pub fn key_layout(info: &DeviceInfo) -> KeyLayout {
    if info.device_type == DeviceType::Cpu {
        KeyLayout::Columns
    } else {
        KeyLayout::Rows
    }
}

/// What every kernel of one executor shares: the KV cache type, the K cache's layout, the
/// head dimension, and whether its prompt products on tiles all take the small block
/// ([`small_tiles`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelShape {
    pub kv: Float,
    pub keys: KeyLayout,
    pub head_dim: u32,
    pub small_tiles: bool,
}

/// Whether every prompt product on tiles takes the small block on the device described by
/// `info`: NVIDIA's Vulkan driver, whose cooperative-matrix products ran SmolLM2's pp512 faster
/// so, where CUDA's tiles ran slower (H200, 2026-11-26, one call each, rounds alternating:
/// vulkan 52,391–54,580 tokens/s against 50,847–51,592 and cuda 81,671–82,766 against
/// 86,225–87,822 before attention was on tiles; vulkan 56,204–58,234 against 53,889–57,264
/// in four of four rounds after).
pub fn small_tiles(info: &DeviceInfo) -> bool {
    info.backend == "vulkan" && info.vendor == "NVIDIA"
}

/// Whether a prompt step's flash attention on the device described by `info` cuts the keys
/// into chunks ([`crate::graph::flash_splits`]): NVIDIA's Vulkan driver, whose tiled kernel
/// takes twice CUDA's time per block of keys, so that the last query block's chain of blocks
/// is the dispatch's length. H100 (2026-11-26, SmolLM2-shaped pp512, two rounds alternating in
/// one call): vulkan attention 2,065–2,071 µs a step → 1,218–1,223 with 4 chunks, plus
/// 231 µs of combine; cuda 1,036 → 1,018, plus 346–353 of combine, a slower step.
pub fn chunked_flash(info: &DeviceInfo) -> bool {
    info.backend == "vulkan" && info.vendor == "NVIDIA"
}

impl KernelKey {
    pub fn of(op: &Op, w: &Weights, s: KernelShape) -> KernelKey {
        match *op {
            Op::Embed { table } => KernelKey::Embed(w.tensors[table].ty),
            Op::Matvec {
                w: id,
                tokens,
                prologue,
                epilogue,
                ..
            } => {
                let t = &w.tensors[id];
                let pro = match prologue {
                    Prologue::None => MatvecPrologue::None,
                    Prologue::Norm(_) => MatvecPrologue::RmsNorm,
                    Prologue::Combine { splits } => MatvecPrologue::Combine(CombineShape {
                        heads: t.cols / s.head_dim,
                        head_dim: s.head_dim,
                        splits,
                    }),
                };
                let epi = match epilogue {
                    Epilogue::None => MatvecEpilogue::None,
                    Epilogue::Add(_) => MatvecEpilogue::Add,
                    Epilogue::Swiglu => MatvecEpilogue::Swiglu,
                    Epilogue::RopeStore { .. } => MatvecEpilogue::RopeStore(RopeShape {
                        head_dim: s.head_dim,
                        kv: s.kv,
                        keys: s.keys,
                    }),
                };
                let size = MatvecSize::of(t.rows, t.cols, tokens);
                KernelKey::Matvec(t.ty, size, pro, epi, w.pairable(id))
            }
            Op::AttnSplit { .. } => KernelKey::AttnSplit,
            Op::AttnFlash { tiles, out, .. } => KernelKey::AttnFlash(tiles, out),
            Op::RmsNorm { .. } => KernelKey::RmsNorm,
            Op::Combine { splits } => KernelKey::Combine(splits),
            Op::SwigluPairs => KernelKey::SwigluPairs,
            Op::RopeStore { .. } => KernelKey::RopeStore,
            Op::Quantize { .. } => KernelKey::Quantize,
            Op::MatvecQ8 {
                w: id, add, tokens, ..
            } => {
                let per = q8_tokens_per_workgroup(tokens);
                KernelKey::MatvecQ8(w.tensors[id].ty, add.is_some(), per)
            }
            Op::MatmulTiles {
                w: id,
                add,
                swiglu,
                rows,
                cols,
                tokens,
                ..
            } => KernelKey::MatmulTiles(TilesKey {
                weights: w.tensors[id].ty,
                add: add.is_some(),
                swiglu,
                block: matmul_tiles::BlockSize::for_product(rows, tokens, s.small_tiles),
                depth: matmul_tiles::TilesSpec::depth_for(cols),
            }),
            Op::PickLast => KernelKey::PickLast,
            Op::Argmax => KernelKey::Argmax,
        }
    }

    /// The kernels that compute this op, best first for a device described by `info`.
    pub fn variants(self, info: &DeviceInfo, s: KernelShape) -> Result<Vec<Kernel>, ShapeError> {
        let sub = info.subgroup_ops;
        let reductions: &[Reduction] = if sub {
            &[Reduction::Subgroup, Reduction::Shared]
        } else {
            &[Reduction::Shared]
        };
        Ok(match self {
            KernelKey::Embed(ty) => vec![embedding::kernel(ty)],
            KernelKey::Matvec(..) => {
                let reduces: &[Reduce] = if sub {
                    &[Reduce::Subgroup, Reduce::Shared]
                } else {
                    &[Reduce::Shared]
                };
                // Each reduction with f16 scales where the shape wants them, then without.
                let mut specs = vec![];
                for &r in reduces {
                    let spec = self
                        .matvec_spec(r, info)
                        .expect("a matvec key has a matvec spec");
                    specs.push(spec);
                    if spec.f16_scales {
                        specs.push(MatvecSpec {
                            f16_scales: false,
                            ..spec
                        });
                    }
                }
                specs
                    .into_iter()
                    .map(matvec::kernel)
                    .collect::<Result<_, _>>()?
            }
            KernelKey::AttnSplit => reductions
                .iter()
                .map(|&how| attention_split::split_kernel(s.head_dim, s.kv, how, s.keys))
                .collect::<Result<_, _>>()?,
            KernelKey::AttnFlash(tiles, out) => {
                let mut variants = vec![];
                // The tiled kernel reads the K cache in rows, with subgroups of its width.
                if tiles
                    && info.tiles
                    && info.runs_subgroup_width(attention_flash_tiles::WIDTH)
                    && s.keys == KeyLayout::Rows
                {
                    variants.push(attention_flash_tiles::kernel(s.head_dim, s.kv, out)?);
                }
                variants.push(attention_flash::kernel(s.head_dim, s.kv, s.keys, out)?);
                variants
            }
            KernelKey::RmsNorm => reductions.iter().map(|&r| rms_norm::kernel(r)).collect(),
            KernelKey::Combine(splits) => {
                vec![attention_split::combine_kernel(s.head_dim, splits)?]
            }
            KernelKey::SwigluPairs => vec![swiglu_pairs_kernel()],
            KernelKey::RopeStore => vec![rope_store::kernel(
                s.head_dim,
                RopeMode::Normal,
                s.kv,
                s.keys,
            )?],
            KernelKey::Quantize => vec![matvec_q8::quantize_kernel()],
            KernelKey::MatvecQ8(ty, add, per) => vec![matvec_q8_rows::kernel(ty, add, per)?],
            KernelKey::MatmulTiles(key) => {
                let mut variants = vec![];
                for spec in tiles_spec(key, info).variants() {
                    if spec.tiles.is_some() {
                        // A width that cannot share the block's tiles evenly has no tiled
                        // kernel (a typed refusal): the next variant serves it.
                        variants.extend(matmul_tiles::kernel(spec).ok());
                    } else {
                        variants.push(matmul_tiles::kernel(spec)?);
                    }
                }
                variants
            }
            KernelKey::PickLast => vec![copy_kernel(Float::F32, Float::F32)],
            KernelKey::Argmax => reductions.iter().map(|&r| argmax::kernel(r)).collect(),
        })
    }
}

/// What decides a tiled product's kernels ([`KernelKey::MatmulTiles`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TilesKey {
    pub weights: WeightType,
    pub add: bool,
    pub swiglu: bool,
    pub block: matmul_tiles::BlockSize,
    pub depth: u32,
}

/// The subgroup width a device's kernels on tiles are written for: its one width, or 32 where
/// it has several and pins a kernel to the width it declares (RADV offers 32 and 64 on
/// RDNA3: 32 is the width the tiles' cases are measured at, and RDNA3's WMMA's native one);
/// `None` without tiles.
pub fn tile_width(info: &DeviceInfo) -> Option<u32> {
    const PINNED: u32 = 32;
    if !info.tiles {
        return None;
    }
    info.subgroup_size()
        .or_else(|| info.runs_subgroup_width(PINNED).then_some(PINNED))
}

/// The tiled product of a [`KernelKey::MatmulTiles`] key on a device described by `info`:
/// tiles need one subgroup width to divide their work by ([`tile_width`]), so a device
/// without them (or a CPU checking a GPU's prompt) gets the scalar variant; f16 weights are copied
/// asynchronously where the device can, and the large block runs on warpgroup products
/// where it has them. Its [`matmul_tiles::TilesSpec::variants`] are the key's
/// kernels, and the executor takes the grid of the one the device compiled.
pub fn tiles_spec(key: TilesKey, info: &DeviceInfo) -> matmul_tiles::TilesSpec {
    let spec = matmul_tiles::TilesSpec {
        weights: key.weights,
        add: key.add,
        tiles: tile_width(info),
        block: key.block,
        depth: key.depth,
        copies: false,
        half_x: false,
        group: false,
        swiglu: key.swiglu,
    };
    let spec = if info.async_copy { spec.copied() } else { spec };
    if info.group_mma {
        spec.grouped()
    } else {
        spec
    }
}

impl KernelKey {
    /// A matvec key's kernel for a device with reduction `reduce`: [`matvec_spec`] for its
    /// size, with its fusions. The executor's grid and its kernel both come from here.
    pub fn matvec_spec(self, reduce: Reduce, info: &DeviceInfo) -> Option<MatvecSpec> {
        let KernelKey::Matvec(ty, size, prologue, epilogue, pairable) = self else {
            return None;
        };
        Some(MatvecSpec {
            prologue,
            epilogue,
            ..matvec_spec(ty, reduce, info, size, pairable)
        })
    }
}

/// How much work a product has, which decides its GPU shape ([`matvec_spec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatvecSize {
    /// A decode step's small matrices.
    Small,
    /// Many short rows, as an output head's (SmolLM2: 49152 × 576).
    Tall,
    /// A matrix of at least 4096 × 4096.
    Wide,
    /// A prefill of at least [`WIDE_TOKENS`] tokens: GPUs take the wide shape (on an H100 it
    /// took SmolLM2's pp512 from 7000 to 9900 tokens/s on both backends, 2026-11-24), CPUs
    /// several tokens per workgroup.
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

/// The matvec shape for a device and a product's size ([`MatvecSize`]). GPUs, quantized and wide: 128
/// invocations sharing 8 rows, the scales read through an f16 view of the weights where the
/// device has 16-bit storage (and then Q4_1's codes as whole words, [`MatvecSpec::word_codes`]). On an H100 that was the fastest or within 10% of the fastest of
/// 120 shapes swept for Q4_0, Q4_1 and Q8_0 at 4096 × 4096 and 11008 × 4096 on both CUDA and
/// Vulkan, 1.2–1.3× faster than 4 rows on 64 invocations with byte-assembled scales; but on
/// SmolLM2's matrices (192 to 1536 rows) it leaves most of the GPU idle, and decode slowed by
/// a fifth (2026-11-24): other quantized products take [`GPU_SMALL_MATVEC`], also with f16
/// scales, and float weights keep 4 rows on 64 invocations (8 rows slowed f32 GEMV on CUDA by
/// 2.4×). CPUs take the blocked walk ([`MatvecSpec::blocked`]) on 8 rows, which GCC
/// vectorises across invocations, with the scales read through an f16 view of the weights (a
/// native conversion instead of some forty integer operations per scale). Measured on 2 EPYC
/// cores (SmolLM2-135M Q4_1, tg64, 2026-11-25): 8 rows on 8 invocations with 8-element
/// segments, each invocation's loop in scalar code, 17 tokens/s; blocked on 16 invocations
/// (32 for Q8_0), 46.
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

/// (rows per workgroup, invocations, segment) of [`matvec_spec`] on a CPU, and on a GPU for a
/// large quantized matrix.
const CPU_MATVEC_ROWS: u32 = 8;

/// (rows per workgroup, invocations, pairs) of a CPU's product in pairs of Q4 blocks: 4 rows
/// keep the sums of a workgroup in registers where 8 spill. On 1 EPYC core, 3072 × 576 Q4_1
/// (2026-11-25, the C function alone): 16 invocations on a block's own layout 5.5 G
/// weights/s; in pairs on 32, 6.5 with 8 rows, 7.3 with 4 and 7.1 with 2.
const CPU_PAIRS_MATVEC: (u32, u32, bool) = (4, 32, true);

/// Tokens per workgroup of a CPU's product in pairs for a prompt: each pair of blocks is
/// dequantised once for this many tokens. SmolLM2-135M Q4_1 pp512 on 2 EPYC cores
/// (2026-11-25, three alternating runs each): 4 tokens 165-168 tokens/s, 8 tokens 177-178.
const CPU_PROMPT_TOKENS: u32 = 8;

/// Tokens a workgroup of a product with quantized x takes in a step of `tokens`: a prompt's
/// share one load of each block of codes, as the float products' in pairs do.
pub fn q8_tokens_per_workgroup(tokens: u32) -> u32 {
    if tokens > 1 {
        CPU_PROMPT_TOKENS
    } else {
        1
    }
}

/// Whether a device holds a weight of type `ty` in pairs of blocks
/// ([`trine_ops::dequant::pair_blocks`]): CPUs do for the Q4 weights only products read
/// (`pairable`); an embedding table is read row by row in the file's layout.
pub fn holds_pairs(info: &DeviceInfo, ty: WeightType, pairable: bool) -> bool {
    info.device_type == DeviceType::Cpu && pairable && trine_ops::dequant::pairs_apply(ty)
}

/// Invocations of a CPU matvec ([`MatvecSpec::blocked`]): GCC vectorises a loop over
/// invocations that load bytes with vectors of as many bytes as the loop has iterations, and
/// converts the codes to floats in vectors of that many bytes too; 32 lanes give Q8_0 256-bit
/// float vectors, while Q4's 16 code bytes per block allow at most 16 (128-bit vectors).
fn cpu_matvec_lanes(ty: WeightType) -> u32 {
    match ty {
        WeightType::Q8_0 => 32,
        WeightType::Q4_0 | WeightType::Q4_1 => 16,
        _ => 8,
    }
}
const GPU_LARGE_MATVEC: (u32, u32, u32) = (8, 128, 8);

/// (rows per workgroup, invocations, segment) for the GPUs' other quantized products: a decode
/// step's small matrices are latency-bound, so fewer rows per workgroup (more workgroups) and
/// fewer segments per invocation finish sooner. On an H100 (2026-11-25, SmolLM2-shaped tg128,
/// f16 scales, CUDA/Vulkan t/s): 4 rows on 64 invocations 1003/603; 2 on 64 about 1030/605;
/// 2 on 128 about 1140/630; 2 on 32 about 1160/600; 2 on 256 1112/618; 8 on 64 787/472;
/// 16-element segments 935–970 on CUDA. Runs varied by ±50 t/s. One row on 128 invocations
/// for the down projection (576 × 1536) was faster alone (`xtask bench --ops matvec
/// --matvec-shape`: 7.5 µs against 8.1) but not inside the step (Nsight Compute, position 64:
/// 5.48 µs against 5.39), and was not kept.
const GPU_SMALL_MATVEC: (u32, u32, u32) = (2, 128, 8);

/// (rows per workgroup, invocations, segment) for a tall product on a GPU: SmolLM2's output
/// head (49152 × 576 Q8_0) took 32.5 µs with 4 rows on 64 invocations against 39.1 with the
/// small shape, 34.8 with 8 rows on 64 and 43.7 with 8 on 128 (H100, CUDA, 2026-11-25, `xtask
/// bench --ops matvec --matvec-shape`); inside the step, with the final norm fused, Nsight
/// Compute measured 52.0 µs against 72.2 (two sessions the same day). After the weights were
/// prefetched and loaded before x, 4 rows on 32 invocations took 27.1 µs against 29.7 (H200,
/// 2026-11-25, the same bench), and tg128 1741–1752 t/s against 1734–1742 in alternation;
/// small products on 32 invocations then fell to 1482–1491.
const GPU_TALL_MATVEC: (u32, u32, u32) = (4, 32, 8);

#[cfg(test)]
mod tests {
    use super::*;

    /// A big prompt product's kernels on a device with tiles are its spec's variants in
    /// order (on warpgroup products where the device has them, then large, medium, scalar),
    /// so the executor finds the grid of whichever the device compiled; on a device without
    /// tiles, the scalar one alone.
    #[test]
    fn tile_products_are_their_specs_variants() {
        let cpu = trine_backends::open(trine_backends::BackendKind::Cpu).unwrap();
        let mut info = cpu.info().clone();
        let shape = KernelShape {
            kv: Float::F16,
            keys: KeyLayout::Rows,
            head_dim: 64,
            small_tiles: false,
        };
        let block = matmul_tiles::BlockSize::for_product(4096, 512, false);
        let fields = TilesKey {
            weights: WeightType::Q4_1,
            add: true,
            swiglu: false,
            block,
            depth: 2,
        };
        let key = KernelKey::MatmulTiles(fields);
        for (tiles, group, count) in [(true, true, 4), (true, false, 3), (false, false, 1)] {
            info.tiles = tiles;
            info.group_mma = group;
            info.subgroup_sizes = vec![32];
            let names: Vec<String> = key
                .variants(&info, shape)
                .unwrap()
                .into_iter()
                .map(|k| k.name)
                .collect();
            let specs: Vec<String> = tiles_spec(fields, &info)
                .variants()
                .iter()
                .map(|v| v.name())
                .collect();
            assert_eq!(names, specs);
            assert_eq!(names.len(), count);
        }
    }

    /// Tiles take the device's one subgroup width, or 32 where a device with several pins a
    /// kernel's (RADV's 32 and 64), and nothing on a device with several that cannot.
    #[test]
    fn tiles_take_the_one_width_or_a_pinned_32() {
        let cpu = trine_backends::open(trine_backends::BackendKind::Cpu).unwrap();
        let mut info = cpu.info().clone();
        info.tiles = true;
        for (sizes, pinned, width) in [
            (vec![32], false, Some(32)),
            (vec![8], true, Some(8)),
            (vec![32, 64], true, Some(32)),
            (vec![32, 64], false, None),
            (vec![64, 128], true, None),
        ] {
            info.subgroup_sizes = sizes.clone();
            info.subgroup_width_pinned = pinned;
            assert_eq!(tile_width(&info), width, "{sizes:?}, pinned {pinned}");
        }
        info.tiles = false;
        info.subgroup_sizes = vec![32];
        assert_eq!(tile_width(&info), None);
    }

    /// Only NVIDIA's Vulkan driver takes the small tile block for every product.
    #[test]
    fn small_tiles_are_nvidias_vulkan_only() {
        let cpu = trine_backends::open(trine_backends::BackendKind::Cpu).unwrap();
        let mut info = cpu.info().clone();
        assert!(!small_tiles(&info));
        for (backend, vendor, small) in [
            ("vulkan", "NVIDIA", true),
            ("cuda", "NVIDIA", false),
            ("vulkan", "AMD", false),
            ("vulkan", "Mesa", false),
        ] {
            info.backend = backend.into();
            info.vendor = vendor.into();
            assert_eq!(small_tiles(&info), small, "{backend} {vendor}");
        }
    }
}

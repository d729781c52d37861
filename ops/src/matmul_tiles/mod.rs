//! Prompt products on matrix units: `y[t, r] = Σ_k x[t, k] · W[r, k]` (plus `add[t, r]`) for
//! the tokens of a prompt step, with W as its GGUF stores it (F32, F16, Q8_0, Q4_0, Q4_1; one
//! row per output feature) and x and y in f32.
//!
//! A workgroup computes a block of tokens by rows ([`BlockSize`]: 64 × 64; 32 × 32 for
//! products of fewer than [`SMALL_ROWS`] rows, whose bigger blocks would leave most of a GPU
//! idle; 128 × 128 for the biggest products), stepping through K [`TilesSpec::depth`] quantized blocks of [`BK`] columns at a time
//! ([`TilesSpec::depth_for`]): it stages x's block rounded to f16 and W's block dequantised to
//! f16 in shared memory, then multiplies them as 16 × 16 matrix tiles ([`trine_ir::TileOp`]):
//! NVIDIA's tensor cores through `mma.sync` or Vulkan's cooperative matrices. The block's
//! output tiles are divided evenly among the workgroup's subgroups, whose width is therefore a
//! constant of the kernel ([`trine_ir::Capabilities::subgroup_width`]: naga wants
//! cooperative-matrix operations in uniform control flow, so no guard may depend on it). Each
//! subgroup keeps the accumulators of its rectangle of tiles through the K loop, loading an A
//! tile per row of it and a B tile per column, then stores them one at a time to a tile of shared memory
//! of its own, from where its lanes write y (adding the residual), guarded at the edges. Each
//! step's blocks are loaded from memory during the step before ([`super::matmul_stage`]), so
//! their latency overlaps that step's multiplications: copied asynchronously where the device
//! can; else f16 blocks are loaded 16 bytes at a time, and put into one of two stages where
//! both fit in shared memory, so that a step waits at one barrier instead of two.
//!
//! A mixture of experts' products over a prompt ([`TilesSpec::experts`]) run as one dispatch
//! per matrix: a workgroup takes a block of one expert's rows by a block of the (token, slot)
//! pairs that chose it, in the order [`crate::moe_sort`] lists them, reading x's rows through
//! that list and writing each pair's own row of y ([`experts`]).
//!
//! Devices without matrix units run the scalar variant ([`TilesSpec::scalar`]): the same
//! staging in f16, a block of K at a time, each invocation summing 32 outputs in f32. Both
//! compute the product of x rounded to f16 with W's f16 values, whose products are exact in
//! f32: they differ only in the order and precision of the sums.
//!
//! Bound: [`NMSE`], against the f64 product of the f16-rounded x with the dequantised W.

mod cases;
mod compute;
pub mod experts;
mod io;
mod kernel;
mod reference;
mod spec;
#[cfg(test)]
mod tests;

pub use cases::{case, case_in, cases, glu_case, split_case, Staging};
pub(crate) use io::{Io, Output};
pub use kernel::kernel;
pub use reference::{reference, reference_split};
pub use spec::{check, check_experts, BlockSize, TilesSpec};

pub(crate) const OP: &str = "matmul_tiles";

/// Whether the tiled product takes weights of `ty`: plain floats, the flat formats its
/// staging decodes ([`crate::matmul_stage::stages`]), and every packed format (staged in runs
/// of 16 elements, which lie in one sub-block of any of them).
pub fn takes(ty: trine_gguf::quant::WeightType) -> bool {
    match crate::blocks::BlockFormat::of(ty) {
        None => true,
        Some(crate::blocks::BlockFormat::Flat(f)) => crate::matmul_stage::stages(f),
        Some(crate::blocks::BlockFormat::Packed(p)) => p.sub >= BK / 2,
    }
}

/// Columns of K per step: one quantized block.
pub use crate::matmul_stage::BK;
/// Products with fewer rows take the small block. Gemma 3 1B's products of 1,152 and 1,536
/// rows ran faster on the medium block on both GPUs measured (docs/bench/prefill.md).
pub const SMALL_ROWS: u32 = 1024;
/// Products with at least this many rows and [`LARGE_TOKENS`] tokens take the large block.
pub const LARGE_ROWS: u32 = 4096;
/// [`LARGE_ROWS`] on a device with warpgroup products, which take the large block's 64 or
/// more workgroups of a 2,048-row product faster than the medium block's 256; the cooperative
/// matrices measured slower on them (docs/bench/prefill.md).
pub const LARGE_ROWS_GROUPED: u32 = 2048;
/// See [`LARGE_ROWS`].
pub const LARGE_TOKENS: u32 = 256;
/// The most blocks of K a step of the tiled kernel takes. Two blocks a step measured faster
/// than one on SmolLM2-135M's prompt (pp512, CUDA and Vulkan), and four (the Fetch's
/// registers doubled again) slower than two (docs/bench/prefill.md).
pub const MAX_DEPTH: u32 = 2;

/// NMSE bound: products of f16 values are exact in f32, so only the f32 sums round, about
/// K·2⁻⁴⁸ relative for these inputs; 1e-9 leaves three orders of magnitude for devices that
/// sum in another order or, as NVIDIA's tensor cores do, with fewer bits between steps.
pub const NMSE: f64 = 1e-9;

/// Stages of copied blocks: each step's copies start two steps ahead of its products. On the
/// 512 × 4096 × 4096 f16 product, three stages measured faster than two with f16 x (the same
/// with f32 x), and four no faster than three for half again the shared memory
/// (docs/bench/prefill.md).
pub const COPY_STAGES: u32 = 3;

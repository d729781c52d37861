//! The binary interface between lowered kernels and the backends that launch them.
//!
//! SPIR-V (Vulkan):
//! - buffer `i` is a storage buffer at descriptor set 0, binding `i`, a runtime array of its
//!   element type; storage-only `u8`, `i8` and `bf16` buffers are declared as arrays of `u32`
//!   and unpacked in the shader (so their bound size must be a multiple of 4 bytes).
//! - one push-constant block of 32-bit words: the grid words below, then parameter `j` at word
//!   [`GRID_WORDS`]` + j` (f32, i32 or u32 bits).
//! - Grid folding: Vulkan allows 65535 workgroups per dimension. A logical grid `(gx, gy, gz)`
//!   is dispatched as `(px, gy * fold, gz)` with `px = min(gx, max_x)` and
//!   `fold = ceil(gx / px)`. The shader recovers the logical workgroup id as
//!   `x = phys.x + (phys.y % fold) * px`, `y = phys.y / fold`, `z = phys.z`, and a workgroup
//!   whose logical `x >= gx` returns at once (uniformly, before any barrier).
//!
//! HIP/CUDA: `extern "C" __global__ void NAME(buffers..., params...)`, buffer `i` a pointer to
//! its element type (`const` when read-only), parameters by value; the grid is launched as is.

/// Push-constant word holding the logical number of workgroups in x.
pub const WORD_GRID_X: u32 = 0;
/// … in y.
pub const WORD_GRID_Y: u32 = 1;
/// … in z.
pub const WORD_GRID_Z: u32 = 2;
/// Physical workgroups dispatched in x (`px`).
pub const WORD_PHYS_X: u32 = 3;
/// Physical rows per logical row (`fold`).
pub const WORD_FOLD: u32 = 4;
/// Number of grid words before the parameters.
pub const GRID_WORDS: u32 = 5;

/// Bytes of a kernel's push-constant (immediate) block: the grid words, then a word per
/// parameter.
pub fn immediate_bytes(kernel: &trine_ir::Kernel) -> u32 {
    4 * (GRID_WORDS + kernel.params.len() as u32)
}

/// The physical grid and the five grid words for a logical `grid` on a device that allows
/// `max` workgroups per dimension. `None` when even folding cannot fit it.
pub fn fold_grid(grid: [u32; 3], max: [u32; 3]) -> Option<([u32; 3], [u32; GRID_WORDS as usize])> {
    let [gx, gy, gz] = grid;
    let px = gx.min(max[0]).max(1);
    let fold = gx.div_ceil(px).max(1);
    let py = gy.checked_mul(fold)?;
    if py > max[1] || gz > max[2] {
        return None;
    }
    Some(([px, py, gz], [gx, gy, gz, px, fold]))
}

//! Matrix-vector product `y = W·x` for decode: W row-major `[rows × cols]` in f32, f16, Q8_0,
//! Q4_0 or Q4_1 (rows of 32-element blocks, dequantised in registers inside the kernel, never
//! beforehand), x and y f32.
//!
//! A workgroup computes `rows_per_workgroup` rows. Its invocations stride over the columns
//! (plain floats) or over 8-element segments of the blocks (quantized), loading each slice of x
//! once and using it for all its rows; then each row's partial sums are reduced across the
//! workgroup, with subgroup sums ([`Reduce::Subgroup`]) or a shared-memory tree
//! ([`Reduce::Shared`], the fallback for devices without subgroups). A spec may fuse the RMS
//! norm before the product and a residual add or SwiGLU after it: see [`super::matvec_fused`].
//!
//! Bound: every output is an f32 sum of `cols` products, which rounds to within about
//! `cols · 2^-24` of Σ|w·x| in the worst case and, with rounding errors of random sign, to
//! about `√cols · 2^-24` of it in practice; for the zero-mean data of the cases that is
//! NMSE ≈ `cols · 2^-48` ≤ 1.5e-11 for cols ≤ 4096, inside [`NMSE`] (1.4e-9, set from
//! measurement: see there). The reference uses the exact dequantised weights, so a kernel that decodes any block
//! differently (a swapped nibble, a wrong scale) is off by the weights' quantization step and
//! fails by orders of magnitude.

mod cases;
mod dot;
mod kernel;
mod packed;
mod reduce;
mod reference;
mod spec;
#[cfg(test)]
mod tests;

pub use super::matvec_fused::{Epilogue, Prologue};
pub use cases::{batched_case, case, cases, spec_case};
pub use kernel::kernel;
pub use reference::reference;
pub use spec::{check_shapes, MatvecSpec, Reduce};

const OP: &str = "matvec";

/// NMSE bound of the products whose outputs are f32 (plain, fused with the norm, the residual
/// add, SwiGLU or the attention combine, and rope into f32 caches): 100 times the worst
/// measured, 1.4e-11 (the interpreter against the f64 reference, `matvec/q4_1/14x96/shared/swiglu`,
/// where SwiGLU multiplies two sums that cancellation left small: see [`super::matvec_fused`]).
/// Measured over every case against the interpreter: cuda at most 3.1e-13, vulkan 7.8e-13
/// on the GPUs, the cpu 1.6e-13 (the conformance records, docs/conformance/README.md); vulkan
/// and wgpu on lavapipe at most 2.6e-12 (a run of CI's suite on the 2-core VM, which keeps
/// no record). The margin is for devices not yet measured that sum in another order.
pub const NMSE: f64 = 1.4e-9;

/// NMSE bound of the QKV product whose rope epilogue stores k and v into f16 caches
/// ([`super::matvec_attn::rope_case`]): 10 times the worst measured, 3.55e-9 (vulkan on a GPU
/// against the interpreter, `matvec/q4_1/qkv9x3x64+576/t1+pos2047+ctx2048/…_f16kv`, in the
/// earlier GPU suites that docs/conformance/README.md points to in git history, caca8aa). The
/// caches are compared with the reference rounded to f16, so what counts is a value that two
/// devices' f32 results (there NVIDIA's sin and cos of an angle near 2047 radians) round to
/// neighbouring halves, each such flip one f16 ulp, a relative error of 2^-11 to 2^-10.
/// Elsewhere: the interpreter against the f64 reference 3.3e-10, cuda 3.3e-12, the cpu
/// 1.4e-11, vulkan and wgpu on lavapipe 5.1e-11.
/// The margin is 10, not 100: 100 times (3.6e-7) would pass caches converted toward zero
/// instead of to nearest, half their values an ulp off (an NMSE of about 2e-7).
pub const NMSE_F16_CACHE: f64 = 3.6e-8;

/// Elements of a quantized block one invocation handles per step, by default: a Q8_0 block's
/// 8 consecutive bytes, or 4 bytes of a Q4 block (elements i..i+4 and i+16..i+20).
const SEGMENT: u32 = 8;

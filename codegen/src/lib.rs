//! trine-codegen: lowerings of trine's IR.
//!
//! - [`naga_module`]: IR → `naga::Module` (validated by naga); [`spirv`] writes it as SPIR-V
//!   words for Vulkan, [`wgsl`] as WGSL text for wgpu and for reading.
//! - [`hip`]: IR → C++ text in the common subset of HIP and CUDA, with a small prelude per
//!   dialect.
//! - [`c`]: IR → C for the CPU, workgroups as loops over their invocations split at barriers.
//! - `c_family`: the statement and expression printer the `hip` and `c` lowerings share; each
//!   supplies how its dialect spells builtins, barriers and intrinsics.
//!
//! Every lowering first validates the kernel, so a lowering never sees an invalid one.

pub mod abi;
pub mod c;
mod c_family;
pub mod error;
pub mod hip;
pub mod naga_module;
pub mod spirv;
pub mod wgsl;

pub use c::{c, c_source, c_symbol, COptions, CSource, C_MAX_FRAME_BYTES};
pub use error::CodegenError;
pub use hip::{cuda_dynamic_shared_bytes, hip, Dialect, CUDA_STATIC_SHARED_BYTES};
/// The naga the modules are built with, for backends that take a module as it is (wgpu).
pub use naga;
pub use spirv::{spirv, SpirvOptions, SpirvOutput};
pub use wgsl::wgsl;

/// Validates `kernel` with limits loose enough for any device: device limits are the backend's
/// business, the lowerings only need the kernel to be well formed.
pub(crate) fn validated(kernel: &trine_ir::Kernel) -> Result<trine_ir::Info, CodegenError> {
    let limits = trine_ir::Limits {
        max_shared_bytes: u64::MAX,
        max_invocations: 1024,
    };
    trine_ir::validate(kernel, &limits).map_err(CodegenError::Invalid)
}

//! IR → WGSL text, from the same naga module as SPIR-V: for wgpu, and for reading what the
//! SPIR-V lowering does.

use crate::{naga_module, CodegenError};
use naga::back::wgsl;
use trine_ir::Kernel;

/// Lowers `kernel` to WGSL. naga's namer may adjust names the text cannot carry as they are,
/// the entry point's included (for example a trailing `_` after a final digit or a keyword).
pub fn wgsl(kernel: &Kernel) -> Result<String, CodegenError> {
    let naga_module::Lowered { module, info, .. } = naga_module::lower(kernel)?;
    wgsl::write_string(&module, &info, wgsl::WriterFlags::empty()).map_err(|e| {
        CodegenError::Write {
            target: "wgsl",
            kernel: kernel.name.clone(),
            message: naga_module::error_chain(&e),
        }
    })
}

//! IR → `naga::Module`, validated by naga: the one lowering behind [`crate::spirv`] and
//! [`crate::wgsl`].
//!
//! - [`interface`]: buffers, the push-constant block and shared arrays as globals; builtins as
//!   entry-point arguments (the layout of [`crate::abi`]).
//! - [`func`]: the function under construction, its emit ranges, and the prologue that
//!   unfolds the workgroup id.
//! - [`stmts`], [`exprs`], [`ops`], [`literal`]: one IR construct each.
//! - [`types`]: naga types for IR scalars.
//!
//! Every IR `Let` becomes naga expressions inside an emit range at that point, so loads and
//! subgroup operations happen exactly where the IR evaluates them.

mod exprs;
mod func;
mod interface;
mod literal;
mod ops;
mod stmts;
mod types;

use crate::CodegenError;
use naga::valid::{
    Capabilities, ModuleInfo, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator,
};
use trine_ir::{BinaryOp, Info, Kernel, UnaryOp};

/// A kernel as a validated naga module: what SPIR-V and WGSL are written from, and what the
/// wgpu backend hands to wgpu as it is.
pub struct Lowered {
    pub module: naga::Module,
    pub info: ModuleInfo,
    /// The capabilities the module was validated with, exactly those the kernel needs:
    /// `IMMEDIATES` always (the grid words), `SHADER_FLOAT16` for f16 values or buffers,
    /// `SUBGROUP` with `SUBGROUP_BARRIER` for kernels that declare subgroups.
    pub capabilities: Capabilities,
}

/// Lowers `kernel` to a naga module with one compute entry point named like the kernel, and
/// validates it with exactly the capabilities the kernel needs.
///
/// Errors: the kernel is invalid ([`CodegenError::Invalid`]), or naga rejects the module
/// ([`CodegenError::NagaValidation`]; a lowering bug, or a kernel naga forbids, such as an
/// integer division by a literal zero).
pub fn lower(kernel: &Kernel) -> Result<Lowered, CodegenError> {
    lower_with(kernel, false)
}

/// [`lower`], with the packed dot products as naga's `Dot4I8Packed`/`Dot4U8Packed` where
/// `native_dot4` (SPIR-V `OpSDot`/`OpUDot`, which need `shaderIntegerDotProduct`), else as
/// byte products.
pub fn lower_with(kernel: &Kernel, native_dot4: bool) -> Result<Lowered, CodegenError> {
    let info = crate::validated(kernel)?;
    if kernel.capabilities.async_copy {
        // Vulkan has no copy that bypasses registers; its devices run the variants that stage
        // through them.
        return Err(CodegenError::Unsupported {
            target: "spirv",
            kernel: kernel.name.clone(),
            what: "asynchronous copies",
        });
    }
    if kernel.capabilities.group_mma {
        // Cooperative matrices take their operands from registers; Vulkan devices run the
        // subgroup tiles.
        return Err(CodegenError::Unsupported {
            target: "spirv",
            kernel: kernel.name.clone(),
            what: "warpgroup products",
        });
    }
    let mut module = naga::Module::default();
    let globals = interface::declare_globals(&mut module, kernel);

    let mut body = naga::Block::new();
    let mut lowerer = func::Lowerer::new(kernel, &info, &mut module.types, &globals, &mut body);
    lowerer.native_dot4 = native_dot4;
    lowerer.lower_into(&kernel.body, &mut body);
    let mut function = lowerer.finish();
    function.body = body;

    module.entry_points.push(naga::EntryPoint {
        name: kernel.name.clone(),
        stage: naga::ShaderStage::Compute,
        early_depth_test: None,
        workgroup_size: kernel.workgroup_size,
        workgroup_size_overrides: None,
        function,
        mesh_info: None,
        task_payload: None,
        incoming_ray_payload: None,
    });

    let capabilities = capabilities(kernel, &info);
    let mut validator = Validator::new(ValidationFlags::all(), capabilities);
    if kernel.capabilities.subgroup {
        validator
            .subgroup_stages(ShaderStages::COMPUTE)
            .subgroup_operations(
                SubgroupOperationSet::BASIC
                    | SubgroupOperationSet::ARITHMETIC
                    | SubgroupOperationSet::SHUFFLE,
            );
    }
    let module_info = validator
        .validate(&module)
        .map_err(|e| CodegenError::NagaValidation {
            kernel: kernel.name.clone(),
            message: error_chain(&e),
        })?;
    Ok(Lowered {
        module,
        info: module_info,
        capabilities,
    })
}

fn capabilities(kernel: &Kernel, info: &Info) -> Capabilities {
    // Every kernel reads the grid words from the push-constant block.
    let mut caps = Capabilities::IMMEDIATES;
    if info.holds_f16(kernel) {
        caps |= Capabilities::SHADER_FLOAT16;
    }
    // `unpack2x16float` and `pack2x16float`, core in SPIR-V (GLSL.std.450) and WGSL, which
    // naga gates for the shading languages that lack them.
    if kernel.uses_unary(UnaryOp::HalfFromBits)
        || kernel.uses_binary(BinaryOp::PackHalves)
        || kernel.stores_shared_pairs()
    {
        caps |= Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    }
    if kernel.capabilities.subgroup {
        caps |= Capabilities::SUBGROUP | Capabilities::SUBGROUP_BARRIER;
    }
    if kernel.capabilities.tiles {
        // A and B tiles are f16 whatever else the kernel computes in.
        caps |= Capabilities::COOPERATIVE_MATRIX | Capabilities::SHADER_FLOAT16;
    }
    caps
}

/// An error and its sources, outermost first: naga's top-level messages name only the
/// function or global, the cause is further down.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

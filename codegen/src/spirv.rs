//! IR → SPIR-V words for Vulkan, through [`crate::naga_module`] and naga's SPIR-V writer.
//!
//! The module targets SPIR-V 1.3 (Vulkan 1.1), which subgroup operations need. What the
//! device must enable follows from the capabilities the words declare, reported in
//! [`SpirvOutput`].

use crate::{abi, naga_module, CodegenError};
use naga::back::spv;
use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
use trine_ir::Kernel;

#[derive(Clone, Debug, Default)]
pub struct SpirvOptions {
    /// Names for every variable and expression naga names (`OpName`), for debuggers and
    /// `spirv-dis`.
    pub debug: bool,
    /// Packed 8-bit dot products as `OpSDot`/`OpUDot` (SPV_KHR_integer_dot_product): the
    /// device must enable `shaderIntegerDotProduct`. Off, they are byte products.
    pub integer_dot_product: bool,
}

#[derive(Clone, Debug)]
pub struct SpirvOutput {
    pub words: Vec<u32>,
    /// The compute entry point (the kernel's name).
    pub entry_point: String,
    /// The module declares `Float16`: enable `shaderFloat16`.
    pub uses_f16: bool,
    /// The module declares `StorageBuffer16BitAccess` and
    /// `UniformAndStorageBuffer16BitAccess`: enable both 16-bit storage features.
    pub uses_16bit_storage: bool,
    /// The module uses `GroupNonUniform*` capabilities (basic, arithmetic, shuffle).
    pub uses_subgroups: bool,
    /// The module declares `DotProduct`: enable `shaderIntegerDotProduct`.
    pub uses_integer_dot: bool,
    /// The module declares `CooperativeMatrixKHR` (and the `VulkanMemoryModel` it comes with):
    /// enable `cooperativeMatrix` and `vulkanMemoryModel`.
    pub uses_tiles: bool,
    /// Bytes of the push-constant block: the grid words, then 4 per parameter.
    pub push_constant_bytes: u32,
}

/// Lowers `kernel` to SPIR-V.
pub fn spirv(kernel: &Kernel, options: &SpirvOptions) -> Result<SpirvOutput, CodegenError> {
    let naga_module::Lowered { module, info, .. } =
        naga_module::lower_with(kernel, options.integer_dot_product)?;
    let mut flags = spv::WriterFlags::empty();
    if options.debug {
        flags |= spv::WriterFlags::DEBUG;
    }
    let writer_options = spv::Options {
        lang_version: (1, 3),
        flags,
        // With no binding map, naga's "fake" bindings are the module's own `(0, i)`: the ABI.
        fake_missing_bindings: true,
        // Out-of-bounds access is the caller's error (the interpreter reports it); checks
        // would cost on every access.
        bounds_check_policies: BoundsCheckPolicies {
            index: BoundsCheckPolicy::Unchecked,
            buffer: BoundsCheckPolicy::Unchecked,
            image_load: BoundsCheckPolicy::Unchecked,
            binding_array: BoundsCheckPolicy::Unchecked,
        },
        // The IR leaves shared memory undefined until written (the interpreter reports early
        // reads), so no initialisation at all: the default polyfill costs a store and a barrier
        // per workgroup (about 7x slower on a barrier-heavy kernel on lavapipe), and `Native`
        // needs shaderZeroInitializeWorkgroupMemory, which pre-1.3 drivers may lack.
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::None,
        // Loops are counted and bounded by construction; the guard only costs.
        force_loop_bounding: false,
        // lavapipe lacks StorageInputOutput16, and compute kernels have no f16 I/O.
        use_storage_input_output_16: false,
        // Integer division by zero is undefined in the IR: no wrapper functions.
        emit_int_div_checks: false,
        ..spv::Options::default()
    };
    let pipeline = spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: kernel.name.clone(),
    };
    let words = spv::write_vec(&module, &info, &writer_options, Some(&pipeline)).map_err(|e| {
        CodegenError::Write {
            target: "spirv",
            kernel: kernel.name.clone(),
            message: naga_module::error_chain(&e),
        }
    })?;
    let caps = declared_capabilities(&words);
    Ok(SpirvOutput {
        entry_point: kernel.name.clone(),
        uses_f16: caps.contains(&CAP_FLOAT16),
        uses_16bit_storage: caps.iter().any(|c| {
            [
                CAP_STORAGE_BUFFER_16BIT,
                CAP_UNIFORM_AND_STORAGE_BUFFER_16BIT,
            ]
            .contains(c)
        }),
        uses_subgroups: caps.iter().any(|c| CAPS_GROUP_NON_UNIFORM.contains(c)),
        uses_integer_dot: caps.contains(&CAP_DOT_PRODUCT),
        uses_tiles: caps.contains(&CAP_COOPERATIVE_MATRIX),
        push_constant_bytes: abi::immediate_bytes(kernel),
        words,
    })
}

// SPIR-V capability numbers (SPIR-V specification, "Capability").
const CAP_FLOAT16: u32 = 9;
/// `GroupNonUniform` through `GroupNonUniformQuad`.
const CAPS_GROUP_NON_UNIFORM: std::ops::RangeInclusive<u32> = 61..=68;
const CAP_STORAGE_BUFFER_16BIT: u32 = 4433;
const CAP_UNIFORM_AND_STORAGE_BUFFER_16BIT: u32 = 4434;
const CAP_DOT_PRODUCT: u32 = 6019;
const CAP_COOPERATIVE_MATRIX: u32 = 6022;
const OP_CAPABILITY: u32 = 17;
const HEADER_WORDS: usize = 5;

/// The operands of the module's `OpCapability` instructions, which all come first.
fn declared_capabilities(words: &[u32]) -> Vec<u32> {
    let mut caps = vec![];
    let mut at = HEADER_WORDS;
    while let Some(&first) = words.get(at) {
        let (count, opcode) = ((first >> 16) as usize, first & 0xffff);
        if opcode != OP_CAPABILITY || count < 2 {
            break;
        }
        caps.extend(words.get(at + 1));
        at += count;
    }
    caps
}

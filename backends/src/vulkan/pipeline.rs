//! Compute pipelines: one per kernel, keyed by the kernel's hash, built through a pipeline
//! cache that persists on disk (in trine's code cache, per device and driver), so a second
//! start skips the driver's shader compiles.

use super::info::Features;
use super::vk_error;
use crate::backend::ProgramId;
use crate::error::BackendError;
use ash::vk;
use std::collections::HashMap;
use std::ffi::CString;
use trine_codegen::abi::GRID_WORDS;
use trine_codegen::SpirvOutput;
use trine_ir::{Access, Kernel, Scalar};

/// A compiled kernel and what a dispatch of it must match.
pub struct Program {
    pub name: String,
    pub buffers: usize,
    /// Each buffer's access, in binding order: where a recording needs barriers.
    pub access: Vec<Access>,
    pub params: Vec<(String, Scalar)>,
    /// Bytes of push constants a dispatch writes: the ABI's words, cut to the shader's block.
    pub push_bytes: usize,
    /// Null for a kernel without buffers.
    pub set_layout: vk::DescriptorSetLayout,
    pub layout: vk::PipelineLayout,
    pub pipeline: vk::Pipeline,
}

pub struct Pipelines {
    cache: vk::PipelineCache,
    /// Where the driver's statistics of each pipeline are wanted
    /// ([`super::info::PIPELINE_STATS_ENV`]).
    stats: Option<ash::khr::pipeline_executable_properties::Device>,
    /// The cache's file name in the code cache's `vulkan-pipelines` namespace.
    disk_key: String,
    programs: HashMap<u64, Program>,
}

/// The code cache's namespace for pipeline caches.
const DISK_NS: &str = "vulkan-pipelines";

impl Pipelines {
    /// A pipeline cache seeded with what an earlier run saved for this device and driver. The
    /// driver checks the data's header itself and starts empty from data it does not accept.
    pub fn new(
        device: &ash::Device,
        disk_key: String,
        stats: Option<ash::khr::pipeline_executable_properties::Device>,
    ) -> Result<Pipelines, BackendError> {
        let saved = crate::cache::load(DISK_NS, &disk_key).unwrap_or_default();
        let info = vk::PipelineCacheCreateInfo::default().initial_data(&saved);
        // SAFETY: valid create info whose initial data outlives the call; `destroy_all`
        // releases the cache.
        let cache = match unsafe { device.create_pipeline_cache(&info, None) } {
            Ok(c) => c,
            // SAFETY: as above, with no initial data.
            Err(_) => unsafe {
                device.create_pipeline_cache(&vk::PipelineCacheCreateInfo::default(), None)
            }
            .map_err(|e| vk_error("vkCreatePipelineCache", e))?,
        };
        Ok(Pipelines {
            cache,
            stats,
            disk_key,
            programs: HashMap::new(),
        })
    }

    /// Writes the pipeline cache to disk. A failure only costs the next start its compiles,
    /// so it is not an error of the build that triggered it.
    fn save(&self, device: &ash::Device) {
        // SAFETY: the cache is ours and no pipeline creation runs (`&self` of the only owner).
        if let Ok(data) = unsafe { device.get_pipeline_cache_data(self.cache) } {
            let _ = crate::cache::store(DISK_NS, &self.disk_key, &data);
        }
    }

    pub fn get(&self, id: ProgramId) -> Result<&Program, BackendError> {
        self.programs
            .get(&id.0)
            .ok_or(BackendError::UnknownProgram(id))
    }

    pub fn contains(&self, hash: u64) -> bool {
        self.programs.contains_key(&hash)
    }

    /// Builds the pipeline of `kernel` from its SPIR-V and caches it under `hash`, pinned to
    /// the subgroup width the kernel declares where the device lets it be required.
    pub fn build(
        &mut self,
        device: &ash::Device,
        hash: u64,
        kernel: &Kernel,
        (spirv, features): (&SpirvOutput, &Features),
    ) -> Result<(), BackendError> {
        let compile_error = |call: &str, e: vk::Result| BackendError::Compile {
            kernel: kernel.name.clone(),
            message: format!("{call}: {e}"),
        };
        let entry =
            CString::new(spirv.entry_point.as_str()).map_err(|_| BackendError::Compile {
                kernel: kernel.name.clone(),
                message: format!("entry point {:?} contains NUL", spirv.entry_point),
            })?;
        let abi_bytes = (GRID_WORDS as usize + kernel.params.len()) * 4;
        let block_bytes = spirv.push_constant_bytes as usize;
        let mut program = Program {
            name: kernel.name.clone(),
            buffers: kernel.buffers.len(),
            access: kernel.buffers.iter().map(|b| b.access).collect(),
            params: kernel
                .params
                .iter()
                .map(|p| (p.name.clone(), p.ty))
                .collect(),
            push_bytes: abi_bytes.min(block_bytes),
            set_layout: vk::DescriptorSetLayout::null(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
        };
        let module_info = vk::ShaderModuleCreateInfo::default().code(&spirv.words);
        // SAFETY: the words are a SPIR-V module naga wrote and validated; the module is
        // destroyed below, once the pipeline holds what it needs.
        let module = unsafe { device.create_shader_module(&module_info, None) }
            .map_err(|e| compile_error("vkCreateShaderModule", e))?;
        let width = kernel
            .capabilities
            .subgroup_width
            .filter(|_| features.pinned_width)
            .map(|w| {
                let full = features.full_subgroups && kernel.workgroup_size[0].is_multiple_of(w);
                (w, full)
            });
        let built = self.create_objects(device, &mut program, (module, &entry, width), block_bytes);
        // SAFETY: pipeline creation has returned; a pipeline does not need its module.
        unsafe { device.destroy_shader_module(module, None) };
        if let Err((call, e)) = built {
            // SAFETY: never dispatched.
            unsafe { destroy(device, &program) };
            return Err(compile_error(call, e));
        }
        self.programs.insert(hash, program);
        self.save(device);
        Ok(())
    }

    /// The pipeline and its layouts; `width`, the subgroup width to require and whether to
    /// require full subgroups.
    fn create_objects(
        &self,
        device: &ash::Device,
        program: &mut Program,
        (module, entry, width): (vk::ShaderModule, &CString, Option<(u32, bool)>),
        block_bytes: usize,
    ) -> Result<(), (&'static str, vk::Result)> {
        let bindings: Vec<_> = (0..program.buffers as u32)
            .map(|i| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(i)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let mut set_layouts = vec![];
        if !bindings.is_empty() {
            let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings);
            // SAFETY: valid create info; the layout is owned by `program`.
            program.set_layout = unsafe { device.create_descriptor_set_layout(&info, None) }
                .map_err(|e| ("vkCreateDescriptorSetLayout", e))?;
            set_layouts.push(program.set_layout);
        }
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(block_bytes as u32)];
        let ranges: &[_] = if block_bytes == 0 { &[] } else { &ranges };
        let info = vk::PipelineLayoutCreateInfo::default()
            .set_layouts(&set_layouts)
            .push_constant_ranges(ranges);
        // SAFETY: valid create info with live set layouts; the layout is owned by `program`.
        program.layout = unsafe { device.create_pipeline_layout(&info, None) }
            .map_err(|e| ("vkCreatePipelineLayout", e))?;
        let mut required = vk::PipelineShaderStageRequiredSubgroupSizeCreateInfo::default()
            .required_subgroup_size(width.map_or(0, |(w, _)| w));
        let mut stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(entry);
        if let Some((_, full)) = width {
            stage = stage.push_next(&mut required);
            if full {
                stage = stage.flags(vk::PipelineShaderStageCreateFlags::REQUIRE_FULL_SUBGROUPS);
            }
        }
        let flags = if self.stats.is_some() {
            vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
        } else {
            vk::PipelineCreateFlags::empty()
        };
        let info = [vk::ComputePipelineCreateInfo::default()
            .flags(flags)
            .stage(stage)
            .layout(program.layout)];
        // SAFETY: live module, layout and cache; the pipeline is owned by `program`.
        let pipelines = unsafe { device.create_compute_pipelines(self.cache, &info, None) };
        match pipelines {
            Ok(p) => {
                program.pipeline = p.first().copied().unwrap_or_default();
                if let Some(stats) = &self.stats {
                    print_stats(stats, program);
                }
                Ok(())
            }
            Err((p, e)) => {
                for pipeline in p {
                    // SAFETY: a pipeline (or null) returned by the failed call, never used.
                    unsafe { device.destroy_pipeline(pipeline, None) };
                }
                Err(("vkCreateComputePipelines", e))
            }
        }
    }

    /// Destroys every pipeline and the cache.
    ///
    /// # Safety
    /// The device is idle (or lost).
    pub unsafe fn destroy_all(&mut self, device: &ash::Device) {
        for (_, p) in self.programs.drain() {
            // SAFETY: the device is idle (the caller's contract).
            unsafe { destroy(device, &p) };
        }
        // SAFETY: no pipeline creation is running (`&mut self`) and the cache is ours; a null
        // handle is ignored.
        unsafe { device.destroy_pipeline_cache(self.cache, None) };
        self.cache = vk::PipelineCache::null();
    }
}

/// Whether the device can run `kernel` as lowered to `spirv`: features and limits the IR
/// validation does not know about.
pub fn check_supported(
    kernel: &Kernel,
    spirv: &SpirvOutput,
    features: &Features,
    limits: &vk::PhysicalDeviceLimits,
) -> Result<(), BackendError> {
    let unsupported = |what: String| BackendError::Unsupported {
        kernel: kernel.name.clone(),
        what,
    };
    if spirv.uses_f16 && !features.float16 {
        return Err(unsupported("f16 arithmetic (shaderFloat16)".into()));
    }
    if spirv.uses_16bit_storage && !features.storage16 {
        return Err(unsupported(
            "16-bit buffer access (storageBuffer16BitAccess, uniformAndStorageBuffer16BitAccess)"
                .into(),
        ));
    }
    if (spirv.uses_subgroups || kernel.capabilities.subgroup) && !features.subgroups {
        return Err(unsupported(
            "subgroup operations (basic, arithmetic and shuffle in compute shaders)".into(),
        ));
    }
    if spirv.uses_tiles && !features.tiles {
        return Err(unsupported(
            "cooperative matrices of 16x16x16 f16 (VK_KHR_cooperative_matrix)".into(),
        ));
    }
    if spirv.uses_integer_dot && !features.integer_dot {
        return Err(unsupported(
            "packed 8-bit dot products (shaderIntegerDotProduct)".into(),
        ));
    }
    if !features.zero_init_workgroup && zero_initializes_workgroup_memory(&spirv.words) {
        return Err(unsupported(
            "zero-initialised shared memory (shaderZeroInitializeWorkgroupMemory)".into(),
        ));
    }
    let size = kernel.workgroup_size;
    if size
        .iter()
        .zip(limits.max_compute_work_group_size)
        .any(|(&s, max)| s > max)
    {
        return Err(unsupported(format!(
            "workgroup size {size:?} (per-axis limit {:?})",
            limits.max_compute_work_group_size
        )));
    }
    let buffers = kernel.buffers.len() as u64;
    let max_buffers = limits
        .max_per_stage_descriptor_storage_buffers
        .min(limits.max_descriptor_set_storage_buffers);
    if buffers > u64::from(max_buffers) {
        return Err(unsupported(format!(
            "{buffers} storage buffers (limit {max_buffers})"
        )));
    }
    if spirv.push_constant_bytes > limits.max_push_constants_size {
        return Err(unsupported(format!(
            "{} bytes of push constants (limit {})",
            spirv.push_constant_bytes, limits.max_push_constants_size
        )));
    }
    Ok(())
}

/// Whether the module declares a workgroup variable with an initializer (naga's native
/// zero-initialisation of shared memory), which needs `shaderZeroInitializeWorkgroupMemory`.
fn zero_initializes_workgroup_memory(words: &[u32]) -> bool {
    const HEADER_WORDS: usize = 5;
    const OP_VARIABLE: u32 = 59;
    const WORKGROUP: u32 = 4;
    let mut at = HEADER_WORDS;
    while let Some(&first) = words.get(at) {
        let (count, opcode) = ((first >> 16) as usize, first & 0xffff);
        // OpVariable: result type, result id, storage class, optional initializer.
        if opcode == OP_VARIABLE && count == 5 && words.get(at + 3) == Some(&WORKGROUP) {
            return true;
        }
        if count == 0 {
            return false;
        }
        at += count;
    }
    false
}

/// # Safety
/// No pending work uses the program; its handles are null or objects of `device`.
unsafe fn destroy(device: &ash::Device, p: &Program) {
    // SAFETY: the caller's contract; null handles of a partly built program are ignored.
    unsafe {
        device.destroy_pipeline(p.pipeline, None);
        device.destroy_pipeline_layout(p.layout, None);
        device.destroy_descriptor_set_layout(p.set_layout, None);
    }
}

/// Prints the driver's statistics of each executable of `program`'s pipeline, one line each:
/// a diagnostic asked for by [`super::info::PIPELINE_STATS_ENV`], which a failed query only
/// leaves unprinted.
fn print_stats(stats: &ash::khr::pipeline_executable_properties::Device, program: &Program) {
    let info = vk::PipelineInfoKHR::default().pipeline(program.pipeline);
    // SAFETY: a live pipeline created with CAPTURE_STATISTICS on a device with the feature.
    let Ok(executables) = (unsafe { stats.get_pipeline_executable_properties(&info) }) else {
        return;
    };
    for index in 0..executables.len() as u32 {
        let info = vk::PipelineExecutableInfoKHR::default()
            .pipeline(program.pipeline)
            .executable_index(index);
        // SAFETY: as above, with an executable index the driver listed.
        let Ok(values) = (unsafe { stats.get_pipeline_executable_statistics(&info) }) else {
            continue;
        };
        let values: Vec<String> = values
            .iter()
            .map(|v| {
                let name = v.name_as_c_str().unwrap_or_default().to_string_lossy();
                // SAFETY: the union member read is the one `format` names.
                let value = unsafe {
                    match v.format {
                        vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                            (v.value.b32 == vk::TRUE).to_string()
                        }
                        vk::PipelineExecutableStatisticFormatKHR::INT64 => v.value.i64.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::UINT64 => v.value.u64.to_string(),
                        _ => v.value.f64.to_string(),
                    }
                };
                format!("{name} {value}")
            })
            .collect();
        eprintln!("vulkan pipeline {}: {}", program.name, values.join(", "));
    }
}

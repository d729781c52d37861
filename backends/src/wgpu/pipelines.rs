//! Compute pipelines: the kernel's naga module handed to wgpu as it is (no WGSL round trip),
//! one pipeline per kernel, keyed by the kernel's hash.

use super::scope::{catch, Caught};
use crate::backend::ProgramId;
use crate::error::BackendError;
use std::borrow::Cow;
use std::collections::HashMap;
use trine_codegen::naga::valid::Capabilities;
use trine_codegen::naga_module::Lowered;
use trine_ir::{Kernel, Scalar};

/// A compiled kernel and what a dispatch of it must match.
pub struct Program {
    pub name: String,
    /// Per buffer: whether the kernel writes it (bound read-write) or only reads it.
    pub writable: Vec<bool>,
    pub params: Vec<(String, Scalar)>,
    pub immediate_bytes: u32,
    /// `None` for a kernel without buffers.
    pub layout: Option<wgpu::BindGroupLayout>,
    pub pipeline: wgpu::ComputePipeline,
}

#[derive(Default)]
pub struct Pipelines {
    programs: HashMap<u64, Program>,
}

impl Pipelines {
    pub fn get(&self, id: ProgramId) -> Result<&Program, BackendError> {
        self.programs
            .get(&id.0)
            .ok_or(BackendError::UnknownProgram(id))
    }

    pub fn contains(&self, hash: u64) -> bool {
        self.programs.contains_key(&hash)
    }

    pub fn insert(&mut self, hash: u64, program: Program) {
        self.programs.insert(hash, program);
    }
}

/// Whether `device` can run `kernel` lowered to `lowered`: the features its module was
/// validated with, and limits the IR's validation does not know about.
pub fn check_supported(
    kernel: &Kernel,
    lowered: &Lowered,
    device: &wgpu::Device,
) -> Result<(), BackendError> {
    let unsupported = |what: String| BackendError::Unsupported {
        kernel: kernel.name.clone(),
        what,
    };
    let features = device.features();
    let limits = device.limits();
    let needs = [
        (Capabilities::IMMEDIATES, wgpu::Features::IMMEDIATES),
        (Capabilities::SHADER_FLOAT16, wgpu::Features::SHADER_F16),
        (Capabilities::SUBGROUP, wgpu::Features::SUBGROUP),
    ];
    for (cap, feature) in needs {
        if lowered.capabilities.contains(cap) && !features.contains(feature) {
            return Err(unsupported(format!("wgpu's Features::{feature:?}")));
        }
    }
    let bytes = trine_codegen::abi::immediate_bytes(kernel);
    if bytes > limits.max_immediate_size {
        return Err(unsupported(format!(
            "{bytes} bytes of immediates (limit {})",
            limits.max_immediate_size
        )));
    }
    let size = kernel.workgroup_size;
    let max = [
        limits.max_compute_workgroup_size_x,
        limits.max_compute_workgroup_size_y,
        limits.max_compute_workgroup_size_z,
    ];
    if size.iter().zip(max).any(|(&s, m)| s > m) {
        return Err(unsupported(format!(
            "workgroup size {size:?} (per-axis limit {max:?})"
        )));
    }
    let buffers = kernel.buffers.len() as u32;
    if buffers > limits.max_storage_buffers_per_shader_stage {
        return Err(unsupported(format!(
            "{buffers} storage buffers (limit {})",
            limits.max_storage_buffers_per_shader_stage
        )));
    }
    Ok(())
}

/// Builds `kernel`'s pipeline on `device` from its module.
pub fn build(
    device: &wgpu::Device,
    kernel: &Kernel,
    lowered: Lowered,
) -> Result<Program, BackendError> {
    let writable: Vec<bool> = kernel
        .buffers
        .iter()
        .map(|b| b.access.can_write())
        .collect();
    let immediate_bytes = trine_codegen::abi::immediate_bytes(kernel);
    let compile_error = |c: Caught| BackendError::Compile {
        kernel: kernel.name.clone(),
        message: match c {
            Caught::OutOfMemory => "out of device memory".into(),
            Caught::Error(message) => message,
        },
    };
    catch(device, || {
        let source = wgpu::ShaderSource::Naga(Cow::Owned(lowered.module));
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(&kernel.name),
            source,
        };
        // SAFETY: bounds checks and loop bounding are off, as in the SPIR-V the Vulkan
        // backend writes: kernels are validated IR whose loops are counted, every dispatch's
        // bindings are checked against their buffers before it is recorded, and accesses
        // outside a binding are the kernel's bug, which conformance's sentinel guards and the
        // interpreter report. Checks here would cost on every access and make wgpu measure
        // differently from ash on the same driver.
        let module = unsafe {
            device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
        };
        let entries: Vec<_> = (0u32..)
            .zip(&writable)
            .map(|(binding, &w)| wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: !w },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        let layout = (!entries.is_empty()).then(|| {
            device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(&kernel.name),
                entries: &entries,
            })
        });
        let layouts: Vec<Option<&wgpu::BindGroupLayout>> = layout.iter().map(Some).collect();
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some(&kernel.name),
            bind_group_layouts: &layouts,
            immediate_size: immediate_bytes,
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&kernel.name),
            layout: Some(&pipeline_layout),
            module: &module,
            entry_point: Some(&kernel.name),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &[],
                // The IR leaves shared memory undefined until written (the interpreter reports
                // early reads): zeroing it costs a store and a barrier per workgroup.
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
        (layout, pipeline)
    })
    .map_err(compile_error)
    .map(|(layout, pipeline)| Program {
        name: kernel.name.clone(),
        writable,
        params: kernel
            .params
            .iter()
            .map(|p| (p.name.clone(), p.ty))
            .collect(),
        immediate_bytes,
        layout,
        pipeline,
    })
}

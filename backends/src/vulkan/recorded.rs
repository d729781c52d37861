//! Native recordings: a list of dispatches as one secondary command buffer, its descriptor
//! sets allocated and written once from a pool of its own, with barriers only where a
//! dispatch depends on an earlier one of the list. A replay executes the secondary buffer
//! inside the open batch, so ordering against other work, fences and buffer serials stay the
//! submitter's.

use super::pipeline::Program;
use super::vk_error;
use crate::error::BackendError;
use ash::vk;

/// One checked dispatch, ready to record.
pub struct Step<'a> {
    pub program: &'a Program,
    pub infos: Vec<vk::DescriptorBufferInfo>,
    pub push: Vec<u8>,
    pub groups: [u32; 3],
    /// Whether a barrier on earlier work precedes it.
    pub barrier: bool,
}

pub struct Recorded {
    pub cmd: vk::CommandBuffer,
    pool: vk::DescriptorPool,
}

/// Records `steps` into a new secondary command buffer from `command_pool`.
///
/// # Safety
/// Every step's program is live and its bindings were checked against live buffers of this
/// device (as for a dispatch); `command_pool` belongs to the device and is not in use on
/// another thread.
pub unsafe fn build(
    device: &ash::Device,
    command_pool: vk::CommandPool,
    steps: &[Step<'_>],
) -> Result<Recorded, BackendError> {
    let sets = steps.iter().filter(|s| !s.infos.is_empty()).count() as u32;
    let descriptors: u32 = steps.iter().map(|s| s.infos.len() as u32).sum();
    let sizes = [vk::DescriptorPoolSize::default()
        .ty(vk::DescriptorType::STORAGE_BUFFER)
        .descriptor_count(descriptors.max(1))];
    let info = vk::DescriptorPoolCreateInfo::default()
        .max_sets(sets.max(1))
        .pool_sizes(&sizes);
    // SAFETY: valid create info; `destroy` releases the pool.
    let pool = unsafe { device.create_descriptor_pool(&info, None) }
        .map_err(|e| vk_error("vkCreateDescriptorPool", e))?;
    let alloc = vk::CommandBufferAllocateInfo::default()
        .command_pool(command_pool)
        .level(vk::CommandBufferLevel::SECONDARY)
        .command_buffer_count(1);
    // SAFETY: the pool is live and used only under the backend's lock (the caller's contract).
    let cmd = match unsafe { device.allocate_command_buffers(&alloc) } {
        Ok(cmds) => cmds[0],
        Err(e) => {
            // SAFETY: no set of the pool was allocated.
            unsafe { device.destroy_descriptor_pool(pool, None) };
            return Err(vk_error("vkAllocateCommandBuffers", e));
        }
    };
    let recorded = Recorded { cmd, pool };
    // SAFETY: the caller's contract covers the steps; the buffer and pool are fresh.
    match unsafe { fill(device, &recorded, steps) } {
        Ok(()) => Ok(recorded),
        Err(e) => {
            // SAFETY: never submitted.
            unsafe { destroy(device, command_pool, recorded) };
            Err(e)
        }
    }
}

/// # Safety
/// As for [`build`]; `r` is fresh.
unsafe fn fill(device: &ash::Device, r: &Recorded, steps: &[Step<'_>]) -> Result<(), BackendError> {
    let inheritance = vk::CommandBufferInheritanceInfo::default();
    // Replays of one step may overlap: each token's batch executes the same buffer.
    let begin = vk::CommandBufferBeginInfo::default()
        .flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE)
        .inheritance_info(&inheritance);
    // SAFETY: a fresh secondary buffer; compute work needs no render pass to inherit.
    unsafe { device.begin_command_buffer(r.cmd, &begin) }
        .map_err(|e| vk_error("vkBeginCommandBuffer", e))?;
    for step in steps {
        let set = if step.infos.is_empty() {
            None
        } else {
            let layouts = [step.program.set_layout];
            let info = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(r.pool)
                .set_layouts(&layouts);
            // SAFETY: the pool was sized for one set per step with bindings.
            let set = unsafe { device.allocate_descriptor_sets(&info) }
                .map_err(|e| vk_error("vkAllocateDescriptorSets", e))?[0];
            let writes = [vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(0)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(&step.infos)];
            // SAFETY: a fresh set; the bindings were checked (the caller's contract).
            unsafe { device.update_descriptor_sets(&writes, &[]) };
            Some(set)
        };
        // SAFETY: `r.cmd` is recording; the set matches the program's layout; the push bytes
        // were cut to the program's range when the step was checked.
        unsafe {
            if step.barrier {
                compute_barrier(device, r.cmd);
            }
            device.cmd_bind_pipeline(r.cmd, vk::PipelineBindPoint::COMPUTE, step.program.pipeline);
            if let Some(set) = set {
                device.cmd_bind_descriptor_sets(
                    r.cmd,
                    vk::PipelineBindPoint::COMPUTE,
                    step.program.layout,
                    0,
                    &[set],
                    &[],
                );
            }
            if !step.push.is_empty() {
                device.cmd_push_constants(
                    r.cmd,
                    step.program.layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    &step.push,
                );
            }
            let [x, y, z] = step.groups;
            device.cmd_dispatch(r.cmd, x, y, z);
        }
    }
    // SAFETY: recording.
    unsafe { device.end_command_buffer(r.cmd) }.map_err(|e| vk_error("vkEndCommandBuffer", e))
}

/// Orders a dispatch after the recording's earlier ones: only shader writes and reads, since a
/// recording holds nothing but dispatches (the primary's own barrier orders it against
/// transfers before it, and the next command's after it).
///
/// # Safety
/// `cmd` is a command buffer of `device` in the recording state.
unsafe fn compute_barrier(device: &ash::Device, cmd: vk::CommandBuffer) {
    let barrier = vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE)
        .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE);
    // SAFETY: the caller's contract.
    unsafe {
        device.cmd_pipeline_barrier(
            cmd,
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::DependencyFlags::empty(),
            &[barrier],
            &[],
            &[],
        );
    }
}

/// Frees a recording's command buffer and descriptor sets.
///
/// # Safety
/// No submission that executes it is pending; `command_pool` is the one it came from.
pub unsafe fn destroy(device: &ash::Device, command_pool: vk::CommandPool, r: Recorded) {
    // SAFETY: the caller's contract.
    unsafe {
        device.free_command_buffers(command_pool, &[r.cmd]);
        device.destroy_descriptor_pool(r.pool, None);
    }
}

/// Destroys the descriptor pool only, for teardown: the command buffer goes with its pool.
///
/// # Safety
/// The device is idle (or lost).
pub unsafe fn destroy_pool(device: &ash::Device, r: Recorded) {
    // SAFETY: the caller's contract.
    unsafe { device.destroy_descriptor_pool(r.pool, None) };
}

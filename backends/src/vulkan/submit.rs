//! Command recording and submission.
//!
//! Work is recorded into one open command buffer (a batch) and submitted only when someone
//! needs its results, or when the batch grows long. A small ring of command buffers lets the
//! host record the next batch while the device runs the previous one; each has its fence and
//! its descriptor pools, which are reset once its batch has completed.
//!
//! Every submission gets a serial number. Buffers remember the serial of the last batch that
//! used them, so that a read, write or free waits for exactly the work it depends on.

use super::pipeline::Program;
use super::vk_error;
use crate::error::BackendError;
use ash::vk;

/// Dispatches recorded before a batch is submitted without being asked: long enough to amortise
/// a submission, short enough to keep the device fed while the host records.
const BATCH_DISPATCHES: u32 = 256;
/// Command buffers in the ring.
const SLOTS: usize = 3;
/// Descriptor sets per pool; one batch fits in one pool unless kernels bind many buffers.
const SETS_PER_POOL: u32 = BATCH_DISPATCHES;
/// Storage-buffer descriptors per pool, for an average of 8 buffers a kernel.
const BUFFERS_PER_POOL: u32 = 8 * SETS_PER_POOL;

struct Slot {
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    pools: Vec<vk::DescriptorPool>,
    /// The pool sets are allocated from now.
    pool: usize,
    /// Serial of its last submission.
    serial: u64,
    /// Submitted and not yet waited for.
    pending: bool,
}

pub struct Submitter {
    queue: vk::Queue,
    command_pool: vk::CommandPool,
    slots: Vec<Slot>,
    current: usize,
    recording: bool,
    recorded: u32,
    submitted: u64,
    completed: u64,
    /// Two timestamp queries for `dispatch_timed`; null without timestamps.
    queries: vk::QueryPool,
}

/// Makes earlier shader and transfer writes visible to later shaders and transfers, and orders
/// later writes after earlier reads. The first scope reaches back into earlier submissions on
/// the queue, so batches are ordered by it too.
const WORK_STAGES: vk::PipelineStageFlags = vk::PipelineStageFlags::from_raw(
    vk::PipelineStageFlags::COMPUTE_SHADER.as_raw() | vk::PipelineStageFlags::TRANSFER.as_raw(),
);
const WORK_WRITES: vk::AccessFlags = vk::AccessFlags::from_raw(
    vk::AccessFlags::SHADER_WRITE.as_raw() | vk::AccessFlags::TRANSFER_WRITE.as_raw(),
);
const WORK_ACCESS: vk::AccessFlags = vk::AccessFlags::from_raw(
    WORK_WRITES.as_raw()
        | vk::AccessFlags::SHADER_READ.as_raw()
        | vk::AccessFlags::TRANSFER_READ.as_raw(),
);

impl Submitter {
    pub fn new(
        device: &ash::Device,
        queue: vk::Queue,
        queue_family: u32,
        timestamps: bool,
    ) -> Result<Submitter, BackendError> {
        let mut this = Submitter {
            queue,
            command_pool: vk::CommandPool::null(),
            slots: vec![],
            current: 0,
            recording: false,
            recorded: 0,
            submitted: 0,
            completed: 0,
            queries: vk::QueryPool::null(),
        };
        if let Err(e) = this.create(device, queue_family, timestamps) {
            // SAFETY: nothing has been submitted.
            unsafe { this.destroy(device) };
            return Err(e);
        }
        Ok(this)
    }

    fn create(
        &mut self,
        device: &ash::Device,
        queue_family: u32,
        timestamps: bool,
    ) -> Result<(), BackendError> {
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(queue_family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: valid create info; `destroy` releases the pool.
        self.command_pool = unsafe { device.create_command_pool(&info, None) }
            .map_err(|e| vk_error("vkCreateCommandPool", e))?;
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(self.command_pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(SLOTS as u32);
        // SAFETY: the pool is live; the buffers are freed with it.
        let cmds = unsafe { device.allocate_command_buffers(&alloc) }
            .map_err(|e| vk_error("vkAllocateCommandBuffers", e))?;
        for cmd in cmds {
            // SAFETY: valid create info; `destroy` releases the fence.
            let fence = unsafe { device.create_fence(&vk::FenceCreateInfo::default(), None) }
                .map_err(|e| vk_error("vkCreateFence", e))?;
            self.slots.push(Slot {
                cmd,
                fence,
                pools: vec![],
                pool: 0,
                serial: 0,
                pending: false,
            });
        }
        if timestamps {
            let info = vk::QueryPoolCreateInfo::default()
                .query_type(vk::QueryType::TIMESTAMP)
                .query_count(2);
            // SAFETY: valid create info; `destroy` releases the pool.
            self.queries = unsafe { device.create_query_pool(&info, None) }
                .map_err(|e| vk_error("vkCreateQueryPool", e))?;
        }
        Ok(())
    }

    /// The serial the open batch will be submitted with.
    pub fn open_serial(&self) -> u64 {
        self.submitted + 1
    }

    /// The open batch's command buffer, beginning a batch if none is open.
    fn begin(&mut self, device: &ash::Device) -> Result<vk::CommandBuffer, BackendError> {
        if self.recording {
            return Ok(self.slots[self.current].cmd);
        }
        self.retire(device, self.current)?;
        let slot = &mut self.slots[self.current];
        for &pool in &slot.pools {
            // SAFETY: the slot's batch has completed, so no set of the pool is in use.
            unsafe { device.reset_descriptor_pool(pool, vk::DescriptorPoolResetFlags::empty()) }
                .map_err(|e| vk_error("vkResetDescriptorPool", e))?;
        }
        slot.pool = 0;
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: the command buffer's last submission has completed; its pool allows resetting
        // single buffers, which beginning does implicitly.
        unsafe { device.begin_command_buffer(slot.cmd, &begin) }
            .map_err(|e| vk_error("vkBeginCommandBuffer", e))?;
        self.recording = true;
        self.recorded = 0;
        Ok(slot.cmd)
    }

    /// Waits for slot `i`'s last submission, if it is still pending.
    fn retire(&mut self, device: &ash::Device, i: usize) -> Result<(), BackendError> {
        let slot = &mut self.slots[i];
        if !slot.pending {
            return Ok(());
        }
        // SAFETY: the fence belongs to this device and was submitted with the slot's batch.
        unsafe {
            device
                .wait_for_fences(&[slot.fence], true, u64::MAX)
                .map_err(|e| vk_error("vkWaitForFences", e))?;
            device
                .reset_fences(&[slot.fence])
                .map_err(|e| vk_error("vkResetFences", e))?;
        }
        slot.pending = false;
        self.completed = self.completed.max(slot.serial);
        Ok(())
    }

    /// A descriptor set of `layout` (with `buffers` storage buffers) from the open batch's pools.
    fn descriptor_set(
        &mut self,
        device: &ash::Device,
        layout: vk::DescriptorSetLayout,
        buffers: u32,
    ) -> Result<vk::DescriptorSet, BackendError> {
        let slot = &mut self.slots[self.current];
        loop {
            let fresh = slot.pool == slot.pools.len();
            if fresh {
                let sizes = [vk::DescriptorPoolSize::default()
                    .ty(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(BUFFERS_PER_POOL.max(buffers))];
                let info = vk::DescriptorPoolCreateInfo::default()
                    .max_sets(SETS_PER_POOL)
                    .pool_sizes(&sizes);
                // SAFETY: valid create info; `destroy` releases the pool.
                let pool = unsafe { device.create_descriptor_pool(&info, None) }
                    .map_err(|e| vk_error("vkCreateDescriptorPool", e))?;
                slot.pools.push(pool);
            }
            let layouts = [layout];
            let info = vk::DescriptorSetAllocateInfo::default()
                .descriptor_pool(slot.pools[slot.pool])
                .set_layouts(&layouts);
            // SAFETY: the pool and the layout are live; sets are freed by resetting the pool.
            match unsafe { device.allocate_descriptor_sets(&info) } {
                Ok(sets) => {
                    return sets.first().copied().ok_or_else(|| {
                        vk_error("vkAllocateDescriptorSets", vk::Result::ERROR_UNKNOWN)
                    });
                }
                // A full pool: move on to the next one (made on demand, reset with the slot).
                Err(vk::Result::ERROR_OUT_OF_POOL_MEMORY | vk::Result::ERROR_FRAGMENTED_POOL)
                    if !fresh =>
                {
                    slot.pool += 1;
                }
                Err(e) => return Err(vk_error("vkAllocateDescriptorSets", e)),
            }
        }
    }

    /// Records one dispatch of `program` into the open batch, after a barrier on earlier work.
    /// With `timed`, it is bracketed by the two timestamps `timestamps` reads.
    ///
    /// # Safety
    /// `program` is live; every binding names a live buffer of this device, with a word-aligned
    /// range inside it within the device's limits; `push` is no longer than the program's
    /// push-constant range; `timed` only where the device has timestamps.
    pub unsafe fn record_dispatch(
        &mut self,
        device: &ash::Device,
        program: &Program,
        bindings: &[vk::DescriptorBufferInfo],
        push: &[u8],
        groups: [u32; 3],
        timed: bool,
    ) -> Result<(), BackendError> {
        let cmd = self.begin(device)?;
        let set = if bindings.is_empty() {
            None
        } else {
            let set = self.descriptor_set(device, program.set_layout, bindings.len() as u32)?;
            let writes = [vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(0)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(bindings)];
            // SAFETY: the set is fresh and not bound yet; the bindings are valid (the caller's
            // contract).
            unsafe { device.update_descriptor_sets(&writes, &[]) };
            Some(set)
        };
        // SAFETY: `cmd` is recording; the set was allocated with the program's layout; the
        // program, `push` and `timed` are valid (the caller's contract), so the query pool
        // exists when it is written.
        unsafe {
            work_barrier(device, cmd);
            if timed {
                device.cmd_reset_query_pool(cmd, self.queries, 0, 2);
                device.cmd_write_timestamp(
                    cmd,
                    vk::PipelineStageFlags::TOP_OF_PIPE,
                    self.queries,
                    0,
                );
            }
            device.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, program.pipeline);
            if let Some(set) = set {
                device.cmd_bind_descriptor_sets(
                    cmd,
                    vk::PipelineBindPoint::COMPUTE,
                    program.layout,
                    0,
                    &[set],
                    &[],
                );
            }
            if !push.is_empty() {
                device.cmd_push_constants(
                    cmd,
                    program.layout,
                    vk::ShaderStageFlags::COMPUTE,
                    0,
                    push,
                );
            }
            device.cmd_dispatch(cmd, groups[0], groups[1], groups[2]);
            if timed {
                device.cmd_write_timestamp(
                    cmd,
                    vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                    self.queries,
                    1,
                );
            }
        }
        self.recorded += 1;
        Ok(())
    }

    /// Records a copy between buffers into the open batch, after a barrier on earlier work;
    /// with `timed`, bracketed by the two timestamps `timestamps` reads.
    ///
    /// # Safety
    /// Both buffers are live buffers of this device and the region lies inside both; `timed`
    /// only where the device has timestamps.
    pub unsafe fn record_copy(
        &mut self,
        device: &ash::Device,
        (src, dst): (vk::Buffer, vk::Buffer),
        region: vk::BufferCopy,
        timed: bool,
    ) -> Result<(), BackendError> {
        let cmd = self.begin_after_work(device)?;
        let stamp = |stage, query| {
            // SAFETY: `cmd` is recording and the query pool exists (`timed`'s contract).
            unsafe { device.cmd_write_timestamp(cmd, stage, self.queries, query) }
        };
        if timed {
            // SAFETY: as above.
            unsafe { device.cmd_reset_query_pool(cmd, self.queries, 0, 2) };
            stamp(vk::PipelineStageFlags::TOP_OF_PIPE, 0);
        }
        // SAFETY: `cmd` is recording; the buffers and region are valid (the caller's contract).
        unsafe { device.cmd_copy_buffer(cmd, src, dst, &[region]) };
        if timed {
            stamp(vk::PipelineStageFlags::BOTTOM_OF_PIPE, 1);
        }
        Ok(())
    }

    /// Records zeroing the whole of `dst` (buffers are word-sized) into the open batch, after a
    /// barrier on earlier work.
    ///
    /// # Safety
    /// `dst` is a live buffer of this device.
    pub unsafe fn record_zero(
        &mut self,
        device: &ash::Device,
        dst: vk::Buffer,
    ) -> Result<(), BackendError> {
        let cmd = self.begin_after_work(device)?;
        // SAFETY: `cmd` is recording; the buffer is valid (the caller's contract).
        unsafe { device.cmd_fill_buffer(cmd, dst, 0, vk::WHOLE_SIZE, 0) };
        Ok(())
    }

    /// The open batch's command buffer, with a barrier on the work recorded before.
    fn begin_after_work(
        &mut self,
        device: &ash::Device,
    ) -> Result<vk::CommandBuffer, BackendError> {
        let cmd = self.begin(device)?;
        // SAFETY: `cmd` is the open batch's buffer, recording.
        unsafe { work_barrier(device, cmd) };
        Ok(cmd)
    }

    /// The pool recordings take their secondary command buffers from.
    pub fn command_pool(&self) -> vk::CommandPool {
        self.command_pool
    }

    /// Executes a recorded secondary command buffer (`dispatches` long) in the open batch,
    /// after a barrier on earlier work, and submits the batch so the device starts on it.
    ///
    /// # Safety
    /// `secondary` is a live, ended secondary command buffer of this device recorded with
    /// simultaneous use, whose every binding names a live buffer.
    pub unsafe fn execute(
        &mut self,
        device: &ash::Device,
        secondary: vk::CommandBuffer,
        dispatches: u32,
    ) -> Result<(), BackendError> {
        let cmd = self.begin_after_work(device)?;
        // SAFETY: `cmd` is recording; `secondary` is valid (the caller's contract).
        unsafe { device.cmd_execute_commands(cmd, &[secondary]) };
        self.recorded += dispatches;
        self.submit(device)
    }

    /// Submits the open batch if it has grown long.
    pub fn maybe_submit(&mut self, device: &ash::Device) -> Result<(), BackendError> {
        if self.recorded >= BATCH_DISPATCHES {
            self.submit(device)?;
        }
        Ok(())
    }

    /// Submits the open batch, if any.
    fn submit(&mut self, device: &ash::Device) -> Result<(), BackendError> {
        if !self.recording {
            return Ok(());
        }
        // Whatever happens below, this batch is closed: a failed one is dropped, and its
        // command buffer is reset when the slot is next begun.
        self.recording = false;
        let slot = &mut self.slots[self.current];
        let host = vk::MemoryBarrier::default()
            .src_access_mask(WORK_WRITES)
            .dst_access_mask(vk::AccessFlags::HOST_READ);
        let cmds = [slot.cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        // SAFETY: the command buffer is recording; the host barrier makes its writes visible
        // to host reads of mapped memory after the fence, which fence signalling alone does not.
        // The fence is unsignalled (reset when the slot was last retired).
        unsafe {
            device.cmd_pipeline_barrier(
                slot.cmd,
                WORK_STAGES,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &[host],
                &[],
                &[],
            );
            device
                .end_command_buffer(slot.cmd)
                .map_err(|e| vk_error("vkEndCommandBuffer", e))?;
            device
                .queue_submit(self.queue, &submit, slot.fence)
                .map_err(|e| vk_error("vkQueueSubmit", e))?;
        }
        self.submitted += 1;
        slot.serial = self.submitted;
        slot.pending = true;
        self.current = (self.current + 1) % SLOTS;
        Ok(())
    }

    /// Waits until the work of submission `serial` (and all before it) has completed,
    /// submitting the open batch first if `serial` is the open one.
    pub fn wait(&mut self, device: &ash::Device, serial: u64) -> Result<(), BackendError> {
        if serial <= self.completed {
            return Ok(());
        }
        if serial > self.submitted {
            self.submit(device)?;
        }
        let mut order: Vec<usize> = (0..SLOTS).filter(|&i| self.slots[i].pending).collect();
        order.sort_by_key(|&i| self.slots[i].serial);
        for i in order {
            if self.slots[i].serial <= serial {
                self.retire(device, i)?;
            }
        }
        Ok(())
    }

    /// Submits the open batch and waits for everything submitted.
    pub fn finish(&mut self, device: &ash::Device) -> Result<(), BackendError> {
        self.wait(device, self.open_serial())
    }

    /// The two timestamps of the last timed dispatch, which has completed.
    pub fn timestamps(&self, device: &ash::Device) -> Result<[u64; 2], BackendError> {
        let mut t = [0u64; 2];
        // SAFETY: both queries were written by a completed submission; 64-bit results fit `t`.
        unsafe {
            device.get_query_pool_results(
                self.queries,
                0,
                &mut t,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(|e| vk_error("vkGetQueryPoolResults", e))?;
        Ok(t)
    }

    /// Destroys everything.
    ///
    /// # Safety
    /// The device is idle (or lost).
    pub unsafe fn destroy(&mut self, device: &ash::Device) {
        // SAFETY: with the device idle no command buffer, fence, pool or query is in use;
        // null handles are ignored.
        unsafe {
            for slot in self.slots.drain(..) {
                device.destroy_fence(slot.fence, None);
                for pool in slot.pools {
                    device.destroy_descriptor_pool(pool, None);
                }
            }
            device.destroy_query_pool(self.queries, None);
            // Frees the command buffers too.
            device.destroy_command_pool(self.command_pool, None);
        }
        self.queries = vk::QueryPool::null();
        self.command_pool = vk::CommandPool::null();
        self.recording = false;
    }
}

/// # Safety
/// `cmd` is a command buffer of `device` in the recording state.
unsafe fn work_barrier(device: &ash::Device, cmd: vk::CommandBuffer) {
    let barrier = vk::MemoryBarrier::default()
        .src_access_mask(WORK_WRITES)
        .dst_access_mask(WORK_ACCESS);
    // SAFETY: the caller's contract.
    unsafe {
        device.cmd_pipeline_barrier(
            cmd,
            WORK_STAGES,
            WORK_STAGES,
            vk::DependencyFlags::empty(),
            &[barrier],
            &[],
            &[],
        );
    }
}

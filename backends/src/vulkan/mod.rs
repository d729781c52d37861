//! The Vulkan backend: kernels lowered to SPIR-V, run through `ash` on whatever device the
//! loader (opened at run time) offers.
//!
//! - [`instance`]: loader, instance, validation layer, device choice.
//! - [`info`]: the device's [`DeviceInfo`] and the features trine enables.
//! - [`memory`]: buffers and staging.
//! - [`pipeline`]: compute pipelines, cached by kernel hash.
//! - [`submit`]: batched command recording, fences, timestamps.
//! - [`runtime_dir`]: `XDG_RUNTIME_DIR` for headless runs, which Mesa's drivers want.
//!
//! Env: `TRINE_VULKAN_DEVICE` (index or name substring) picks the device;
//! `TRINE_VULKAN_VALIDATION=1` turns the validation layer on, its messages going to stderr.

mod info;
mod instance;
mod memory;
mod pipeline;
mod recorded;
#[cfg(unix)]
mod runtime_dir;
mod submit;

pub use instance::{DEVICE_ENV, VALIDATION_ENV};
#[cfg(unix)]
pub use runtime_dir::ensure_runtime_dir;

use crate::backend::{Backend, BufferHandle, Dispatch, ProgramId};
use crate::checks::{check_range, check_signature, folded_launch, storage_binding};
use crate::error::BackendError;
use crate::info::DeviceInfo;
use crate::recording::{barriers_before, Recording};
use ash::vk;
use memory::{Buffers, STAGING_MAX};
use pipeline::Pipelines;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use submit::Submitter;
use trine_codegen::SpirvOptions;
use trine_ir::Kernel;

pub struct VulkanBackend {
    info: DeviceInfo,
    features: info::Features,
    limits: vk::PhysicalDeviceLimits,
    timestamp_bits: u32,
    physical: vk::PhysicalDevice,
    budget_heaps: Option<Vec<usize>>,
    /// Everything mutable, and every use of the queue, under one lock.
    state: Mutex<State>,
    /// Declared after `state` (destroyed explicitly in `Drop`) and before `instance`: fields drop
    /// in order, and the device must go before the instance that made it.
    device: instance::Device,
    instance: instance::Instance,
}

struct State {
    buffers: Buffers,
    pipelines: Pipelines,
    submit: Submitter,
    recordings: HashMap<u64, recorded::Recorded>,
    next_recording: u64,
}

impl State {
    /// Destroys every object.
    ///
    /// # Safety
    /// The device is idle (or lost).
    unsafe fn destroy(&mut self, device: &ash::Device) {
        // SAFETY: the caller's contract; descriptor pools go before the command pool that
        // frees the recordings' command buffers.
        unsafe {
            for (_, r) in self.recordings.drain() {
                recorded::destroy_pool(device, r);
            }
            self.submit.destroy(device);
            self.pipelines.destroy_all(device);
            self.buffers.destroy_all(device);
        }
    }
}

/// A checked dispatch: descriptor infos, push-constant bytes, folded workgroup counts.
type Prepared = (Vec<vk::DescriptorBufferInfo>, Vec<u8>, [u32; 3]);

fn vk_error(call: &'static str, e: vk::Result) -> BackendError {
    BackendError::Driver {
        call,
        code: e.to_string(),
    }
}

impl VulkanBackend {
    /// Opens the best device (discrete > integrated > virtual > CPU), or the one
    /// `TRINE_VULKAN_DEVICE` names. No loader, no usable device → `Unavailable` with the reason.
    pub fn new() -> Result<VulkanBackend, BackendError> {
        let instance = instance::Instance::new()?;
        let candidate = instance.select()?;
        let probe = info::probe(&instance, &candidate);
        let device = instance.create_device(&candidate, &probe.enable)?;
        let dev = &device.device;
        let stats = probe.features.pipeline_stats.then(|| {
            ash::khr::pipeline_executable_properties::Device::new(&instance.instance, dev)
        });
        let pipelines = Pipelines::new(dev, candidate.pipeline_cache_key.clone(), stats)?;
        let submit = match Submitter::new(
            dev,
            device.queue,
            device.queue_family,
            probe.info.timestamps,
        ) {
            Ok(s) => s,
            Err(e) => {
                let mut pipelines = pipelines;
                // SAFETY: nothing has been submitted.
                unsafe { pipelines.destroy_all(dev) };
                return Err(e);
            }
        };
        let state = State {
            buffers: Buffers::new(probe.memory),
            pipelines,
            submit,
            recordings: HashMap::new(),
            next_recording: 1,
        };
        Ok(VulkanBackend {
            info: probe.info,
            features: probe.features,
            limits: probe.limits,
            timestamp_bits: candidate.timestamp_bits,
            physical: candidate.physical,
            budget_heaps: probe.budget_heaps,
            state: Mutex::new(state),
            device,
            instance,
        })
    }

    /// Whether the validation layer is on (`TRINE_VULKAN_VALIDATION=1` and the layer installed).
    pub fn validation_enabled(&self) -> bool {
        self.instance.validation()
    }

    /// Validation errors reported so far (always 0 without the layer): tests assert it stays 0.
    pub fn validation_errors(&self) -> u64 {
        self.instance.validation_errors()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every state change is completed before anything that can panic, so a poisoned lock
        // still guards consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn dev(&self) -> &ash::Device {
        &self.device.device
    }

    /// Checks `d` against its program and the device: its descriptor infos, push constants
    /// and folded workgroup counts.
    fn prepare(
        &self,
        buffers: &Buffers,
        program: &pipeline::Program,
        d: &Dispatch<'_>,
    ) -> Result<Prepared, BackendError> {
        check_signature(&program.name, program.buffers, &program.params, d)?;
        let mut infos = Vec::with_capacity(d.bindings.len());
        for (i, b) in d.bindings.iter().enumerate() {
            let buffer = buffers.get(b.buffer)?;
            let (offset, range) = storage_binding(
                &program.name,
                i,
                b,
                buffer.size,
                buffer.capacity,
                &self.info,
            )?;
            infos.push(vk::DescriptorBufferInfo {
                buffer: buffer.buffer,
                offset,
                range,
            });
        }
        let (groups, push) = folded_launch(&program.name, d, &self.info, program.push_bytes)?;
        Ok((infos, push, groups))
    }

    /// Checks `d` and records it into the open batch.
    fn record(&self, state: &mut State, d: &Dispatch<'_>, timed: bool) -> Result<(), BackendError> {
        let State {
            buffers,
            pipelines,
            submit,
            ..
        } = state;
        let program = pipelines.get(d.program)?;
        let (infos, push, groups) = self.prepare(buffers, program, d)?;
        if d.grid.contains(&0) && !timed {
            return Ok(());
        }
        // SAFETY: the program comes from the cache; each binding was checked above against
        // its live buffer (word-aligned offset, word-rounded range inside the word-rounded
        // allocation, within the binding limit); `push` was cut to the program's range;
        // `timed` is only passed when the device has timestamps.
        unsafe { submit.record_dispatch(self.dev(), program, &infos, &push, groups, timed)? };
        let serial = submit.open_serial();
        for b in d.bindings {
            buffers.get_mut(b.buffer)?.last_use = serial;
        }
        Ok(())
    }

    /// Copies `data` into a device-local buffer through the staging buffer, in pieces.
    fn write_staged(
        &self,
        state: &mut State,
        h: BufferHandle,
        offset: u64,
        data: &[u8],
    ) -> Result<(), BackendError> {
        let dev = self.dev();
        let State {
            buffers, submit, ..
        } = state;
        let dst = buffers.get(h)?.buffer;
        for (i, piece) in data.chunks(STAGING_MAX as usize).enumerate() {
            let staging = buffers.staging(dev, submit, piece.len() as u64)?;
            staging
                .bytes(dev, submit, piece.len())?
                .copy_from_slice(piece);
            let region = vk::BufferCopy {
                src_offset: 0,
                dst_offset: offset + i as u64 * STAGING_MAX,
                size: piece.len() as u64,
            };
            // SAFETY: both buffers are live; the caller checked `offset + data.len()` against
            // the destination, and the staging buffer holds at least `piece.len()` bytes.
            unsafe { submit.record_copy(dev, (staging.buffer, dst), region, false)? };
            staging.last_use = submit.open_serial();
        }
        buffers.get_mut(h)?.last_use = submit.open_serial();
        Ok(())
    }

    /// Copies from a device-local buffer into `out` through the staging buffer, in pieces.
    fn read_staged(
        &self,
        state: &mut State,
        h: BufferHandle,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), BackendError> {
        let dev = self.dev();
        let State {
            buffers, submit, ..
        } = state;
        let src = buffers.get(h)?.buffer;
        for (i, piece) in out.chunks_mut(STAGING_MAX as usize).enumerate() {
            let staging = buffers.staging(dev, submit, piece.len() as u64)?;
            let region = vk::BufferCopy {
                src_offset: offset + i as u64 * STAGING_MAX,
                dst_offset: 0,
                size: piece.len() as u64,
            };
            // SAFETY: as in `write_staged`, with source and destination swapped.
            unsafe { submit.record_copy(dev, (src, staging.buffer), region, false)? };
            staging.last_use = submit.open_serial();
            piece.copy_from_slice(staging.bytes(dev, submit, piece.len())?);
        }
        Ok(())
    }
}

impl Backend for VulkanBackend {
    fn name(&self) -> &'static str {
        "vulkan"
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// With VK_EXT_memory_budget: the budget left in the heaps `info().memory.device_local`
    /// counts, the driver's estimate of what this process can still allocate there, other
    /// processes' use included.
    fn free_memory(&self) -> Option<u64> {
        let heaps = self.budget_heaps.as_ref()?;
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let mut props = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
        // SAFETY: a query on this instance's physical device; the chained struct belongs to an
        // extension the device offers, which a physical-device query may use unenabled.
        unsafe {
            self.instance
                .instance
                .get_physical_device_memory_properties2(self.physical, &mut props)
        };
        let left = |&h: &usize| budget.heap_budget[h].saturating_sub(budget.heap_usage[h]);
        Some(heaps.iter().map(left).sum())
    }

    /// Vulkan hands out memory with whatever it held before (lavapipe reuses the process's
    /// freed allocations), so a new buffer is zeroed here: on the host where it is mapped, by a
    /// fill queued before any use of it otherwise.
    fn alloc(&self, bytes: u64) -> Result<BufferHandle, BackendError> {
        let mut state = self.lock();
        let State {
            buffers, submit, ..
        } = &mut *state;
        let h = buffers.alloc(self.dev(), bytes).map_err(|e| match e {
            BackendError::OutOfMemory { bytes, free: None } => BackendError::OutOfMemory {
                bytes,
                free: self.free_memory(),
            },
            e => e,
        })?;
        let b = buffers.get(h)?;
        let zeroed = if b.is_mapped() {
            b.zero_mapped(self.dev(), submit)
        } else {
            // SAFETY: the buffer was just made on this device.
            unsafe { submit.record_zero(self.dev(), b.buffer) }.map(|()| {
                let serial = submit.open_serial();
                if let Ok(b) = buffers.get_mut(h) {
                    b.last_use = serial;
                }
            })
        };
        if let Err(e) = zeroed {
            buffers.free(self.dev(), submit, h);
            return Err(e);
        }
        Ok(h)
    }

    fn free(&self, buffer: BufferHandle) {
        let mut state = self.lock();
        let State {
            buffers, submit, ..
        } = &mut *state;
        buffers.free(self.dev(), submit, buffer);
    }

    fn write(&self, buffer: BufferHandle, offset: u64, data: &[u8]) -> Result<(), BackendError> {
        let mut state = self.lock();
        let b = state.buffers.get(buffer)?;
        check_range(offset, data.len() as u64, b.size)?;
        if data.is_empty() {
            return Ok(());
        }
        if b.is_mapped() {
            let State {
                buffers, submit, ..
            } = &mut *state;
            buffers
                .get(buffer)?
                .write_mapped(self.dev(), submit, offset, data)
        } else {
            self.write_staged(&mut state, buffer, offset, data)
        }
    }

    fn read(&self, buffer: BufferHandle, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        let mut state = self.lock();
        let b = state.buffers.get(buffer)?;
        check_range(offset, out.len() as u64, b.size)?;
        if out.is_empty() {
            return Ok(());
        }
        if b.is_mapped() {
            let State {
                buffers, submit, ..
            } = &mut *state;
            buffers
                .get(buffer)?
                .read_mapped(self.dev(), submit, offset, out)
        } else {
            self.read_staged(&mut state, buffer, offset, out)
        }
    }

    fn compile(&self, kernel: &Kernel) -> Result<ProgramId, BackendError> {
        let hash = crate::checks::check_kernel(kernel, &self.info)?;
        if self.lock().pipelines.contains(hash) {
            return Ok(ProgramId(hash));
        }
        // Lowered outside the lock: it is CPU work that touches no device state.
        let options = SpirvOptions {
            debug: self.validation_enabled(),
            integer_dot_product: self.features.integer_dot,
        };
        let spirv = trine_codegen::spirv(kernel, &options).map_err(|e| BackendError::Compile {
            kernel: kernel.name.clone(),
            message: e.to_string(),
        })?;
        pipeline::check_supported(kernel, &spirv, &self.features, &self.limits)?;
        let mut state = self.lock();
        if !state.pipelines.contains(hash) {
            state
                .pipelines
                .build(self.dev(), hash, kernel, (&spirv, &self.features))?;
        }
        Ok(ProgramId(hash))
    }

    fn dispatch(&self, d: &Dispatch<'_>) -> Result<(), BackendError> {
        let mut state = self.lock();
        self.record(&mut state, d, false)?;
        state.submit.maybe_submit(self.dev())
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        self.lock().submit.finish(self.dev())
    }

    fn record(&self, list: &[Dispatch<'_>]) -> Result<Recording, BackendError> {
        let mut state = self.lock();
        let State {
            buffers,
            pipelines,
            submit,
            recordings,
            next_recording,
        } = &mut *state;
        let mut steps = Vec::with_capacity(list.len());
        let mut kept = Vec::with_capacity(list.len());
        for d in list {
            let program = pipelines.get(d.program)?;
            let (infos, push, groups) = self.prepare(buffers, program, d)?;
            if d.grid.contains(&0) {
                continue;
            }
            steps.push(recorded::Step {
                program,
                infos,
                push,
                groups,
                barrier: false,
            });
            kept.push(d);
        }
        let need = barriers_before(kept.len(), |i| {
            let access = &steps[i].program.access;
            kept[i]
                .bindings
                .iter()
                .zip(access)
                .map(|(b, &a)| (b.buffer, a))
                .collect()
        });
        for (step, barrier) in steps.iter_mut().zip(&need) {
            step.barrier = *barrier;
        }
        // SAFETY: every step was checked above against its live program and buffers; the
        // command pool is used only under this lock.
        let r = unsafe { recorded::build(self.dev(), submit.command_pool(), &steps)? };
        let id = *next_recording;
        *next_recording += 1;
        recordings.insert(id, r);
        let barriers = need.iter().filter(|&&b| b).count();
        Ok(Recording::native(list, id, barriers))
    }

    fn replay(&self, recording: &Recording) -> Result<(), BackendError> {
        let mut state = self.lock();
        let State {
            buffers,
            submit,
            recordings,
            ..
        } = &mut *state;
        let cmd = recording
            .native
            .and_then(|id| recordings.get(&id))
            .ok_or_else(|| BackendError::BadDispatch("a recording made by another backend".into()))?
            .cmd;
        recording.check_live(|b| buffers.get(b).is_ok())?;
        let serial = submit.open_serial();
        let n = recording.len() as u32;
        // SAFETY: the command buffer is one of this backend's recordings, ended, recorded with
        // simultaneous use; every buffer it binds is still allocated (checked just above).
        unsafe { submit.execute(self.dev(), cmd, n)? };
        for b in recording.buffers() {
            buffers.get_mut(b)?.last_use = serial;
        }
        Ok(())
    }

    fn release(&self, recording: Recording) {
        let mut state = self.lock();
        let Some(r) = recording.native.and_then(|id| state.recordings.remove(&id)) else {
            return;
        };
        // A replay may still be running: wait for it before freeing what it executes. A
        // failed wait means a lost device, where destroying is allowed anyway.
        let _ = state.submit.finish(self.dev());
        // SAFETY: nothing that executes the recording is pending (waited for above); the
        // command pool is the submitter's, used only under this lock.
        unsafe { recorded::destroy(self.dev(), state.submit.command_pool(), r) };
    }

    fn dispatch_timed(&self, d: &Dispatch<'_>) -> Result<Duration, BackendError> {
        let mut state = self.lock();
        let dev = self.dev();
        state.submit.finish(dev)?;
        if !self.info.timestamps {
            let start = Instant::now();
            self.record(&mut state, d, false)?;
            state.submit.finish(dev)?;
            return Ok(start.elapsed());
        }
        self.record(&mut state, d, true)?;
        state.submit.finish(dev)?;
        self.elapsed(&state)
    }

    fn copy_timed(
        &self,
        src: BufferHandle,
        dst: BufferHandle,
        bytes: u64,
    ) -> Result<Duration, BackendError> {
        if !self.info.timestamps {
            return Err(BackendError::Unsupported {
                kernel: "buffer copy".into(),
                what: "timestamps on this device".into(),
            });
        }
        let mut state = self.lock();
        let dev = self.dev();
        state.submit.finish(dev)?;
        let (s, d) = (state.buffers.get(src)?, state.buffers.get(dst)?);
        check_range(0, bytes, s.size)?;
        check_range(0, bytes, d.size)?;
        let (from, to) = (s.buffer, d.buffer);
        let region = vk::BufferCopy {
            src_offset: 0,
            dst_offset: 0,
            size: bytes,
        };
        // SAFETY: both buffers are live and hold `bytes` (checked above); the device has
        // timestamps.
        unsafe { state.submit.record_copy(dev, (from, to), region, true)? };
        state.submit.finish(dev)?;
        self.elapsed(&state)
    }
}

impl VulkanBackend {
    /// The time between the two timestamps of the last timed command, which has completed.
    fn elapsed(&self, state: &State) -> Result<Duration, BackendError> {
        let [start, end] = state.submit.timestamps(self.dev())?;
        let bits = self.timestamp_bits;
        let mask = if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        let ticks = end.wrapping_sub(start) & mask;
        let nanos = ticks as f64 * f64::from(self.limits.timestamp_period);
        Ok(Duration::from_nanos(nanos as u64))
    }
}

impl Drop for VulkanBackend {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        let device = &self.device.device;
        // SAFETY: after waiting for idle nothing is in flight (after device loss, destroying is
        // allowed anyway), so every object can be destroyed.
        unsafe {
            let _ = device.device_wait_idle();
            state.destroy(device);
        }
    }
}

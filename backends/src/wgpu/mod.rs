//! The wgpu backend: each kernel's naga module, the one the Vulkan backend writes as SPIR-V,
//! handed to wgpu as it is (`ShaderSource::Naga`, no WGSL round trip), so kernels run
//! wherever wgpu does: Metal on macOS, DX12 and Vulkan on Windows, Vulkan on Linux.
//!
//! - [`adapter`]: the instance, the adapter (`TRINE_WGPU_ADAPTER`), the device's features.
//! - [`info`]: the device's [`DeviceInfo`].
//! - [`buffers`]: buffers and copies to and from the host.
//! - [`pipelines`]: compute pipelines, cached by kernel hash.
//! - [`submit`]: batched recording, bind groups, submission, timestamps.
//! - [`scope`]: wgpu's errors caught as [`BackendError`]s.
//!
//! A host application shares its device with [`WgpuBackend::from_device`], and its buffers
//! with [`WgpuBackend::import_buffer`] / [`WgpuBackend::wgpu_buffer`]. trine records onto
//! the application's queue and submits at [`WgpuBackend::flush`], `synchronize`, `read` and
//! `write`: flush before submitting work of your own that reads what trine wrote.

mod adapter;
mod buffers;
mod info;
mod pipelines;
mod scope;
mod submit;

/// The wgpu trine is built against: a host application that shares its device names the
/// same version through this.
pub use ::wgpu as api;
pub use adapter::{adapters, device_descriptor, wanted_features, ADAPTER_ENV};

use crate::backend::{Backend, BufferHandle, Dispatch, ProgramId};
use crate::checks::{bad_dispatch, check_range, check_signature, folded_launch, storage_binding};
use crate::error::BackendError;
use crate::info::DeviceInfo;
use buffers::Buffers;
use pipelines::Pipelines;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use submit::{Batch, Bound, Prepared, Timer};
use trine_ir::Kernel;

pub struct WgpuBackend {
    info: DeviceInfo,
    device: wgpu::Device,
    queue: wgpu::Queue,
    /// `None` without `Features::TIMESTAMP_QUERY`.
    timer: Option<Timer>,
    /// Everything mutable, and every recording and submission, under one lock.
    state: Mutex<State>,
}

struct State {
    buffers: Buffers,
    pipelines: Pipelines,
    batch: Batch,
}

impl WgpuBackend {
    /// Opens the best adapter wgpu finds (discrete > integrated > virtual > CPU), or the one
    /// `TRINE_WGPU_ADAPTER` names (index or name substring), with every feature of trine's
    /// the adapter has and the adapter's own limits.
    pub fn new() -> Result<WgpuBackend, BackendError> {
        let adapter = adapter::choose(adapter::adapters())?;
        WgpuBackend::on_adapter(&adapter)
    }

    /// Opens a device of trine's own on `adapter` (one of [`adapters`], say), with every
    /// feature of trine's the adapter has and the adapter's own limits.
    pub fn on_adapter(adapter: &wgpu::Adapter) -> Result<WgpuBackend, BackendError> {
        let (device, queue) = adapter::request(adapter)?;
        // A device of trine's own: anything a scope misses is printed, never a panic (wgpu's
        // default handler panics).
        device.on_uncaptured_error(std::sync::Arc::new(|e: wgpu::Error| {
            eprintln!("trine wgpu: uncaptured error: {e}");
        }));
        WgpuBackend::from_device(device, queue)
    }

    /// Runs trine's kernels on a host application's device and queue. The device needs
    /// `Features::IMMEDIATES` (every kernel takes its grid and parameters as immediates);
    /// [`device_descriptor`] asks for that and for the features that pick faster kernel
    /// variants (f16, subgroups, timestamps). Errors are caught in error scopes and returned,
    /// so the application's uncaptured-error handler sees none of trine's.
    pub fn from_device(
        device: wgpu::Device,
        queue: wgpu::Queue,
    ) -> Result<WgpuBackend, BackendError> {
        let info = info::device_info(&device);
        if !device.features().contains(wgpu::Features::IMMEDIATES) {
            return Err(BackendError::Unavailable(format!(
                "the wgpu device on {} lacks Features::IMMEDIATES, which carry every kernel's \
                 grid and parameters (ask for it with trine_backends::wgpu::device_descriptor)",
                info.name
            )));
        }
        let timer = match info.timestamps {
            true => Some(Timer::new(&device, &queue)?),
            false => None,
        };
        Ok(WgpuBackend {
            info,
            device,
            queue,
            timer,
            state: Mutex::new(State {
                buffers: Buffers::new(),
                pipelines: Pipelines::default(),
                batch: Batch::default(),
            }),
        })
    }

    pub fn device(&self) -> &wgpu::Device {
        &self.device
    }

    pub fn queue(&self) -> &wgpu::Queue {
        &self.queue
    }

    /// Lends trine a buffer of the host application's device: kernels can bind it (it needs
    /// `BufferUsages::STORAGE`; trine's `read` and `write` also need `COPY_SRC`/`COPY_DST`).
    /// `free` forgets the handle and leaves the buffer to the application.
    pub fn import_buffer(&self, buffer: wgpu::Buffer) -> Result<BufferHandle, BackendError> {
        self.lock().buffers.import(buffer)
    }

    /// The wgpu buffer behind `h`, for the host application to bind or copy.
    pub fn wgpu_buffer(&self, h: BufferHandle) -> Result<wgpu::Buffer, BackendError> {
        Ok(self.lock().buffers.get(h)?.buffer.clone())
    }

    /// Submits the dispatches recorded so far, without waiting for them.
    pub fn flush(&self) -> Result<(), BackendError> {
        self.lock().batch.flush(&self.device, &self.queue)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every state change is completed before anything that can panic, so a poisoned lock
        // still guards consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks `d` against its program and the device and resolves it to wgpu objects; `None`
    /// for an empty grid, which runs nothing.
    fn prepare(
        &self,
        state: &mut State,
        d: &Dispatch<'_>,
    ) -> Result<Option<Prepared>, BackendError> {
        let State {
            buffers,
            pipelines,
            batch,
        } = state;
        let program = pipelines.get(d.program)?;
        check_signature(&program.name, program.writable.len(), &program.params, d)?;
        let mut bound = Vec::with_capacity(d.bindings.len());
        for (i, b) in d.bindings.iter().enumerate() {
            let entry = buffers.get(b.buffer)?;
            let (offset, size) = storage_binding(
                &program.name,
                i,
                b,
                entry.size,
                entry.buffer.size(),
                &self.info,
            )?;
            bound.push(Bound {
                handle: b.buffer.0,
                offset,
                size,
            });
        }
        // wgpu forbids one buffer bound read-only and writable in the same dispatch.
        for (i, a) in bound.iter().enumerate() {
            for (j, b) in bound.iter().enumerate().skip(i + 1) {
                if a.handle == b.handle && program.writable[i] != program.writable[j] {
                    return Err(bad_dispatch(
                        &program.name,
                        format!(
                            "bindings {i} and {j} are the same buffer, read-only in one and \
                             written in the other, which wgpu does not allow"
                        ),
                    ));
                }
            }
        }
        let (groups, immediates) = folded_launch(
            &program.name,
            d,
            &self.info,
            program.immediate_bytes as usize,
        )?;
        if d.grid.contains(&0) {
            return Ok(None);
        }
        let bind_group = match &program.layout {
            Some(layout) => {
                Some(
                    batch.bind_group(&self.device, d.program.0, layout, bound, |h| {
                        buffers
                            .get(BufferHandle(h))
                            .map(|e| e.buffer.clone())
                            .expect("checked above")
                    })?,
                )
            }
            None => None,
        };
        Ok(Some(Prepared {
            pipeline: program.pipeline.clone(),
            bind_group,
            immediates,
            groups,
        }))
    }
}

impl Backend for WgpuBackend {
    fn name(&self) -> &'static str {
        "wgpu"
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn alloc(&self, bytes: u64) -> Result<BufferHandle, BackendError> {
        let max = self.device.limits().max_buffer_size;
        self.lock().buffers.alloc(&self.device, bytes, max)
    }

    fn free(&self, buffer: BufferHandle) {
        let mut state = self.lock();
        state.batch.forget(buffer);
        state.buffers.free(buffer);
    }

    fn write(&self, buffer: BufferHandle, offset: u64, data: &[u8]) -> Result<(), BackendError> {
        let mut state = self.lock();
        check_range(offset, data.len() as u64, state.buffers.get(buffer)?.size)?;
        if data.is_empty() {
            return Ok(());
        }
        // wgpu runs a queue write before the next submission's commands: submit what was
        // recorded first, so the write lands after it.
        state.batch.flush(&self.device, &self.queue)?;
        state
            .buffers
            .write(&self.device, &self.queue, buffer, offset, data)
    }

    fn read(&self, buffer: BufferHandle, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        let mut state = self.lock();
        check_range(offset, out.len() as u64, state.buffers.get(buffer)?.size)?;
        if out.is_empty() {
            return Ok(());
        }
        state.batch.flush(&self.device, &self.queue)?;
        state
            .buffers
            .read(&self.device, &self.queue, buffer, offset, out)
    }

    fn compile(&self, kernel: &Kernel) -> Result<ProgramId, BackendError> {
        let hash = crate::checks::check_kernel(kernel, &self.info)?;
        if self.lock().pipelines.contains(hash) {
            return Ok(ProgramId(hash));
        }
        // Lowered outside the lock: CPU work that touches no device state.
        let lowered =
            trine_codegen::naga_module::lower(kernel).map_err(|e| BackendError::Compile {
                kernel: kernel.name.clone(),
                message: e.to_string(),
            })?;
        pipelines::check_supported(kernel, &lowered, &self.device)?;
        let program = pipelines::build(&self.device, kernel, lowered)?;
        self.lock().pipelines.insert(hash, program);
        Ok(ProgramId(hash))
    }

    fn dispatch(&self, d: &Dispatch<'_>) -> Result<(), BackendError> {
        let mut state = self.lock();
        if let Some(p) = self.prepare(&mut state, d)? {
            state.batch.push(&self.device, &self.queue, &p)?;
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        self.lock().batch.flush(&self.device, &self.queue)?;
        buffers::wait(&self.device)
    }

    fn dispatch_timed(&self, d: &Dispatch<'_>) -> Result<Duration, BackendError> {
        self.synchronize()?;
        let mut state = self.lock();
        let Some(p) = self.prepare(&mut state, d)? else {
            return Ok(Duration::ZERO);
        };
        match &self.timer {
            Some(timer) => timer.time(&self.device, &self.queue, &p),
            None => {
                let start = Instant::now();
                state.batch.push(&self.device, &self.queue, &p)?;
                state.batch.flush(&self.device, &self.queue)?;
                drop(state);
                buffers::wait(&self.device)?;
                Ok(start.elapsed())
            }
        }
    }
}

impl Drop for WgpuBackend {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        let _ = state.batch.flush(&self.device, &self.queue);
        let _ = buffers::wait(&self.device);
        state.buffers.destroy_all();
    }
}

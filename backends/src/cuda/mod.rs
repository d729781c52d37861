//! The CUDA backend: kernels lowered to the CUDA dialect of the HIP C++ text, compiled by NVRTC
//! and run through the CUDA driver API, both loaded at run time.
//!
//! - [`driver`]: `libcuda.so.1` bindings and error codes.
//! - [`nvrtc`]: NVRTC bindings, the search for it and its include directory.
//! - [`device`]: device choice and its [`DeviceInfo`].
//! - [`memory`]: resident buffers, one pinned staging buffer, asynchronous copies.
//! - [`program`]: lowering, compilation (cached on disk), modules.
//! - [`cublas`]: cuBLAS on the backend's stream, the peer its GEMM and GEMV are measured against.
//!
//! All work goes to one non-blocking stream of the device's primary context, in order; `read`
//! and `synchronize` wait for it. On sm_90 and later a kernel is launched to overlap the one
//! before it (programmatic dependent launch: its blocks start while that kernel finishes, and
//! wait for it in their first statement), which hides most of a launch's latency in a chain
//! of small dependent kernels such as a decode step.
//!
//! Env: `TRINE_CUDA_DEVICE` (index) picks the device; `CUDA_PATH` names the toolkit searched
//! first for NVRTC and `cuda_fp16.h`.

pub mod cublas;
mod device;
mod driver;
mod graph;
mod memory;
mod nvrtc;
mod program;

pub use device::DEVICE_ENV;
pub use nvrtc::CUDA_PATH_ENV;

use crate::backend::{Backend, BufferHandle, Dispatch, ProgramId};
use crate::checks::{
    bad_dispatch, check_binding, check_line_alignment, check_range, check_signature,
};
use crate::error::BackendError;
use crate::info::DeviceInfo;
use crate::recording::Recording;
use driver::{CuContext, CuEvent, CuStream, Driver};
use memory::Buffers;
use nvrtc::{nvrtc, Nvrtc};
use program::Program;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;
use trine_ir::Kernel;

/// The ELF machine number of CUDA cubins (`EM_CUDA`).
pub const EM_CUDA: u16 = 190;

/// The oldest architecture (`sm_XY` as `XY`) given matrix tiles: their `mma.sync.m16n8k16`
/// with f16 operands and `ldmatrix` need sm_80.
pub const TILES_MIN_ARCH: u32 = 80;

/// Whether kernels for `arch` launch to overlap the kernel before them: sm_90 and later,
/// through a driver with `cuLaunchKernelEx`.
pub(crate) fn overlaps(arch: u32, driver: &driver::Driver) -> bool {
    arch >= 90 && driver.launch_kernel_ex.is_some()
}

/// The oldest architecture given asynchronous copies (`cp.async`, sm_80).
pub const ASYNC_COPY_MIN_ARCH: u32 = 80;

/// The one architecture given warpgroup products: `wgmma` is Hopper's (sm_90a); Blackwell's
/// tensor cores take other instructions.
pub const GROUP_MMA_ARCH: u32 = 90;

/// `kernel` lowered to CUDA and compiled by NVRTC into a cubin for `sm_<arch>` (`arch` 90 for
/// sm_90), with the backend's options; uncached. Needs NVRTC, not a GPU or driver.
pub fn compile_for_arch(kernel: &Kernel, arch: u32) -> Result<Vec<u8>, BackendError> {
    let nvrtc = nvrtc()?;
    match nvrtc.target(arch) {
        Some(target @ nvrtc::Target::Sm(_)) => {
            program::compile(nvrtc, kernel, target.for_kernel(kernel))
        }
        _ => Err(BackendError::Unsupported {
            kernel: kernel.name.clone(),
            what: format!(
                "sm_{arch}, which NVRTC {}.{} does not compile for (it knows {:?})",
                nvrtc.version.0, nvrtc.version.1, nvrtc.archs_supported
            ),
        }),
    }
}

/// NVRTC's version and the file it was loaded from, without a GPU or driver.
pub fn nvrtc_version() -> Result<((i32, i32), std::path::PathBuf), BackendError> {
    nvrtc().map(|n| (n.version, n.path.clone()))
}

/// The context, stream and timing events: fixed for the backend's life.
struct Handles {
    device: driver::CuDevice,
    ctx: CuContext,
    stream: CuStream,
    /// Start and end of a timed dispatch.
    timers: [CuEvent; 2],
}

// SAFETY: the handles are plain identifiers of driver objects; the driver API may be called
// from any thread once the context is made current there, which every use does under the
// backend's lock (see `CudaBackend::enter`).
unsafe impl Send for Handles {}
// SAFETY: as above; shared access only reads the identifiers.
unsafe impl Sync for Handles {}

struct State {
    buffers: Buffers,
    programs: HashMap<u64, Program>,
    graphs: HashMap<u64, graph::Graph>,
    next_graph: u64,
}

// SAFETY: the state holds driver handles and a pinned host pointer, used only under the
// backend's mutex with the context current; none is tied to the thread that made it.
unsafe impl Send for State {}

pub struct CudaBackend {
    info: DeviceInfo,
    arch: u32,
    max_block: [u32; 3],
    /// Everything mutable, and every use of the stream, under one lock.
    state: Mutex<State>,
    handles: Handles,
    /// Made on first use (see [`CudaBackend::cublas`]), destroyed before the context.
    cublas: OnceLock<cublas::Handle>,
    nvrtc: &'static Nvrtc,
    driver: &'static Driver,
}

impl CudaBackend {
    /// Opens the device `TRINE_CUDA_DEVICE` names (default 0). No driver, no device or no
    /// NVRTC → `Unavailable` with the reason.
    pub fn new() -> Result<CudaBackend, BackendError> {
        let driver = driver::driver()?;
        let device = device::select(driver)?;
        let nvrtc = nvrtc()?;
        let handles = open_context(driver, device)?;
        // The context is current on this thread (open_context made it so).
        let free = memory::free_memory(driver);
        let (dev, info) = match device::describe(driver, nvrtc, device, free) {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: nothing was queued on the stream.
                unsafe { close_context(driver, &handles) };
                return Err(e);
            }
        };
        if nvrtc.target(dev.arch).is_none() {
            // SAFETY: nothing was queued on the stream.
            unsafe { close_context(driver, &handles) };
            return Err(BackendError::Unavailable(format!(
                "NVRTC {}.{} at {} compiles for none of sm_{} or older (it knows {:?})",
                nvrtc.version.0,
                nvrtc.version.1,
                nvrtc.path.display(),
                dev.arch,
                nvrtc.archs_supported
            )));
        }
        Ok(CudaBackend {
            info,
            arch: dev.arch,
            max_block: dev.max_block,
            state: Mutex::new(State {
                buffers: Buffers::new(),
                programs: HashMap::new(),
                graphs: HashMap::new(),
                next_graph: 1,
            }),
            handles,
            cublas: OnceLock::new(),
            nvrtc,
            driver,
        })
    }

    /// Locks the state and makes the context current on this thread.
    fn enter(&self) -> Result<MutexGuard<'_, State>, BackendError> {
        // Every state change completes before anything that can panic, so a poisoned lock
        // still guards consistent state.
        let guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: a live context; making it current only affects this thread.
        self.driver.check("cuCtxSetCurrent", unsafe {
            (self.driver.ctx_set_current)(self.handles.ctx)
        })?;
        Ok(guard)
    }

    /// Device time of the work `queue` puts on the stream, between events recorded before and
    /// after it once earlier work has finished. The caller holds `enter`'s guard.
    fn timed(
        &self,
        queue: impl FnOnce() -> Result<(), BackendError>,
    ) -> Result<Duration, BackendError> {
        self.sync_stream()?;
        let [start, end] = self.handles.timers;
        let stream = self.handles.stream;
        // SAFETY: live events and stream of the current context.
        self.driver.check("cuEventRecord", unsafe {
            (self.driver.event_record)(start, stream)
        })?;
        queue()?;
        // SAFETY: as above.
        self.driver.check("cuEventRecord", unsafe {
            (self.driver.event_record)(end, stream)
        })?;
        // SAFETY: a recorded event.
        self.driver.check("cuEventSynchronize", unsafe {
            (self.driver.event_synchronize)(end)
        })?;
        let mut ms = 0f32;
        // SAFETY: both events recorded on the same stream and completed.
        self.driver.check("cuEventElapsedTime", unsafe {
            (self.driver.event_elapsed_time)(&mut ms, start, end)
        })?;
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
    }

    fn sync_stream(&self) -> Result<(), BackendError> {
        // SAFETY: a live stream of the current context (the caller holds `enter`'s guard).
        self.driver.check("cuStreamSynchronize", unsafe {
            (self.driver.stream_synchronize)(self.handles.stream)
        })
    }

    /// Checks `d` against its program and the device, and queues the launch.
    fn launch(&self, state: &State, d: &Dispatch<'_>) -> Result<(), BackendError> {
        let program = state
            .programs
            .get(&d.program.0)
            .ok_or(BackendError::UnknownProgram(d.program))?;
        let bad = |msg: String| bad_dispatch(&program.name, msg);
        check_signature(&program.name, program.buffers, &program.params, d)?;
        check_line_alignment(&program.name, &program.line_sources, d)?;
        let align = self.info.min_binding_alignment;
        let mut pointers = Vec::with_capacity(d.bindings.len());
        for (i, b) in d.bindings.iter().enumerate() {
            let buffer = state.buffers.get(b.buffer)?;
            check_binding(&program.name, i, b, buffer.size, align)?;
            pointers.push(buffer.ptr + b.offset);
        }
        let max = self.info.max_workgroups;
        if d.grid.iter().zip(max).any(|(&g, m)| g > m) {
            return Err(bad(format!(
                "grid {:?} exceeds the device's workgroup counts {max:?}",
                d.grid
            )));
        }
        // CUDA refuses empty grids; an empty grid runs nothing anywhere.
        if d.grid.contains(&0) {
            return Ok(());
        }
        let words: Vec<u32> = d.params.iter().map(|p| p.bits()).collect();
        // Each kernel argument is passed as a pointer to its value: device pointers (8 bytes),
        // then 4-byte parameters, in the order of the lowered signature (see `abi`).
        let mut args: Vec<*mut c_void> = pointers
            .iter_mut()
            .map(|p| (p as *mut u64).cast::<c_void>())
            .chain(
                words
                    .iter()
                    .map(|w| (w as *const u32).cast_mut().cast::<c_void>()),
            )
            .collect();
        let [gx, gy, gz] = d.grid;
        let [bx, by, bz] = program.block;
        if let Some(launch_ex) = self.driver.launch_kernel_ex.filter(|_| program.overlap) {
            let mut overlap = driver::LaunchAttribute {
                id: driver::LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                pad: [0; 4],
                value: [1, 0, 0, 0, 0, 0, 0, 0],
            };
            let config = driver::LaunchConfig {
                grid: d.grid,
                block: program.block,
                shared_mem_bytes: program.dynamic_shared,
                stream: self.handles.stream,
                attrs: &mut overlap,
                num_attrs: 1,
            };
            // SAFETY: as for cuLaunchKernel below; `config` and the attribute it points to
            // live until the call returns. The overlap is safe because the program's first
            // statement waits for the grid before it (`Program::overlap`).
            return self.driver.check("cuLaunchKernelEx", unsafe {
                launch_ex(
                    &config,
                    program.function,
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            });
        }
        // SAFETY: a function of a loaded module; `args` holds one pointer per kernel argument,
        // each to a live value of the argument's size (checked against the program above),
        // valid until the call returns (the driver copies them); every device pointer lies
        // inside a live allocation with its bound range checked.
        self.driver.check("cuLaunchKernel", unsafe {
            (self.driver.launch_kernel)(
                program.function,
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                program.dynamic_shared,
                self.handles.stream,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }
}

/// Retains the device's primary context (shared with any other CUDA user in the process),
/// makes it current, and creates the stream and timing events.
fn open_context(driver: &Driver, device: driver::CuDevice) -> Result<Handles, BackendError> {
    let mut ctx: CuContext = std::ptr::null_mut();
    // SAFETY: a valid out-pointer and device.
    driver.check("cuDevicePrimaryCtxRetain", unsafe {
        (driver.primary_ctx_retain)(&mut ctx, device)
    })?;
    let mut h = Handles {
        device,
        ctx,
        stream: std::ptr::null_mut(),
        timers: [std::ptr::null_mut(); 2],
    };
    let made = (|| {
        // SAFETY: a live context.
        driver.check("cuCtxSetCurrent", unsafe { (driver.ctx_set_current)(ctx) })?;
        // SAFETY: a valid out-pointer; the context is current.
        driver.check("cuStreamCreate", unsafe {
            (driver.stream_create)(&mut h.stream, driver::STREAM_NON_BLOCKING)
        })?;
        for t in &mut h.timers {
            // SAFETY: a valid out-pointer; flags 0 keep timing on.
            driver.check("cuEventCreate", unsafe { (driver.event_create)(t, 0) })?;
        }
        Ok(())
    })();
    match made {
        Ok(()) => Ok(h),
        Err(e) => {
            // SAFETY: nothing was queued; null handles are skipped.
            unsafe { close_context(driver, &h) };
            Err(e)
        }
    }
}

/// Destroys the events and stream and releases the primary context.
///
/// # Safety
/// No queued work remains (or the context is lost); nothing uses the handles afterwards.
unsafe fn close_context(driver: &Driver, h: &Handles) {
    // SAFETY: the caller's contract; each handle is destroyed once, null ones skipped.
    unsafe {
        (driver.ctx_set_current)(h.ctx);
        for &t in &h.timers {
            if !t.is_null() {
                (driver.event_destroy)(t);
            }
        }
        if !h.stream.is_null() {
            (driver.stream_destroy)(h.stream);
        }
        (driver.primary_ctx_release)(h.device);
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn alloc(&self, bytes: u64) -> Result<BufferHandle, BackendError> {
        let mut state = self.enter()?;
        if bytes > self.info.memory.device_local {
            return Err(BackendError::OutOfMemory {
                bytes,
                free: memory::free_memory(self.driver),
            });
        }
        state.buffers.alloc(self.driver, self.handles.stream, bytes)
    }

    fn free_memory(&self) -> Option<u64> {
        let _state = self.enter().ok()?;
        memory::free_memory(self.driver)
    }

    fn free(&self, buffer: BufferHandle) {
        let Ok(mut state) = self.enter() else {
            return;
        };
        if let Some(b) = state.buffers.remove(buffer) {
            // cuMemFree does not wait for queued work on other streams that still uses the
            // memory; waiting for ours first keeps a pending kernel from touching freed memory.
            // If the wait fails the context is lost and freeing is harmless.
            let _ = self.sync_stream();
            // SAFETY: no queued work uses the buffer any more (waited above).
            unsafe { (self.driver.mem_free)(b.ptr) };
        }
    }

    fn write(&self, buffer: BufferHandle, offset: u64, data: &[u8]) -> Result<(), BackendError> {
        let mut state = self.enter()?;
        let b = state.buffers.get(buffer)?;
        check_range(offset, data.len() as u64, b.size)?;
        if data.is_empty() {
            return Ok(());
        }
        let dst = b.ptr + offset;
        state
            .buffers
            .upload(self.driver, self.handles.stream, dst, data)
    }

    fn read(&self, buffer: BufferHandle, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        let mut state = self.enter()?;
        let b = state.buffers.get(buffer)?;
        check_range(offset, out.len() as u64, b.size)?;
        if out.is_empty() {
            return Ok(());
        }
        let src = b.ptr + offset;
        state
            .buffers
            .download(self.driver, self.handles.stream, src, out)
    }

    fn compile(&self, kernel: &Kernel) -> Result<ProgramId, BackendError> {
        let hash = crate::checks::check_kernel(kernel, &self.info)?;
        if self.enter()?.programs.contains_key(&hash) {
            return Ok(ProgramId(hash));
        }
        let size = kernel.workgroup_size;
        if size.iter().zip(self.max_block).any(|(&s, m)| s > m) {
            return Err(BackendError::Unsupported {
                kernel: kernel.name.clone(),
                what: format!(
                    "workgroup size {size:?} (per-axis limit {:?})",
                    self.max_block
                ),
            });
        }
        let target = self
            .nvrtc
            .target(self.arch)
            .ok_or_else(|| BackendError::Unsupported {
                kernel: kernel.name.clone(),
                what: format!("an NVRTC that compiles for sm_{}", self.arch),
            })?;
        let target = target.for_kernel(kernel);
        // Lowered and compiled outside the lock: CPU work that touches no device state.
        let image = program::image(self.nvrtc, kernel, target)?;
        let mut state = self.enter()?;
        if let std::collections::hash_map::Entry::Vacant(slot) = state.programs.entry(hash) {
            slot.insert(program::load(self.driver, kernel, &image, target)?);
        }
        Ok(ProgramId(hash))
    }

    fn dispatch(&self, d: &Dispatch<'_>) -> Result<(), BackendError> {
        let state = self.enter()?;
        self.launch(&state, d)
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        let _state = self.enter()?;
        self.sync_stream()
    }

    fn dispatch_timed(&self, d: &Dispatch<'_>) -> Result<Duration, BackendError> {
        let state = self.enter()?;
        self.timed(|| self.launch(&state, d))
    }

    fn copy_timed(
        &self,
        src: BufferHandle,
        dst: BufferHandle,
        bytes: u64,
    ) -> Result<Duration, BackendError> {
        let state = self.enter()?;
        let (s, d) = (state.buffers.get(src)?, state.buffers.get(dst)?);
        check_range(0, bytes, s.size)?;
        check_range(0, bytes, d.size)?;
        let (from, to) = (s.ptr, d.ptr);
        self.timed(|| {
            // SAFETY: both pointers start live allocations of this context holding at least
            // `bytes` (checked above), queued on the backend's stream.
            self.driver.check("cuMemcpyDtoDAsync", unsafe {
                (self.driver.memcpy_dtod_async)(to, from, bytes as usize, self.handles.stream)
            })
        })
    }

    fn record(&self, list: &[Dispatch<'_>]) -> Result<Recording, BackendError> {
        let mut state = self.enter()?;
        // SAFETY: the stream is live and only used under the lock held here, so nothing else
        // queues onto it or synchronises it during the capture.
        let g = unsafe {
            graph::capture(self.driver, self.handles.stream, || {
                list.iter().try_for_each(|d| self.launch(&state, d))
            })?
        };
        let id = state.next_graph;
        state.next_graph += 1;
        state.graphs.insert(id, g);
        Ok(Recording::native(list, id, 0))
    }

    fn replay(&self, recording: &Recording) -> Result<(), BackendError> {
        let state = self.enter()?;
        let exec = recording
            .native
            .and_then(|id| state.graphs.get(&id))
            .ok_or_else(|| BackendError::BadDispatch("a recording made by another backend".into()))?
            .exec;
        recording.check_live(|b| state.buffers.get(b).is_ok())?;
        // SAFETY: an instantiated graph of this context whose every device pointer lies in a
        // buffer still allocated (checked just above), launched on the backend's stream.
        self.driver.check("cuGraphLaunch", unsafe {
            (self.driver.graph_launch)(exec, self.handles.stream)
        })
    }

    fn release(&self, recording: Recording) {
        let Ok(mut state) = self.enter() else {
            return;
        };
        if let Some(g) = recording.native.and_then(|id| state.graphs.remove(&id)) {
            // A failed wait means a lost context, where destroying is harmless.
            let _ = self.sync_stream();
            // SAFETY: no launch is pending (waited above); the context is current.
            unsafe { graph::destroy(self.driver, g) };
        }
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        let d = self.driver;
        // SAFETY: after waiting for the stream nothing is queued (after a lost context every
        // call fails harmlessly), so every object can be released; the context is made
        // current first.
        unsafe {
            (d.ctx_set_current)(self.handles.ctx);
            let _ = (d.stream_synchronize)(self.handles.stream);
            if let Some(h) = self.cublas.take() {
                h.destroy();
            }
            for (_, g) in state.graphs.drain() {
                graph::destroy(d, g);
            }
            for (_, p) in state.programs.drain() {
                (d.module_unload)(p.module);
            }
            state.buffers.destroy_all(d);
            close_context(d, &self.handles);
        }
    }
}

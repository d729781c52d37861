//! The ROCm/HIP backend: kernels lowered to HIP C++, compiled by hiprtc for the device's
//! arch, run through the HIP runtime, all opened at run time.
//!
//! - [`loader`]: finding libamdhip64, hiprtc and comgr; [`describe_runtime`].
//! - [`ffi`]: the functions used, as tables of function pointers.
//! - [`device`]: device queries and its [`DeviceInfo`] (with [`sysfs`] for an APU's GTT pool).
//! - [`compile`]: hiprtc, the disk cache, and [`child`] for compilers that abort.
//! - [`memory`]: resident buffers and pinned staging.
//! - [`quirks`]: advice per arch and ROCm version.
//!
//! One stream per backend: writes and dispatches queue on it without waiting; `read`
//! and `synchronize` wait.
//!
//! Env: `TRINE_ROCM_PATH` (see [`loader`]), `TRINE_HIP_DEVICE` (device index, default 0),
//! `TRINE_CACHE_DIR` (code object cache, see [`crate::cache`]).

mod child;
mod comgr;
mod compile;
mod device;
mod ffi;
mod graph;
mod loader;
mod memory;
pub mod quirks;
mod sysfs;

pub use child::{compile_child_main, compile_isolated, CHILD_ARG, CHILD_ENV, COMPILE_TIMEOUT};
pub use compile::{compile_for_arch, compile_options, is_amdgpu_code_object};
pub use loader::{describe_runtime, Install, RuntimeInfo, ROCM_PATH_ENV};

use crate::backend::{Backend, BufferHandle, Dispatch, ProgramId};
use crate::checks::{
    bad_dispatch, check_binding, check_line_alignment, check_range, check_signature,
};
use crate::error::BackendError;
use crate::info::DeviceInfo;
use crate::recording::Recording;
use ffi::{Event, Function, Module, Stream};
use loader::Runtime;
use memory::{Buffers, Staging};
use std::collections::HashMap;
use std::ffi::{c_int, c_void, CString};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use trine_ir::{Kernel, Scalar};

/// Picks the device by index (default 0).
pub const DEVICE_ENV: &str = "TRINE_HIP_DEVICE";

pub struct HipBackend {
    rt: &'static Runtime,
    device: c_int,
    isa: String,
    info: DeviceInfo,
    stream: Stream,
    /// Start and end of `dispatch_timed`.
    events: [Event; 2],
    state: Mutex<State>,
}

// SAFETY: HIP's API may be called from any thread, and its handles (stream, events, modules,
// device pointers) are not tied to the thread that made them; every use of them goes through
// `state`'s lock, which also makes the device current on the calling thread.
unsafe impl Send for HipBackend {}
// SAFETY: as above: shared access only reaches the handles under the lock.
unsafe impl Sync for HipBackend {}

struct Program {
    name: String,
    module: Module,
    function: Function,
    buffers: usize,
    params: Vec<(String, Scalar)>,
    /// The bindings it reads as 16-byte quads, whose offsets must be aligned to them.
    line_sources: Vec<usize>,
    workgroup: [u32; 3],
}

#[derive(Default)]
struct State {
    buffers: Buffers,
    programs: HashMap<u64, Program>,
    staging: Staging,
    graphs: HashMap<u64, graph::Graph>,
    next_graph: u64,
}

impl HipBackend {
    /// Opens device `TRINE_HIP_DEVICE` (default 0). No ROCm library, or one that sees no AMD
    /// GPU, is `Unavailable` with the library's path and version in the reason.
    pub fn new() -> Result<HipBackend, BackendError> {
        let rt = loader::runtime()?;
        let hip = &rt.hip;
        let loaded = format!(
            "ROCm {} loaded from {}",
            rt.info.version.as_deref().unwrap_or("(unknown version)"),
            rt.info.library
        );
        let mut count = 0;
        // SAFETY: an out-parameter; answers without a device (hipErrorNoDevice).
        let code = unsafe { (hip.hipGetDeviceCount)(&mut count) };
        if code == ffi::ERROR_NO_DEVICE {
            return Err(BackendError::Unavailable(format!(
                "{loaded}, but it sees no AMD GPU (hipErrorNoDevice{})",
                kfd_hint()
            )));
        }
        if code != ffi::SUCCESS {
            return Err(BackendError::Unavailable(format!(
                "{loaded}, but hipGetDeviceCount failed: {}",
                hip.describe(code)
            )));
        }
        if count <= 0 {
            return Err(BackendError::Unavailable(format!(
                "{loaded}, but it sees no AMD GPU (0 devices)"
            )));
        }
        // SAFETY: flags must be 0.
        let code = unsafe { (hip.hipInit)(0) };
        if code != ffi::SUCCESS {
            return Err(BackendError::Unavailable(format!(
                "{loaded}, but hipInit failed: {}",
                hip.describe(code)
            )));
        }
        let device = match std::env::var(DEVICE_ENV) {
            Err(_) => 0,
            Ok(v) => v
                .trim()
                .parse::<c_int>()
                .ok()
                .filter(|i| (0..count).contains(i))
                .ok_or_else(|| {
                    BackendError::Unavailable(format!(
                        "{DEVICE_ENV}={v:?} is not a device index below {count}"
                    ))
                })?,
        };
        // SAFETY: an index below the device count.
        hip.check("hipSetDevice", unsafe { (hip.hipSetDevice)(device) })?;
        let dev = device::query(rt, device)?;

        let mut stream: Stream = std::ptr::null_mut();
        // SAFETY: an out-parameter; the device is current.
        hip.check("hipStreamCreate", unsafe {
            (hip.hipStreamCreate)(&mut stream)
        })?;
        let mut events: [Event; 2] = [std::ptr::null_mut(); 2];
        for i in 0..2 {
            // SAFETY: an out-parameter.
            let code = unsafe { (hip.hipEventCreate)(&mut events[i]) };
            if let Err(e) = hip.check("hipEventCreate", code) {
                // SAFETY: made above, unused.
                unsafe {
                    for e in &events[..i] {
                        (hip.hipEventDestroy)(*e);
                    }
                    (hip.hipStreamDestroy)(stream);
                }
                return Err(e);
            }
        }
        let info = device::device_info(rt, &dev);
        Ok(HipBackend {
            rt,
            device,
            isa: dev.isa,
            info,
            stream,
            events,
            state: Mutex::new(State::default()),
        })
    }

    fn hip(&self) -> &ffi::Hip {
        &self.rt.hip
    }

    /// The state, with this backend's device current on the calling thread (HIP's current
    /// device is per thread, and callers come from any thread).
    fn lock(&self) -> Result<MutexGuard<'_, State>, BackendError> {
        // Every state change completes before anything that can panic, so a poisoned lock
        // still guards consistent state.
        let guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: the index was checked against the device count when the backend opened.
        self.hip().check("hipSetDevice", unsafe {
            (self.hip().hipSetDevice)(self.device)
        })?;
        Ok(guard)
    }

    fn sync_stream(&self, state: &mut State) -> Result<(), BackendError> {
        // SAFETY: the stream is live.
        let code = unsafe { (self.hip().hipStreamSynchronize)(self.stream) };
        self.hip().check("hipStreamSynchronize", code)?;
        state.staging.drained();
        Ok(())
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
        let mut pointers: Vec<*mut c_void> = Vec::with_capacity(d.bindings.len());
        for (i, b) in d.bindings.iter().enumerate() {
            let buffer = state.buffers.get(b.buffer)?;
            check_binding(&program.name, i, b, buffer.size, align)?;
            // SAFETY: the offset lies within the allocation (checked above).
            pointers.push(unsafe { buffer.ptr.cast::<u8>().add(b.offset as usize) }.cast());
        }
        for (axis, (&groups, &size)) in d.grid.iter().zip(&program.workgroup).enumerate() {
            let max = self.info.max_workgroups[axis];
            // HIP counts threads, not workgroups, in 32 bits per axis.
            if groups > max || u64::from(groups) * u64::from(size) > u64::from(u32::MAX) {
                return Err(bad(format!(
                    "grid {:?} exceeds the device's limits on axis {axis} ({max} workgroups, \
                     2^32 - 1 threads)",
                    d.grid
                )));
            }
        }
        if d.grid.contains(&0) {
            return Ok(());
        }
        let mut words: Vec<u32> = d.params.iter().map(|p| p.bits()).collect();
        let mut args: Vec<*mut c_void> = pointers
            .iter_mut()
            .map(|p| (p as *mut *mut c_void).cast())
            .chain(words.iter_mut().map(|w| (w as *mut u32).cast()))
            .collect();
        let [gx, gy, gz] = d.grid;
        let [wx, wy, wz] = program.workgroup;
        // SAFETY: `args` points at one value per kernel parameter, in order: a device pointer
        // for each buffer (inside its live allocation, checked above) and a 4-byte f32/i32/u32
        // for each parameter (types checked above). The runtime copies them during the call.
        // The grid fits the device's limits; the workgroup is the kernel's own.
        let code = unsafe {
            (self.hip().hipModuleLaunchKernel)(
                program.function,
                gx,
                gy,
                gz,
                wx,
                wy,
                wz,
                0,
                self.stream,
                args.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.hip().check("hipModuleLaunchKernel", code)
    }

    /// Loads a code object and finds the kernel in it.
    fn load_module(&self, code: &[u8], name: &str) -> Result<(Module, Function), BackendError> {
        let hip = self.hip();
        let mut module: Module = std::ptr::null_mut();
        // SAFETY: `code` is a complete AMDGPU code object (checked when compiled or read from
        // the cache) that outlives the call; the device is current (caller holds the lock).
        hip.check("hipModuleLoadData", unsafe {
            (hip.hipModuleLoadData)(&mut module, code.as_ptr().cast())
        })?;
        let cname = CString::new(name).map_err(|_| BackendError::Compile {
            kernel: name.to_string(),
            message: "the kernel name contains a NUL byte".into(),
        })?;
        let mut function: Function = std::ptr::null_mut();
        // SAFETY: a live module and a NUL-terminated name.
        let code = unsafe { (hip.hipModuleGetFunction)(&mut function, module, cname.as_ptr()) };
        if let Err(e) = hip.check("hipModuleGetFunction", code) {
            // SAFETY: loaded above, used by nothing.
            unsafe { (hip.hipModuleUnload)(module) };
            return Err(e);
        }
        Ok((module, function))
    }
}

/// Why ROCm may see no GPU, from the compute device node every ROCm process opens.
fn kfd_hint() -> &'static str {
    const KFD: &std::ffi::CStr = c"/dev/kfd";
    // SAFETY: a NUL-terminated path; access() only checks permissions.
    let accessible = unsafe { libc::access(KFD.as_ptr(), libc::R_OK | libc::W_OK) } == 0;
    if !std::path::Path::new("/dev/kfd").exists() {
        "; there is no /dev/kfd: the amdgpu driver offers no compute device"
    } else if !accessible {
        "; /dev/kfd is not readable and writable by this user: add it to the render and video \
         groups"
    } else {
        ""
    }
}

impl Backend for HipBackend {
    fn name(&self) -> &'static str {
        "hip"
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn alloc(&self, bytes: u64) -> Result<BufferHandle, BackendError> {
        let mut state = self.lock()?;
        state.buffers.alloc(self.hip(), bytes)
    }

    fn free_memory(&self) -> Option<u64> {
        let _state = self.lock().ok()?;
        memory::free_memory(self.hip())
    }

    fn free(&self, buffer: BufferHandle) {
        let Ok(mut state) = self.lock() else {
            return;
        };
        if let Some(b) = state.buffers.remove(buffer) {
            // hipFree waits for the device to finish all work first (HIP documents an implicit
            // device synchronisation), so no queued kernel or copy still uses the buffer.
            // SAFETY: allocated by hipMalloc, removed from the map, freed once.
            unsafe { (self.hip().hipFree)(b.ptr) };
            state.staging.drained();
        }
    }

    fn write(&self, buffer: BufferHandle, offset: u64, data: &[u8]) -> Result<(), BackendError> {
        let mut guard = self.lock()?;
        let state = &mut *guard;
        let b = state.buffers.get(buffer)?;
        check_range(offset, data.len() as u64, b.size)?;
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: the range lies inside the live allocation (checked above); the device is
        // current.
        unsafe {
            let dst = b.ptr.cast::<u8>().add(offset as usize);
            state.staging.upload(self.hip(), self.stream, dst, data)
        }
    }

    fn read(&self, buffer: BufferHandle, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        let mut guard = self.lock()?;
        let state = &mut *guard;
        let b = state.buffers.get(buffer)?;
        check_range(offset, out.len() as u64, b.size)?;
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: as in `write`.
        unsafe {
            let src = b.ptr.cast::<u8>().add(offset as usize);
            state.staging.download(self.hip(), self.stream, src, out)
        }
    }

    fn compile(&self, kernel: &Kernel) -> Result<ProgramId, BackendError> {
        let hash = crate::checks::check_kernel(kernel, &self.info)?;
        if self.lock()?.programs.contains_key(&hash) {
            return Ok(ProgramId(hash));
        }
        // Lowered and compiled outside the lock: no device state is involved.
        let source = compile::lower(kernel)?;
        let (code, from_cache) = compile::code_object(self.rt, kernel, &source, &self.isa, true)?;
        let mut state = self.lock()?;
        if state.programs.contains_key(&hash) {
            return Ok(ProgramId(hash));
        }
        let (module, function) = match self.load_module(&code, &kernel.name) {
            // A cached object the runtime rejects (a runtime update the version did not
            // capture, a damaged file) is compiled again once.
            Err(_) if from_cache => {
                let (code, _) = compile::code_object(self.rt, kernel, &source, &self.isa, false)?;
                self.load_module(&code, &kernel.name)?
            }
            other => other?,
        };
        state.programs.insert(
            hash,
            Program {
                name: kernel.name.clone(),
                module,
                function,
                buffers: kernel.buffers.len(),
                params: kernel
                    .params
                    .iter()
                    .map(|p| (p.name.clone(), p.ty))
                    .collect(),
                line_sources: kernel.line_sources().iter().map(|b| b.0 as usize).collect(),
                workgroup: kernel.workgroup_size,
            },
        );
        Ok(ProgramId(hash))
    }

    fn dispatch(&self, d: &Dispatch<'_>) -> Result<(), BackendError> {
        let state = self.lock()?;
        self.launch(&state, d)
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        let mut state = self.lock()?;
        self.sync_stream(&mut state)
    }

    fn dispatch_timed(&self, d: &Dispatch<'_>) -> Result<Duration, BackendError> {
        let mut state = self.lock()?;
        self.sync_stream(&mut state)?;
        let hip = self.hip();
        let [start, end] = self.events;
        // SAFETY: live events and stream.
        hip.check("hipEventRecord", unsafe {
            (hip.hipEventRecord)(start, self.stream)
        })?;
        self.launch(&state, d)?;
        // SAFETY: as above.
        unsafe {
            hip.check("hipEventRecord", (hip.hipEventRecord)(end, self.stream))?;
            hip.check("hipEventSynchronize", (hip.hipEventSynchronize)(end))?;
        }
        let mut ms = 0f32;
        // SAFETY: both events have completed.
        hip.check("hipEventElapsedTime", unsafe {
            (hip.hipEventElapsedTime)(&mut ms, start, end)
        })?;
        state.staging.drained();
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
    }

    fn record(&self, list: &[Dispatch<'_>]) -> Result<Recording, BackendError> {
        let Some(g) = &self.rt.graphs else {
            return Ok(Recording::direct(list));
        };
        let mut state = self.lock()?;
        // SAFETY: the stream is live and only used under the lock held here.
        let captured = unsafe {
            graph::capture(self.hip(), g, self.stream, || {
                list.iter().try_for_each(|d| self.launch(&state, d))
            })?
        };
        let id = state.next_graph;
        state.next_graph += 1;
        state.graphs.insert(id, captured);
        Ok(Recording::native(list, id, 0))
    }

    fn replay(&self, recording: &Recording) -> Result<(), BackendError> {
        let (Some(g), Some(id)) = (&self.rt.graphs, recording.native) else {
            return crate::recording::replay_each(self, recording);
        };
        let state = self.lock()?;
        let exec = state
            .graphs
            .get(&id)
            .ok_or_else(|| BackendError::BadDispatch("a recording made by another backend".into()))?
            .exec;
        recording.check_live(|b| state.buffers.get(b).is_ok())?;
        // SAFETY: an instantiated graph whose every pointer lies in a buffer still allocated
        // (checked just above), launched on the backend's stream.
        self.hip().check("hipGraphLaunch", unsafe {
            (g.hipGraphLaunch)(exec, self.stream)
        })
    }

    fn release(&self, recording: Recording) {
        let (Some(g), Some(id)) = (&self.rt.graphs, recording.native) else {
            return;
        };
        let Ok(mut state) = self.lock() else {
            return;
        };
        if let Some(graph) = state.graphs.remove(&id) {
            // A failed wait leaves nothing better to do than to destroy anyway.
            let _ = self.sync_stream(&mut state);
            // SAFETY: no launch is pending (waited above).
            unsafe { graph::destroy(g, graph) };
        }
    }
}

impl Drop for HipBackend {
    fn drop(&mut self) {
        let hip = &self.rt.hip;
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        // SAFETY: after the stream drains nothing is in flight, so every object can go; each
        // is destroyed once. Errors are ignored: there is nothing left to do about them.
        unsafe {
            (hip.hipSetDevice)(self.device);
            (hip.hipStreamSynchronize)(self.stream);
            for b in state.buffers.drain() {
                (hip.hipFree)(b.ptr);
            }
            if let Some(g) = &self.rt.graphs {
                for (_, graph) in state.graphs.drain() {
                    graph::destroy(g, graph);
                }
            }
            for (_, p) in state.programs.drain() {
                (hip.hipModuleUnload)(p.module);
            }
            state.staging.free(hip);
            for e in self.events {
                (hip.hipEventDestroy)(e);
            }
            (hip.hipStreamDestroy)(self.stream);
        }
    }
}

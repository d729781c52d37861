//! The trait every backend implements.

use crate::error::BackendError;
use crate::info::DeviceInfo;
use crate::recording::Recording;
use std::time::{Duration, Instant};
use trine_ir::{Kernel, ParamValue};

/// A buffer on a backend's device. Opaque; only meaningful to the backend that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferHandle(pub u64);

/// A compiled kernel on a backend. Compiling the same kernel again returns the same id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProgramId(pub u64);

/// The part of a buffer bound to one kernel buffer slot. `offset` must be a multiple of
/// [`DeviceInfo::min_binding_alignment`]; `size` is in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    pub buffer: BufferHandle,
    pub offset: u64,
    pub size: u64,
}

/// One launch of a compiled kernel over a grid of `grid` workgroups (logical: the backend folds
/// grids wider than its per-dimension limit).
#[derive(Clone, Copy, Debug)]
pub struct Dispatch<'a> {
    pub program: ProgramId,
    pub grid: [u32; 3],
    pub bindings: &'a [Binding],
    pub params: &'a [ParamValue],
}

/// A compute device. Work is queued in order: `dispatch` may return before the kernel ran;
/// `read` and `synchronize` wait for everything queued before them.
pub trait Backend: Send + Sync {
    /// The registry name: "cpu", "vulkan", …
    fn name(&self) -> &'static str;
    fn info(&self) -> &DeviceInfo;
    /// Allocates a zeroed buffer; failing for want of memory is [`BackendError::OutOfMemory`].
    fn alloc(&self, bytes: u64) -> Result<BufferHandle, BackendError>;
    /// Bytes of device memory free for new buffers now, where the runtime says (CUDA's
    /// `cuMemGetInfo`, HIP's `hipMemGetInfo`, Vulkan's VK_EXT_memory_budget, the host's
    /// available memory for the CPU); `None` where it does not (Vulkan without that
    /// extension, wgpu).
    fn free_memory(&self) -> Option<u64> {
        None
    }
    fn free(&self, buffer: BufferHandle);
    fn write(&self, buffer: BufferHandle, offset: u64, data: &[u8]) -> Result<(), BackendError>;
    fn read(&self, buffer: BufferHandle, offset: u64, out: &mut [u8]) -> Result<(), BackendError>;
    /// Validates, lowers and compiles `kernel`, cached by its hash.
    fn compile(&self, kernel: &Kernel) -> Result<ProgramId, BackendError>;
    fn dispatch(&self, dispatch: &Dispatch<'_>) -> Result<(), BackendError>;
    fn synchronize(&self) -> Result<(), BackendError>;
    /// Runs one dispatch alone and returns its duration: device timestamps where the backend
    /// has them, otherwise host time around dispatch and synchronize.
    fn dispatch_timed(&self, dispatch: &Dispatch<'_>) -> Result<Duration, BackendError> {
        self.synchronize()?;
        let t = Instant::now();
        self.dispatch(dispatch)?;
        self.synchronize()?;
        Ok(t.elapsed())
    }
    /// Copies the first `bytes` of `src` into `dst` with the runtime's own copy
    /// (`cuMemcpyDtoDAsync`, `vkCmdCopyBuffer`), alone, and returns its duration on the
    /// device's clock: the bandwidth the device's memory gives without any kernel of ours,
    /// which a bench measures kernels against. [`BackendError::Unsupported`] where the backend
    /// has no such copy.
    fn copy_timed(
        &self,
        src: BufferHandle,
        dst: BufferHandle,
        bytes: u64,
    ) -> Result<Duration, BackendError> {
        let _ = (src, dst, bytes);
        Err(BackendError::Unsupported {
            kernel: "buffer copy".into(),
            what: format!("{} has no timed copy of its runtime's own", self.name()),
        })
    }
    /// Checks `list` as `dispatch` would and records it for [`Backend::replay`]. Its bindings
    /// and parameters are frozen: what changes between replays goes in a buffer the kernels
    /// read. The default keeps the list and replays it dispatch by dispatch.
    fn record(&self, list: &[Dispatch<'_>]) -> Result<Recording, BackendError> {
        Ok(Recording::direct(list))
    }
    /// Queues the recorded dispatches, in order, as if each had been passed to `dispatch`.
    /// A recording whose buffers were freed is [`BackendError::StaleRecording`].
    fn replay(&self, recording: &Recording) -> Result<(), BackendError> {
        crate::recording::replay_each(self, recording)
    }
    /// Frees a recording's device objects, once no replay of it is in flight.
    fn release(&self, recording: Recording) {
        drop(recording);
    }
}

//! A backend made of another: every call forwarded to a real backend beneath, under a name
//! and a device description of its own, with hooks on the calls it changes. What tests and
//! tools stand in for a device the machine lacks with: a GPU-typed device on the CPU, a
//! driver that refuses a kernel or computes one wrong, a device that runs out of memory.

use crate::backend::{Backend, BufferHandle, Dispatch, ProgramId};
use crate::error::BackendError;
use crate::info::DeviceInfo;
use std::sync::Arc;
use trine_ir::Kernel;

/// The calls a [`Proxy`] may change; each defaults to the backend beneath.
pub trait Hooks: Send + Sync {
    fn compile(&self, inner: &dyn Backend, kernel: &Kernel) -> Result<ProgramId, BackendError> {
        inner.compile(kernel)
    }
    fn dispatch(&self, inner: &dyn Backend, d: &Dispatch<'_>) -> Result<(), BackendError> {
        inner.dispatch(d)
    }
    fn alloc(&self, inner: &dyn Backend, bytes: u64) -> Result<BufferHandle, BackendError> {
        inner.alloc(bytes)
    }
    fn write(
        &self,
        inner: &dyn Backend,
        b: BufferHandle,
        offset: u64,
        data: &[u8],
    ) -> Result<(), BackendError> {
        inner.write(b, offset, data)
    }
    fn free_memory(&self, inner: &dyn Backend) -> Option<u64> {
        inner.free_memory()
    }
}

/// No hooks: a proxy that only renames and redescribes its device.
impl Hooks for () {}

pub struct Proxy<H> {
    pub inner: Arc<dyn Backend>,
    pub name: &'static str,
    pub info: DeviceInfo,
    pub hooks: H,
}

impl<H: Hooks> Proxy<H> {
    /// `inner` as `name`, described as `inner` describes itself after `describe`.
    pub fn new(
        inner: Arc<dyn Backend>,
        name: &'static str,
        describe: impl FnOnce(&mut DeviceInfo),
        hooks: H,
    ) -> Proxy<H> {
        let mut info = inner.info().clone();
        describe(&mut info);
        Proxy {
            inner,
            name,
            info,
            hooks,
        }
    }
}

// Recording, replay and timed dispatches keep the trait's defaults, which go through
// `dispatch`, so a hook on it sees every launch.
impl<H: Hooks> Backend for Proxy<H> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn alloc(&self, bytes: u64) -> Result<BufferHandle, BackendError> {
        self.hooks.alloc(self.inner.as_ref(), bytes)
    }
    fn free_memory(&self) -> Option<u64> {
        self.hooks.free_memory(self.inner.as_ref())
    }
    fn free(&self, buffer: BufferHandle) {
        self.inner.free(buffer)
    }
    fn write(&self, b: BufferHandle, offset: u64, data: &[u8]) -> Result<(), BackendError> {
        self.hooks.write(self.inner.as_ref(), b, offset, data)
    }
    fn read(&self, b: BufferHandle, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.inner.read(b, offset, out)
    }
    fn compile(&self, kernel: &Kernel) -> Result<ProgramId, BackendError> {
        self.hooks.compile(self.inner.as_ref(), kernel)
    }
    fn dispatch(&self, d: &Dispatch<'_>) -> Result<(), BackendError> {
        self.hooks.dispatch(self.inner.as_ref(), d)
    }
    fn synchronize(&self) -> Result<(), BackendError> {
        self.inner.synchronize()
    }
}

//! Errors of every backend.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum BackendError {
    /// The backend cannot run here: no library, no device, a driver too old. The reason says
    /// which, in words a user can act on.
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("kernel {kernel:?} is invalid: {source}")]
    Invalid {
        kernel: String,
        #[source]
        source: trine_ir::ValidationError,
    },
    #[error("kernel {kernel:?} needs {what}, which this device lacks")]
    Unsupported { kernel: String, what: String },
    #[error("kernel {kernel:?} failed to compile: {message}")]
    Compile { kernel: String, message: String },
    /// `free` is the device's free memory when the allocation failed, where the backend can
    /// tell ([`crate::Backend::free_memory`]), so that the message says how far off it was.
    #[error("out of device memory allocating {bytes} bytes ({})", free.map_or("free memory unknown".to_string(), |f| format!("{f} bytes free")))]
    OutOfMemory { bytes: u64, free: Option<u64> },
    #[error("buffer {0:?} does not exist on this backend")]
    UnknownBuffer(crate::BufferHandle),
    #[error("program {0:?} does not exist on this backend")]
    UnknownProgram(crate::ProgramId),
    #[error("range {offset}+{len} is outside a buffer of {size} bytes")]
    OutOfRange { offset: u64, len: u64, size: u64 },
    #[error("dispatch does not match the kernel: {0}")]
    BadDispatch(String),
    #[error("kernel {kernel:?} faulted: {source}")]
    Fault {
        kernel: String,
        #[source]
        source: trine_ir::interp::InterpError,
    },
    /// A host application's buffer (wgpu) lacks a usage trine needs for it.
    #[error("imported buffer: {0}")]
    ImportedBuffer(String),
    /// A recording was replayed after a buffer it binds was freed.
    #[error("recording binds buffer {buffer:?}, which was freed after it was recorded")]
    StaleRecording { buffer: crate::BufferHandle },
    #[error("{call} failed: {code}")]
    Driver { call: &'static str, code: String },
}

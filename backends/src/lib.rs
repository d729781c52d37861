//! trine-backends: one [`Backend`] trait, and the backends that implement it.
//!
//! A backend owns a device: buffers, compiled programs, a queue. System libraries (the Vulkan
//! loader, ROCm, CUDA) are opened at run time, so one binary runs on every machine; a missing
//! library or device is [`BackendError::Unavailable`] with the reason, never a panic.

pub mod backend;
pub mod cache;
pub mod checks;
pub mod cpu;
pub mod cuda;
pub mod error;
pub mod hip;
pub mod info;
pub mod probe;
pub mod proxy;
pub mod recording;
pub mod registry;
pub mod vulkan;
#[cfg(trine_wgpu)]
pub mod wgpu;

pub use backend::{Backend, Binding, BufferHandle, Dispatch, ProgramId};
pub use error::BackendError;
pub use info::{DeviceInfo, DeviceType, MemoryInfo, Tuning};
pub use recording::{RecordedDispatch, Recording};
pub use registry::{
    open, open_all, open_best, placement_order, probe_all, BackendKind, Opened, PlacementError,
    Tier,
};

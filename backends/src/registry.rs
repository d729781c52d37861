//! The backends trine knows, opened by name.

use crate::backend::Backend;
use crate::error::BackendError;
use std::fmt;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    Cpu,
    Vulkan,
}

impl BackendKind {
    /// Every kind, in order of preference for placement (best last: the CPU always works).
    pub const ALL: [BackendKind; 2] = [BackendKind::Vulkan, BackendKind::Cpu];

    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Vulkan => "vulkan",
        }
    }

    pub fn parse(s: &str) -> Option<BackendKind> {
        BackendKind::ALL.into_iter().find(|k| k.name() == s.trim())
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A backend that was tried: opened, or the reason it could not be.
pub struct Opened {
    pub kind: BackendKind,
    pub backend: Result<Arc<dyn Backend>, BackendError>,
}

pub fn open(kind: BackendKind) -> Result<Arc<dyn Backend>, BackendError> {
    Ok(match kind {
        BackendKind::Cpu => Arc::new(crate::cpu::CpuBackend::new()),
        BackendKind::Vulkan => Arc::new(crate::vulkan::VulkanBackend::new()?),
    })
}

/// Opens each of `kinds`, keeping the failures with their reasons.
pub fn open_all(kinds: &[BackendKind]) -> Vec<Opened> {
    kinds
        .iter()
        .map(|&kind| Opened {
            kind,
            backend: open(kind),
        })
        .collect()
}

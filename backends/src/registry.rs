//! The backends trine knows, opened by name, and placement: probe every backend in a child
//! process, then open the best that works in this one.

use crate::backend::Backend;
use crate::error::BackendError;
use crate::probe::{probe, ProbeOutcome};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    Cuda,
    Hip,
    Vulkan,
    /// The same kernels through wgpu: Metal, DX12 or Vulkan (see [`crate::wgpu`]).
    Wgpu,
    Cpu,
}

impl BackendKind {
    /// Every kind, in order of preference for placement: the vendor runtimes first (their
    /// compilers and libraries are the fastest path on their hardware), then Vulkan through
    /// ash, then wgpu (the portable path: where ash finds no Vulkan, as on macOS), then the
    /// CPU, which always works.
    pub const ALL: [BackendKind; 5] = [
        BackendKind::Cuda,
        BackendKind::Hip,
        BackendKind::Vulkan,
        BackendKind::Wgpu,
        BackendKind::Cpu,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cuda => "cuda",
            BackendKind::Hip => "hip",
            BackendKind::Vulkan => "vulkan",
            BackendKind::Wgpu => "wgpu",
            BackendKind::Cpu => "cpu",
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

/// Opens `kind` in this process. A backend whose runtime may hang or abort is safer probed
/// first ([`open_best`], [`crate::probe::probe`]).
pub fn open(kind: BackendKind) -> Result<Arc<dyn Backend>, BackendError> {
    Ok(match kind {
        BackendKind::Cuda => Arc::new(crate::cuda::CudaBackend::new()?),
        BackendKind::Hip => Arc::new(crate::hip::HipBackend::new()?),
        BackendKind::Vulkan => Arc::new(crate::vulkan::VulkanBackend::new()?),
        #[cfg(trine_wgpu)]
        BackendKind::Wgpu => Arc::new(crate::wgpu::WgpuBackend::new()?),
        #[cfg(not(trine_wgpu))]
        BackendKind::Wgpu => {
            return Err(BackendError::Unavailable(
                "this build has no wgpu backend (on Linux it is the `wgpu` cargo feature: \
                 cargo build --features wgpu)"
                    .into(),
            ))
        }
        BackendKind::Cpu => Arc::new(crate::cpu::CpuBackend::new()),
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

/// Every probe of a placement, in the order of the kinds asked for.
pub type Probes = Vec<(BackendKind, ProbeOutcome)>;

#[derive(Debug, Error)]
pub enum PlacementError {
    #[error("no backend works here: {}", list(.0))]
    NoBackend(Probes),
}

fn list(probes: &Probes) -> String {
    if probes.is_empty() {
        return "none was asked for".into();
    }
    probes
        .iter()
        .map(|(k, o)| format!("{k} {o}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Probes every one of `kinds` in a child process (`exe __probe <kind>`), all at once, each
/// for at most `timeout`. `exe` is a binary that hands the probe subcommand to
/// [`crate::probe::child_main`] (the `trine` binary does).
pub fn probe_all(exe: &Path, kinds: &[BackendKind], timeout: Duration) -> Probes {
    std::thread::scope(|s| {
        let running: Vec<_> = kinds
            .iter()
            .map(|&kind| (kind, s.spawn(move || probe(exe, kind, timeout))))
            .collect();
        running
            .into_iter()
            .map(|(kind, h)| {
                let outcome = h.join().unwrap_or_else(|_| {
                    ProbeOutcome::Unavailable("the probe's thread panicked".into())
                });
                (kind, outcome)
            })
            .collect()
    })
}

/// Probes every one of `kinds` ([`probe_all`]), then opens in this process the first of
/// `kinds` whose probe passed, falling back to the next when opening fails here. `kinds` is
/// in order of preference, e.g. [`BackendKind::ALL`].
///
/// Returns the backend and every probe's outcome; a probe that passed but whose backend did
/// not open here is reported `Unavailable` with both facts.
pub fn open_best(
    exe: &Path,
    kinds: &[BackendKind],
    timeout: Duration,
) -> Result<(Arc<dyn Backend>, Probes), PlacementError> {
    let mut probes = probe_all(exe, kinds, timeout);
    for (kind, outcome) in probes.iter_mut() {
        if !outcome.is_ok() {
            continue;
        }
        match open(*kind) {
            Ok(backend) => return Ok((backend, probes)),
            Err(e) => {
                *outcome = ProbeOutcome::Unavailable(format!(
                    "the probe passed, but opening it in this process failed: {e}"
                ))
            }
        }
    }
    Err(PlacementError::NoBackend(probes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_all_is_in_priority_order() {
        for k in BackendKind::ALL {
            assert_eq!(BackendKind::parse(k.name()), Some(k));
        }
        assert_eq!(BackendKind::parse(" cuda "), Some(BackendKind::Cuda));
        assert_eq!(BackendKind::parse("metal"), None);
        assert_eq!(BackendKind::ALL.last(), Some(&BackendKind::Cpu));
    }

    #[test]
    fn placement_with_nothing_to_probe_says_so() {
        match open_best(Path::new("/nonexistent"), &[], Duration::from_secs(1)) {
            Err(e) => assert_eq!(e.to_string(), "no backend works here: none was asked for"),
            Ok((b, _)) => panic!("opened {} from nothing", b.name()),
        }
    }
}

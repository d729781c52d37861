//! The backends trine knows, opened by name, and placement: probe every backend in a child
//! process, then open the best that works in this one.

use crate::backend::Backend;
use crate::cpu::INTERPRETER_DRIVER;
use crate::error::BackendError;
use crate::info::{DeviceInfo, DeviceType};
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
    /// Every kind, in order of preference for placement among devices of one [`Tier`]: the
    /// vendor runtimes first (their compilers and libraries are the fastest path on their
    /// hardware), then Vulkan through ash, then wgpu (the portable path: where ash finds no
    /// Vulkan, as on macOS), then the CPU, which always works.
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

/// Where placement puts a backend whose probe passed, best first; within a tier, the order of
/// the kinds asked for decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// A device other than the host's CPU: a GPU, integrated or discrete.
    Device,
    /// The CPU backend, compiling its kernels with the system C compiler.
    Cpu,
    /// A GPU API whose driver runs on the CPU (a software renderer): the host's own cores
    /// behind a layer made for GPUs, slower than the CPU backend's compiled kernels.
    EmulatedDevice,
    /// The CPU backend interpreting its kernels (no C compiler works): slower than anything
    /// else that runs.
    Interpreter,
}

impl Tier {
    /// The tier of `kind` on the device its probe described.
    pub fn of(kind: BackendKind, info: &DeviceInfo) -> Tier {
        match (kind, info.device_type) {
            (BackendKind::Cpu, _) if info.driver == INTERPRETER_DRIVER => Tier::Interpreter,
            (BackendKind::Cpu, _) => Tier::Cpu,
            (_, DeviceType::Cpu) => Tier::EmulatedDevice,
            _ => Tier::Device,
        }
    }

    /// Why a backend of this tier comes after one of a better tier, in words.
    pub fn why_later(self) -> &'static str {
        match self {
            Tier::Device => "it comes later in placement order",
            Tier::Cpu => "a GPU that works comes before the cpu backend",
            Tier::EmulatedDevice => {
                "its device is the CPU behind a GPU driver (a software renderer), slower than \
                 the cpu backend's compiled kernels"
            }
            Tier::Interpreter => {
                "it interprets its kernels (no working C compiler), slower than any other \
                 backend"
            }
        }
    }
}

/// The order placement tries the probes that passed in: by [`Tier`], then in the order given.
/// Indices into `probes`.
pub fn placement_order(probes: &Probes) -> Vec<usize> {
    let mut ok: Vec<(Tier, usize)> = probes
        .iter()
        .enumerate()
        .filter_map(|(i, (kind, outcome))| match outcome {
            ProbeOutcome::Ok(info) => Some((Tier::of(*kind, info), i)),
            _ => None,
        })
        .collect();
    ok.sort();
    ok.into_iter().map(|(_, i)| i).collect()
}

/// Probes every one of `kinds` ([`probe_all`]), then opens in this process the best whose
/// probe passed ([`placement_order`]: a GPU before the CPU backend, the CPU backend before a
/// GPU API emulated on the CPU, the interpreter last; `kinds`' order within each), falling
/// back to the next when opening fails here. `kinds` is in order of preference, e.g.
/// [`BackendKind::ALL`].
///
/// Returns the backend and every probe's outcome; a probe that passed but whose backend did
/// not open here is reported `Unavailable` with both facts.
pub fn open_best(
    exe: &Path,
    kinds: &[BackendKind],
    timeout: Duration,
) -> Result<(Arc<dyn Backend>, Probes), PlacementError> {
    let mut probes = probe_all(exe, kinds, timeout);
    for i in placement_order(&probes) {
        let (kind, outcome) = &mut probes[i];
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

    /// The CPU backend's own description, as a probe of `backend` on a device of `ty` with
    /// `driver` would report it.
    fn described(backend: BackendKind, ty: DeviceType, driver: &str) -> ProbeOutcome {
        let mut info = crate::Backend::info(&crate::cpu::CpuBackend::interpreter()).clone();
        info.backend = backend.name().into();
        info.device_type = ty;
        info.driver = driver.into();
        ProbeOutcome::Ok(Box::new(info))
    }

    #[test]
    fn a_gpu_api_on_the_cpu_comes_after_the_cpu_backend() {
        let emulated = |kind| (kind, described(kind, DeviceType::Cpu, "llvmpipe"));
        let compiled = (
            BackendKind::Cpu,
            described(BackendKind::Cpu, DeviceType::Cpu, "C compiled by cc"),
        );
        let probes = vec![
            (
                BackendKind::Cuda,
                ProbeOutcome::Unavailable("no driver".into()),
            ),
            emulated(BackendKind::Vulkan),
            emulated(BackendKind::Wgpu),
            compiled.clone(),
        ];
        assert_eq!(placement_order(&probes), [3, 1, 2]);

        // A real GPU still comes first, whatever backend the CPU-type device is on.
        let gpu = (
            BackendKind::Wgpu,
            described(BackendKind::Wgpu, DeviceType::Discrete, "radv"),
        );
        let probes = vec![emulated(BackendKind::Vulkan), gpu, compiled];
        assert_eq!(placement_order(&probes), [1, 2, 0]);

        // Without a C compiler, the emulated GPU is faster than the interpreter.
        let interpreted = (
            BackendKind::Cpu,
            described(BackendKind::Cpu, DeviceType::Cpu, INTERPRETER_DRIVER),
        );
        let probes = vec![emulated(BackendKind::Vulkan), interpreted];
        assert_eq!(placement_order(&probes), [0, 1]);
        assert_eq!(
            Tier::of(BackendKind::Cpu, probes[1].1.device().unwrap()),
            Tier::Interpreter
        );
    }

    #[test]
    fn placement_with_nothing_to_probe_says_so() {
        match open_best(Path::new("/nonexistent"), &[], Duration::from_secs(1)) {
            Err(e) => assert_eq!(e.to_string(), "no backend works here: none was asked for"),
            Ok((b, _)) => panic!("opened {} from nothing", b.name()),
        }
    }
}

//! Opening a model on a backend as a user names it (`auto` or a backend), with the GPU
//! backends probed in a child process first so that a hanging or aborting runtime is reported
//! instead of taking this process with it; and generating with an optional cross-check.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use trine_backends::probe::{probe, ProbeOutcome};
use trine_backends::{open_best, Backend, BackendKind, Tier};
use trine_llama::{
    generate, Engine, EngineOptions, GenerateOptions, Model, ModelError, Report, Session,
};

#[derive(Debug, Error)]
pub enum RunError {
    #[error("unknown backend {name:?} (expected auto, {})", names())]
    UnknownBackend { name: String },
    #[error("backend {kind} is not usable here: {why}")]
    Unusable { kind: BackendKind, why: String },
    #[error(transparent)]
    Placement(#[from] trine_backends::PlacementError),
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// Every backend's name, in placement order, as a list in words: "cuda, hip, vulkan, wgpu or
/// cpu".
pub fn names() -> String {
    let names: Vec<&str> = BackendKind::ALL.iter().map(|k| k.name()).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    }
}

/// `auto` (the best backend that works, in placement order) or one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Auto,
    Kind(BackendKind),
}

impl Choice {
    pub fn parse(s: &str) -> Result<Choice, RunError> {
        if s.trim() == "auto" {
            return Ok(Choice::Auto);
        }
        BackendKind::parse(s)
            .map(Choice::Kind)
            .ok_or_else(|| RunError::UnknownBackend {
                name: s.to_string(),
            })
    }
}

/// Opens `kind` after a probe in a child process (`exe __probe kind`); the CPU runs no
/// foreign code and needs none.
pub fn open_probed(
    exe: &Path,
    kind: BackendKind,
    timeout: Duration,
) -> Result<Arc<dyn Backend>, RunError> {
    probe_and_open(exe, kind, timeout).map_err(|why| RunError::Unusable { kind, why })
}

/// [`open_probed`] with the reason alone as the error: the probe's reason for an unavailable
/// backend, `probe <outcome>` for one that hung or crashed, or why opening it failed.
pub fn probe_and_open(
    exe: &Path,
    kind: BackendKind,
    timeout: Duration,
) -> Result<Arc<dyn Backend>, String> {
    if kind != BackendKind::Cpu {
        match probe(exe, kind, timeout) {
            ProbeOutcome::Ok(_) => {}
            ProbeOutcome::Unavailable(why) => return Err(why),
            other => return Err(format!("probe {other}")),
        }
    }
    trine_backends::open(kind).map_err(|e| e.to_string())
}

/// The backend a choice opened, and why.
pub struct Placed {
    pub backend: Arc<dyn Backend>,
    pub kind: BackendKind,
    /// Why this one: "--backend asked for it", or what `auto` prefers.
    pub why: String,
    /// For `auto`, one line per other backend: why it was not chosen.
    pub others: Vec<String>,
}

/// Opens the backend `choice` names, saying why it was chosen and, for `auto`, why each other
/// one was not.
pub fn place(exe: &Path, choice: Choice, timeout: Duration) -> Result<Placed, RunError> {
    let kind = match choice {
        Choice::Kind(kind) => {
            return Ok(Placed {
                backend: open_probed(exe, kind, timeout)?,
                kind,
                why: "as --backend asked".into(),
                others: vec![],
            })
        }
        Choice::Auto => BackendKind::ALL,
    };
    let (backend, probes) = open_best(exe, &kind, timeout)?;
    let chosen = probes
        .iter()
        .find(|(k, _)| k.name() == backend.name())
        .map(|(k, _)| *k)
        .unwrap_or(BackendKind::Cpu);
    let tier = Tier::of(chosen, backend.info());
    let others = probes
        .iter()
        .filter(|(k, _)| *k != chosen)
        .map(|(k, o)| match o {
            ProbeOutcome::Ok(info) => {
                let why = match Tier::of(*k, info) {
                    t if t == tier => Tier::Device.why_later(),
                    t => t.why_later(),
                };
                format!("{k} ({}) works, but comes after {chosen}: {why}", info.name)
            }
            other => format!("{k}: {other}"),
        })
        .collect();
    let why = match tier {
        Tier::Device => "auto: the first GPU in placement order that works here",
        Tier::Cpu => {
            "auto: no GPU works here, and the cpu backend's compiled kernels are faster than a \
             GPU driver running on the CPU"
        }
        Tier::EmulatedDevice => {
            "auto: no GPU works here, and the cpu backend has no C compiler (gcc or clang, or \
             TRINE_CC naming one, would make it the fastest): a GPU driver running on the CPU \
             is faster than its interpreter"
        }
        Tier::Interpreter => "auto: nothing else works here",
    };
    Ok(Placed {
        backend,
        kind: chosen,
        why: why.into(),
        others,
    })
}

/// Opens the backend `choice` names; for `auto`, also one line per backend that was passed
/// over, saying why.
pub fn open_choice(
    exe: &Path,
    choice: Choice,
    timeout: Duration,
) -> Result<(Arc<dyn Backend>, Vec<String>), RunError> {
    let placed = place(exe, choice, timeout)?;
    Ok((placed.backend, placed.others))
}

/// A session on `backend`, cross-checked node by node on `checker` if given, with a run of
/// the checker's own beside it that says where the greedy choices part
/// ([`Session::with_reference`]).
pub fn session_on(
    model: &Arc<Model>,
    backend: Arc<dyn Backend>,
    checker: Option<Arc<dyn Backend>>,
    engine: EngineOptions,
) -> Result<Session, RunError> {
    let main = Engine::new(model.clone(), backend, engine)?;
    let Some(b) = checker else {
        return Ok(Session::new(main, None));
    };
    let check = main.checker(b.clone())?;
    let reference = Engine::new(model.clone(), b, engine)?;
    Ok(Session::new(main, Some(check)).with_reference(reference))
}

/// Generates after `prompt` on `backend`, cross-checked node by node on `checker` if given.
pub fn generate_on(
    model: &Arc<Model>,
    backend: Arc<dyn Backend>,
    checker: Option<Arc<dyn Backend>>,
    engine: EngineOptions,
    prompt: &[u32],
    opts: GenerateOptions,
    on_text: impl FnMut(&str),
) -> Result<Report, RunError> {
    let mut session = session_on(model, backend, checker, engine)?;
    Ok(generate(&mut session, prompt, opts, on_text)?)
}

//! Opening a model on a backend as a user names it (`auto` or a backend), with the GPU
//! backends probed in a child process first so that a hanging or aborting runtime is reported
//! instead of taking this process with it; and generating with an optional cross-check.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use trine_backends::probe::{probe, ProbeOutcome};
use trine_backends::{open_best, Backend, BackendKind};
use trine_llama::{
    generate, Engine, EngineOptions, GenerateOptions, Model, ModelError, Report, Session,
};

#[derive(Debug, Error)]
pub enum RunError {
    #[error("unknown backend {0:?} (expected auto, cpu, vulkan, hip or cuda)")]
    UnknownBackend(String),
    #[error("backend {kind} is not usable here: {why}")]
    Unusable { kind: BackendKind, why: String },
    #[error(transparent)]
    Placement(#[from] trine_backends::PlacementError),
    #[error(transparent)]
    Model(#[from] ModelError),
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
            .ok_or_else(|| RunError::UnknownBackend(s.to_string()))
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

/// Opens the backend `choice` names; for `auto`, also one line per backend that was passed
/// over, saying why.
pub fn open_choice(
    exe: &Path,
    choice: Choice,
    timeout: Duration,
) -> Result<(Arc<dyn Backend>, Vec<String>), RunError> {
    match choice {
        Choice::Kind(kind) => Ok((open_probed(exe, kind, timeout)?, vec![])),
        Choice::Auto => {
            let (backend, probes) = open_best(exe, &BackendKind::ALL, timeout)?;
            let skipped = probes
                .iter()
                .take_while(|(k, _)| k.name() != backend.name())
                .map(|(k, o)| format!("{k}: {o}"))
                .collect();
            Ok((backend, skipped))
        }
    }
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
    let main = Engine::new(model.clone(), backend, engine)?;
    let check = match checker {
        Some(b) => Some(main.checker(b)?),
        None => None,
    };
    let mut session = Session::new(main, check);
    Ok(generate(&mut session, prompt, opts, on_text)?)
}

/// The executor's sizes for a prompt and a token budget ([`EngineOptions::for_generation`]).
pub fn engine_options(model: &Model, prompt: usize, max_tokens: usize) -> EngineOptions {
    EngineOptions::for_generation(&model.config, prompt, max_tokens)
}

//! `cargo xtask conformance [--backends cpu,vulkan,wgpu,hip,cuda] [--json FILE] [--filter TEXT]`.
//!
//! GPU backends are probed in a child process first (this binary's hidden `__probe`
//! subcommand, `TRINE_PROBE_TIMEOUT`), so a runtime that hangs or aborts becomes an absent
//! column with the reason instead of a dead run.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use trine::run::probe_and_open;
use trine_backends::probe::timeout_from_env;
use trine_backends::BackendKind;
use trine_conformance::Summary;

/// What stops a conformance run before any case runs: a run that checks nothing must not
/// read as a pass.
#[derive(Debug, thiserror::Error)]
pub enum ConformanceError {
    #[error("unknown backend {0:?} (the backends: {known})", known = known_backends())]
    UnknownBackend(String),
    #[error("no backend to test: --backends is empty")]
    NoBackends,
    #[error("none of the backends opened ({0}): nothing was checked (`trine doctor` says why)")]
    NoneOpened(String),
    #[error("no case matches --filter {0:?} (a case is named kernel/dtype/shape, e.g. {1:?})")]
    NoCase(String, String),
    #[error("finding this program's path: {0}")]
    Exe(std::io::Error),
    #[error("{0}")]
    Probe(String),
    #[error("encoding the JSON records: {0}")]
    Json(#[from] serde_json::Error),
    #[error("writing {path}: {source}")]
    Write {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

fn known_backends() -> String {
    BackendKind::ALL.map(BackendKind::name).join(", ")
}

#[derive(clap::Args)]
pub struct Args {
    /// Backends to test, comma-separated: cpu, vulkan, wgpu, hip, cuda (the interpreter always runs
    /// as the reference).
    #[arg(long, value_delimiter = ',', default_value = "cpu,vulkan,wgpu")]
    backends: Vec<String>,
    /// Write the records as a JSON array to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Only cases whose name contains this text.
    #[arg(long)]
    filter: Option<String>,
}

pub fn run(args: Args) -> Result<ExitCode, String> {
    conformance(args).map_err(|e| e.to_string())
}

fn conformance(args: Args) -> Result<ExitCode, ConformanceError> {
    // Names and the filter are checked before any probe, so a typo fails at once.
    if let Some(bad) = args
        .backends
        .iter()
        .find(|n| BackendKind::parse(n).is_none())
    {
        return Err(ConformanceError::UnknownBackend(bad.clone()));
    }
    if args.backends.is_empty() {
        return Err(ConformanceError::NoBackends);
    }
    let suite = trine_conformance::suite();
    let example = suite.first().map(|c| c.name.clone()).unwrap_or_default();
    let cases: Vec<_> = suite
        .into_iter()
        .filter(|c| {
            args.filter
                .as_ref()
                .is_none_or(|f| c.name.contains(f.as_str()))
        })
        .collect();
    if cases.is_empty() {
        return Err(ConformanceError::NoCase(
            args.filter.unwrap_or_default(),
            example,
        ));
    }
    let exe = std::env::current_exe().map_err(ConformanceError::Exe)?;
    let timeout = timeout_from_env().map_err(|e| ConformanceError::Probe(e.to_string()))?;
    let columns =
        trine_conformance::columns_with(&args.backends, |kind| probe_and_open(&exe, kind, timeout));
    for c in &columns {
        match &c.backend {
            Ok(b) => eprintln!("{}: {} ({})", c.name, b.info().name, b.info().driver),
            Err(why) => eprintln!("{}: unavailable: {why}", c.name),
        }
    }
    if columns.iter().all(|c| c.backend.is_err()) {
        return Err(ConformanceError::NoneOpened(args.backends.join(", ")));
    }
    let total = cases.len();
    let mut done = 0;
    // A terminal gets one line rewritten in place; a file or pipe gets plain lines, since
    // carriage returns and escapes would be noise in a log.
    let terminal = std::io::stderr().is_terminal();
    let records = trine_conformance::run_suite(&cases, &columns, |case| {
        done += 1;
        if terminal {
            eprint!("\r\x1b[K[{done}/{total}] {}", case.name);
            let _ = std::io::stderr().flush();
        } else {
            eprintln!("[{done}/{total}] {}", case.name);
        }
    });
    if terminal {
        eprintln!("\r\x1b[K");
    }
    print!("{}", trine_conformance::matrix(&records));
    if let Some(path) = args.json {
        let text = serde_json::to_string_pretty(&records)?;
        std::fs::write(&path, text).map_err(|source| ConformanceError::Write { path, source })?;
    }
    Ok(if Summary::of(&records).fail > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

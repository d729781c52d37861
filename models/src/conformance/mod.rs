//! The conformance harness: every case on every backend, judged against the interpreter.

pub mod case;
pub mod compare;
pub mod expectations;
pub mod report;
pub mod run;

pub use case::Case;
pub use report::{matrix, Summary};
pub use run::{check_backend, check_interpreter, reference, Record, Status, INTERPRETER};

use std::sync::Arc;
use trine_backends::Backend;

/// A backend column of the run: opened, or absent with the reason.
pub struct Column {
    pub name: String,
    pub backend: Result<Arc<dyn Backend>, String>,
    /// Whether absence is a failure (`TRINE_REQUIRE_BACKENDS`).
    pub required: bool,
}

/// Runs every case on every column, plus the interpreter against the plain-Rust references.
/// `progress` is called once per case.
pub fn run_suite(
    cases: &[Case],
    columns: &[Column],
    mut progress: impl FnMut(&Case),
) -> Vec<Record> {
    let mut out = vec![];
    for case in cases {
        progress(case);
        let reference = reference(case);
        out.push(check_interpreter(case, &reference));
        for col in columns {
            out.push(match &col.backend {
                Ok(b) => check_backend(case, b, &reference),
                Err(why) => Record {
                    case: case.name.clone(),
                    backend: col.name.clone(),
                    status: if col.required {
                        Status::Fail
                    } else {
                        Status::Skip
                    },
                    nmse: None,
                    reason: Some(if col.required {
                        format!("required backend unavailable: {why}")
                    } else {
                        why.clone()
                    }),
                    kernel: case.kernel.name.clone(),
                },
            });
        }
    }
    out
}

/// Backends named in `TRINE_REQUIRE_BACKENDS` (comma-separated).
pub fn required_backends() -> Vec<String> {
    std::env::var("TRINE_REQUIRE_BACKENDS")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Opens the named backends in this process as columns; unknown names and failed opens
/// become absent columns with the reason. A backend listed in `TRINE_REQUIRE_BACKENDS` is
/// required.
pub fn columns(names: &[String]) -> Vec<Column> {
    columns_with(names, |kind| {
        trine_backends::open(kind).map_err(|e| e.to_string())
    })
}

/// [`columns`] with the backends opened by `open`, e.g. after probing each in a child process.
pub fn columns_with(
    names: &[String],
    open: impl Fn(trine_backends::BackendKind) -> Result<Arc<dyn Backend>, String>,
) -> Vec<Column> {
    let required = required_backends();
    names
        .iter()
        .map(|name| {
            let backend = match trine_backends::BackendKind::parse(name) {
                None => Err(format!("unknown backend {name:?}")),
                Some(kind) => open(kind),
            };
            Column {
                name: name.clone(),
                backend,
                required: required.contains(name),
            }
        })
        .collect()
}

//! trine-conformance: the conformance harness. Every case of the kernel library
//! ([`suite`], from `trine-ops`) runs on the interpreter, which is checked against the case's
//! plain-Rust reference, and on every backend, which is judged against the interpreter.

pub mod expectations;
pub mod report;
pub mod run;

pub use report::{matrix, Summary};
pub use run::{
    check_backend, check_interpreter, kernel_for, lacking, reference, Record, Status, INTERPRETER,
    LACKS,
};

use std::sync::Arc;
use trine_backends::Backend;
use trine_ops::case::Case;

/// Every conformance case: the foundation kernels, then the op library.
pub fn suite() -> Vec<Case> {
    let mut v = trine_ops::kernels::cases();
    v.extend(trine_ops::cases());
    v
}

/// Every distinct kernel of the suite (variants and fallbacks included), by name.
pub fn all_kernels() -> Vec<trine_ir::Kernel> {
    let mut out: Vec<trine_ir::Kernel> = vec![];
    for c in suite() {
        for k in std::iter::once(c.kernel).chain(c.fallback) {
            if !out.iter().any(|o| o.name == k.name) {
                out.push(k);
            }
        }
    }
    out
}

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
/// required; a required `cpu` that found no working C compiler and interprets its kernels is
/// absent too, since what a run requiring it means to test is the compiled code.
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
            let required = required.contains(name);
            let backend = match trine_backends::BackendKind::parse(name) {
                None => Err(format!("unknown backend {name:?}")),
                Some(kind) => open(kind),
            };
            let backend = match backend {
                Ok(b) if required && b.info().driver == trine_backends::cpu::INTERPRETER_DRIVER => {
                    Err(format!(
                        "it fell back to the interpreter: {}",
                        b.info().notes.join("; ")
                    ))
                }
                b => b,
            };
            Column {
                name: name.clone(),
                backend,
                required,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run by [`a_required_cpu_without_a_compiler_is_absent`] in a child process, with the
    /// environment it sets (changing this multi-threaded process's would race other tests).
    #[test]
    #[ignore = "run in a child process by a_required_cpu_without_a_compiler_is_absent"]
    fn child_cpu_column() {
        let col = columns(&["cpu".to_string()]).remove(0);
        let required = std::env::var("TRINE_REQUIRE_BACKENDS").unwrap_or_default() == "cpu";
        assert_eq!(col.required, required);
        match col.backend {
            Err(why) => {
                assert!(required, "an optional cpu is absent: {why}");
                assert!(why.contains("/nonexistent"), "{why}");
            }
            Ok(b) => {
                assert!(!required, "a required cpu interprets: {:?}", b.info().notes);
                assert_eq!(b.info().driver, trine_backends::cpu::INTERPRETER_DRIVER);
            }
        }
    }

    /// `TRINE_CC` names a compiler that does not exist: the CPU backend interprets, which is
    /// fine where nothing requires it and makes a required `cpu` absent (so a failure).
    #[test]
    fn a_required_cpu_without_a_compiler_is_absent() {
        for require in ["cpu", ""] {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "tests::child_cpu_column", "--ignored"])
                .env(trine_backends::cpu::CC_ENV, "/nonexistent")
                .env("TRINE_REQUIRE_BACKENDS", require)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("1 passed"),
                "TRINE_REQUIRE_BACKENDS={require:?}:\n{text}"
            );
        }
    }
}

//! The probe child: opens one backend in this (throw-away) process and runs the steps,
//! reporting each on stdout before it starts, so that a hang or a crash names its step.

use super::protocol::{Line, Step};
use super::steps;
use crate::registry::{open, BackendKind};
use std::io::Write;
use std::process::ExitCode;

/// Exit status of a child whose backend is unavailable or failed a step (reported in a
/// [`Line::Fail`] before exiting).
pub const EXIT_FAILED: u8 = 3;

/// Set by the parent to its process id, so the child can tell whether it is already orphaned.
pub(super) const PARENT_ENV: &str = "TRINE_PROBE_PARENT";

/// Makes the kernel kill this child when its parent dies. The parent runs the child in a
/// process group of its own (so that it can kill everything the child starts), which also
/// keeps a Ctrl-C at the terminal from reaching the child: without this, interrupting
/// `trine doctor` would leave a child hung in a runtime call forever.
#[cfg(target_os = "linux")]
fn die_with_parent() {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and touches no memory.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    // A parent that died before the call will never send the signal: check it is still there.
    let parent = std::env::var(PARENT_ENV)
        .ok()
        .and_then(|v| v.parse::<libc::pid_t>().ok());
    // SAFETY: getppid has no preconditions.
    if parent.is_some_and(|p| p != unsafe { libc::getppid() }) {
        std::process::exit(i32::from(EXIT_FAILED));
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent() {}

/// Writes one event and flushes it at once: the line must reach the parent even if the next
/// library call never returns or kills the process.
fn emit(line: Line) {
    let mut out = std::io::stdout().lock();
    // A closed stdout means the parent is gone; the probe's result has no reader then.
    let _ = writeln!(out, "{}", line.encode());
    let _ = out.flush();
}

/// The body of `trine __probe <backend>`: probes `kind` and exits 0 when every step passed,
/// [`EXIT_FAILED`] when one failed with an error.
pub fn child_main(kind: BackendKind) -> ExitCode {
    die_with_parent();
    emit(Line::Start(Step::Init));
    let backend = match open(kind) {
        Ok(b) => b,
        Err(e) => {
            emit(Line::Fail {
                step: Step::Init,
                reason: steps::reason(e),
            });
            return ExitCode::from(EXIT_FAILED);
        }
    };
    emit(Line::Done(Step::Init));
    match steps::run(&*backend, &mut emit) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            emit(Line::Fail {
                step: f.step,
                reason: f.reason,
            });
            ExitCode::from(EXIT_FAILED)
        }
    }
}

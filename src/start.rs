//! What a program using trine's backends does first in `main`. trine runs the program again
//! as a child to probe a backend (`__probe <backend>`: placement and `run::open_probed`) and
//! to compile a HIP kernel whose compiler may abort (`__hip_compile`); the program must
//! answer those. And Mesa's Vulkan drivers warn on every run without a runtime directory,
//! which must be set before any thread starts.

use std::process::ExitCode;
use trine_backends::{hip, probe, BackendKind};

/// Call first thing in `main`, before any thread starts. `Some(code)` when this process is
/// one of trine's children: its work is done and `main` returns `code`.
pub fn start() -> Option<ExitCode> {
    #[cfg(unix)]
    trine_backends::vulkan::ensure_runtime_dir();
    let mut args = std::env::args_os().skip(1);
    let role = args.next()?;
    if role == hip::CHILD_ARG {
        hip::compile_child_main();
    }
    if role != probe::SUBCOMMAND {
        return None;
    }
    let backend = args.next().unwrap_or_default();
    let Some(kind) = backend.to_str().and_then(BackendKind::parse) else {
        eprintln!("unknown backend {backend:?}");
        return Some(ExitCode::from(2));
    };
    Some(probe::child_main(kind))
}

//! `cargo xtask conformance [--backends cpu,vulkan,wgpu,hip,cuda] [--json FILE] [--filter TEXT]`.
//!
//! GPU backends are probed in a child process first (this binary's hidden `__probe`
//! subcommand, `TRINE_PROBE_TIMEOUT`), so a runtime that hangs or aborts becomes an absent
//! column with the reason instead of a dead run.

use std::io::Write;
use std::process::ExitCode;
use trine::run::probe_and_open;
use trine_backends::probe::timeout_from_env;
use trine_conformance::Summary;

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
    let exe = std::env::current_exe().map_err(|e| format!("finding this program's path: {e}"))?;
    let timeout = timeout_from_env().map_err(|e| e.to_string())?;
    let columns =
        trine_conformance::columns_with(&args.backends, |kind| probe_and_open(&exe, kind, timeout));
    for c in &columns {
        match &c.backend {
            Ok(b) => eprintln!("{}: {} ({})", c.name, b.info().name, b.info().driver),
            Err(why) => eprintln!("{}: unavailable: {why}", c.name),
        }
    }
    let cases: Vec<_> = trine_conformance::suite()
        .into_iter()
        .filter(|c| {
            args.filter
                .as_ref()
                .is_none_or(|f| c.name.contains(f.as_str()))
        })
        .collect();
    let total = cases.len();
    let mut done = 0;
    let records = trine_conformance::run_suite(&cases, &columns, |case| {
        done += 1;
        eprint!("\r\x1b[K[{done}/{total}] {}", case.name);
        let _ = std::io::stderr().flush();
    });
    eprintln!("\r\x1b[K");
    print!("{}", trine_conformance::matrix(&records));
    if let Some(path) = args.json {
        let text = serde_json::to_string_pretty(&records).map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(if Summary::of(&records).fail > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

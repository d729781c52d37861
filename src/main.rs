//! The `trine` command.

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use trine_backends::hip;
use trine_backends::probe::{self, timeout_from_env};
use trine_backends::BackendKind;

#[derive(Parser)]
#[command(
    name = "trine",
    version,
    about = "Kernels written once, run on Vulkan, HIP, CUDA and the CPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Probe every backend in a child process and print its status and device information.
    Doctor {
        /// Print JSON for tools.
        #[arg(long)]
        json: bool,
    },
    /// Generate text from a Llama-family GGUF model.
    Generate(cmd::generate::Args),
    /// Write a random-weight GGUF with a real model's layout.
    SynthModel(cmd::synth::Args),
    /// Probe one backend in this process, reporting each step on stdout (what `doctor` and
    /// placement run in a child process).
    #[command(name = probe::SUBCOMMAND, hide = true)]
    Probe { backend: String },
    /// Compile one HIP kernel in this process, request on stdin (what the HIP backend runs in
    /// a child process when the compiler may abort).
    #[command(name = hip::CHILD_ARG, hide = true)]
    HipCompile,
}

fn main() -> ExitCode {
    // Before any thread starts: Mesa's Vulkan drivers warn on every run without it.
    #[cfg(unix)]
    trine_backends::vulkan::ensure_runtime_dir();
    match Cli::parse().command {
        Command::Doctor { json } => doctor(json),
        Command::Generate(a) => report(cmd::generate::run(a)),
        Command::SynthModel(a) => report(cmd::synth::run(a)),
        Command::Probe { backend } => match BackendKind::parse(&backend) {
            Some(kind) => probe::child_main(kind),
            None => {
                eprintln!("unknown backend {backend:?}");
                ExitCode::from(2)
            }
        },
        Command::HipCompile => hip::compile_child_main(),
    }
}

fn report(r: Result<ExitCode, String>) -> ExitCode {
    r.unwrap_or_else(|e| {
        eprintln!("error: {e}");
        ExitCode::FAILURE
    })
}

fn doctor(json: bool) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: cannot find this program's own path to probe with: {e}");
            return ExitCode::FAILURE;
        }
    };
    let timeout = match timeout_from_env() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let reports = trine::doctor::diagnose(&exe, timeout);
    if json {
        let v = trine::doctor::to_json(&reports);
        println!(
            "{}",
            serde_json::to_string_pretty(&v).unwrap_or_else(|e| e.to_string())
        );
    } else {
        print!("{}", trine::doctor::to_text(&reports));
    }
    ExitCode::SUCCESS
}

//! `cargo xtask`: the demo, conformance runs and kernel emission.

mod bench;
mod conformance;
mod demo;
mod emit;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Time every op at model shapes on every backend, against the copy roof and `gemm`.
    Bench(bench::Args),
    /// Run every kernel on every backend against the reference interpreter.
    Conformance(conformance::Args),
    /// Generate with SmolLM2 on every working backend, cross-checked against the CPU.
    Demo(demo::Args),
    /// Print what a kernel lowers to.
    Emit(emit::Args),
    /// Probe one backend in this process, step by step (run in a child by `conformance`).
    #[command(name = trine_backends::probe::SUBCOMMAND, hide = true)]
    Probe { backend: String },
    /// Compile one HIP kernel in this process (the HIP backend's compile child).
    #[command(name = trine_backends::hip::CHILD_ARG, hide = true)]
    HipCompile,
}

fn main() -> ExitCode {
    // Before any thread starts: Mesa's Vulkan drivers warn on every run without it.
    #[cfg(unix)]
    trine_backends::vulkan::ensure_runtime_dir();
    let result = match Cli::parse().command {
        Command::Bench(a) => bench::run(a),
        Command::Conformance(a) => conformance::run(a),
        Command::Emit(a) => emit::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Probe { backend } => match trine_backends::BackendKind::parse(&backend) {
            Some(kind) => return trine_backends::probe::child_main(kind),
            None => Err(format!("unknown backend {backend:?}")),
        },
        Command::HipCompile => trine_backends::hip::compile_child_main(),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

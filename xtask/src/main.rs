//! `cargo xtask`: the demo, conformance runs, benches, tuning and kernel emission.

mod bench;
mod conformance;
mod demo;
mod emit;
mod tune;

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
    /// Measure the decode products' forms at a model's shapes and store the fastest as the
    /// device's tuning table.
    Tune(tune::Args),
}

fn main() -> ExitCode {
    // The probe and HIP-compile children this program is re-run as, and the Vulkan runtime
    // directory, before any thread starts.
    if let Some(code) = trine::start() {
        return code;
    }
    let result = match Cli::parse().command {
        Command::Bench(a) => bench::run(a),
        Command::Conformance(a) => conformance::run(a),
        Command::Emit(a) => emit::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Tune(a) => tune::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

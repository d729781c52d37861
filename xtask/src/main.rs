//! `cargo xtask`: conformance runs and kernel emission.

mod conformance;
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
    /// Run every kernel on every backend against the reference interpreter.
    Conformance(conformance::Args),
    /// Print what a kernel lowers to.
    Emit(emit::Args),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Conformance(a) => conformance::run(a),
        Command::Emit(a) => emit::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

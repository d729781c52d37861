//! The `trine` command.

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use trine_backends::probe::{timeout_from_env, ProbeError, TIMEOUT_ENV};

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
    /// Talk with a model through its chat template: each line of stdin is a message.
    Chat(cmd::chat::Args),
    /// Write a random-weight GGUF with a real model's layout.
    SynthModel(cmd::synth::Args),
}

fn main() -> ExitCode {
    // The probe and HIP-compile children this program is re-run as, and the Vulkan runtime
    // directory, before any thread starts.
    if let Some(code) = trine::start() {
        return code;
    }
    match Cli::parse().command {
        Command::Doctor { json } => cmd::finish(doctor(json)),
        Command::Generate(a) => cmd::finish(cmd::generate::run(a)),
        Command::Chat(a) => cmd::finish(cmd::chat::run(a)),
        Command::SynthModel(a) => cmd::finish(cmd::synth::run(a)),
    }
}

#[derive(Debug, thiserror::Error)]
enum DoctorError {
    #[error("cannot find this program's own path to probe with: {0}")]
    OwnPath(std::io::Error),
    #[error(transparent)]
    ProbeTimeout(#[from] ProbeError),
    #[error("writing to stdout: {0}")]
    Output(std::io::Error),
    #[error(
        "no backend works here: every probe failed (each one's reason is in the report); with \
         {TIMEOUT_ENV} set, a probe may need longer than it allows"
    )]
    NothingWorks,
}

impl cmd::Failure for DoctorError {
    fn status(&self) -> u8 {
        match self {
            DoctorError::ProbeTimeout(_) => 2,
            _ => 1,
        }
    }
}

/// Probes every backend and prints what it found; fails where no backend works, which a
/// script running `trine doctor` first can test.
fn doctor(json: bool) -> Result<ExitCode, DoctorError> {
    let exe = std::env::current_exe().map_err(DoctorError::OwnPath)?;
    let timeout = timeout_from_env()?;
    let reports = trine::doctor::diagnose(&exe, timeout);
    let text = if json {
        let v = trine::doctor::to_json(&reports);
        format!(
            "{}\n",
            serde_json::to_string_pretty(&v).unwrap_or_else(|e| e.to_string())
        )
    } else {
        trine::doctor::to_text(&reports)
    };
    if let Err(e) = cmd::out::write(&text) {
        return if cmd::out::closed(&e) {
            Ok(ExitCode::SUCCESS)
        } else {
            Err(DoctorError::Output(e))
        };
    }
    anything_works(&reports)?;
    Ok(ExitCode::SUCCESS)
}

fn anything_works(reports: &[trine::doctor::Report]) -> Result<(), DoctorError> {
    if reports.iter().any(|r| r.outcome.is_ok()) {
        Ok(())
    } else {
        Err(DoctorError::NothingWorks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trine::doctor::Report;
    use trine_backends::probe::{ProbeOutcome, Step};
    use trine_backends::BackendKind;

    fn report(kind: BackendKind, outcome: ProbeOutcome) -> Report {
        Report {
            kind,
            outcome,
            runtime: vec![],
            advice: vec![],
        }
    }

    /// A timeout too short for any probe reports every backend hung: doctor fails then.
    #[test]
    fn doctor_fails_where_every_probe_failed() {
        let hung = |kind| {
            let outcome = ProbeOutcome::Hung {
                step: Step::Spawn,
                device: None,
            };
            report(kind, outcome)
        };
        let all_hung: Vec<Report> = BackendKind::ALL.into_iter().map(hung).collect();
        let e = anything_works(&all_hung).unwrap_err();
        assert_eq!(cmd::Failure::status(&e), 1);
        assert!(e.to_string().starts_with("no backend works here"), "{e}");

        let cpu = trine_backends::cpu::CpuBackend::interpreter();
        let cpu = trine_backends::Backend::info(&cpu);
        let mut some = all_hung;
        some.push(report(
            BackendKind::Cpu,
            ProbeOutcome::Ok(Box::new(cpu.clone())),
        ));
        assert!(anything_works(&some).is_ok());
    }
}

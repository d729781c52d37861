//! `trine synth-model`: a random-weight GGUF with a real model's architecture, metadata,
//! shapes and tensor types, for benchmarks where the real file cannot be copied.

use clap::Args as ClapArgs;
use std::path::PathBuf;
use std::process::ExitCode;
use trine_gguf::{synth, Gguf, GgufError};

/// The preset that needs no file.
const SMOLLM2: &str = "smollm2-135m";

#[derive(ClapArgs)]
pub struct Args {
    /// A GGUF file to imitate, or `smollm2-135m` for SmolLM2-135M-Instruct Q4_1's layout.
    #[arg(long)]
    like: String,
    #[arg(short = 'o', long)]
    output: PathBuf,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    let writer = if a.like == SMOLLM2 {
        synth::synth_smollm2_135m(a.seed)
    } else {
        let src = Gguf::open(a.like.as_ref()).map_err(|e| with_path(&a.like, e))?;
        synth::synth_like(&src, a.seed)
    }
    .map_err(|e| e.to_string())?;
    writer
        .write(&a.output)
        .map_err(|e| with_path(&a.output.display().to_string(), e))?;
    eprintln!(
        "wrote {} ({} tensors, like {})",
        a.output.display(),
        writer.tensors().len(),
        a.like
    );
    Ok(ExitCode::SUCCESS)
}

/// `e` with the file it is about, once: a file system error names its path already.
fn with_path(path: &str, e: GgufError) -> String {
    match e {
        GgufError::Io { .. } => e.to_string(),
        e => format!("{path}: {e}"),
    }
}

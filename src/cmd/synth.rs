//! `trine synth-model`: a random-weight GGUF with a real model's architecture, metadata,
//! shapes and tensor types, for benchmarks where the real file cannot be copied, and the tests'
//! tiny layouts for the reference scripts.

use clap::Args as ClapArgs;
use std::path::PathBuf;
use std::process::ExitCode;
use trine_gguf::synth::rope::Llama3Rope;
use trine_gguf::synth::{Mix, SynthShape};
use trine_gguf::{synth, Gguf, GgufError, GgufWriter, TensorType, Value};

#[derive(ClapArgs)]
pub struct Args {
    /// A GGUF file to imitate, or a layout: smollm2-135m (SmolLM2-135M-Instruct Q4_1's),
    /// llama-3.2-1b, llama-3-8b, llama-3.1-8b, llama-3-70b (Q4_K_M unless --type or --mix says
    /// otherwise; Llama 3.1 and 3.2 with their rope_freqs.weight and 131,072-token context),
    /// qwen2.5-0.5b, qwen3-0.6b (Q8_0), qwen2.5-7b, qwen3-8b (Q4_K_M), gemma-3-1b (Q8_0),
    /// mistral-7b (v0.3), phi-3.5-mini (Q4_K_M,
    /// with LongRoPE's factors),
    /// phi-4-mini (Q4_K_M, rope on 96 of each head's 128), qwen3-30b-a3b (Qwen3-MoE, Q4_K_M),
    /// or the tests' tiny, qwen2-tiny, qwen3-tiny, gemma3-tiny, mistral-tiny, phi3-tiny,
    /// phi4-tiny, qwen3moe-tiny.
    #[arg(long)]
    like: String,
    /// Every matrix, the embedding and the output head in this type (q4_k, q8_0, …), for a
    /// layout.
    #[arg(long = "type", conflicts_with = "mix")]
    ty: Option<String>,
    /// The types llama.cpp's quantizer would give: q4_k_m, for a layout.
    #[arg(long)]
    mix: Option<String>,
    #[arg(short = 'o', long)]
    output: PathBuf,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    let preset = SynthShape::PRESETS.iter().find(|(name, _)| *name == a.like);
    let writer = match preset {
        Some(&(name, shape)) => {
            with_rope(name, shape, synth::synth_llama(typed(shape, &a)?, a.seed))
        }
        None if a.ty.is_some() || a.mix.is_some() => {
            return Err(format!(
                "--type and --mix apply to a layout ({}), not to a file",
                names()
            ))
        }
        None if !std::path::Path::new(&a.like).exists() => {
            return Err(format!(
                "--like {}: neither a layout ({}) nor a file",
                a.like,
                names()
            ))
        }
        None => {
            let src = Gguf::open(a.like.as_ref()).map_err(|e| with_path(&a.like, e))?;
            synth::synth_like(&src, a.seed)
        }
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

/// The preset's file with the rope scaling its model carries, where it has one, and the
/// context that scaling trains for.
fn with_rope(
    preset: &str,
    shape: SynthShape,
    w: Result<GgufWriter, GgufError>,
) -> Result<GgufWriter, GgufError> {
    let mut w = w?;
    if let Some(rope) = Llama3Rope::of_preset(preset) {
        rope.apply(&mut w, (shape.n_embd / u64::from(shape.n_head)) as u32)?;
        w.add("llama.context_length", Value::U32(rope.context))?;
    }
    Ok(w)
}

fn names() -> String {
    let names: Vec<&str> = SynthShape::PRESETS.iter().map(|(n, _)| *n).collect();
    names.join(", ")
}

/// `shape` with the types `--type` or `--mix` asks for.
fn typed(shape: SynthShape, a: &Args) -> Result<SynthShape, String> {
    if let Some(name) = &a.ty {
        let ty = TensorType::ALL
            .into_iter()
            .find(|t| t.name() == name.to_lowercase())
            .ok_or_else(|| {
                let all: Vec<&str> = TensorType::ALL.iter().map(|t| t.name()).collect();
                format!("--type {name}: not a type ({})", all.join(", "))
            })?;
        return Ok(SynthShape {
            matrices: ty,
            embedding: ty,
            output: shape.output.map(|_| ty),
            mix: Mix::AsGiven,
            ..shape
        });
    }
    match a.mix.as_deref() {
        None => Ok(shape),
        Some("q4_k_m") => Ok(SynthShape {
            mix: Mix::Q4KM,
            ..shape
        }),
        Some(other) => Err(format!("--mix {other}: the mixes are q4_k_m")),
    }
}

/// `e` with the file it is about, once: a file system error names its path already.
fn with_path(path: &str, e: GgufError) -> String {
    match e {
        GgufError::Io { .. } => e.to_string(),
        e => format!("{path}: {e}"),
    }
}

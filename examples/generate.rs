//! Text from a GGUF model through trine's library API: the model (by default SmolLM2 from
//! trine's asset cache) on the best backend here, 32 greedy tokens streamed, then the speed.
//!
//!     cargo run --release --example generate -- [M.gguf] ["prompt"]

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use trine::backends::probe::timeout_from_env;
use trine::gguf::assets;
use trine::llama::{EngineOptions, GenerateOptions, Model, Sampling};
use trine::run::{generate_on, open_choice, Choice};

const TOKENS: usize = 32;

fn main() -> ExitCode {
    if let Some(code) = trine::start() {
        return code;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args_os().skip(1);
    let path = match args.next() {
        Some(p) => PathBuf::from(p),
        None => assets::find(assets::SMOLLM2).ok_or_else(|| {
            format!(
                "no model given and {} is not in {}: pass a GGUF file, or fetch it with \
                 `bash .ci/fetch-assets`",
                assets::SMOLLM2,
                assets::dir().display()
            )
        })?,
    };
    let text: String = args
        .next()
        .map_or("Once upon a time,".into(), |t| t.to_string_lossy().into());
    let model = Arc::new(Model::open(&path)?);
    let prompt = model.tokenizer.encode(&text, true, true)?;
    // `auto` probes each GPU backend in a child process (this program run again: see
    // trine::start), so that a runtime that hangs or aborts is passed over, not fatal.
    let exe = std::env::current_exe()?;
    let (backend, skipped) = open_choice(&exe, Choice::Auto, timeout_from_env()?)?;
    for why in skipped {
        eprintln!("skipped {why}");
    }
    eprintln!("{} on {}", backend.name(), backend.info().name);
    let sizes = EngineOptions::for_generation(&model.config, prompt.len(), TOKENS);
    let options = GenerateOptions {
        max_tokens: TOKENS,
        sampling: Sampling::default(), // temperature 0: greedy
        stop_at_end: true,
        stop_on_divergence: false,
    };
    print!("{text}");
    let report = generate_on(&model, backend, None, sizes, &prompt, options, |piece| {
        print!("{piece}");
        let _ = std::io::stdout().flush();
    })?;
    println!();
    eprintln!(
        "prompt {} tokens at {:.1} tokens/s, then {} tokens at {:.1} tokens/s",
        report.prompt_tokens,
        report.prefill_tps,
        report.generated_tokens.len(),
        report.decode_tps
    );
    Ok(())
}

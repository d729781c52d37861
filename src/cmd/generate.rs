//! `trine generate`: text from a GGUF model on a backend, optionally cross-checked.

use clap::Args as ClapArgs;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use trine::run::{engine_options, generate_on, open_choice, open_probed, Choice};
use trine_backends::probe::timeout_from_env;
use trine_backends::BackendKind;
use trine_llama::{GenerateOptions, Model, Report, Sampling};

#[derive(ClapArgs)]
pub struct Args {
    /// A Llama-family GGUF file.
    #[arg(long)]
    model: PathBuf,
    #[arg(long)]
    prompt: String,
    /// Tokens to generate at most.
    #[arg(short = 'n', long, default_value_t = 64)]
    n: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temp: f32,
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// auto, cpu, vulkan, hip or cuda.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// Run this backend in lock-step and report, per step, the first op whose output differs
    /// beyond its bound.
    #[arg(long)]
    cross_check: Option<String>,
    /// Stop the run at the first step that diverges.
    #[arg(long)]
    stop_on_divergence: bool,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    json: bool,
    /// Treat special-token text in the prompt (e.g. `<|im_start|>`) as plain text.
    #[arg(long)]
    no_special: bool,
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding this program's path: {e}"))?;
    let timeout = timeout_from_env().map_err(|e| e.to_string())?;
    let choice = Choice::parse(&a.backend).map_err(|e| e.to_string())?;
    let checker = match &a.cross_check {
        Some(s) => Some(BackendKind::parse(s).ok_or_else(|| format!("unknown backend {s:?}"))?),
        None => None,
    };
    let model = Arc::new(Model::open(&a.model).map_err(|e| format!("{}: {e}", a.model.display()))?);
    let prompt = model
        .tokenizer
        .encode(&a.prompt, true, !a.no_special)
        .map_err(|e| e.to_string())?;
    let (backend, skipped) = open_choice(&exe, choice, timeout).map_err(|e| e.to_string())?;
    for line in &skipped {
        eprintln!("skipped {line}");
    }
    let checker = match checker {
        Some(k) => Some(open_probed(&exe, k, timeout).map_err(|e| e.to_string())?),
        None => None,
    };
    let opts = GenerateOptions {
        max_tokens: a.n,
        sampling: Sampling {
            temperature: a.temp,
            top_k: a.top_k,
            top_p: a.top_p,
            seed: a.seed,
        },
        stop_at_end: true,
        stop_on_divergence: a.stop_on_divergence,
    };
    let sizes = engine_options(&model, prompt.len(), a.n);
    let json = a.json;
    let report = generate_on(&model, backend, checker, sizes, &prompt, opts, |piece| {
        if !json {
            print!("{piece}");
            let _ = std::io::stdout().flush();
        }
    })
    .map_err(|e| e.to_string())?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
    } else {
        println!();
        eprint!("{}", summary(&report));
    }
    Ok(if report.diverged {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

fn summary(r: &Report) -> String {
    let mut s = format!(
        "backend {} ({})\nprefill: {} tokens in {:.3} s, {:.1} tokens/s\ndecode: {} tokens in {:.3} s, {:.1} tokens/s\n",
        r.backend,
        r.devices.join(", "),
        r.prompt_tokens,
        r.prefill_seconds,
        r.prefill_tps,
        r.generated_tokens.len(),
        r.decode_seconds,
        r.decode_tps
    );
    if let Some(other) = &r.checked_against {
        let over: Vec<_> = r
            .cross_check
            .iter()
            .filter_map(|c| c.first_over_bound.as_ref().map(|d| (c.step, d)))
            .collect();
        let worst = r
            .cross_check
            .iter()
            .filter_map(|c| c.worst.nmse)
            .fold(0.0f64, f64::max);
        if over.is_empty() {
            s += &format!(
                "cross-check against {other}: {} steps agree (worst node NMSE {worst:.2e})\n",
                r.cross_check.len()
            );
        } else {
            s += &format!(
                "cross-check against {other}: {} steps diverge\n",
                over.len()
            );
            for (step, d) in over {
                let nmse = d
                    .nmse
                    .map_or_else(|| "NaN/Inf pattern".into(), |e| format!("{e:.2e}"));
                let layer = d.layer.map_or_else(String::new, |l| format!(" layer {l}"));
                s += &format!(
                    "  step {step}: {}{layer} NMSE {nmse} > {:.0e}\n",
                    d.op, d.bound
                );
            }
        }
    }
    for n in &r.notes {
        s += &format!("note: {n}\n");
    }
    s
}

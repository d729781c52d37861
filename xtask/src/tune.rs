//! `cargo xtask tune (--model FILE | --models LAYOUT,…) [--backends cuda,vulkan] [--reps N]
//! [--dry-run]`: measures the GPU decode products on the weights' blocks
//! ([`trine_ops::matvec_q8_blocks`]) at a model's shapes in every form the planner can take
//! (teams of the whole workgroup or of 32 invocations on pairs of units, in one or two steps
//! an iteration; one, two or four rows a team), each as the executor dispatches it in a
//! decode step, and stores the fastest per shape as the device's tuning table in the cache
//! ([`trine_llama::tuned`]), which every later executor on that device reads.
//!
//! A candidate replaces the default only where its median is [`MARGIN`] below the default's
//! (differences within the spread of repeated runs would otherwise flip a choice back and
//! forth between tunings), and only where the whole decode step, recorded and replayed as
//! `trine generate` runs it, is faster with it than without ([`STEP_MARGIN`]): a node timed
//! alone does not overlap the one before it, as CUDA's launches do in a step, and a form that
//! wins alone can lose there. The winners are tried one at a time, the largest gain first, each
//! kept where the step's tokens per second rise.

use crate::bench::{open, Policy, Stats};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use trine_backends::Backend;
use trine_benches::steps::{self, Layout};
use trine_gguf::quant::WeightType;
use trine_llama::speed::{measure, Test};
use trine_llama::tuned::{ProductChoice, Tuned};
use trine_llama::{Engine, EngineOptions, Model};
use trine_ops::matvec_q8_blocks::Teams;

#[derive(clap::Args)]
pub struct Args {
    /// Backends to tune, comma-separated (a backend whose decode step has no products on the
    /// weights' blocks, as a CPU's, has nothing to tune).
    #[arg(long, value_delimiter = ',', default_value = "vulkan,hip,cuda")]
    backends: Vec<String>,
    /// The GGUF model whose shapes to tune.
    #[arg(long, conflicts_with = "models")]
    model: Option<PathBuf>,
    /// Synthetic layouts (one layer of random weights each) whose shapes to tune:
    /// smollm2-135m, llama-7b, llama-3-8b, qwen3-30b-a3b, gemma-3-1b.
    #[arg(long, value_delimiter = ',')]
    models: Option<Vec<String>>,
    /// Repetitions of the decode step per candidate (default: at least 10 and 0.1 s, at most
    /// 50 or 3 s, after two).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    reps: Option<usize>,
    /// Print the table without storing it.
    #[arg(long)]
    dry_run: bool,
    /// Also print every form's median at each shape.
    #[arg(long)]
    forms: bool,
}

/// How much faster than the default a candidate must be to replace it.
pub const MARGIN: f64 = 0.02;

/// How much faster the decode step must get for a node's winner to be kept.
pub const STEP_MARGIN: f64 = 0.005;

/// Tokens of the decode test each step check runs, and its repetitions.
const STEP_TOKENS: u32 = 64;
const STEP_REPS: usize = 3;

/// Rows a team takes in the candidates.
const ROWS: [u32; 3] = [1, 2, 4];

/// The team forms of the candidates.
const TEAMS: [Teams; 3] = [Teams::WHOLE, Teams::pairs(1), Teams::pairs(2)];

/// A product shape: the weights' type as the device reads them, rows, columns.
type Shape = (WeightType, u32, u32);

pub fn run(args: Args) -> Result<ExitCode, String> {
    let models = models(&args)?;
    let (columns, absent) = open(&args.backends).map_err(|e| e.to_string())?;
    for (name, why) in &absent {
        eprintln!("{name}: absent: {why}");
    }
    if columns.is_empty() {
        return Err("no backend to tune opened here".into());
    }
    let policy = policy(args.reps);
    for (name, backend) in columns {
        let info = backend.info();
        eprintln!("{name}: {} ({})", info.name, info.driver);
        let mut tuned = Tuned::empty(info);
        let mut measured = vec![];
        for (label, model) in &models {
            let fastest = tune_model(&backend, model, &policy, args.forms)?;
            let chosen = confirm(&backend, model, fastest)?;
            if chosen.is_empty() {
                println!(
                    "{name} {label}: nothing to tune: its decode step has no products on the \
                     weights' blocks"
                );
            } else {
                print!("{}", table(&name, label, &chosen));
            }
            for (c, verdict) in chosen {
                tuned.products.retain(|p| !same_shape(p, &c));
                if verdict == Verdict::Kept {
                    tuned.products.push(c.clone());
                }
                measured.push(c);
            }
        }
        if args.dry_run || measured.is_empty() {
            continue;
        }
        // What an earlier run chose at shapes not measured now stays.
        let before = Tuned::load(info).ok().flatten();
        for p in before.iter().flat_map(|b| &b.products) {
            if !measured.iter().any(|q| same_shape(q, p)) {
                tuned.products.push(p.clone());
            }
        }
        if tuned.products.is_empty() && before.is_none() {
            println!("{name}: the defaults stand; nothing stored");
            continue;
        }
        let path = tuned
            .store(info)
            .map_err(|e| format!("{name}: storing the tuning table: {e}"))?;
        println!(
            "{name}: stored {} ({} shapes)",
            path.display(),
            tuned.products.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn same_shape(a: &ProductChoice, b: &ProductChoice) -> bool {
    a.shape() == b.shape()
}

fn models(args: &Args) -> Result<Vec<(String, Arc<Model>)>, String> {
    if let Some(path) = &args.model {
        let m = Model::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        return Ok(vec![(path.display().to_string(), Arc::new(m))]);
    }
    let Some(names) = &args.models else {
        return Err("name a model to tune: --model FILE or --models LAYOUT,…".into());
    };
    names
        .iter()
        .map(|n| {
            let layout = Layout::parse(n).ok_or_else(|| {
                let known: Vec<_> = Layout::NAMED.iter().map(|l| l.name()).collect();
                format!("unknown layout {n:?} (known: {})", known.join(", "))
            })?;
            Ok((n.clone(), layout.model(1)?))
        })
        .collect()
}

fn policy(reps: Option<usize>) -> Policy {
    match reps {
        Some(n) => Policy::exact(n),
        None => Policy {
            warmup: 2,
            min_reps: 10,
            min_time: Duration::from_millis(100),
            max_reps: 50,
            max_time: Duration::from_secs(3),
        },
    }
}

/// A candidate: every shape takes `(rows per team, teams)`; `None` is the defaults.
type Candidate = Option<(u32, Teams)>;

/// Each blocks product shape of `model`'s decode step on `backend`: the default's median and
/// the fastest candidate's, as the table stores them.
fn tune_model(
    backend: &Arc<dyn Backend>,
    model: &Arc<Model>,
    policy: &Policy,
    forms: bool,
) -> Result<Vec<ProductChoice>, String> {
    let info = backend.info();
    let candidates: Vec<Candidate> = std::iter::once(None)
        .chain(
            TEAMS
                .iter()
                .flat_map(|&t| ROWS.iter().map(move |&r| Some((r, t)))),
        )
        .collect();
    // Per shape, per candidate that applied to it: the samples of every node of the shape.
    let mut samples: HashMap<Shape, Vec<(Candidate, Vec<Duration>)>> = HashMap::new();
    let mut defaults: HashMap<Shape, (u32, Teams)> = HashMap::new();
    for &candidate in &candidates {
        let mut tuned = Tuned::empty(info);
        if let Some((per_team, teams)) = candidate {
            for shape in defaults.keys() {
                tuned
                    .products
                    .push(choice(*shape, (per_team, teams), (0.0, 0.0)));
            }
        }
        let prepared =
            steps::prepare_with(model.clone(), backend.clone(), 2, Some(Arc::new(tuned)));
        let mut p = match prepared {
            Ok(p) => p,
            Err(e) => {
                eprintln!("  {}: not run: {e}", describe(candidate));
                continue;
            }
        };
        let timed = crate::bench::time_step(&mut p, 0, policy).map_err(|e| e.to_string())?;
        let mut by_shape: HashMap<Shape, Vec<Duration>> = HashMap::new();
        for (node, times) in p.steps[0].nodes.iter().zip(timed) {
            let Some(b) = p.engine.blocks_product(node) else {
                continue;
            };
            let shape = (b.weights, b.rows, b.cols);
            match candidate {
                None => {
                    defaults.insert(shape, (b.per_team, b.teams));
                }
                // A shape where the candidate did not apply (rope's pairs of rows) ran its
                // default: not this candidate's time.
                Some(c) if c != (b.per_team, b.teams) => continue,
                Some(_) => {}
            }
            by_shape.entry(shape).or_default().extend(times);
        }
        for (shape, s) in by_shape {
            samples.entry(shape).or_default().push((candidate, s));
        }
        eprintln!("  {}: timed", describe(candidate));
        if defaults.is_empty() {
            break;
        }
    }
    let mut samples: Vec<_> = samples.into_iter().collect();
    samples.sort_by_key(|&((ty, rows, cols), _)| (ty.name(), rows, cols));
    let mut out: Vec<ProductChoice> = samples
        .into_iter()
        .filter_map(|(shape, runs)| {
            let median = |s: &[Duration]| Stats::of(s).map(|st| st.median_us);
            let medians: Vec<(Candidate, f64)> = runs
                .iter()
                .filter_map(|(c, s)| Some((*c, median(s)?)))
                .collect();
            if forms {
                print!("{}", forms_table(shape, &medians));
            }
            let (best, times) = fastest(&medians, defaults[&shape])?;
            Some(choice(shape, best, times))
        })
        .collect();
    out.sort_by(|a, b| a.shape().cmp(&b.shape()));
    Ok(out)
}

/// The choices of `measured` the decode step confirms (see the module's documentation): each
/// that differs from its default, the largest saving first, kept where the step's tokens per
/// second rise by [`STEP_MARGIN`] over the best so far; the rest go back to their default.
fn confirm(
    backend: &Arc<dyn Backend>,
    model: &Arc<Model>,
    measured: Vec<ProductChoice>,
) -> Result<Vec<(ProductChoice, Verdict)>, String> {
    let info = backend.info();
    let step = |table: &Tuned| -> Result<f64, String> {
        let options = EngineOptions {
            context: STEP_TOKENS + 1,
            max_batch: 1,
            record: true,
            cache: None,
        };
        let engine = Engine::with_tuned(
            model.clone(),
            backend.clone(),
            options,
            Arc::new(table.clone()),
        )
        .map_err(|e| e.to_string())?;
        let (speed, _) =
            measure(engine, Test::Tg, (STEP_TOKENS, 0), STEP_REPS).map_err(|e| e.to_string())?;
        Ok(speed.mean_tps)
    };
    let mut kept = Tuned::empty(info);
    let mut best = step(&kept)?;
    eprintln!("  step check: defaults {best:.1} t/s");
    let mut order: Vec<usize> = (0..measured.len())
        .filter(|&i| measured[i].median_us < measured[i].default_us)
        .collect();
    order.sort_by(|&a, &b| {
        let saved = |c: &ProductChoice| c.default_us - c.median_us;
        saved(&measured[b]).total_cmp(&saved(&measured[a]))
    });
    for i in order {
        let mut trial = kept.clone();
        trial.products.push(measured[i].clone());
        let tps = step(&trial)?;
        let c = &measured[i];
        let keep = tps > best * (1.0 + STEP_MARGIN);
        eprintln!(
            "  step check: {} {} × {} as {}: {tps:.1} t/s, {}",
            c.weights,
            c.rows,
            c.cols,
            teams_name(c.rows_per_team, c.teams()),
            if keep { "kept" } else { "not kept" }
        );
        if keep {
            best = tps;
            kept = trial;
        }
    }
    Ok(measured
        .into_iter()
        .map(|c| {
            let verdict = if kept.products.iter().any(|k| same_shape(k, &c)) {
                Verdict::Kept
            } else if c.median_us < c.default_us {
                Verdict::StepSlower
            } else {
                Verdict::Default
            };
            (c, verdict)
        })
        .collect())
}

/// What became of a shape's measured winner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// No candidate beat the default alone.
    Default,
    /// It beat the default alone, and the step with it.
    Kept,
    /// It beat the default alone, but not in the step.
    StepSlower,
}

impl Verdict {
    fn name(self) -> &'static str {
        match self {
            Verdict::Default => "default",
            Verdict::Kept => "kept",
            Verdict::StepSlower => "not kept: the step was not faster",
        }
    }
}

/// The form a shape takes from its candidates' medians (µs; `None` is the defaults' run, whose
/// form is `default`): the fastest form other than the default's where it is [`MARGIN`] below
/// the default's median, else the default; with its median and the default's. `None` where
/// the defaults' run has no time.
fn fastest(
    medians: &[(Candidate, f64)],
    default: (u32, Teams),
) -> Option<((u32, Teams), (f64, f64))> {
    let default_us = medians.iter().find(|(c, _)| c.is_none())?.1;
    let (best, best_us) = medians
        .iter()
        .filter_map(|&(c, us)| Some((c?, us)))
        .filter(|&(c, _)| c != default)
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .filter(|&(_, us)| us < default_us * (1.0 - MARGIN))
        .unwrap_or((default, default_us));
    Some((best, (best_us, default_us)))
}

fn choice(
    (ty, rows, cols): Shape,
    (per_team, teams): (u32, Teams),
    (median_us, default_us): (f64, f64),
) -> ProductChoice {
    ProductChoice {
        weights: ty.name().into(),
        rows,
        cols,
        rows_per_team: per_team,
        team_width: teams.width,
        units: teams.units,
        steps: teams.steps,
        median_us,
        default_us,
    }
}

fn describe(c: Candidate) -> String {
    match c {
        None => "defaults".into(),
        Some((r, t)) => teams_name(r, t),
    }
}

fn teams_name(rows: u32, t: Teams) -> String {
    if t == Teams::WHOLE {
        format!("{rows} rows a workgroup")
    } else {
        format!(
            "{rows} rows a team of {}, {} units a step, {} steps",
            t.width, t.units, t.steps
        )
    }
}

/// Every form's median at one shape, fastest first, as a Markdown table.
fn forms_table((ty, rows, cols): Shape, medians: &[(Candidate, f64)]) -> String {
    let mut sorted = medians.to_vec();
    sorted.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut s = format!("\n{ty} {rows} × {cols}\n\n| form | µs |\n| --- | --- |\n");
    for (c, us) in sorted {
        s.push_str(&format!("| {} | {us:.1} |\n", describe(c)));
    }
    s
}

/// The measured winners and what the step made of them, as a Markdown table.
fn table(backend: &str, model: &str, chosen: &[(ProductChoice, Verdict)]) -> String {
    let mut s = format!(
        "\n{backend}, {model}\n\n| weights | rows × cols | default µs | fastest alone | µs | gain | in the step |\n| --- | --- | --- | --- | --- | --- | --- |\n"
    );
    for (c, verdict) in chosen {
        let gain = c.default_us / c.median_us;
        s.push_str(&format!(
            "| {} | {} × {} | {:.1} | {} | {:.1} | {gain:.2}× | {} |\n",
            c.weights,
            c.rows,
            c.cols,
            c.default_us,
            teams_name(c.rows_per_team, c.teams()),
            c.median_us,
            verdict.name(),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_replaces_the_default_only_past_the_margin() {
        let default = (2, Teams::WHOLE);
        let pairs = (1, Teams::pairs(1));
        let four = (4, Teams::pairs(2));
        // 3% under the default: taken.
        let m = [(None, 100.0), (Some(pairs), 97.0), (Some(four), 99.0)];
        assert_eq!(fastest(&m, default), Some((pairs, (97.0, 100.0))));
        // 1% under: within the margin, the default stays with its own time.
        let m = [(None, 100.0), (Some(pairs), 99.0)];
        assert_eq!(fastest(&m, default), Some((default, (100.0, 100.0))));
        // The default's own form given as a candidate is not a rival to itself.
        let m = [(None, 100.0), (Some(default), 90.0), (Some(four), 99.5)];
        assert_eq!(fastest(&m, default), Some((default, (100.0, 100.0))));
        // No defaults' run, no choice.
        assert_eq!(fastest(&[(Some(pairs), 50.0)], default), None);
    }
}

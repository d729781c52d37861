//! `cargo xtask bench [--backends cpu,vulkan,wgpu,hip,cuda] [--models smollm2-135m,llama-7b]
//! [-p 512] [--layers 1] [--reps N] [--json FILE] [--markdown FILE] [--svg FILE]`: the
//! executor's kernels as it dispatches them. For each model layout
//! ([`trine_benches::steps::Layout`], one layer of random weights unless `--layers` says more)
//! and each backend that works here, an [`trine_llama::Engine`] runs a prompt
//! step and a decode step once, then times every node of the decode step and of the prompt
//! step ([`nodes`]): the kernel the device compiled, its median time, the bytes it moves and
//! its arithmetic, against the backend's copy bandwidth measured just before and just after.
//!
//! GPU backends are probed in a child process first, as `conformance` does; one that is absent
//! is listed with its reason and measures nothing. Peers time the same work with the same
//! clock: the `gemm` crate the CPU's prompt products (host clock), cuBLAS the cuda backend's
//! prompt products on matrix tiles (CUDA events), and the Vulkan (ash) column is the wgpu
//! column's peer on the same device (timestamps). A ratio is only taken between runs timed
//! alike.
//!
//! `--model FILE -p 512 -n 128` measures llama-bench's pp and tg tests end to end instead.

mod chart;
mod cublas_peer;
mod error;
mod exec;
mod measure;
mod model;
mod nodes;
mod peer;
mod report;
mod roof;

use error::BenchError;
pub(crate) use measure::{Policy, Stats};
pub(crate) use nodes::time_step;
use report::{Context, Record, Timing};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use trine::run::probe_and_open;
use trine_backends::probe::timeout_from_env;
use trine_backends::{Backend, BackendKind};
use trine_benches::steps::{self, Layout};
use trine_llama::Model;
use trine_ops::kv_type::KvType;

#[derive(clap::Args)]
pub struct Args {
    /// Backends to measure, comma-separated: cpu, vulkan, wgpu, hip, cuda.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "cpu,vulkan,wgpu,hip,cuda"
    )]
    backends: Vec<String>,
    /// Only these model layouts (default: smollm2-135m, llama-7b): those, or llama-3-8b (one
    /// layer of Llama 3 8B in Q4_K_M, with its 128k-row output head), qwen3-30b-a3b (one
    /// layer of Qwen3-30B-A3B in Q4_K_M, its 128 experts) or gemma-3-1b (one layer of Gemma 3
    /// 1B in Q8_0, its 262k-row output head). Not with --model.
    #[arg(long, value_delimiter = ',')]
    models: Option<Vec<String>>,
    /// Layers of the synthetic models (default 1): the nodes of one kind in every layer are
    /// pooled into one summary. Not with --model.
    #[arg(long)]
    layers: Option<u32>,
    /// Write the records as a JSON array to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a Markdown page (date, devices, command, table) to this file.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Write an SVG chart (time and share of the copy roof per node and backend) to this
    /// file. Not with --model.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// End to end instead of node by node: this GGUF model's prompt processing and generation
    /// speed, as llama-bench measures them.
    #[arg(long)]
    model: Option<PathBuf>,
    /// The prompt step's tokens, at least 2 (with --model: the prompt length of the pp test,
    /// 0 leaves it out).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    n_prompt: u32,
    /// Only with --model: the tokens of the tg test (default 128, 0 leaves it out).
    #[arg(short = 'n', long = "n-gen")]
    n_gen: Option<u32>,
    /// Only with --model: tokens already in the KV cache before each test (llama-bench's
    /// `-d`), fed as a prompt that is not timed.
    #[arg(short = 'd', long = "n-depth")]
    n_depth: Option<u32>,
    /// Repetitions of each step after one warm-up (default: at least 10 and 0.2 s, at most
    /// 100 or 5 s, after two); with --model, of each test after a warm-up (default 3).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    reps: Option<usize>,
    /// Only with --model: the KV cache's type, f32, f16 or q8_0 (llama-bench's `-ctk`/`-ctv`;
    /// default: each device's, f16 on GPUs).
    #[arg(long)]
    cache_type: Option<KvType>,
}

/// The tg test's tokens where `-n` is not given.
const DEFAULT_GEN: u32 = 128;

/// Refuses an option the chosen mode would ignore, and a run that would measure nothing: a
/// table that silently leaves out what was asked for reads as if it had been measured.
fn check(args: &Args) -> Result<(), BenchError> {
    if args.model.is_some() {
        let node_only = [
            ("--models", args.models.is_some()),
            ("--layers", args.layers.is_some()),
            ("--svg", args.svg.is_some()),
        ];
        if let Some((flag, _)) = node_only.iter().find(|(_, given)| *given) {
            return Err(BenchError::NotWithModel(flag));
        }
        if args.n_prompt == 0 && args.n_gen == Some(0) {
            return Err(BenchError::NothingToMeasure);
        }
    } else {
        if args.n_gen.is_some() {
            return Err(BenchError::NeedsModel("-n/--n-gen"));
        }
        if args.n_depth.is_some() {
            return Err(BenchError::NeedsModel("-d/--n-depth"));
        }
        if args.cache_type.is_some() {
            return Err(BenchError::NeedsModel("--cache-type"));
        }
        if args.n_prompt < 2 {
            return Err(BenchError::PromptTooShort(args.n_prompt));
        }
        if args.layers == Some(0) {
            return Err(BenchError::NoLayers);
        }
    }
    Ok(())
}

/// The name the `gemm` crate's records carry as their backend.
const PEER: &str = "gemm";
/// cuBLAS's records, and the backend compared with it: the same GPU under the same clock
/// (CUDA events), see [`report::Timer`].
const GPU_PEER: &str = "cublas";
const GPU_PEER_OF: [&str; 1] = ["cuda"];
/// The portable path's peer: the same naga module through ash on the same device, so its
/// "vs peer" is what wgpu costs (below 1) or saves.
const PORTABLE: &str = "wgpu";
const PORTABLE_PEER: &str = "vulkan";

/// A backend that opened, with the last copy roof it measured (GB/s) or why it has none.
struct Column {
    name: String,
    backend: Arc<dyn Backend>,
    roof: Result<f64, String>,
}

pub fn run(args: Args) -> Result<ExitCode, String> {
    bench(args).map_err(|e| e.to_string())?;
    Ok(ExitCode::SUCCESS)
}

fn bench(args: Args) -> Result<(), BenchError> {
    check(&args)?;
    if let Some(path) = &args.model {
        return bench_model(&args, path);
    }
    let layouts = selected(&args)?;
    let (columns, absent) = open(&args.backends)?;
    let cublas = columns
        .iter()
        .any(|(n, _)| n == "cuda")
        .then(|| match cublas_peer::CublasPeer::open() {
            Ok(p) => Some(p),
            Err(why) => {
                eprintln!("cublas: absent: {why}");
                None
            }
        })
        .flatten();
    let mut cols: Vec<Column> = columns
        .into_iter()
        .map(|(name, backend)| {
            let info = backend.info();
            eprintln!("{name}: {} ({})", info.name, info.driver);
            Column {
                name,
                backend,
                roof: Err("not measured".into()),
            }
        })
        .collect();
    let policies = Policies::new(args.reps);
    let layers = args.layers.unwrap_or(1);
    let mut records = vec![];
    for layout in layouts {
        eprintln!("{}: random weights, layers: {layers}", layout.name());
        let model = layout.model(layers).map_err(BenchError::Model)?;
        for col in &mut cols {
            let peers = Peers {
                gemm: col.name == BackendKind::Cpu.name(),
                cublas: cublas.as_ref().filter(|_| col.name == "cuda"),
            };
            let run = Run {
                layout,
                model: model.clone(),
                prompt: args.n_prompt,
                policies: &policies,
            };
            records.extend(bench_column(col, &run, &peers));
        }
    }
    report::compare_with_peer(&mut records, PEER, &[BackendKind::Cpu.name()]);
    report::compare_with_peer(&mut records, GPU_PEER, &GPU_PEER_OF);
    report::compare_with_peer(&mut records, PORTABLE_PEER, &[PORTABLE]);
    print!("{}", report::table(&records));
    println!("{}", report::ROOF_NOTE);
    for (name, why) in &absent {
        println!("{name}: absent: {why}");
    }
    write_outputs(&args, &cols, &absent, &records)
}

/// The measurement policies: each step's repetitions, and the copy roof's and the peers'.
struct Policies {
    steps: Policy,
    single: Policy,
}

impl Policies {
    /// With `reps`, exactly that many of each after one warm-up.
    fn new(reps: Option<usize>) -> Policies {
        match reps {
            Some(n) => Policies {
                steps: Policy::exact(n),
                single: Policy::exact(n),
            },
            None => Policies {
                steps: Policy {
                    warmup: 2,
                    min_reps: 10,
                    min_time: Duration::from_millis(200),
                    max_reps: 100,
                    max_time: Duration::from_secs(5),
                },
                single: Policy::default(),
            },
        }
    }
}

/// What one backend times of one model.
struct Run<'a> {
    layout: Layout,
    model: Arc<Model>,
    prompt: u32,
    policies: &'a Policies,
}

/// The peers a backend's nodes are timed beside.
struct Peers<'a> {
    /// The gemm crate beside the CPU's prompt products.
    gemm: bool,
    /// cuBLAS beside the cuda backend's prompt products on matrix tiles.
    cublas: Option<&'a cublas_peer::CublasPeer>,
}

/// A node as the bench timed it.
struct Timed {
    step: String,
    node: &'static str,
    kernel: String,
    shape: String,
    bytes: u64,
    flops: u64,
    product: Option<nodes::Product>,
    stats: Stats,
}

/// Times every node of `run`'s steps on `col`, between two copy roofs, with the peers beside
/// the nodes they compare with: the copy's record first, then each step's nodes in order
/// and the step's sum.
fn bench_column(col: &mut Column, run: &Run<'_>, peers: &Peers<'_>) -> Vec<Record> {
    let backend = col.backend.clone();
    let device = backend.info().name.clone();
    let roof = || match roof::measure(backend.as_ref(), &run.policies.single) {
        Ok(copies) => {
            let gbps = copies.iter().map(|c| c.gbps).fold(f64::NAN, f64::max);
            Some((copies, gbps))
        }
        Err(e) => {
            eprintln!("{}: no copy roof: {e}", col.name);
            None
        }
    };
    let before = roof();
    let timed = time_model(run, backend.clone());
    let after = roof();
    let gbps = match (&before, &after) {
        (Some(b), Some(a)) => Some((b.1 + a.1) / 2.0),
        (Some(r), None) | (None, Some(r)) => Some(r.1),
        (None, None) => None,
    };
    col.roof = gbps.ok_or_else(|| "no copy roof".to_string());
    let base = |step: &str, node: &str, kernel: String, shape: String| Record {
        backend: col.name.clone(),
        device: device.clone(),
        model: run.layout.name().into(),
        step: step.into(),
        node: node.into(),
        kernel,
        shape,
        bytes: 0,
        flops: 0,
        timing: None,
        adjacent_roofs_gbps: before.as_ref().zip(after.as_ref()).map(|(b, a)| [b.1, a.1]),
        skipped: None,
    };
    let roof_gbps = gbps.unwrap_or(f64::NAN);
    let mut out = vec![];
    for r in before
        .as_ref()
        .or(after.as_ref())
        .map_or(&[][..], |(c, _)| c)
    {
        let copy = Record {
            bytes: 2 * r.bytes,
            ..base("-", "copy", r.how.clone(), format!("{} MiB", r.bytes >> 20))
        };
        eprintln!("{}: {} {:.2} GB/s", col.name, r.how, r.gbps);
        out.push(with_timing(copy, &r.stats, roof_gbps));
    }
    let timed = match timed {
        Ok(t) => t,
        Err(why) => {
            eprintln!("{} {}: skipped: {why}", col.name, run.layout.name());
            out.push(Record {
                skipped: Some(why),
                ..base("-", "-", String::new(), String::new())
            });
            return out;
        }
    };
    for t in &timed {
        let r = Record {
            bytes: t.bytes,
            flops: t.flops,
            ..base(&t.step, t.node, t.kernel.clone(), t.shape.clone())
        };
        let r = with_timing(r, &t.stats, roof_gbps);
        progress(&r);
        out.push(r);
        let Some(p) = t.product.filter(|p| p.m > 1) else {
            continue;
        };
        let peer = if peers.gemm {
            let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
            let stats = Ok(peer::matmul(&run.policies.single, m, n, k));
            let bytes = peer::matmul_bytes(p.m, p.n, p.k);
            Some((PEER, "gemm crate, f32", bytes, stats))
        } else if let Some(cublas) = peers.cublas.filter(|_| p.tiles) {
            let stats = cublas.product(&run.policies.single, (p.m, p.n, p.k));
            let bytes = cublas_peer::product_bytes(p.m, p.n, p.k);
            Some((GPU_PEER, "cublasGemmEx, f16", bytes, stats))
        } else {
            None
        };
        if let Some((name, kernel, bytes, stats)) = peer {
            let r = Record {
                backend: name.into(),
                bytes,
                flops: t.flops,
                ..base(&t.step, t.node, kernel.into(), t.shape.clone())
            };
            let r = match stats {
                Ok(s) => with_timing(r, &s, roof_gbps),
                Err(why) => Record {
                    skipped: Some(why),
                    ..r
                },
            };
            progress(&r);
            out.push(r);
        }
    }
    out
}

/// The executor on `backend` for `run`'s model: every node of its decode step and its prompt
/// step timed ([`nodes::time_step`]), with its kernel, bytes and flops, the nodes of one kind
/// pooled over the layers, each step followed by its sum.
fn time_model(run: &Run<'_>, backend: Arc<dyn Backend>) -> Result<Vec<Timed>, String> {
    let name = backend.name();
    let mut p =
        steps::prepare(run.model.clone(), backend, run.prompt).map_err(|e| e.to_string())?;
    for note in p.engine.placement_notes() {
        eprintln!("{name} {}: {note}", run.layout.name());
    }
    let mut out = vec![];
    for i in 0..p.steps.len() {
        let samples =
            nodes::time_step(&mut p, i, &run.policies.steps).map_err(|e| e.to_string())?;
        let (e, st) = (&p.engine, &p.steps[i]);
        let summary = |s: &[Duration]| Stats::of(s).expect("a step takes at least one sample");
        // The step: the sum of every node's summary.
        let each: Vec<Stats> = samples.iter().map(|s| summary(s)).collect();
        let sum = |f: fn(&Stats) -> f64| each.iter().map(f).sum();
        let total = Timed {
            step: st.name.clone(),
            node: "step",
            kernel: String::new(),
            shape: format!("{} nodes", st.nodes.len()),
            bytes: st.nodes.iter().map(|n| e.traffic(n, st.step)).sum(),
            flops: st.nodes.iter().map(|n| nodes::flops(e, n, st.step)).sum(),
            product: None,
            stats: Stats {
                median_us: sum(|s| s.median_us),
                min_us: sum(|s| s.min_us),
                max_us: sum(|s| s.max_us),
                p10_us: sum(|s| s.p10_us),
                p90_us: sum(|s| s.p90_us),
                reps: each.iter().map(|s| s.reps).min().unwrap_or(0),
            },
        };
        // The nodes of one kind (label) in every layer pooled, in the order of their first.
        let mut kinds: Vec<(usize, Vec<Duration>)> = vec![];
        for (k, (node, s)) in st.nodes.iter().zip(samples).enumerate() {
            match kinds
                .iter_mut()
                .find(|(f, _)| st.nodes[*f].label == node.label)
            {
                Some((_, pool)) => pool.extend(s),
                None => kinds.push((k, s)),
            }
        }
        for (f, pool) in kinds {
            let node = &st.nodes[f];
            let kernel = match e.kernel_of(node) {
                Some((dev, k)) if dev == name => k.to_string(),
                Some((dev, k)) => format!("{dev}: {k}"),
                None => "?".into(),
            };
            out.push(Timed {
                step: st.name.clone(),
                node: node.label,
                kernel,
                shape: nodes::shape(e, node, st.step),
                bytes: e.traffic(node, st.step),
                flops: nodes::flops(e, node, st.step),
                product: nodes::product(e, node),
                stats: summary(&pool),
            });
        }
        out.push(total);
    }
    Ok(out)
}

fn with_timing(r: Record, s: &Stats, roof_gbps: f64) -> Record {
    Record {
        timing: Some(Timing::new(s, r.bytes, r.flops, roof_gbps)),
        ..r
    }
}

/// `--model`: pp and tg on every backend that opens, as a table (and Markdown / JSON files).
fn bench_model(args: &Args, path: &std::path::Path) -> Result<(), BenchError> {
    let (columns, absent) = open(&args.backends)?;
    let mut backends: Vec<model::Named> = columns.into_iter().map(|(n, b)| (n, Ok(b))).collect();
    backends.extend(absent.into_iter().map(|(n, why)| (n, Err(why))));
    let reps = args.reps.unwrap_or(3);
    let n_gen = args.n_gen.unwrap_or(DEFAULT_GEN);
    let rows = model::run(
        path,
        &backends,
        (args.n_prompt, n_gen, args.n_depth.unwrap_or(0), reps),
        args.cache_type,
    )
    .map_err(BenchError::Model)?;
    let table = model::table(path, &rows);
    print!("{table}");
    let write = |p: &PathBuf, text: String| {
        std::fs::write(p, text).map_err(|source| BenchError::Write {
            path: p.clone(),
            source,
        })
    };
    if let Some(p) = &args.markdown {
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        write(
            p,
            format!(
                "# End-to-end speed\n\nDate: {}\n\nCommand: `{command}`\n\n{table}",
                utc_now()
            ),
        )?;
    }
    if let Some(p) = &args.json {
        write(p, model::json(&rows).map_err(BenchError::Model)?)?;
    }
    Ok(())
}

/// The layouts `--models` names (the default ones without it); an unknown name is an error that lists the
/// known.
fn selected(args: &Args) -> Result<Vec<Layout>, BenchError> {
    let Some(names) = &args.models else {
        return Ok(Layout::ALL.to_vec());
    };
    names
        .iter()
        .map(|n| {
            Layout::parse(n).ok_or_else(|| {
                let known: Vec<&str> = Layout::NAMED.iter().map(|l| l.name()).collect();
                BenchError::UnknownModel(n.clone(), known.join(", "))
            })
        })
        .collect()
}

pub(crate) type Opened = (Vec<(String, Arc<dyn Backend>)>, Vec<(String, String)>);

/// Opens each named backend, GPU ones after a probe in a child process.
pub(crate) fn open(names: &[String]) -> Result<Opened, BenchError> {
    let exe = std::env::current_exe().map_err(BenchError::Exe)?;
    let timeout = timeout_from_env().map_err(|e| BenchError::Probe(e.to_string()))?;
    // Every name is checked before the first probe, so a typo fails at once.
    let kinds = names
        .iter()
        .map(|n| BackendKind::parse(n).ok_or_else(|| BenchError::UnknownBackend(n.clone())))
        .collect::<Result<Vec<_>, _>>()?;
    let (mut ok, mut absent) = (vec![], vec![]);
    for (name, kind) in names.iter().zip(kinds) {
        match probe_and_open(&exe, kind, timeout) {
            Ok(b) => ok.push((name.clone(), b)),
            Err(why) => absent.push((name.clone(), why)),
        }
    }
    Ok((ok, absent))
}

fn progress(r: &Record) {
    let what = match (&r.timing, &r.skipped) {
        (Some(t), _) => format!("{:.1} µs ({} reps)", t.median_us, t.reps),
        (None, why) => format!("skipped: {}", why.as_deref().unwrap_or("")),
    };
    eprintln!(
        "{} {} {} {} {}: {what}",
        r.backend, r.model, r.step, r.node, r.kernel
    );
}

fn write_outputs(
    args: &Args,
    cols: &[Column],
    absent: &[(String, String)],
    records: &[Record],
) -> Result<(), BenchError> {
    let write = |path: &PathBuf, text: String| {
        std::fs::write(path, text).map_err(|source| BenchError::Write {
            path: path.clone(),
            source,
        })
    };
    if let Some(path) = &args.json {
        write(path, report::json(records)?)?;
    }
    if let Some(path) = &args.markdown {
        let ctx = Context {
            date: utc_now(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            backends: cols
                .iter()
                .map(|c| {
                    let info = c.backend.info();
                    let roof = match &c.roof {
                        Ok(g) => format!("{g:.2} GB/s"),
                        Err(why) => why.clone(),
                    };
                    (c.name.clone(), info.name.clone(), info.driver.clone(), roof)
                })
                .collect(),
            absent: absent.to_vec(),
        };
        write(path, report::markdown(&ctx, records))?;
    }
    if let Some(path) = &args.svg {
        chart::svg(path, records).map_err(|message| BenchError::Chart {
            path: path.clone(),
            message,
        })?;
    }
    Ok(())
}

/// The current UTC time as `YYYY-MM-DD HH:MM UTC`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc(secs)
}

/// Days since 1970-01-01 to a proleptic Gregorian date (the era arithmetic of Howard
/// Hinnant's `civil_from_days`).
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m) = (secs % 86_400 / 3600, secs % 3600 / 60);
    format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02} UTC")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--reps N` takes exactly N repetitions of each step, roof and peer after one warm-up.
    #[test]
    fn reps_make_exact_policies() {
        let p = Policies::new(Some(3));
        for q in [p.steps, p.single] {
            assert_eq!((q.warmup, q.min_reps, q.max_reps), (1, 3, 3));
        }
        let mut calls = 0;
        let s = measure::measure(&p.steps, || {
            calls += 1;
            Ok::<_, ()>(Duration::from_secs(1))
        })
        .unwrap();
        assert_eq!((s.reps, calls), (3, 4));
    }

    #[test]
    fn utc_dates() {
        assert_eq!(super::utc(0), "1970-01-01 00:00 UTC");
        // `date -u -d @1795480200`: Tue Nov 24 00:30:00 UTC 2026.
        assert_eq!(super::utc(1_795_480_200), "2026-11-24 00:30 UTC");
        // 2000-02-29 12:34 UTC, a leap day.
        assert_eq!(super::utc(951_827_640), "2000-02-29 12:34 UTC");
    }
}

//! `cargo xtask bench [--backends cpu,vulkan,wgpu,hip,cuda] [--ops matvec,rms_norm,…] [--json FILE]
//! [--markdown FILE] [--svg FILE]`: every op of the library at model shapes on every backend
//! that works here, next to that backend's copy bandwidth measured in the same run and, on the
//! CPU, next to the `gemm` crate.
//!
//! A quantized GEMV is held to a fraction of the copy roof, so it is measured alike
//! ([`rotates`]): its weights rotate through copies that add up to the copy's own buffer size,
//! so that every repetition reads them from memory as the copy does (a 4096 × 4096 Q4 matrix,
//! 10 MB, would otherwise stay in a 32 MiB L3), and its roof is the mean of copies measured on
//! the same backend just before and just after it, not the one at the start of the run, which
//! a noisy machine may have measured at another speed.
//!
//! GPU backends are probed in a child process first, as `conformance` does; one that is absent
//! is listed with its reason and measures nothing. With the CUDA backend, cuBLAS is the peer of
//! the cuda column (both timed with CUDA events); the wgpu column's peer is the Vulkan (ash)
//! column on the same device. A ratio is only taken between runs timed alike.
//!
//! `--model FILE -p 512 -n 128` measures llama-bench's pp and tg tests end to end instead.

mod cases;
mod chart;
mod cublas_peer;
mod error;
mod exec;
mod measure;
mod model;
mod ops;
mod peer;
mod report;
mod roof;

use cases::Variant;
use error::BenchError;
use exec::{Skip, Slot, Work};
use measure::{Policy, Stats};
use ops::{Item, Op};
use report::{Context, Record, Timing};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use trine::run::probe_and_open;
use trine_backends::probe::timeout_from_env;
use trine_backends::{Backend, BackendKind};
use trine_gguf::quant::WeightType;
use trine_ops::case::Case;
use trine_ops::case::CaseBuffer;
use trine_ops::support::Float;

#[derive(clap::Args)]
pub struct Args {
    /// Backends to measure, comma-separated: cpu, vulkan, wgpu, hip, cuda.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "cpu,vulkan,wgpu,hip,cuda"
    )]
    backends: Vec<String>,
    /// Only these ops (default: all): matvec, matmul, rms_norm, rope, softmax, attention,
    /// swiglu, add.
    #[arg(long, value_delimiter = ',')]
    ops: Option<Vec<String>>,
    /// Quantized matvecs on GPUs in this shape instead of the executor's: rows per workgroup,
    /// invocations and segment length, e.g. `8,64,8` (a sweep runs the bench once per shape).
    #[arg(long, value_delimiter = ',')]
    matvec_shape: Option<Vec<u32>>,
    /// Write the records as a JSON array to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a Markdown page (date, devices, command, table) to this file.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Write an SVG chart (time and roof fraction per op and backend) to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// End to end instead of op by op: this GGUF model's prompt processing and generation
    /// speed, as llama-bench measures them.
    #[arg(long)]
    model: Option<PathBuf>,
    /// With --model: the prompt length of the pp test (0 leaves it out).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    n_prompt: u32,
    /// With --model: the tokens of the tg test (0 leaves it out).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    n_gen: u32,
    /// With --model: repetitions of each test after a warm-up.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// With --model: fuse the recorded decode step's runs of dispatches into kernels with grid
    /// barriers (`EngineOptions::fuse`), to measure what that gives; off by default, as it was
    /// slower on the H100 (docs/bench/decode.md).
    #[arg(long)]
    fuse: bool,
    /// With --model: every product multiplies float x, as before a CPU's products and a GPU's
    /// prompt products took x quantized to 8 bits (`EngineOptions::quantize_x`).
    #[arg(long)]
    float_x: bool,
    /// With --model: GPU prompts without matrix tiles, on quantized x as before they had them
    /// (`EngineOptions::tiles`).
    #[arg(long)]
    no_tiles: bool,
    /// With --model: each GPU decode layer's down projection in the gate/up product's
    /// epilogue, adding into the residual stream with f32 atomic adds
    /// (`EngineOptions::down_in_ffn`), to measure what that gives; off by default, as it was
    /// slower on the H100 (docs/bench/decode.md).
    #[arg(long)]
    down_in_ffn: bool,
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

/// A backend that opened, with its copy roof (GB/s) or why it has none.
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
    if let Some(path) = &args.model {
        return bench_model(&args, path);
    }
    let items = selected(&args)?;
    if let Some(s) = args.matvec_shape.as_ref().filter(|s| s.len() != 3) {
        return Err(BenchError::MatvecShape(s.clone()));
    }
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
    let policy = Policy::default();
    let mut records = vec![];
    let mut cols = vec![];
    for (name, backend) in columns {
        eprintln!(
            "{name}: {} ({})",
            backend.info().name,
            backend.info().driver
        );
        let roof = match roof::measure(backend.as_ref(), &policy) {
            Ok(r) => {
                eprintln!("{name}: copy {} MiB: {:.2} GB/s", r.bytes >> 20, r.gbps);
                records.push(roof_record(&name, backend.as_ref(), &r));
                Ok(r.gbps)
            }
            Err(e) => {
                eprintln!("{name}: no copy roof: {e}");
                Err(e.to_string())
            }
        };
        cols.push(Column {
            name,
            backend,
            roof,
        });
    }
    let cpu = cols.iter().find(|c| c.name == BackendKind::Cpu.name());
    let cuda = cols.iter().find(|c| c.name == BackendKind::Cuda.name());
    let total = items.len();
    for (i, item) in items.iter().enumerate() {
        // Inputs are made once per variant: every backend here usually shares one.
        let mut made: Vec<(Variant, Result<Case, String>)> = vec![];
        for col in &cols {
            let info = col.backend.info();
            let v = item.variant(info, args.matvec_shape.as_deref());
            let at = match made.iter().position(|(m, _)| *m == v) {
                Some(at) => at,
                None => {
                    made.push((v, item.case(v).map_err(|e| e.to_string())));
                    made.len() - 1
                }
            };
            let rotate = rotates(&item.op);
            let (outcome, adjacent) = between_roofs(col, rotate, &policy, || match &made[at].1 {
                Ok(c) => measure_on(col.backend.as_ref(), c, &policy, rotate),
                Err(e) => Err(e.clone()),
            });
            let r = record(
                &col.name, &info.name, item, &v, outcome, &col.roof, adjacent,
            );
            progress(i, total, &r);
            records.push(r);
        }
        if let Some(cpu) = cpu {
            if let Some(outcome) = run_peer(item, &policy) {
                let info = cpu.backend.info();
                let r = record(
                    PEER,
                    &info.name,
                    item,
                    &ON_CPU,
                    Ok(outcome),
                    &cpu.roof,
                    None,
                );
                progress(i, total, &r);
                records.push(r);
            }
        }
        if let (Some(peer), Some(cuda)) = (&cublas, cuda) {
            if let Some(outcome) = peer.run(item, &policy) {
                let info = cuda.backend.info();
                let r = record(
                    GPU_PEER, &info.name, item, &ON_GPU, outcome, &cuda.roof, None,
                );
                progress(i, total, &r);
                records.push(r);
            }
        }
    }
    report::compare_with_peer(&mut records, PEER, &[BackendKind::Cpu.name()]);
    report::compare_with_peer(&mut records, GPU_PEER, &GPU_PEER_OF);
    report::compare_with_peer(&mut records, PORTABLE_PEER, &[PORTABLE]);
    print!("{}", report::table(&records));
    for (name, why) in &absent {
        println!("{name}: absent: {why}");
    }
    write_outputs(&args, &cols, &absent, &records)
}

/// `--model`: pp and tg on every backend that opens, as a table (and Markdown / JSON files).
fn bench_model(args: &Args, path: &std::path::Path) -> Result<(), BenchError> {
    let (columns, absent) = open(&args.backends)?;
    let mut backends: Vec<model::Named> = columns.into_iter().map(|(n, b)| (n, Ok(b))).collect();
    backends.extend(absent.into_iter().map(|(n, why)| (n, Err(why))));
    let rows = model::run(
        path,
        &backends,
        args.n_prompt,
        args.n_gen,
        args.reps,
        model::Products {
            fuse: args.fuse,
            quantize_x: !args.float_x,
            tiles: !args.no_tiles,
            down_in_ffn: args.down_in_ffn,
        },
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

/// The items `--ops` names (all without it); an unknown name is an error that lists the known.
fn selected(args: &Args) -> Result<Vec<Item>, BenchError> {
    let all = ops::list();
    let Some(names) = &args.ops else {
        return Ok(all);
    };
    let mut known: Vec<&str> = all.iter().map(|i| i.op.name()).collect();
    known.sort_unstable();
    known.dedup();
    if let Some(bad) = names.iter().find(|n| !known.contains(&n.as_str())) {
        return Err(BenchError::UnknownOp(bad.clone(), known.join(", ")));
    }
    Ok(all
        .into_iter()
        .filter(|i| names.iter().any(|n| n == i.op.name()))
        .collect())
}

type Opened = (Vec<(String, Arc<dyn Backend>)>, Vec<(String, String)>);

/// Opens each named backend, GPU ones after a probe in a child process.
fn open(names: &[String]) -> Result<Opened, BenchError> {
    let exe = std::env::current_exe().map_err(BenchError::Exe)?;
    let timeout = timeout_from_env().map_err(|e| BenchError::Probe(e.to_string()))?;
    let (mut ok, mut absent) = (vec![], vec![]);
    for name in names {
        let kind =
            BackendKind::parse(name).ok_or_else(|| BenchError::UnknownBackend(name.clone()))?;
        match probe_and_open(&exe, kind, timeout) {
            Ok(b) => ok.push((name.clone(), b)),
            Err(why) => absent.push((name.clone(), why)),
        }
    }
    Ok((ok, absent))
}

/// The name of the f16 view of a matvec's weights, which the executor binds to the weights'
/// own memory: binding a copy instead would read every block's cache lines twice.
const WEIGHTS_F16_VIEW: (&str, &str) = ("w16", "w");

/// The variants the peers' records count their bytes in: f32 operands, the gemm crate on the
/// CPU, cuBLAS on a GPU.
const ON_CPU: Variant = Variant {
    kv: Float::F32,
    matvec: None,
    cpu_walks: true,
};
const ON_GPU: Variant = Variant {
    cpu_walks: false,
    ..ON_CPU
};

/// Whether an item runs on rotated weights against the roofs measured around it (module
/// documentation): the quantized GEMVs, whose target is a fraction of the copy roof. Float
/// GEMVs keep one copy of their weights (in the cache where it fits), as their peers, the
/// gemm crate and cuBLAS, run: a ratio between the two is taken alike.
fn rotates(op: &Op) -> bool {
    match *op {
        Op::Matvec { ty, .. } => ty.is_quantized(),
        Op::MatvecQ8 { .. } => true,
        _ => false,
    }
}

/// Copies of `weights` bytes that add up to at least `roof_bytes`, the size of each of the
/// copy roof's buffers (256 MiB: 8× the 2-core VM's 32 MiB L3, 5× an H100's 50 MB L2).
fn weight_copies(weights: usize, roof_bytes: u64) -> usize {
    (roof_bytes as usize).div_ceil(weights.max(1)).max(1)
}

/// Runs `run` and, where `adjacent`, measures `col`'s copy roof just before and just after
/// it; `None` where it does not, or a measurement fails (then the run's first roof stands).
fn between_roofs<T>(
    col: &Column,
    adjacent: bool,
    policy: &Policy,
    run: impl FnOnce() -> T,
) -> (T, Option<[f64; 2]>) {
    if !adjacent || col.roof.is_err() {
        return (run(), None);
    }
    let roof = || match roof::measure(col.backend.as_ref(), policy) {
        Ok(r) => Some(r.gbps),
        Err(e) => {
            eprintln!("{}: no copy roof beside an item: {e}", col.name);
            None
        }
    };
    let before = roof();
    let out = run();
    let after = roof();
    (out, before.zip(after).map(|(b, a)| [b, a]))
}

fn measure_on<'c>(
    backend: &dyn Backend,
    case: &'c Case,
    policy: &Policy,
    rotate: bool,
) -> Result<Stats, String> {
    let kernel = trine_conformance::kernel_for(case, backend.info())
        .map_err(|what| Skip::NoKernel(format!("the device lacks {what}")).to_string())?;
    let weights = case
        .buffers
        .iter()
        .position(|w| w.name == WEIGHTS_F16_VIEW.1);
    let copies = match weights {
        Some(i) if rotate => {
            let roof_bytes = roof::buffer_bytes(backend.info().max_binding_bytes);
            weight_copies(case.buffers[i].data.len(), roof_bytes)
        }
        _ => 1,
    };
    let slot = |b: &'c CaseBuffer| match weights {
        Some(i) if b.name == WEIGHTS_F16_VIEW.0 => Slot::SameAs(i),
        Some(_) if b.name == WEIGHTS_F16_VIEW.1 && copies > 1 => Slot::Rotated(&b.data),
        _ => Slot::Data(&b.data),
    };
    let work = Work {
        kernel,
        grid: case.grid_for(kernel),
        params: &case.params,
        buffers: case
            .buffers
            .iter()
            .map(|b| (b.name.as_str(), slot(b)))
            .collect(),
        copies,
    };
    exec::time(backend, &work, policy).map_err(|e| e.to_string())
}

/// The `gemm` crate on the items it computes: f32 and f16 GEMV, f32 matmul.
fn run_peer(item: &Item, policy: &Policy) -> Option<Stats> {
    match item.op {
        Op::Matvec { ty, rows, cols } if matches!(ty, WeightType::F32 | WeightType::F16) => Some(
            peer::gemv(policy, ty == WeightType::F16, rows as usize, cols as usize),
        ),
        Op::Matmul {
            b: Float::F32,
            m,
            n,
            k,
        } => Some(peer::matmul(policy, m as usize, n as usize, k as usize)),
        _ => None,
    }
}

/// The record of `item` measured on `backend` in variant `v`, its roof fraction taken against
/// the mean of the `adjacent` roofs where there are, the run's `roof` otherwise.
fn record(
    backend: &str,
    device: &str,
    item: &Item,
    v: &Variant,
    outcome: Result<Stats, String>,
    roof: &Result<f64, String>,
    adjacent: Option<[f64; 2]>,
) -> Record {
    let (bytes, flops) = (item.op.bytes(v.kv, v.cpu_walks), item.op.flops());
    let roof = match adjacent {
        Some([before, after]) => (before + after) / 2.0,
        None => *roof.as_ref().unwrap_or(&f64::NAN),
    };
    let (timing, skipped) = match outcome {
        Ok(s) => (Some(Timing::new(&s, bytes, flops, roof)), None),
        Err(why) => (None, Some(why)),
    };
    Record {
        backend: backend.into(),
        device: device.into(),
        model: item.model.name().into(),
        op: item.op.name().into(),
        shape: item.op.shape(),
        dtype: item.op.dtype(v.kv),
        bytes,
        flops,
        timing,
        adjacent_roofs_gbps: adjacent,
        skipped,
    }
}

fn roof_record(name: &str, backend: &dyn Backend, r: &roof::Roof) -> Record {
    Record {
        backend: name.into(),
        device: backend.info().name.clone(),
        model: "-".into(),
        op: "copy".into(),
        shape: format!("{} MiB", r.bytes >> 20),
        dtype: "f32".into(),
        bytes: 2 * r.bytes,
        flops: 0,
        timing: Some(Timing::new(&r.stats, 2 * r.bytes, 0, r.gbps)),
        adjacent_roofs_gbps: None,
        skipped: None,
    }
}

fn progress(i: usize, total: usize, r: &Record) {
    let what = match (&r.timing, &r.skipped) {
        (Some(t), _) => format!("{:.1} µs ({} reps)", t.median_us, t.reps),
        (None, why) => format!("skipped: {}", why.as_deref().unwrap_or("")),
    };
    let roofs = match r.adjacent_roofs_gbps {
        Some([before, after]) => format!(", copy {before:.2} GB/s before, {after:.2} after"),
        None => String::new(),
    };
    eprintln!(
        "[{}/{total}] {} {} {} {} {}: {what}{roofs}",
        i + 1,
        r.op,
        r.model,
        r.shape,
        r.dtype,
        r.backend
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

    /// Quantized GEMVs rotate their weights; float GEMVs (which have peers) and the rest keep
    /// one copy.
    #[test]
    fn what_rotates_and_how_many_copies() {
        let gemv = |ty| Op::Matvec {
            ty,
            rows: 4096,
            cols: 4096,
        };
        assert!(rotates(&gemv(WeightType::Q4_0)) && !rotates(&gemv(WeightType::F32)));
        let q8 = Op::MatvecQ8 {
            ty: WeightType::Q4_1,
            rows: 4096,
            cols: 4096,
        };
        assert!(rotates(&q8) && !rotates(&Op::Add { n: 4096 }));
        // 4096 × 4096 Q4_0 in the CPUs' layout, 10.5 MB: 26 copies make 256 MiB.
        assert_eq!(weight_copies(4096 * 128 * 20, 256 << 20), 26);
        // Weights as large as the copy's buffer or larger: one copy.
        assert_eq!(weight_copies(256 << 20, 256 << 20), 1);
        assert_eq!(weight_copies(300 << 20, 256 << 20), 1);
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

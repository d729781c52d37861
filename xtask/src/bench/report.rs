//! The results: one record per (model, step, node, backend), printed as a terminal table,
//! written as a JSON array or as a Markdown page with a header saying where they come from.

use super::measure::Stats;
use serde::Serialize;
use std::fmt::Write;

/// The numbers of a measurement that ran.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timing {
    #[serde(flatten)]
    pub stats: Stats,
    /// Bytes moved per second, 10⁹ bytes.
    pub gbps: f64,
    pub gflops: f64,
    /// `gbps` as a percentage of this backend's copy bandwidth. A percentage rather than a
    /// fraction because it exceeds 100 wherever a node's data came from a cache, and a
    /// "fraction" of 3.30 reads as a mistake.
    pub copy_roof_percent: f64,
    /// The peer's median time over this one (above 1: faster than the peer), where the peer
    /// ran the same node's work.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_peer: Option<f64>,
}

/// A timing reads as its samples' summary too (`t.median_us`).
impl std::ops::Deref for Timing {
    type Target = Stats;

    fn deref(&self) -> &Stats {
        &self.stats
    }
}

impl Timing {
    pub fn new(s: &Stats, bytes: u64, flops: u64, roof_gbps: f64) -> Timing {
        let gbps = bytes as f64 / (s.median_us * 1e3);
        Timing {
            stats: *s,
            gbps,
            gflops: flops as f64 / (s.median_us * 1e3),
            copy_roof_percent: 100.0 * gbps / roof_gbps,
            vs_peer: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record {
    pub backend: String,
    pub device: String,
    pub model: String,
    /// `tg` (a decode step) or `pp512` (a prompt step of 512 tokens).
    pub step: String,
    /// The node's label in the graph (`attn_qkv`, `ffn_down`, …), `copy` for the roof and
    /// `step` for the sum of a step's nodes.
    pub node: String,
    /// The kernel the device compiled for the node (`backend: kernel` where the executor
    /// placed it on another device), or what a peer ran.
    pub kernel: String,
    pub shape: String,
    pub bytes: u64,
    pub flops: u64,
    #[serde(flatten)]
    pub timing: Option<Timing>,
    /// The copy roof measured just before and just after this backend timed this model's
    /// steps (GB/s): the copy roof percentage is taken against their mean.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adjacent_roofs_gbps: Option<[f64; 2]>,
    /// Why there is no timing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl Record {
    fn key(&self) -> (&str, &str, &str) {
        (&self.model, &self.step, &self.node)
    }
}

/// What times a backend's (or peer's) runs. A ratio of two medians means something only where
/// one kind of clock took both: CUDA events on one stream are not Vulkan timestamp queries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timer {
    /// The host's monotonic clock around a synchronous run (the CPU backend, the gemm crate).
    Host,
    /// CUDA events recorded around the work on its stream (the cuda backend, cuBLAS).
    CudaEvents,
    /// HIP events, likewise.
    HipEvents,
    /// Timestamp queries written by the device's command stream (vulkan, and wgpu on the same
    /// device).
    Timestamps,
}

impl Timer {
    pub fn of(backend: &str) -> Timer {
        match backend {
            "cpu" | "gemm" => Timer::Host,
            "cuda" | "cublas" => Timer::CudaEvents,
            "hip" => Timer::HipEvents,
            _ => Timer::Timestamps,
        }
    }
}

/// Fills every record's `vs_peer` from the `peer` backend's records of the same model, step
/// and node, for the `backends` timed with the same kind of clock as the peer ([`Timer`]); the
/// others keep none, whatever the caller lists.
pub fn compare_with_peer(records: &mut [Record], peer: &str, backends: &[&str]) {
    let peers: Vec<(String, String, String, f64)> = records
        .iter()
        .filter(|r| r.backend == peer)
        .filter_map(|r| {
            let t = r.timing.as_ref()?;
            Some((r.model.clone(), r.step.clone(), r.node.clone(), t.median_us))
        })
        .collect();
    for r in records.iter_mut().filter(|r| {
        backends.contains(&r.backend.as_str()) && Timer::of(&r.backend) == Timer::of(peer)
    }) {
        let found = peers
            .iter()
            .find(|p| (p.0.as_str(), p.1.as_str(), p.2.as_str()) == r.key());
        if let (Some(p), Some(t)) = (found, r.timing.as_mut()) {
            t.vs_peer = Some(p.3 / t.median_us);
        }
    }
}

const HEADER: [&str; 13] = [
    "model",
    "step",
    "node",
    "shape",
    "kernel",
    "backend",
    "median µs",
    "min–max µs",
    "GB/s",
    "GFLOP/s",
    "% copy roof",
    "vs peer",
    "reps",
];

fn cells(r: &Record) -> Vec<String> {
    let mut row = vec![
        r.model.clone(),
        r.step.clone(),
        r.node.clone(),
        r.shape.clone(),
        r.kernel.clone(),
        r.backend.clone(),
    ];
    match (&r.timing, &r.skipped) {
        (Some(t), _) => row.extend([
            format!("{:.1}", t.median_us),
            format!("{:.1}–{:.1}", t.min_us, t.max_us),
            format!("{:.2}", t.gbps),
            match r.flops {
                0 => String::new(),
                _ => format!("{:.2}", t.gflops),
            },
            format!("{:.0}%", t.copy_roof_percent),
            t.vs_peer.map_or(String::new(), |v| format!("{v:.2}×")),
            t.reps.to_string(),
        ]),
        (None, why) => {
            row.push(format!("skipped: {}", why.as_deref().unwrap_or("")));
            row.extend(std::iter::repeat_n(String::new(), 6));
        }
    }
    row
}

/// Below the terminal table: what its copy roof column means.
pub const ROOF_NOTE: &str = "% copy roof: GB/s as a percentage of the backend's copy \
     bandwidth (the copy rows: the fastest of the runtime's own buffer copy, where the backend \
     times one, and two copy kernels, a word and a quad an invocation); over 100% means the \
     node's data came from a cache, not memory";

/// A plain-text table with aligned columns.
pub fn table(records: &[Record]) -> String {
    let rows: Vec<Vec<String>> = std::iter::once(HEADER.map(String::from).to_vec())
        .chain(records.iter().map(cells))
        .collect();
    let widths: Vec<usize> = (0..HEADER.len())
        .map(|c| {
            rows.iter()
                .filter(|r| r[c].len() < 40)
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, &w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

/// Where the numbers come from, for the Markdown header.
pub struct Context {
    pub date: String,
    pub command: String,
    /// (backend, device, driver, copy GB/s or why it has none).
    pub backends: Vec<(String, String, String, String)>,
    /// (backend, why it was not measured).
    pub absent: Vec<(String, String)>,
}

pub fn markdown(ctx: &Context, records: &[Record]) -> String {
    let mut out = format!(
        "# Node-by-node bench\n\nDate: {}\n\nCommand: `{}`\n\n| backend | device | driver | copy roof |\n| --- | --- | --- | --- |\n",
        ctx.date, ctx.command
    );
    for (b, dev, drv, roof) in &ctx.backends {
        let _ = writeln!(out, "| {b} | {dev} | {drv} | {roof} |");
    }
    for (b, why) in &ctx.absent {
        let _ = writeln!(out, "| {b} | absent: {why} | | |");
    }
    let _ = writeln!(
        out,
        "\nEach node of the executor's decode step (tg, at the position after the prompt) and \
         prompt step (ppN) on a synthetic model of one layer, timed as the executor \
         dispatches it, the step repeated; times are medians; GB/s counts each tensor the \
         node binds read or written once (weights whole, the KV cache up to the step's last \
         position); % copy roof is GB/s as a percentage of the backend's copy bandwidth (the \
         fastest of the runtime's own buffer copy, cuMemcpyDtoDAsync or vkCmdCopyBuffer, where \
         the backend times one, and two copy kernels, a word and a quad an invocation), the mean of copies measured just before and just after the backend timed the model \
         (the copy rows): over 100% means the node's data came from a cache, not memory; step is the sum of a step's nodes. vs peer is the peer's time over this one \
         (above 1: faster than the peer), each timed with the same kind of clock: the gemm \
         crate's f32 product for cpu's prompt products (host clock), cuBLAS's f16 product \
         for cuda's prompt products on matrix tiles (CUDA events on the same GPU), and for \
         wgpu the vulkan (ash) column's node (timestamp queries): the same kernel's module \
         on the same device, so below 1 is what the portable path costs. vulkan has no \
         peer: cuBLAS is timed with CUDA events, not Vulkan timestamps.\n"
    );
    let _ = writeln!(out, "| {} |", HEADER.join(" | "));
    let _ = writeln!(out, "|{}", " --- |".repeat(HEADER.len()));
    for r in records {
        let _ = writeln!(out, "| {} |", cells(r).join(" | "));
    }
    out
}

pub fn json(records: &[Record]) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(backend: &str, median_us: f64) -> Record {
        let stats = Stats {
            median_us,
            min_us: median_us / 2.0,
            max_us: median_us * 2.0,
            p10_us: median_us,
            p90_us: median_us,
            reps: 10,
        };
        Record {
            backend: backend.into(),
            device: "dev".into(),
            model: "smollm2-135m".into(),
            step: "tg".into(),
            node: "attn_output".into(),
            kernel: "matvec_q4_1".into(),
            shape: "1x576x576".into(),
            bytes: 2_000_000,
            flops: 663_552,
            timing: Some(Timing::new(&stats, 2_000_000, 663_552, 20.0)),
            adjacent_roofs_gbps: None,
            skipped: None,
        }
    }

    #[test]
    fn json_record_shape() {
        let mut rs = vec![record("cpu", 200.0), record("gemm", 100.0)];
        rs.push(Record {
            timing: None,
            skipped: Some("too large".into()),
            ..record("vulkan", 1.0)
        });
        compare_with_peer(&mut rs, "gemm", &["cpu"]);
        let v: serde_json::Value = serde_json::from_str(&json(&rs).unwrap()).unwrap();
        let cpu = &v[0];
        for key in [
            "backend",
            "device",
            "model",
            "step",
            "node",
            "kernel",
            "shape",
            "median_us",
            "min_us",
            "max_us",
            "reps",
            "gbps",
            "gflops",
            "copy_roof_percent",
        ] {
            assert!(cpu.get(key).is_some(), "missing {key}");
        }
        // 2 MB in 200 µs is 10 GB/s, half of a 20 GB/s roof; 663,552 flops in 200 µs.
        assert_eq!(cpu["gbps"], 10.0);
        assert_eq!(cpu["copy_roof_percent"], 50.0);
        assert!((cpu["gflops"].as_f64().unwrap() - 3.31776).abs() < 1e-12);
        assert_eq!(cpu["vs_peer"], 0.5);
        assert_eq!(cpu["min_us"], 100.0);
        assert!(v[1].get("vs_peer").is_none());
        assert_eq!(v[2]["skipped"], "too large");
        assert!(v[2].get("median_us").is_none());
    }

    /// A ratio is only taken between runs timed alike: vulkan's timestamps are not compared
    /// with cuBLAS's CUDA events, even where the caller lists vulkan.
    #[test]
    fn peers_are_compared_only_under_the_same_clock() {
        let mut rs = vec![
            record("cublas", 100.0),
            record("cuda", 200.0),
            record("vulkan", 50.0),
            record("wgpu", 100.0),
        ];
        compare_with_peer(&mut rs, "cublas", &["cuda", "vulkan"]);
        compare_with_peer(&mut rs, "vulkan", &["wgpu"]);
        let ratio = |i: usize| rs[i].timing.as_ref().unwrap().vs_peer;
        assert_eq!(ratio(1), Some(0.5));
        assert_eq!(ratio(2), None);
        assert_eq!(ratio(3), Some(0.5));
    }

    /// A node whose data stays in a cache runs above the copy roof: it reads as a percentage
    /// over 100 in every output, not as a "fraction" of 3.30.
    #[test]
    fn the_copy_roof_is_a_percentage_everywhere() {
        // 2 MB in 30.3 µs is 66 GB/s: 330% of a 20 GB/s roof.
        let r = Record {
            timing: Some(Timing::new(
                &record("cpu", 30.303).timing.unwrap(),
                2_000_000,
                0,
                20.0,
            )),
            ..record("cpu", 1.0)
        };
        let v: serde_json::Value =
            serde_json::from_str(&json(std::slice::from_ref(&r)).unwrap()).unwrap();
        assert!((v[0]["copy_roof_percent"].as_f64().unwrap() - 330.0).abs() < 0.01);
        assert!(v[0].get("roof_fraction").is_none());
        let t = table(std::slice::from_ref(&r));
        assert!(t.starts_with("model") && t.contains("% copy roof"), "{t}");
        assert!(t.contains(" 330% "), "{t}");
        let ctx = Context {
            date: String::new(),
            command: String::new(),
            backends: vec![],
            absent: vec![],
        };
        let md = markdown(&ctx, &[r]);
        assert!(
            md.contains("| % copy roof |") && md.contains("| 330% |"),
            "{md}"
        );
        assert!(md.contains("over 100% means"), "{md}");
    }

    #[test]
    fn tables_list_skips_with_their_reason() {
        let rs = vec![
            record("cpu", 200.0),
            Record {
                timing: None,
                skipped: Some("too large".into()),
                ..record("vulkan", 1.0)
            },
        ];
        assert!(table(&rs).contains("skipped: too large"));
        let ctx = Context {
            date: "2026-11-24".into(),
            command: "xtask bench".into(),
            backends: vec![("cpu".into(), "x86".into(), "cc".into(), "10 GB/s".into())],
            absent: vec![("hip".into(), "no device".into())],
        };
        let md = markdown(&ctx, &rs);
        assert!(md.contains("| hip | absent: no device |"));
        assert!(md.contains(
            "| smollm2-135m | tg | attn_output | 1x576x576 | matvec_q4_1 | cpu | 200.0 |"
        ));
    }
}

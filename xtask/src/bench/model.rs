//! `cargo xtask bench --model FILE -p 512 -n 128`: llama-bench's pp and tg tests on every
//! working backend, so the numbers compare directly with llama.cpp's.

use super::measure::Policy;
use super::roof;
use std::path::Path;
use std::sync::Arc;
use trine_backends::Backend;
use trine_llama::speed::{measure, Speed, Test};
use trine_llama::{Engine, EngineOptions, Footprint, Model};
use trine_ops::kv_type::KvType;

/// Tokens a step of a depth's prompt takes where the run has no pp test: llama-bench's
/// default batch.
const DEPTH_BATCH: u32 = 512;

/// A backend by name: opened, or why not.
pub type Named = (String, Result<Arc<dyn Backend>, String>);

/// One backend's results, or why it has none.
pub struct ModelRow {
    pub backend: String,
    pub device: String,
    pub speeds: Result<Vec<Speed>, String>,
    /// Kernel launches of one decode step (the recorded step replays them all at once).
    pub dispatches_per_token: Option<usize>,
    pub layers: u32,
    pub memory: Option<Memory>,
    /// The backend's copy rate before the tests ([`roof::measure`], the fastest copy): what
    /// the tg test's weight streaming is held against.
    pub copy: Option<CopyRoof>,
}

/// A copy roof: how it copied and GB/s, reads plus writes.
#[derive(Clone, serde::Serialize)]
pub struct CopyRoof {
    pub how: String,
    pub gbps: f64,
}

impl ModelRow {
    /// GB/s of weights the tg test streamed.
    pub fn decode_read_gbps(&self) -> Option<f64> {
        let tg = self
            .speeds
            .as_ref()
            .ok()?
            .iter()
            .find(|s| s.test.starts_with("tg"))?;
        Some(self.memory?.held.decode_reads as f64 * tg.mean_tps / 1e9)
    }

    /// [`Self::decode_read_gbps`] over the copy rate.
    pub fn share_of_copy(&self) -> Option<f64> {
        Some(self.decode_read_gbps()? / self.copy.as_ref()?.gbps)
    }
}

/// Device memory of one backend's run.
#[derive(Clone, Copy, serde::Serialize)]
pub struct Memory {
    /// What the engine's buffers hold.
    #[serde(flatten)]
    pub held: Footprint,
    /// How far the device's free memory (as its runtime reports it) fell from before the
    /// engine was made to after the tests: the buffers, the kernels' code, recorded steps and
    /// the runtime's own. The engine allocates everything before the first step and frees
    /// nothing until it drops, so this is its peak. `None` where the backend reports no free
    /// memory.
    pub device_used: Option<u64>,
}

impl Memory {
    /// The line the bench prints: each part in GiB, and the device's use against weights and
    /// KV cache.
    pub fn line(&self) -> String {
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        let h = &self.held;
        let mut s = format!(
            "weights {:.3} GiB, KV cache {:.3} GiB, activations {:.3} GiB",
            gib(h.weights),
            gib(h.kv_cache),
            gib(h.activations)
        );
        if let Some(used) = self.device_used {
            let base = (h.weights + h.kv_cache) as f64;
            s += &format!(
                "; the device's free memory fell by {:.3} GiB, {:.3}× weights + KV cache",
                gib(used),
                used as f64 / base
            );
        }
        s
    }
}

/// Runs pp`pp` and tg`tg` (a test of 0 tokens is left out), `reps` times each, on each backend,
/// each after `depth` tokens in the KV cache, with the KV cache in `cache` (`None`: each
/// device's type).
pub fn run(
    path: &Path,
    backends: &[Named],
    (pp, tg, depth, reps): (u32, u32, u32, usize),
    cache: Option<KvType>,
) -> Result<Vec<ModelRow>, String> {
    let model = Arc::new(Model::open(path).map_err(|e| format!("{}: {e}", path.display()))?);
    let wanted = depth + pp.max(tg).max(1);
    if wanted > model.config.context_length {
        return Err(format!(
            "{}: depth {depth} and the tests take {wanted} positions, past the model's context of {}",
            path.display(),
            model.config.context_length
        ));
    }
    let context = wanted;
    // A depth's prompt is fed in steps of the pp test's tokens, or of llama-bench's default
    // batch where there is no pp test.
    let batch = if pp > 0 { pp } else { DEPTH_BATCH };
    let sizes = EngineOptions {
        context,
        max_batch: batch.clamp(1, context),
        record: true,
        cache,
    };
    let mut rows = vec![];
    for (name, backend) in backends {
        let backend = match backend {
            Ok(b) => b.clone(),
            Err(why) => {
                rows.push(ModelRow {
                    backend: name.clone(),
                    device: String::new(),
                    speeds: Err(why.clone()),
                    dispatches_per_token: None,
                    layers: model.config.n_layer,
                    memory: None,
                    copy: None,
                });
                continue;
            }
        };
        eprintln!("{name}: pp{pp} and tg{tg}, {reps} repetitions after a warm-up");
        let mut device = backend.info().name.clone();
        let mut dispatches = None;
        let mut memory = None;
        let copy = match roof::measure(backend.as_ref(), &Policy::default()) {
            Ok(roofs) => roofs
                .into_iter()
                .max_by(|a, b| a.gbps.total_cmp(&b.gbps))
                .map(|r| CopyRoof {
                    how: r.how,
                    gbps: r.gbps,
                }),
            Err(e) => {
                eprintln!("{name}: no copy roof: {e}");
                None
            }
        };
        let free_before = backend.free_memory();
        let speeds = (|| {
            let mut engine =
                Engine::new(model.clone(), backend.clone(), sizes).map_err(|e| e.to_string())?;
            device = format!("{device}, {} KV cache", engine.cache_form());
            let mut out = vec![];
            for (test, n) in [(Test::Pp, pp), (Test::Tg, tg)] {
                if n == 0 {
                    continue;
                }
                let (speed, e) =
                    measure(engine, test, (n, depth), reps).map_err(|e| e.to_string())?;
                engine = e;
                out.push(speed);
            }
            // After the tests: the recorded step's count, fused where it was.
            dispatches = Some(engine.dispatches_per_token());
            let held = engine.footprint().map_err(|e| e.to_string())?;
            let device_used = free_before
                .zip(backend.free_memory())
                .map(|(before, after)| before.saturating_sub(after));
            memory = Some(Memory { held, device_used });
            Ok(out)
        })();
        if let Some(n) = dispatches {
            eprintln!(
                "{name}: {n} dispatches per decode step ({:.2} per layer)",
                n as f64 / f64::from(model.config.n_layer)
            );
        }
        if let Some(m) = &memory {
            eprintln!("{name}: {}", m.line());
        }
        rows.push(ModelRow {
            backend: name.clone(),
            device,
            speeds,
            dispatches_per_token: dispatches,
            layers: model.config.n_layer,
            memory,
            copy,
        });
    }
    Ok(rows)
}

#[derive(serde::Serialize)]
struct JsonRow<'a> {
    backend: &'a str,
    device: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<&'a str>,
    tests: &'a [Speed],
    #[serde(skip_serializing_if = "Option::is_none")]
    dispatches_per_token: Option<usize>,
    layers: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory: Option<Memory>,
    #[serde(skip_serializing_if = "Option::is_none")]
    copy: Option<&'a CopyRoof>,
    /// GB/s of weights the tg test streamed (the decode step's weights times its tokens per
    /// second), and that as a share of the copy rate.
    #[serde(skip_serializing_if = "Option::is_none")]
    decode_read_gbps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    share_of_copy: Option<f64>,
}

/// The rows as a JSON array: backend, device, and each test's samples, mean and deviation.
pub fn json(rows: &[ModelRow]) -> Result<String, String> {
    let rows: Vec<JsonRow> = rows
        .iter()
        .map(|r| JsonRow {
            backend: &r.backend,
            device: &r.device,
            skipped: r.speeds.as_ref().err().map(String::as_str),
            tests: r.speeds.as_deref().unwrap_or(&[]),
            dispatches_per_token: r.dispatches_per_token,
            layers: r.layers,
            memory: r.memory,
            copy: r.copy.as_ref(),
            decode_read_gbps: r.decode_read_gbps(),
            share_of_copy: r.share_of_copy(),
        })
        .collect();
    serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())
}

/// llama-bench's table: model, backend, test, t/s as mean ± standard deviation.
pub fn table(model: &Path, rows: &[ModelRow]) -> String {
    let name = model
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut s = String::from(
        "| model | backend | device | test | t/s | dispatches per token |\n| --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        match &r.speeds {
            Err(why) => s += &format!("| {name} | {} | — | — | not run: {why} | |\n", r.backend),
            Ok(speeds) => {
                for sp in speeds {
                    let per = r
                        .dispatches_per_token
                        .map_or_else(String::new, |n| n.to_string());
                    s += &format!(
                        "| {name} | {} | {} | {} | {:.2} ± {:.2} | {per} |\n",
                        r.backend, r.device, sp.test, sp.mean_tps, sp.stddev_tps
                    );
                }
            }
        }
    }
    for r in rows {
        if let Some(m) = &r.memory {
            s += &format!("\n{} memory: {}\n", r.backend, m.line());
        }
        if let (Some(gbps), Some(share), Some(copy)) =
            (r.decode_read_gbps(), r.share_of_copy(), &r.copy)
        {
            s += &format!(
                "\n{} decode: {:.2} GB of weights per token, streamed at {gbps:.0} GB/s, {share:.2} of the copy rate ({}, {:.0} GB/s)\n",
                r.backend,
                r.memory.map_or(0.0, |m| m.held.decode_reads as f64 / 1e9),
                copy.how,
                copy.gbps
            );
        }
    }
    s
}

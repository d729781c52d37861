//! Integration tests of the trine facade live in `tests/`; this crate holds only what several
//! of them share.

pub mod reference;

use serde_json::Value;
use std::sync::Arc;
use trine_backends::Backend;
use trine_llama::{generate, Engine, EngineOptions, GenerateOptions, Model, Sampling, Session};

/// The reference fixtures' folder (`llama/tests/fixtures`: llama.cpp's and the float64
/// graph's outputs).
pub const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../llama/tests/fixtures");

/// The JSON fixture `name` of [`FIXTURES`].
pub fn fixture(name: &str) -> Value {
    let path = format!("{FIXTURES}/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A fixture's array of token ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

/// `f` of every item, computed one per core at a time (the compile tests' compilers take one
/// kernel at a time, and CI has two cores), in no particular order.
pub fn on_every_core<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::with_capacity(items.len()));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                results.lock().unwrap_or_else(|p| p.into_inner()).push(r);
            });
        }
    });
    results.into_inner().unwrap_or_else(|p| p.into_inner())
}

/// Compares ids `got` with `who`'s (`want`, with `who`'s top two logits per step in `top2`):
/// equal, or equal up to a step where `who`'s choice was a near tie, a top-2 gap under
/// `flip_gap`. Returns what was found, or why it fails.
pub fn equal_up_to_a_near_tie(
    who: &str,
    (got, want): (&[u32], &[u32]),
    top2: &Value,
    flip_gap: f64,
) -> Result<String, String> {
    let Some(step) = got.iter().zip(want).position(|(a, b)| a != b) else {
        return Ok(format!("{who}'s {} ids equal", got.len().min(want.len())));
    };
    let gap = top2
        .as_array()
        .and_then(|t| t.get(step))
        .and_then(|pair| Some(pair[0].as_f64()? - pair[1].as_f64()?))
        .ok_or_else(|| format!("ids differ at step {step}, and the fixture has no top-2 there"))?;
    if gap < flip_gap {
        Ok(format!(
            "{who}'s equal up to step {step}, where its top-2 gap is {gap:.3}"
        ))
    } else {
        Err(format!(
            "ids differ at step {step} ({} against {who}'s {}), where {who}'s top-2 gap is \
             {gap:.3}: not a near tie 8-bit activations could flip",
            got[step], want[step]
        ))
    }
}

/// The `n` ids `trine generate` decodes greedily after `prompt` on `backend`, with the options
/// it runs with.
pub fn greedy(
    model: &Arc<Model>,
    backend: &Arc<dyn Backend>,
    prompt: &[u32],
    n: usize,
) -> Vec<u32> {
    let sizes = EngineOptions::for_generation(&model.config, prompt.len(), n);
    greedy_sized(model, backend, sizes, prompt, n)
}

/// [`greedy`] on an engine of the given sizes: a KV cache of another context (which picks
/// LongRoPE's factors) than `trine generate` would allocate.
pub fn greedy_sized(
    model: &Arc<Model>,
    backend: &Arc<dyn Backend>,
    sizes: EngineOptions,
    prompt: &[u32],
    n: usize,
) -> Vec<u32> {
    let engine = Engine::new(model.clone(), backend.clone(), sizes).unwrap();
    let opts = GenerateOptions {
        max_tokens: n,
        sampling: Sampling::default(),
        stop_at_end: true,
        stop_on_divergence: false,
    };
    generate(&mut Session::new(engine, None), prompt, opts, |_| {})
        .unwrap()
        .generated_tokens
}

//! Integration tests of the trine facade live in `tests/`; this crate holds only what several
//! of them share.

use serde_json::Value;

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

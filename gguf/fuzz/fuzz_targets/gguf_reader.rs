//! Any bytes through the GGUF reader: it must return Ok or Err without crashing, and a file it
//! accepts must be readable throughout — every tensor's bytes and every metadata value.

#![no_main]

use libfuzzer_sys::fuzz_target;
use trine_gguf::{Gguf, Value};

/// Visits a value and everything inside it, so nested arrays are walked too.
fn touch(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        Value::Array(items) => items.iter().map(touch).sum(),
        v => v.to_string().len(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(g) = Gguf::from_bytes(data.to_vec()) else {
        return;
    };
    let mut sum = 0usize;
    for t in g.tensors() {
        let bytes = g.tensor_data(t);
        assert_eq!(bytes.len() as u64, t.n_bytes, "{}", t.name);
        sum = sum.wrapping_add(bytes.iter().map(|&b| usize::from(b)).sum::<usize>());
        assert!(g.tensor(&t.name).is_some());
    }
    for (k, v) in g.metadata() {
        sum = sum.wrapping_add(k.len() + touch(v));
        assert!(g.get(k).is_some());
    }
    std::hint::black_box(sum);
});

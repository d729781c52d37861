//! Writes the tiny models with rope scaling that `llama/tests/executor/rope_scaling.rs` runs
//! (`trine_gguf::synth::rope::tiny`), for `scripts/reference/rope.sh`, which records llama.cpp's
//! and a float64 reference's greedy ids on them.
//!
//!     cargo run --example rope_models -- DIR

use trine_gguf::synth::rope::{tiny, TinyRope};

/// The seed the tests make the models from.
const SEED: u64 = 5;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: rope_models DIR")?;
    for r in TinyRope::ALL {
        let path = std::path::Path::new(&dir).join(format!("tiny-{}.gguf", r.name()));
        tiny(r, SEED)?.write(&path)?;
        println!("{}", path.display());
    }
    Ok(())
}

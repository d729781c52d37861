//! Device time of the op library at model shapes (SmolLM2-135M: 576 wide, FFN 1536, vocabulary
//! 49152; a 7B model's 4096 × 4096 GEMV; attention decode against caches of 100 and 300) on
//! every available backend. `cargo xtask bench` is the shootout with roofs and peers; these
//! are the same kernels under criterion, for tracking one backend over time.

use criterion::{criterion_group, criterion_main, Criterion};
use std::time::Duration;
use trine_benches::bench_on_every_backend;
use trine_ops::case::Case;

/// Case names at model shapes, as `trine_ops::cases()` names them.
const MODEL_SHAPES: [&str; 9] = [
    "x576/",
    "576x1536",
    "1536x576",
    "49152",
    "4096x4096",
    "7x576",
    "1x9x3x64+L100",
    "1x9x3x64+L300",
    "/1536",
];

fn benches(c: &mut Criterion) {
    let cases: Vec<Case> = trine_ops::cases()
        .into_iter()
        .filter(|c| MODEL_SHAPES.iter().any(|s| c.name.contains(s)))
        .collect();
    bench_on_every_backend(c, &cases);
}

criterion_group! {
    name = group;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_millis(200));
    targets = benches
}
criterion_main!(group);

//! Device time of foundation kernels on every available backend: Vulkan timestamps where the
//! device has them, host time around dispatch and synchronize otherwise.

use criterion::{criterion_group, criterion_main, Criterion};
use std::time::Duration;
use trine_benches::bench_on_every_backend;
use trine_ops::case::Case;
use trine_ops::kernels;

fn benches(c: &mut Criterion) {
    let cases: Vec<Case> = [kernels::saxpy::cases(), kernels::matmul::cases()]
        .concat()
        .into_iter()
        .filter(|c| c.name.contains("n=1000") || c.name.contains("64x128x96"))
        .collect();
    bench_on_every_backend(c, &cases);
}

criterion_group! {
    name = group;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_millis(300));
    targets = benches
}
criterion_main!(group);

//! Device time of the executor's nodes under criterion, on every backend that opens here:
//! SmolLM2-135M's layout with one layer of random weights ([`trine_benches::steps`]), every node
//! of a decode step and of a 128-token prompt step, named `backend/model/step/node`, each
//! dispatched as the executor dispatches it ([`trine_llama::Engine::run_timed`]: timestamps
//! where the backend has them). `cargo xtask bench` times the same nodes with their bytes, a
//! copy roof and peers; this tracks one backend over time.

use criterion::{criterion_group, criterion_main, Criterion};
use std::time::Duration;
use trine_backends::{open_all, BackendKind};
use trine_benches::steps::{self, Layout};

/// The prompt step's tokens: enough for the prompt kernels (64 tokens and more take the wide
/// products), few enough for lavapipe.
const PROMPT: u32 = 128;

fn benches(c: &mut Criterion) {
    let layout = Layout::SmolLm2;
    let model = layout.model(1).expect("the synthetic model");
    for opened in open_all(&BackendKind::ALL) {
        let backend = match opened.backend {
            Ok(b) => b,
            Err(e) => {
                println!("{}: skipped: {e}", opened.kind);
                continue;
            }
        };
        let mut p = match steps::prepare(model.clone(), backend, PROMPT) {
            Ok(p) => p,
            Err(e) => {
                println!("{}: skipped: {e}", opened.kind);
                continue;
            }
        };
        for i in 0..p.steps.len() {
            p.enter(i).expect("the step's ids and position");
            let step = p.steps[i].name.clone();
            for n in 0..p.steps[i].nodes.len() {
                let label = p.steps[i].nodes[n].label;
                let name = format!("{}/{}/{step}/{label}", opened.kind, layout.name());
                c.bench_function(&name, |b| {
                    b.iter_custom(|iters| {
                        (0..iters)
                            .map(|_| p.time(i, n).expect("a node of the step"))
                            .sum::<Duration>()
                    })
                });
            }
        }
    }
}

criterion_group! {
    name = group;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_millis(200));
    targets = benches
}
criterion_main!(group);

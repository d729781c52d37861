//! Device time of foundation kernels on every available backend: Vulkan timestamps where the
//! device has them, host time around dispatch and synchronize otherwise.

use criterion::{criterion_group, criterion_main, Criterion};
use std::time::Duration;
use trine_backends::{open_all, Backend, BackendKind, Binding, Dispatch};
use trine_models::conformance::Case;
use trine_models::kernels;

fn bench_case(c: &mut Criterion, backend: &dyn Backend, case: &Case) {
    let program = match backend.compile(&case.kernel) {
        Ok(p) => p,
        Err(e) => {
            println!("{} on {}: skipped: {e}", case.name, backend.name());
            return;
        }
    };
    let mut bindings = vec![];
    for b in &case.buffers {
        let h = backend
            .alloc(b.data.len() as u64)
            .expect("allocating a bench buffer");
        backend
            .write(h, 0, &b.data)
            .expect("uploading a bench buffer");
        bindings.push(Binding {
            buffer: h,
            offset: 0,
            size: b.data.len() as u64,
        });
    }
    let d = Dispatch {
        program,
        grid: case.grid,
        bindings: &bindings,
        params: &case.params,
    };
    c.bench_function(&format!("{}/{}", backend.name(), case.name), |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| backend.dispatch_timed(&d).expect("dispatch"))
                .sum::<Duration>()
        })
    });
    for b in bindings {
        backend.free(b.buffer);
    }
}

fn benches(c: &mut Criterion) {
    let cases: Vec<Case> = [kernels::saxpy::cases(), kernels::matmul::cases()]
        .concat()
        .into_iter()
        .filter(|c| c.name.contains("n=1000") || c.name.contains("64x128x96"))
        .collect();
    for opened in open_all(&BackendKind::ALL) {
        match opened.backend {
            Err(e) => println!("{}: skipped: {e}", opened.kind),
            Ok(b) => cases
                .iter()
                .for_each(|case| bench_case(c, b.as_ref(), case)),
        }
    }
}

criterion_group! {
    name = group;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_millis(300));
    targets = benches
}
criterion_main!(group);

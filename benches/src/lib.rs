//! What the criterion benches share: timing one conformance case's dispatch on a backend.

use criterion::Criterion;
use std::time::Duration;
use trine_backends::{Backend, Binding, Dispatch};
use trine_models::conformance::Case;

/// Benches `case` on `backend` as `backend/case`, by device time per dispatch (timestamps
/// where the backend has them). A kernel the backend cannot compile is skipped with its reason.
pub fn bench_case(c: &mut Criterion, backend: &dyn Backend, case: &Case) {
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

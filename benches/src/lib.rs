//! What the criterion benches share: timing conformance cases' dispatches on every backend,
//! and the `gemm` crate as the CPU peer (also used by `cargo xtask bench`).

pub mod gemm_peer;
pub mod steps;

use criterion::Criterion;
use std::time::Duration;
use trine_backends::{open_all, Backend, BackendKind, Binding, Dispatch};
use trine_ops::case::Case;

/// Benches every case on every backend that opens here; an absent one is named with its reason.
pub fn bench_on_every_backend(c: &mut Criterion, cases: &[Case]) {
    for opened in open_all(&BackendKind::ALL) {
        match opened.backend {
            Err(e) => println!("{}: skipped: {e}", opened.kind),
            Ok(b) => cases
                .iter()
                .for_each(|case| bench_case(c, b.as_ref(), case)),
        }
    }
}

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

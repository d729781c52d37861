//! The CPU peer: the `gemm` crate on the GEMV and matmul shapes the CPU backend runs, timed on
//! the host (one call per sample) under the same policy. Its f16 GEMV keeps x and y in f16
//! (trine's are f32): a few KiB more or less, against megabytes of weights.

use super::measure::{measure, Policy, Stats};
use std::convert::Infallible;
use std::time::Instant;
use trine_benches::gemm_peer::{f16, Product};

/// Times `C[m × n] = A[m × k]·Bᵀ` (B stored as weights, `[n × k]`) under `policy`.
fn time_product<T: Copy + 'static>(
    policy: &Policy,
    (m, n, k): (usize, usize, usize),
    (fill, zero, one): (T, T, T),
) -> Stats {
    let mut product = Product::new(m, n, k, fill, zero, one);
    let run = measure(policy, || {
        let t = Instant::now();
        product.run();
        Ok::<_, Infallible>(t.elapsed())
    });
    match run {
        Ok(s) => s,
        Err(never) => match never {},
    }
}

/// `y[rows] = W[rows × cols]·x` in f32 (`half` false) or f16.
pub fn gemv(policy: &Policy, half: bool, rows: usize, cols: usize) -> Stats {
    if half {
        let f = (f16::from_f32(0.5), f16::ZERO, f16::ONE);
        time_product(policy, (1, rows, cols), f)
    } else {
        time_product(policy, (1, rows, cols), (0.5f32, 0.0, 1.0))
    }
}

/// f32 `C[m × n] = A[m × k]·Bᵀ`.
pub fn matmul(policy: &Policy, m: usize, n: usize, k: usize) -> Stats {
    time_product(policy, (m, n, k), (0.5f32, 0.0, 1.0))
}

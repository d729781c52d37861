//! The CPU peer: the `gemm` crate on the shapes of the CPU's prompt products (f32 operands,
//! where trine's take 8-bit x and quantized weights: the same arithmetic on 4 to 8 times the
//! bytes), timed on the host (one call per sample) under the same policy.

use super::measure::{measure, Policy, Stats};
use std::convert::Infallible;
use std::time::Instant;
use trine_benches::gemm_peer::Product;

/// Times f32 `C[m × n] = A[m × k]·Bᵀ` (B stored as weights, `[n × k]`) under `policy`.
pub fn matmul(policy: &Policy, m: usize, n: usize, k: usize) -> Stats {
    let mut product = Product::new(m, n, k, 0.5f32, 0.0, 1.0);
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

/// Bytes the product reads and writes: A, B and C in f32.
pub fn matmul_bytes(m: u32, n: u32, k: u32) -> u64 {
    let (m, n, k) = (u64::from(m), u64::from(n), u64::from(k));
    (m * k + n * k + m * n) * 4
}

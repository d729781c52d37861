//! The CPU peer: the `gemm` crate on the GEMV and matmul shapes the CPU backend runs, timed on
//! the host (one call per sample) under the same policy. Its f16 GEMV keeps x and y in f16
//! (trine's are f32): a few KiB more or less, against megabytes of weights.

use super::measure::{measure, Policy, Stats};
use gemm::{f16, Parallelism};
use std::convert::Infallible;
use std::time::Instant;

fn parallelism() -> Parallelism {
    Parallelism::Rayon(std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `C[m × n] = A[m × k]·Bᵀ`, B stored `[n × k]` row-major (weights), as a GEMV when m = 1.
fn time_product<T: Copy + 'static>(
    policy: &Policy,
    (m, n, k): (usize, usize, usize),
    (fill, zero, one): (T, T, T),
) -> Stats {
    let a = vec![fill; m * k];
    let b = vec![fill; n * k];
    let mut c = vec![zero; m * n];
    let par = parallelism();
    let run = measure(policy, || {
        let t = Instant::now();
        // SAFETY: A is m × k row-major (column stride 1, row stride k); Bᵀ is k × n read from
        // B, n × k row-major (element (p, j) at j·k + p: column stride k, row stride 1); C is
        // m × n row-major. All three were allocated with exactly those sizes above and
        // nothing else aliases them.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                1,
                k as isize,
                b.as_ptr(),
                k as isize,
                1,
                zero,
                one,
                false,
                false,
                false,
                par,
            )
        }
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

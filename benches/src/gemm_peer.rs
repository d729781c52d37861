//! The `gemm` crate as the CPU peer of trine's prompt products: `C[m × n] = A[m × k]·Bᵀ`, B
//! stored `[n × k]` row-major as weights are. One place holds the unsafe call, for
//! `cargo xtask bench`.

/// Operands of one product, allocated once and multiplied by [`Product::run`] as often as a
/// measurement needs.
pub struct Product<T> {
    m: usize,
    n: usize,
    k: usize,
    a: Vec<T>,
    b: Vec<T>,
    c: Vec<T>,
    zero: T,
    one: T,
}

impl<T: Copy + 'static> Product<T> {
    /// A and B filled with `fill`; `zero` and `one` are T's 0 and 1 (gemm's α and β).
    pub fn new(m: usize, n: usize, k: usize, fill: T, zero: T, one: T) -> Product<T> {
        Product {
            m,
            n,
            k,
            a: vec![fill; m * k],
            b: vec![fill; n * k],
            c: vec![zero; m * n],
            zero,
            one,
        }
    }

    /// C = A·Bᵀ on every thread of rayon's pool.
    pub fn run(&mut self) {
        let (m, n, k) = (self.m, self.n, self.k);
        let par = gemm::Parallelism::Rayon(rayon::current_num_threads());
        // SAFETY: A is m × k row-major (column stride 1, row stride k); Bᵀ is k × n read from
        // B, n × k row-major (element (p, j) at j·k + p: column stride k, row stride 1); C is
        // m × n row-major. `new` allocated all three with exactly those sizes, and `&mut self`
        // keeps anything else from touching them during the call.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                self.c.as_mut_ptr(),
                1,
                n as isize,
                false,
                self.a.as_ptr(),
                1,
                k as isize,
                self.b.as_ptr(),
                k as isize,
                1,
                self.zero,
                self.one,
                false,
                false,
                false,
                par,
            )
        }
    }
}

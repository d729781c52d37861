//! What the benches share: the executor's steps as they time them ([`steps`], also used by
//! `cargo xtask bench`), and the `gemm` crate as the CPU peer of the CPU's prompt products.

pub mod gemm_peer;
pub mod steps;

//! Criterion benches of trine's kernels per backend live in `benches/`; this crate has no code
//! of its own.

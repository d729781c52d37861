//! trine-models: the kernel library and the conformance harness.
//!
//! For now it holds the foundation kernels ([`kernels`]) that exercise every part of the IR;
//! the transformer op library and the graph executor grow here.

pub mod conformance;
pub mod kernels;

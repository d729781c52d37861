//! trine: kernels written once in a Rust-embedded IR, lowered to SPIR-V (Vulkan), HIP/CUDA C++
//! and the CPU, run on whichever backend works on the machine, and cross-checked against a
//! reference interpreter.
//!
//! This facade re-exports the layers: [`ir`] (the kernel IR), [`codegen`] (its lowerings),
//! [`backends`] (devices), [`models`] (kernels and conformance).

pub mod doctor;
pub mod run;

pub use trine_backends as backends;
pub use trine_codegen as codegen;
pub use trine_ir as ir;
pub use trine_models as models;

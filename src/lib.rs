//! trine: kernels written once in a Rust-embedded IR, lowered to SPIR-V (Vulkan), HIP/CUDA C++
//! and the CPU, run on whichever backend works on the machine, and cross-checked against a
//! reference interpreter.
//!
//! This facade re-exports the layers: [`ir`] (the kernel IR), [`codegen`] (its lowerings),
//! [`backends`] (devices), [`ops`] (the kernel library), [`gguf`] (model files),
//! [`tokenizer`] and [`llama`] (models, their executor and generation). A program using the
//! backends calls [`start`] first in `main`; `examples/` has two short ones.

pub mod doctor;
pub mod run;
mod start;

pub use trine_backends as backends;
pub use trine_codegen as codegen;
pub use trine_gguf as gguf;
pub use trine_ir as ir;
pub use trine_llama as llama;
pub use trine_ops as ops;
pub use trine_tokenizer as tokenizer;

pub use start::start;

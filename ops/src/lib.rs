//! trine-ops: the kernel library, written once in the IR, each kernel with its plain-Rust
//! reference and its error bound.
//!
//! The transformer ops are the modules at the root: the kernels the Llama executor
//! (`trine-llama`) runs, one module each with its kernel(s), its plain-Rust reference
//! (accumulating in f64), its shape rules, its NMSE bound and its cases; [`cases`] lists them.
//! A large op is a folder whose files each hold one of these concerns (`matvec/`: `spec.rs`,
//! `kernel.rs`, `reference.rs`, `cases.rs`, …).
//! [`rope`] and [`attention`] hold no kernel of their own: the references, shapes and the walk
//! over the keys that the fused kernels share. The foundation kernels
//! ([`kernels`]) exercise every part of the IR. [`case`] is what a kernel with its inputs,
//! references and bound is, [`compare`] how an output is judged against a bound, and
//! [`dequant`] the IR helpers that decode GGUF's quantized blocks inside a kernel.

pub mod argmax;
pub mod attention;
pub mod attention_flash;
pub mod attention_flash_tiles;
pub mod attention_split;
pub mod case;
pub mod compare;
pub mod dequant;
pub mod elementwise;
pub mod embedding;
pub mod kernels;
pub mod key_layout;
mod matmul_group;
mod matmul_stage;
pub mod matmul_tiles;
pub mod matvec;
pub mod matvec_attn;
pub mod matvec_fused;
pub mod matvec_q8;
pub mod matvec_q8_rows;
pub mod rms_norm;
pub mod rope;
pub mod rope_store;
pub mod shape;
pub mod support;

use crate::case::Case;

/// Every conformance case of the op library.
pub fn cases() -> Vec<Case> {
    [
        matmul_tiles::cases as fn() -> Vec<Case>,
        matvec::cases,
        matvec_fused::cases,
        matvec_q8::cases,
        matvec_q8_rows::cases,
        matvec_attn::cases,
        embedding::cases,
        rms_norm::cases,
        attention_split::cases,
        attention_flash::cases,
        attention_flash_tiles::cases,
        rope_store::cases,
        elementwise::cases,
        argmax::cases,
    ]
    .iter()
    .flat_map(|f| f())
    .collect()
}

//! The transformer op library: every op a Llama-family model needs, written once in the IR.
//! Each op is one file: its kernel(s), its plain-Rust reference (accumulating in f64), its
//! shape rules and its NMSE bound, and its conformance cases.

pub mod argmax;
pub mod attention;
pub mod attention_split;
pub mod elementwise;
pub mod embedding;
pub mod matmul;
pub mod matvec;
pub mod matvec_attn;
pub mod matvec_fused;
pub mod quant;
pub mod rms_norm;
pub mod rope;
pub mod rope_store;
pub mod shape;
pub mod softmax;
pub mod support;

use crate::conformance::case::Case;

/// Every conformance case of the op library.
pub fn cases() -> Vec<Case> {
    [
        matmul::cases as fn() -> Vec<Case>,
        matvec::cases,
        matvec_fused::cases,
        matvec_attn::cases,
        embedding::cases,
        rms_norm::cases,
        rope::cases,
        softmax::cases,
        attention::cases,
        attention_split::cases,
        rope_store::cases,
        elementwise::cases,
        argmax::cases,
    ]
    .iter()
    .flat_map(|f| f())
    .collect()
}

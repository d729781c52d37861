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
//! [`blocks`] the one description of GGUF's quantized blocks that every kernel decodes them by.

pub mod argmax;
pub mod attention;
pub mod attention_flash;
pub mod attention_flash_tiles;
pub mod attention_split;
pub mod blocks;
pub mod case;
pub mod compare;
pub mod elementwise;
pub mod embedding;
pub mod kernels;
pub mod key_layout;
pub mod kv_type;
mod matmul_group;
mod matmul_stage;
pub mod matmul_tiles;
pub mod matvec;
pub mod matvec_attn;
pub mod matvec_fused;
pub mod matvec_ids;
pub mod matvec_ids_blocks;
pub mod matvec_ids_rows;
pub mod matvec_ids_sorted;
pub mod matvec_q8;
pub mod matvec_q8_blocks;
pub mod matvec_q8_rows;
pub mod moe_combine;
pub mod moe_route;
pub mod moe_sort;
pub mod norm_add;
pub mod qkv_bias_norm;
pub mod quantize;
pub mod rms_norm;
pub mod rope;
pub mod rope_freqs;
pub mod rope_store;
pub mod shape;
pub mod split_sum;
pub mod support;
pub mod widen;

use crate::case::Case;

/// A module of the library and its cases, with a line that says what its kernels compute:
/// the kernels' names alone do not tell a reader which op a variant belongs to.
pub struct Family {
    /// The module.
    pub name: &'static str,
    /// One line, for listings.
    pub about: &'static str,
    pub cases: fn() -> Vec<Case>,
}

/// The op library's families, in the order of [`cases`].
pub static FAMILIES: [Family; 26] = [
    Family {
        name: "matmul_tiles",
        about: "prompt products y = x·Wᵀ on matrix units, W in f32, f16, Q8_0, Q4_0 or Q4_1",
        cases: matmul_tiles::cases,
    },
    Family {
        name: "widen",
        about: "a prompt product's operands in f16: quantized W dequantised to f16 rows, x rounded",
        cases: widen::cases,
    },
    Family {
        name: "matvec",
        about: "decode's matrix-vector product y = W·x, W in f32, f16 or any block format",
        cases: matvec::cases,
    },
    Family {
        name: "matvec_fused",
        about: "matvecs with the RMS norm before, the residual add after or SwiGLU fused in",
        cases: matvec_fused::cases,
    },
    Family {
        name: "quantize",
        about: "x quantized to 8 bits (Q8_0, Q8_1 or Q8_K blocks) for the products with 8-bit activations, from x, SwiGLU, the RMS norm or attention's partials",
        cases: quantize::cases,
    },
    Family {
        name: "matvec_q8_rows",
        about: "the 8-bit-activation product for CPUs: 16 interleaved rows per workgroup",
        cases: matvec_q8_rows::cases,
    },
    Family {
        name: "matvec_q8_blocks",
        about: "the 8-bit-activation product for GPUs: the file's K-quant blocks, packed dots",
        cases: matvec_q8_blocks::cases,
    },
    Family {
        name: "matvec_attn",
        about: "the products either side of attention with what sits between them fused in",
        cases: matvec_attn::cases,
    },
    Family {
        name: "matvec_ids",
        about: "mixture-of-experts products: each row reads its chosen expert's weights by index",
        cases: matvec_ids::cases,
    },
    Family {
        name: "matvec_ids_blocks",
        about: "mixture-of-experts products on 8-bit x and the experts' own K-quant blocks",
        cases: matvec_ids_blocks::cases,
    },
    Family {
        name: "matvec_ids_rows",
        about: "mixture-of-experts products for CPUs: 16 interleaved rows of a pair's expert on 8-bit x",
        cases: matvec_ids_rows::cases,
    },
    Family {
        name: "matvec_ids_sorted",
        about: "a prompt's experts' gate/up products by expert, its tokens' pairs in chunks",
        cases: matvec_ids_sorted::cases,
    },
    Family {
        name: "moe_route",
        about: "mixture-of-experts routing: softmax, the top k experts, their weights normalised",
        cases: moe_route::cases,
    },
    Family {
        name: "moe_sort",
        about: "mixture-of-experts routing by expert: each expert's count and (token, slot) pairs",
        cases: moe_sort::cases,
    },
    Family {
        name: "moe_combine",
        about: "mixture-of-experts output: each token's pairs' rows weighted, summed onto the residual",
        cases: moe_combine::cases,
    },
    Family {
        name: "split_sum",
        about: "a K-split prompt product's slices summed, with the residual",
        cases: split_sum::cases,
    },
    Family {
        name: "embedding",
        about: "embedding lookup out[t] = table[ids[t]], dequantised to f32 (and scaled)",
        cases: embedding::cases,
    },
    Family {
        name: "rms_norm",
        about: "RMS normalisation with weight, per row: y = x / sqrt(mean(x²) + eps) · w",
        cases: rms_norm::cases,
    },
    Family {
        name: "norm_add",
        about: "a post-norm residual connection, per row: y = rms_norm(x) · w + r",
        cases: norm_add::cases,
    },
    Family {
        name: "attention_split",
        about: "decode attention split over the keys (flash decoding), in two dispatches",
        cases: attention_split::cases,
    },
    Family {
        name: "attention_flash",
        about: "flash attention for prompt steps: a block of query tokens per workgroup",
        cases: attention_flash::cases,
    },
    Family {
        name: "attention_flash_tiles",
        about: "flash attention for prompt steps with scores and sums on matrix tiles",
        cases: attention_flash_tiles::cases,
    },
    Family {
        name: "qkv_bias_norm",
        about: "a QKV product's biases added and its q and k heads rms-normalised, in place",
        cases: qkv_bias_norm::cases,
    },
    Family {
        name: "rope_store",
        about: "rope on the query and key heads and the KV cache store, in one dispatch",
        cases: rope_store::cases,
    },
    Family {
        name: "elementwise",
        about: "one element per invocation: SwiGLU and GeGLU on paired rows, f32/f16 copies",
        cases: elementwise::cases,
    },
    Family {
        name: "argmax",
        about: "index of the largest value of each row, for greedy decoding",
        cases: argmax::cases,
    },
];

/// Every conformance case of the op library.
pub fn cases() -> Vec<Case> {
    FAMILIES.iter().flat_map(|f| (f.cases)()).collect()
}

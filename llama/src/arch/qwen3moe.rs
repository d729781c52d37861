//! Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): Qwen3's attention (per-head q and k norms, NeoX
//! rope, the head size the file gives) and in each layer, in place of the SwiGLU block, a
//! mixture of SwiGLU experts: a router's softmax picks `expert_used_count` of
//! `expert_count` experts per token, weighted by their probabilities normalised over the
//! chosen (llama.cpp's `LLM_ARCH_QWEN3MOE` and `build_moe_ffn` with softmax gating and
//! `norm_w`). The layer's experts are [`crate::weights::Ffn::Experts`].

use crate::graph::builder::Builder;
use crate::weights::Weights;
use trine_ops::rope::RopeMode;

pub fn build(b: &mut Builder, w: &Weights) {
    b.decoder(w, RopeMode::Neox);
}

//! Qwen3 (dense): Llama's blocks with each query and key head rms-normalised before rope
//! (the layer's [`crate::weights::Layer::qk_norm`]), a head size the file gives
//! (`qwen3.attention.key_length`: 0.6B's 16 heads of 128 over a stream of 1024), no biases,
//! and NeoX rope (llama.cpp's `LLM_ARCH_QWEN3`, rope type NEOX).

use crate::graph::builder::Builder;
use crate::weights::Weights;
use trine_ops::rope::RopeMode;

pub fn build(b: &mut Builder, w: &Weights) {
    b.decoder(w, RopeMode::Neox);
}

//! Qwen2 (Qwen2.5): Llama's blocks with biases on the Q, K and V projections and NeoX rope
//! (llama.cpp's `LLM_ARCH_QWEN2`, rope type NEOX). The biases are the layer's
//! [`crate::weights::QkvPart::bias`], added before rope by the attention block.

use crate::graph::builder::Builder;
use crate::weights::Weights;
use trine_ops::rope::RopeMode;

pub fn build(b: &mut Builder, w: &Weights) {
    b.decoder(w, RopeMode::Neox);
}

//! Qwen2 (Qwen2.5): Llama's blocks with biases on the Q, K and V projections and NeoX rope
//! (llama.cpp's `LLM_ARCH_QWEN2`, rope type NEOX). The biases are the layer's
//! [`crate::weights::QkvPart::bias`], added before rope by the attention block.

use crate::graph::builder::Builder;
use crate::graph::Tensor;
use crate::weights::Weights;
use trine_ops::rope::RopeMode;

pub fn build(b: &mut Builder, w: &Weights) {
    let x = b.embed(w.token_embd);
    let mid = Tensor::Resid(1);
    for (l, layer) in w.layers.iter().enumerate() {
        b.layer(Some(l as u32));
        b.attention_block(x, mid, layer, RopeMode::Neox);
        b.swiglu_block(mid, x, layer);
    }
    b.head(x, w.output_norm, w.output);
}

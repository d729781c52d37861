//! Llama (and the files that share its graph: SmolLM2, Llama 2 and 3 without rope scaling):
//! pre-norm attention with normal rope and grouped-query attention, a SwiGLU feed-forward
//! block, rms_norm throughout, an output head that may be tied to the embedding table.

use crate::graph::builder::Builder;
use crate::graph::Tensor;
use crate::weights::Weights;
use trine_ops::rope::RopeMode;

pub fn build(b: &mut Builder, w: &Weights) {
    let x = b.embed(w.token_embd);
    // The residual stream alternates: each block reads one buffer and adds into the other.
    let mid = Tensor::Resid(1);
    for (l, layer) in w.layers.iter().enumerate() {
        b.layer(Some(l as u32));
        b.attention_block(x, mid, layer, RopeMode::Normal);
        b.swiglu_block(mid, x, layer);
    }
    b.head(x, w.output_norm, w.output);
}

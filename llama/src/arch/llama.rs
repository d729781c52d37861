//! Llama (and the files that share its graph: SmolLM2, Llama 2 and 3, Mistral; Llama 3.1 and
//! 3.2's rope scaling is the rope's table, [`crate::rope`]): pre-norm attention with normal
//! rope and grouped-query attention, a SwiGLU feed-forward block, rms_norm throughout, an
//! output head that may be tied to the embedding table.

use crate::graph::builder::Builder;
use crate::weights::Weights;
use trine_ops::rope::RopeMode;

pub fn build(b: &mut Builder, w: &Weights) {
    b.decoder(w, RopeMode::Normal);
}

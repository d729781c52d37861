//! Phi-3 (Phi-3-mini, Phi-3.5-mini: llama.cpp's `LLM_ARCH_PHI3`, rope type NEOX): Llama's
//! blocks over the file's fused tensors, Q, K and V in one `attn_qkv` and gate then up in
//! one `ffn_up` ([`crate::arch::Extras::fused`]), each one product as stored, with NeoX rope
//! turned by LongRoPE's factors where the file has them ([`crate::rope`]). Phi's sliding
//! window is not applied: llama.cpp 0c1e570 turns it off for this architecture
//! (`llama_model_phi3::load_arch_hparams`), so attention sees the whole cache.

use crate::graph::builder::Builder;
use crate::weights::Weights;
use trine_ops::rope::RopeMode;

pub fn build(b: &mut Builder, w: &Weights) {
    b.decoder(w, RopeMode::Neox);
}

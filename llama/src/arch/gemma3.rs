//! Gemma 3 (llama.cpp's `LLM_ARCH_GEMMA3`, rope type NEOX): the embedding scaled by
//! `sqrt(n_embd)`, each query and key head rms-normalised before rope, a GeGLU feed-forward
//! block (GELU's tanh form), and each block's output rms-normalised (`post_attention_norm`,
//! `post_ffw_norm`) before its residual add. Layers interleave local ones, whose queries see
//! the last `attention.sliding_window` positions and turn by rope of base
//! `rope.freq_base_swa`, with global ones on the file's rope ([`crate::config::Swa`]). The
//! query scale is `1/sqrt(head_dim)`, llama.cpp's `f_attention_scale` for every layout but
//! the 27B one, which the config refuses. The output head is tied to the embedding table
//! where the file has no `output.weight`.

use crate::graph::builder::{Builder, Glu};
use crate::weights::Weights;
use trine_ops::rope::RopeMode;

pub fn build(b: &mut Builder, w: &Weights) {
    b.decoder_with(w, RopeMode::Neox, Glu::Geglu);
}

//! The model architectures, one file each, building a step's generic graph from the shared
//! blocks of [`crate::graph::builder`]. Adding one is a file here, a variant of
//! [`Architecture`] and its name; its hyperparameters are read under its name's GGUF prefix
//! ([`crate::config`]), and the tensors it adds to Llama's are named by [`Architecture::extras`].

mod gemma3;
mod llama;
mod phi3;
mod qwen2;
mod qwen3;
mod qwen3moe;

use super::error::ModelError;
use super::graph::builder::Builder;
use super::graph::{Node, Step};
use super::weights::Weights;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    Llama,
    Qwen2,
    Qwen3,
    Gemma3,
    Phi3,
    Qwen3Moe,
}

/// The tensors an architecture's layers hold beside Llama's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extras {
    /// `blk.N.attn_q.bias`, `attn_k.bias`, `attn_v.bias`, added after the products.
    pub qkv_bias: bool,
    /// `blk.N.attn_q_norm.weight`, `attn_k_norm.weight` [head_dim]: each query and key head
    /// rms-normalised before rope.
    pub qk_norm: bool,
    /// `blk.N.post_attention_norm.weight`, `post_ffw_norm.weight` [n_embd]: each block's
    /// output rms-normalised before the residual add.
    pub post_norms: bool,
    /// `blk.N.attn_qkv.weight` (Q, K and V rows) and `blk.N.ffn_up.weight` (gate rows,
    /// then up rows) in place of the separate projections, each run as the file holds it;
    /// `rope_factors_long.weight` and `rope_factors_short.weight` ([`crate::rope`]).
    pub fused: bool,
    /// A mixture of experts in place of the feed-forward block: `blk.N.ffn_gate_inp.weight`
    /// (the router) and `ffn_gate_exps`, `ffn_up_exps`, `ffn_down_exps` (every expert's
    /// matrix in one tensor) instead of `ffn_gate`, `ffn_up`, `ffn_down`.
    pub experts: bool,
}

impl Architecture {
    pub const ALL: [Architecture; 6] = [
        Architecture::Llama,
        Architecture::Qwen2,
        Architecture::Qwen3,
        Architecture::Gemma3,
        Architecture::Phi3,
        Architecture::Qwen3Moe,
    ];

    /// `general.architecture` as GGUF files name it, and the prefix of its keys.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
            Architecture::Gemma3 => "gemma3",
            Architecture::Phi3 => "phi3",
            Architecture::Qwen3Moe => "qwen3moe",
        }
    }

    pub fn from_name(name: &str) -> Result<Architecture, ModelError> {
        Architecture::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| ModelError::Architecture {
                found: name.to_string(),
                supported: Architecture::ALL.map(Architecture::name).join(", "),
            })
    }

    /// The layer tensors it reads beside Llama's, as llama.cpp's loader names them.
    pub fn extras(self) -> Extras {
        Extras {
            qkv_bias: self == Architecture::Qwen2,
            qk_norm: matches!(
                self,
                Architecture::Qwen3 | Architecture::Gemma3 | Architecture::Qwen3Moe
            ),
            post_norms: self == Architecture::Gemma3,
            fused: self == Architecture::Phi3,
            experts: self == Architecture::Qwen3Moe,
        }
    }

    /// Whether its layers may attend through sliding windows (`{arch}.attention.sliding_window`,
    /// [`crate::config::Swa`]).
    pub fn sliding_windows(self) -> bool {
        self == Architecture::Gemma3
    }

    /// Whether rope may turn part of a head (`{arch}.rope.dimension_count` below the head size):
    /// Phi-3's, as llama.cpp's `phi3.cpp` runs it. llama.cpp refuses it for the others (its
    /// Llama, Qwen2, Qwen3 and Qwen3-MoE graphs assert a whole head; Gemma 3's local layers
    /// would turn by `rope.dimension_count_swa`, which trine does not read).
    pub fn partial_rotary(self) -> bool {
        self == Architecture::Phi3
    }

    /// What the embedding's rows are multiplied by: `sqrt(n_embd)` for Gemma.
    pub fn embedding_scale(self, n_embd: u32) -> Option<f32> {
        (self == Architecture::Gemma3).then(|| (n_embd as f32).sqrt())
    }

    /// The generic nodes of step `s`.
    pub fn graph(self, w: &Weights, s: Step) -> Vec<Node> {
        let mut b = Builder::new(w, s);
        match self {
            Architecture::Llama => llama::build(&mut b, w),
            Architecture::Qwen2 => qwen2::build(&mut b, w),
            Architecture::Qwen3 => qwen3::build(&mut b, w),
            Architecture::Gemma3 => gemma3::build(&mut b, w),
            Architecture::Phi3 => phi3::build(&mut b, w),
            Architecture::Qwen3Moe => qwen3moe::build(&mut b, w),
        }
        b.finish()
    }
}

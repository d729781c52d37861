//! One forward step of the Llama graph as a list of nodes: `tokens` new tokens at positions
//! `pos..pos + tokens`, appended to the KV cache, ending in the logits of the last one.
//! The graph is data so that one executor runs it on any backend and a cross-check can run
//! two executors node by node.

use super::config::LlamaConfig;
use super::weights::{WeightId, Weights};
use crate::conformance::case::{NMSE_DEFAULT, NMSE_MATMUL, NMSE_SOFTMAX};

/// A tensor the graph reads or writes. Activations are sized for the largest step the
/// executor was built for; the residual stream alternates between two buffers so that no
/// kernel reads and writes the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tensor {
    /// u32 [tokens]: the step's token ids.
    Ids,
    /// f32 [tokens × n_embd].
    Resid(u8),
    Normed,
    Q,
    K,
    V,
    QRot,
    KRot,
    Attn,
    Proj,
    /// f32 [tokens × n_ff].
    Gate,
    Up,
    Act,
    /// f32 [n_embd]: the last token's row of the residual stream, then normalised.
    Last,
    LastNormed,
    /// f32 [vocab].
    Logits,
    /// [context × kv_dim] of the cache type, per layer.
    KCache(u32),
    VCache(u32),
    /// f32 [head_dim / 2]: rope's frequency table.
    Freq,
    Weight(WeightId),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    Embed {
        table: WeightId,
    },
    RmsNorm {
        x: Tensor,
        w: WeightId,
        y: Tensor,
        rows: u32,
    },
    /// `y = x·Wᵀ` for `tokens` rows of x; W has `rows` rows.
    Matvec {
        w: WeightId,
        rows: u32,
        x: Tensor,
        y: Tensor,
        tokens: u32,
    },
    Rope {
        x: Tensor,
        y: Tensor,
        heads: u32,
    },
    /// Appends `tokens` rows of `x` to the cache at position `pos`.
    CacheStore {
        x: Tensor,
        cache: Tensor,
    },
    Attention {
        layer: u32,
    },
    Add {
        a: Tensor,
        b: Tensor,
        y: Tensor,
    },
    Swiglu,
    /// Copies the last token's row of the residual stream to [`Tensor::Last`].
    PickLast,
}

/// One node: an op with where it sits in the model, for reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    /// Short name: "attn_q", "ffn_norm", "output", …
    pub label: &'static str,
    pub layer: Option<u32>,
}

/// The step a graph was built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub tokens: u32,
    pub pos: u32,
}

impl Node {
    /// The tensor the node writes and the elements of it that this step produces.
    pub fn output(&self, c: &LlamaConfig, s: Step) -> (Tensor, std::ops::Range<usize>) {
        let t = s.tokens as usize;
        let rows = |y: Tensor, width: u32| (y, 0..t * width as usize);
        match self.op {
            Op::Embed { .. } => rows(Tensor::Resid(0), c.n_embd),
            Op::RmsNorm { y, rows: r, .. } => (y, 0..r as usize * c.n_embd as usize),
            Op::Matvec {
                y, rows, tokens, ..
            } => (y, 0..tokens as usize * rows as usize),
            Op::Rope { y, heads, .. } => rows(y, heads * c.head_dim()),
            Op::CacheStore { cache, .. } => {
                let kv = c.kv_dim() as usize;
                (cache, s.pos as usize * kv..(s.pos as usize + t) * kv)
            }
            Op::Attention { .. } => rows(Tensor::Attn, c.n_embd),
            Op::Add { y, .. } => rows(y, c.n_embd),
            Op::Swiglu => rows(Tensor::Act, c.n_ff),
            Op::PickLast => (Tensor::Last, 0..c.n_embd as usize),
        }
    }

    /// How far two backends' outputs of this node may differ (NMSE), the op library's bound
    /// for the op: products and attention sum in a device's own order.
    pub fn bound(&self) -> f64 {
        match self.op {
            Op::Matvec { .. } | Op::Attention { .. } => NMSE_MATMUL,
            Op::RmsNorm { .. } => NMSE_SOFTMAX,
            _ => NMSE_DEFAULT,
        }
    }
}

/// The nodes of one step.
pub fn build(c: &LlamaConfig, w: &Weights, s: Step) -> Vec<Node> {
    let t = s.tokens;
    let mut g = vec![];
    let mut node = |op, label, layer| g.push(Node { op, label, layer });
    node(
        Op::Embed {
            table: w.token_embd,
        },
        "token_embd",
        None,
    );
    let x = Tensor::Resid(0);
    let mid = Tensor::Resid(1);
    for (l, lw) in w.layers.iter().enumerate() {
        let l = l as u32;
        let at = Some(l);
        let mv = |id: WeightId, x, y| Op::Matvec {
            w: id,
            rows: w.tensors[id].rows,
            x,
            y,
            tokens: t,
        };
        let norm = |x, w| Op::RmsNorm {
            x,
            w,
            y: Tensor::Normed,
            rows: t,
        };
        node(norm(x, lw.attn_norm), "attn_norm", at);
        node(mv(lw.wq, Tensor::Normed, Tensor::Q), "attn_q", at);
        node(mv(lw.wk, Tensor::Normed, Tensor::K), "attn_k", at);
        node(mv(lw.wv, Tensor::Normed, Tensor::V), "attn_v", at);
        let rope = |x, y, heads| Op::Rope { x, y, heads };
        node(rope(Tensor::Q, Tensor::QRot, c.n_head), "rope_q", at);
        node(rope(Tensor::K, Tensor::KRot, c.n_head_kv), "rope_k", at);
        let store = |x, cache| Op::CacheStore { x, cache };
        node(store(Tensor::KRot, Tensor::KCache(l)), "k_cache", at);
        node(store(Tensor::V, Tensor::VCache(l)), "v_cache", at);
        node(Op::Attention { layer: l }, "attention", at);
        node(mv(lw.wo, Tensor::Attn, Tensor::Proj), "attn_output", at);
        let add = |a, b, y| Op::Add { a, b, y };
        node(add(x, Tensor::Proj, mid), "attn_residual", at);
        node(norm(mid, lw.ffn_norm), "ffn_norm", at);
        node(mv(lw.w_gate, Tensor::Normed, Tensor::Gate), "ffn_gate", at);
        node(mv(lw.w_up, Tensor::Normed, Tensor::Up), "ffn_up", at);
        node(Op::Swiglu, "ffn_swiglu", at);
        node(mv(lw.w_down, Tensor::Act, Tensor::Proj), "ffn_down", at);
        node(add(mid, Tensor::Proj, x), "ffn_residual", at);
    }
    node(Op::PickLast, "last_token", None);
    node(
        Op::RmsNorm {
            x: Tensor::Last,
            w: w.output_norm,
            y: Tensor::LastNormed,
            rows: 1,
        },
        "output_norm",
        None,
    );
    node(
        Op::Matvec {
            w: w.output,
            rows: c.vocab,
            x: Tensor::LastNormed,
            y: Tensor::Logits,
            tokens: 1,
        },
        "output",
        None,
    );
    g
}

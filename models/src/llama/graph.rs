//! One forward step of the Llama graph as a list of nodes: `tokens` new tokens at positions
//! `pos..pos + tokens`, appended to the KV cache, ending in the logits of the last one.
//! The graph is data so that one executor runs it on any backend and a cross-check can run
//! two executors node by node.

use super::config::LlamaConfig;
use super::weights::{WeightId, Weights};
use crate::conformance::case::{NMSE_DEFAULT, NMSE_MATMUL};

/// A tensor the graph reads or writes. Activations are sized for the largest step the
/// executor was built for; the residual stream alternates between two buffers so that no
/// kernel reads and writes the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tensor {
    /// u32 [tokens]: the step's token ids.
    Ids,
    /// u32 [4]: what changes from one step to the next besides the ids, read by the kernels
    /// so that a recorded step stays valid: element 0 is the position of the step's first
    /// token (tokens already in the KV cache).
    Step,
    /// f32 [tokens × n_embd].
    Resid(u8),
    /// f32 [tokens × (n_embd + 2 kv_dim)]: each token's q, then k, then v.
    Qkv,
    /// f32 [tokens × n_embd]: q after rope.
    QRot,
    /// f32 [tokens × heads × splits × (head_dim + 2)]: attention's partial results.
    Part,
    Attn,
    /// f32 [tokens × n_ff]: SwiGLU of gate and up.
    Act,
    /// f32 [n_embd]: the last token's row of the residual stream (prompt steps).
    Last,
    /// f32 [vocab].
    Logits,
    /// u32 [1]: the greedy token, the argmax of the logits.
    Token,
    /// [context × kv_dim] of the cache type, per layer.
    KCache(u32),
    VCache(u32),
    /// f32 [head_dim / 2]: rope's frequency table.
    Freq,
    Weight(WeightId),
}

/// What a matvec does to its sums before storing them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    None,
    /// Adds the tensor's matching element: the residual connection.
    Add(Tensor),
    /// W's rows are gate/up pairs; stores silu(gate) · up, half as many rows.
    Swiglu,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    Embed {
        table: WeightId,
    },
    /// `y = x·Wᵀ` for `tokens` rows of x; W has `rows` rows. With `norm`, x is first
    /// rms-normalised and scaled by that weight (inside the matvec, not as a node).
    Matvec {
        w: WeightId,
        rows: u32,
        x: Tensor,
        y: Tensor,
        tokens: u32,
        norm: Option<WeightId>,
        epilogue: Epilogue,
    },
    /// Rope on q and k of [`Tensor::Qkv`] into [`Tensor::QRot`] and the layer's K cache, and
    /// v into the V cache, at the step's position.
    RopeStore {
        layer: u32,
    },
    /// Attention of [`Tensor::QRot`] against the layer's caches, the keys split over
    /// `splits` workgroups per head, into [`Tensor::Part`].
    AttnSplit {
        layer: u32,
        splits: u32,
    },
    /// Combines the splits into [`Tensor::Attn`].
    AttnCombine {
        splits: u32,
    },
    /// Copies the last token's row of the residual stream to [`Tensor::Last`].
    PickLast,
    /// The logits' argmax into [`Tensor::Token`].
    Argmax,
}

/// One node: an op with where it sits in the model, for reports.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    /// Short name: "attn_qkv", "ffn_down", "output", …
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
    /// The tensor the node writes and the elements of it that this step produces. Rope's
    /// cache writes are not among them: attention, which reads them, is checked instead.
    pub fn output(&self, c: &LlamaConfig, s: Step) -> (Tensor, std::ops::Range<usize>) {
        let t = s.tokens as usize;
        let rows = |y: Tensor, width: u32| (y, 0..t * width as usize);
        match self.op {
            Op::Embed { .. } => rows(Tensor::Resid(0), c.n_embd),
            Op::Matvec {
                y,
                rows,
                tokens,
                epilogue,
                ..
            } => {
                let n = if epilogue == Epilogue::Swiglu {
                    rows / 2
                } else {
                    rows
                };
                (y, 0..tokens as usize * n as usize)
            }
            Op::RopeStore { .. } => rows(Tensor::QRot, c.n_embd),
            Op::AttnSplit { splits, .. } => {
                rows(Tensor::Part, c.n_head * splits * (c.head_dim() + 2))
            }
            Op::AttnCombine { .. } => rows(Tensor::Attn, c.n_embd),
            Op::PickLast => (Tensor::Last, 0..c.n_embd as usize),
            Op::Argmax => (Tensor::Token, 0..1),
        }
    }

    /// How far two backends' outputs of this node may differ (NMSE), the op library's bound
    /// for the op: products and attention sum in a device's own order.
    pub fn bound(&self) -> f64 {
        match self.op {
            Op::Matvec { .. } | Op::AttnSplit { .. } | Op::AttnCombine { .. } => NMSE_MATMUL,
            _ => NMSE_DEFAULT,
        }
    }
}

/// Splits of the keys in decode attention on a GPU: 9 heads × 8 = 72 workgroups on SmolLM2,
/// each a chunk of the cache (on an H100, tg128 with 8 splits was about 4% faster than with 16
/// on Vulkan and CUDA, whose combine reads twice the partials; 4 was no faster). A CPU's cores
/// are busy with the heads alone, and prompt steps have a workgroup per token and head
/// already: they use one.
pub const GPU_SPLITS: u32 = 8;

pub fn attention_splits(tokens: u32, gpu: bool) -> u32 {
    if tokens == 1 && gpu {
        GPU_SPLITS
    } else {
        1
    }
}

/// The nodes of one step: seven per layer (a fused QKV projection with the attention norm
/// inside it; rope with the KV-cache store; attention in two parts; the output projection
/// adding the residual; gate and up with the FFN norm and SwiGLU; the down projection adding
/// the residual), then the output head with the final norm, and the greedy token.
pub fn build(c: &LlamaConfig, w: &Weights, s: Step, gpu: bool) -> Vec<Node> {
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
    let splits = attention_splits(t, gpu);
    for (l, lw) in w.layers.iter().enumerate() {
        let l = l as u32;
        let at = Some(l);
        let mv = |id: WeightId, x, y, norm, epilogue| Op::Matvec {
            w: id,
            rows: w.tensors[id].rows,
            x,
            y,
            tokens: t,
            norm,
            epilogue,
        };
        let qkv = mv(lw.wqkv, x, Tensor::Qkv, Some(lw.attn_norm), Epilogue::None);
        node(qkv, "attn_qkv", at);
        node(Op::RopeStore { layer: l }, "rope_kv_store", at);
        node(Op::AttnSplit { layer: l, splits }, "attention", at);
        node(Op::AttnCombine { splits }, "attention_combine", at);
        let wo = mv(lw.wo, Tensor::Attn, mid, None, Epilogue::Add(x));
        node(wo, "attn_output", at);
        let up = mv(
            lw.w_gate_up,
            mid,
            Tensor::Act,
            Some(lw.ffn_norm),
            Epilogue::Swiglu,
        );
        node(up, "ffn_gate_up", at);
        let down = mv(lw.w_down, Tensor::Act, x, None, Epilogue::Add(mid));
        node(down, "ffn_down", at);
    }
    // One token's row is the residual stream itself; a prompt's last row is copied out.
    let last = if t == 1 {
        x
    } else {
        node(Op::PickLast, "last_token", None);
        Tensor::Last
    };
    node(
        Op::Matvec {
            w: w.output,
            rows: c.vocab,
            x: last,
            y: Tensor::Logits,
            tokens: 1,
            norm: Some(w.output_norm),
            epilogue: Epilogue::None,
        },
        "output",
        None,
    );
    node(Op::Argmax, "argmax", None);
    g
}

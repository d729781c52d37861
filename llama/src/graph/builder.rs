//! The blocks architectures share, written in generic nodes: a pre-norm attention block, a
//! pre-norm gated feed-forward block (SwiGLU or GeGLU) or mixture of SwiGLU experts, each
//! closed by a residual add or, where the layer has post norms, a post-norm residual add, and
//! the output head. An architecture's file ([`crate::arch`]) strings them together; the
//! fusion pass ([`crate::fuse`]) decides what runs in one kernel.

use super::{AttentionForm, Form, Load, Node, NormOut, Op, Step, Store, Tensor};
use crate::weights::{DenseWeights, ExpertWeights, Ffn, Layer, WeightId, Weights};
use trine_ops::rope::RopeMode;

/// A gated feed-forward block's activation on the gate/up pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Glu {
    /// `silu(gate)·up` (Llama, Qwen).
    Swiglu,
    /// `gelu(gate)·up`, GELU's tanh form (Gemma).
    Geglu,
}

/// Builds the generic nodes of one step.
pub struct Builder<'a> {
    w: &'a Weights,
    step: Step,
    layer: Option<u32>,
    nodes: Vec<Node>,
}

impl<'a> Builder<'a> {
    pub fn new(w: &'a Weights, step: Step) -> Builder<'a> {
        Builder {
            w,
            step,
            layer: None,
            nodes: vec![],
        }
    }

    pub fn finish(self) -> Vec<Node> {
        self.nodes
    }

    /// The layer the next nodes belong to (`None`: outside the layers).
    pub fn layer(&mut self, layer: Option<u32>) {
        self.layer = layer;
    }

    fn push(&mut self, op: Op, label: &'static str) {
        self.nodes.push(Node {
            op,
            label,
            layer: self.layer,
        });
    }

    /// The step's rows of the embedding table, multiplied by `scale` where given, into the
    /// first residual buffer.
    pub fn embed(&mut self, table: WeightId, scale: Option<f32>) -> Tensor {
        self.push(Op::Embed { table, scale }, "token_embd");
        Tensor::Resid(0)
    }

    /// rms_norm of `tokens` rows of `x`, scaled by `weight`.
    pub fn norm(&mut self, x: Tensor, weight: WeightId, tokens: u32, label: &'static str) {
        self.push(
            Op::Norm {
                x,
                weight,
                tokens,
                out: NormOut::F32,
            },
            label,
        );
    }

    /// `x·Wᵀ` for `tokens` rows of `x` into [`Tensor::Raw`], for what follows to consume.
    pub fn product(&mut self, w: WeightId, x: Tensor, tokens: u32, label: &'static str) {
        let op = Op::Product {
            w,
            rows: self.w.tensors[w].rows,
            x,
            y: Tensor::Raw,
            tokens,
            load: Load::None,
            store: Store::None,
            form: Form::Float,
            part: None,
        };
        self.push(op, label);
    }

    /// `out = Raw + r`: the residual connection after a product; with a post norm `post`,
    /// `out = rms_norm(Raw)·post + r`.
    pub fn add(&mut self, r: Tensor, out: Tensor, post: Option<WeightId>, label: &'static str) {
        let op = match post {
            None => Op::Add {
                x: Tensor::Raw,
                r,
                out,
            },
            Some(weight) => Op::NormAdd { weight, r, out },
        };
        self.push(op, label);
    }

    /// A pre-norm attention block over residual stream `x` into `out`: rms_norm, the QKV
    /// products (one where Q, K and V share a weight type), each followed by the layer's
    /// biases and q/k head norms where it has them, then rope (`mode`) and the KV-cache store
    /// of its heads, attention (through the layer's sliding window where it has one), the
    /// output projection and the residual add (after the layer's post norm where it has
    /// one).
    pub fn attention_block(&mut self, x: Tensor, out: Tensor, l: &Layer, mode: RopeMode) {
        let (t, layer) = (self.step.tokens, self.layer.unwrap_or(0));
        self.norm(x, l.attn_norm, t, "attn_norm");
        for part in &l.qkv {
            self.product(part.w, Tensor::Normed, t, "attn_qkv");
            let heads = part.heads;
            if part.bias.is_some() || l.qk_norm.is_some() {
                let op = Op::QkvBiasNorm {
                    heads,
                    bias: part.bias,
                    norm: l.qk_norm,
                };
                self.push(op, "attn_qkv_bias_norm");
            }
            self.push(Op::RopeStore { layer, mode, heads }, "rope_store");
        }
        let form = AttentionForm::Split { splits: 1 };
        let window = l.window;
        self.push(
            Op::Attention {
                layer,
                form,
                window,
            },
            "attention",
        );
        self.product(l.wo, Tensor::Combined, t, "attn_output");
        let post = l.post_norms.map(|(attn, _)| attn);
        self.add(x, out, post, "attn_residual");
    }

    /// A pre-norm gated feed-forward block over residual stream `x` into `out`: rms_norm,
    /// the gate/up product (its rows as `f.layout` lays them), the activation `glu`, the down
    /// projection and the residual add (after the layer's post norm where it has one).
    pub fn ffn_block(&mut self, x: Tensor, out: Tensor, l: &Layer, f: DenseWeights, glu: Glu) {
        let t = self.step.tokens;
        self.norm(x, l.ffn_norm, t, "ffn_norm");
        self.product(f.gate_up, Tensor::Normed, t, "ffn_gate_up");
        match glu {
            Glu::Swiglu => self.push(Op::Swiglu(f.layout), "ffn_swiglu"),
            Glu::Geglu => self.push(Op::Geglu, "ffn_geglu"),
        }
        self.product(f.down, Tensor::Act, t, "ffn_down");
        let post = l.post_norms.map(|(_, ffn)| ffn);
        self.add(x, out, post, "ffn_residual");
    }

    /// A pre-norm mixture-of-experts block over residual stream `x` into `out`: rms_norm, the
    /// router's product and the routing, the chosen experts' gate/up products with SwiGLU,
    /// and their down products weighted, summed and added to the residual.
    pub fn experts_block(&mut self, x: Tensor, out: Tensor, l: &Layer, e: ExpertWeights) {
        let t = self.step.tokens;
        self.norm(x, l.ffn_norm, t, "ffn_norm");
        self.product(e.router, Tensor::Normed, t, "ffn_gate_inp");
        self.push(Op::MoeRoute, "ffn_moe_route");
        let (gate, up) = (e.gate, e.up);
        let form = Form::Float;
        let by_expert = false;
        let op = Op::ExpertsSwiglu {
            gate,
            up,
            form,
            by_expert,
        };
        self.push(op, "ffn_moe_gate_up");
        let down = e.down;
        self.push(
            Op::ExpertsDown {
                down,
                r: x,
                out,
                form,
            },
            "ffn_moe_down",
        );
    }

    /// The decoder stack Llama and its kin share: the embedding, then per layer a pre-norm
    /// attention block with `mode` rope and a pre-norm SwiGLU block (or mixture of SwiGLU
    /// experts, where the layer has them), then the output head.
    pub fn decoder(&mut self, w: &Weights, mode: RopeMode) {
        self.decoder_with(w, mode, Glu::Swiglu);
    }

    /// [`Builder::decoder`] with the feed-forward activation `glu`. The residual stream
    /// alternates: each block reads one buffer and adds into the other. What a family adds
    /// to Llama's layer (biases, q/k norms, post norms, sliding windows, an embedding scale)
    /// comes with its weights.
    pub fn decoder_with(&mut self, w: &Weights, mode: RopeMode, glu: Glu) {
        let x = self.embed(w.token_embd, w.embedding_scale);
        let mid = Tensor::Resid(1);
        for (l, layer) in w.layers.iter().enumerate() {
            self.layer(Some(l as u32));
            self.attention_block(x, mid, layer, mode);
            match layer.ffn {
                Ffn::Dense(f) => self.ffn_block(mid, x, layer, f, glu),
                Ffn::Experts(e) => self.experts_block(mid, x, layer, e),
            }
        }
        self.head(x, w.output_norm, w.output);
    }

    /// The output head over residual stream `x`: the last token's row (a prompt's is copied
    /// out), the final norm, the logits and their argmax.
    pub fn head(&mut self, x: Tensor, norm: WeightId, output: WeightId) {
        self.layer = None;
        let last = if self.step.tokens == 1 {
            x
        } else {
            self.push(Op::PickLast, "last_token");
            Tensor::Last
        };
        self.norm(last, norm, 1, "output_norm");
        let op = Op::Product {
            w: output,
            rows: self.w.tensors[output].rows,
            x: Tensor::Normed,
            y: Tensor::Logits,
            tokens: 1,
            load: Load::None,
            store: Store::None,
            form: Form::Float,
            part: None,
        };
        self.push(op, "output");
        self.push(Op::Argmax, "argmax");
    }
}

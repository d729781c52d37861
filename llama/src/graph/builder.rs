//! The blocks architectures share, written in generic nodes: a pre-norm attention block, a
//! pre-norm SwiGLU feed-forward block or mixture of SwiGLU experts, and the output head. An
//! architecture's file ([`crate::arch`]) strings them together; the fusion pass
//! ([`crate::fuse`]) decides what runs in one kernel.

use super::{AttentionForm, Form, Load, Node, Op, Step, Store, Tensor};
use crate::weights::{ExpertWeights, Ffn, Layer, WeightId, Weights};
use trine_ops::rope::RopeMode;

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

    /// The step's rows of the embedding table, into the first residual buffer.
    pub fn embed(&mut self, table: WeightId) -> Tensor {
        self.push(Op::Embed { table }, "token_embd");
        Tensor::Resid(0)
    }

    /// rms_norm of `tokens` rows of `x`, scaled by `weight`.
    pub fn norm(&mut self, x: Tensor, weight: WeightId, tokens: u32, label: &'static str) {
        self.push(Op::Norm { x, weight, tokens }, label);
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
        };
        self.push(op, label);
    }

    /// `out = Raw + r`: the residual connection after a product.
    pub fn add(&mut self, r: Tensor, out: Tensor, label: &'static str) {
        let op = Op::Add {
            x: Tensor::Raw,
            r,
            out,
        };
        self.push(op, label);
    }

    /// A pre-norm attention block over residual stream `x` into `out`: rms_norm, the QKV
    /// products (one where Q, K and V share a weight type), each followed by the layer's
    /// biases and q/k head norms where it has them, then rope (`mode`) and the KV-cache store
    /// of its heads, attention, the output projection and the residual add.
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
        self.push(Op::Attention { layer, form }, "attention");
        self.product(l.wo, Tensor::Combined, t, "attn_output");
        self.add(x, out, "attn_residual");
    }

    /// A pre-norm SwiGLU feed-forward block over residual stream `x` into `out`: rms_norm,
    /// the gate/up product (rows interleaved in pairs), SwiGLU, the down projection and the
    /// residual add.
    pub fn swiglu_block(
        &mut self,
        x: Tensor,
        out: Tensor,
        l: &Layer,
        gate_up: WeightId,
        down: WeightId,
    ) {
        let t = self.step.tokens;
        self.norm(x, l.ffn_norm, t, "ffn_norm");
        self.product(gate_up, Tensor::Normed, t, "ffn_gate_up");
        self.push(Op::Swiglu, "ffn_swiglu");
        self.product(down, Tensor::Act, t, "ffn_down");
        self.add(x, out, "ffn_residual");
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
        self.push(Op::ExpertsSwiglu { gate, up }, "ffn_moe_gate_up");
        let down = e.down;
        self.push(Op::ExpertsDown { down, r: x, out }, "ffn_moe_down");
    }

    /// The decoder stack Llama and its kin share: the embedding, then per layer a pre-norm
    /// attention block with `mode` rope and a pre-norm SwiGLU block (or mixture of SwiGLU
    /// experts, where the layer has them), then the output head. The
    /// residual stream alternates: each block reads one buffer and adds into the other. What
    /// a family adds to Llama's layer (biases, q/k norms, experts) comes with its weights.
    pub fn decoder(&mut self, w: &Weights, mode: RopeMode) {
        let x = self.embed(w.token_embd);
        let mid = Tensor::Resid(1);
        for (l, layer) in w.layers.iter().enumerate() {
            self.layer(Some(l as u32));
            self.attention_block(x, mid, layer, mode);
            match layer.ffn {
                Ffn::Dense { gate_up, down } => self.swiglu_block(mid, x, layer, gate_up, down),
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
        };
        self.push(op, "output");
        self.push(Op::Argmax, "argmax");
    }
}

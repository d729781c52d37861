//! What one node dispatches: its kernel's bindings in order, its parameters and its grid.

use super::Engine;
use crate::llama::graph::{Node, Op, Step, Tensor};
use crate::llama::kernels::{is_wide, matvec_spec, KernelKey};
use crate::ops::elementwise;
use crate::ops::matvec::Reduce;
use crate::ops::rms_norm::RmsNorm;
use crate::ops::rope::{Rope, RopeMode};
use crate::ops::{attention::Attention, embedding};
use trine_ir::ParamValue;

impl Engine {
    /// The node's input tensors (in the kernel's buffer order), its output, its parameters
    /// and its grid.
    pub(super) fn plan(
        &self,
        node: &Node,
        s: Step,
    ) -> (Vec<Tensor>, Tensor, Vec<ParamValue>, [u32; 3]) {
        let c = &self.model.config;
        let w = &self.model.weights;
        let (t, u) = (s.tokens, ParamValue::U32);
        let (out, _) = node.output(c, s);
        let elementwise = |n: u32| elementwise::grid(n).unwrap_or([1, 1, 1]);
        match node.op {
            Op::Embed { table } => (
                vec![Tensor::Ids, Tensor::Weight(table)],
                out,
                vec![u(t), u(c.n_embd), u(c.vocab)],
                embedding::grid(c.n_embd, t),
            ),
            Op::RmsNorm { x, w: wid, y, rows } => {
                let norm = RmsNorm {
                    rows,
                    cols: c.n_embd,
                    eps: c.rms_eps,
                };
                (vec![x, Tensor::Weight(wid)], y, norm.params(), norm.grid())
            }
            Op::Matvec {
                w: wid,
                rows,
                x,
                y,
                tokens,
            } => {
                let key = KernelKey::of(&node.op, w);
                let info = self.dev(self.placement.programs[&key].0).info();
                let t = &w.tensors[wid];
                let spec = matvec_spec(t.ty, Reduce::Shared, info, is_wide(t.rows, t.cols, tokens));
                let cols = w.tensors[wid].cols;
                // A variant reading the scales through an f16 view binds the weights twice.
                let views = self.placement.buffers[&key].len() - 2;
                let mut inputs = vec![Tensor::Weight(wid); views];
                inputs.push(x);
                (inputs, y, vec![u(rows), u(cols)], spec.grid(rows, tokens))
            }
            Op::Rope { x, y, heads } => {
                let r = self.rope(t, heads, s.pos);
                (vec![x, Tensor::Freq], y, r.params(), r.grid())
            }
            Op::CacheStore { x, cache } => {
                let n = t * c.kv_dim();
                (
                    vec![x],
                    cache,
                    vec![u(n), u(0), u(s.pos * c.kv_dim())],
                    elementwise(n),
                )
            }
            Op::Attention { layer } => {
                let a = Attention {
                    tokens: t,
                    kv_len: s.pos + t,
                    heads: c.n_head,
                    kv_heads: c.n_head_kv,
                    head_dim: c.head_dim(),
                    offset: s.pos,
                };
                (
                    vec![Tensor::QRot, Tensor::KCache(layer), Tensor::VCache(layer)],
                    Tensor::Attn,
                    a.params(),
                    a.grid(),
                )
            }
            Op::Add { a, b, y } => (
                vec![a, b],
                y,
                vec![u(t * c.n_embd)],
                elementwise(t * c.n_embd),
            ),
            Op::Swiglu => (
                vec![Tensor::Gate, Tensor::Up],
                Tensor::Act,
                vec![u(t * c.n_ff)],
                elementwise(t * c.n_ff),
            ),
            Op::PickLast => (
                vec![Tensor::Resid(0)],
                Tensor::Last,
                vec![u(c.n_embd), u((t - 1) * c.n_embd), u(0)],
                elementwise(c.n_embd),
            ),
        }
    }

    pub(super) fn rope(&self, tokens: u32, heads: u32, pos: u32) -> Rope {
        let c = &self.model.config;
        Rope {
            tokens,
            heads,
            head_dim: c.head_dim(),
            offset: pos,
            base: c.rope_base,
            mode: RopeMode::Normal,
        }
    }
}

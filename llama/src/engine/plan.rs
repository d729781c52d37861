//! What one node dispatches: its kernel's bindings in order, its parameters and its grid.
//! Nothing here depends on the step's position (kernels read it from [`Tensor::Step`]), so a
//! decode step's dispatches can be recorded once and replayed at every position.

use super::Engine;
use crate::config::Experts;
use crate::graph::{
    AttentionForm, ExpertsOn, Form, Load, Node, NormOut, Op, QuantizeFrom, Step, Store, Tensor,
};
use crate::planner::{KernelKey, Launch};
use crate::tuning::{self, holds_pairs};
use crate::weights::WeightId;
use trine_ir::ParamValue;
use trine_ops::argmax::Argmax;
use trine_ops::attention_flash::FlashAttention;
use trine_ops::attention_flash_tiles;
use trine_ops::attention_split::SplitAttention;
use trine_ops::elementwise::{self, GateUp};
use trine_ops::embedding;
use trine_ops::kv_type::KvType;
use trine_ops::matvec_ids::{self, MatvecIds};
use trine_ops::matvec_ids_rows::IdsRows;
use trine_ops::moe_combine::MoeCombine;
use trine_ops::moe_route::MoeRoute;
use trine_ops::moe_sort::MoeSort;
use trine_ops::qkv_bias_norm::{Apply, QkvBiasNorm};
use trine_ops::rms_norm::RmsNorm;
use trine_ops::rope::RopeMode;
use trine_ops::rope_store::{HeadSpan, RopeStore};
use trine_ops::split_sum::SplitSum;
use trine_ops::{matvec_ids_blocks, matvec_ids_sorted};
use trine_ops::{matvec_q8_blocks, matvec_q8_rows, quantize, widen};

/// A node's dispatch before buffers are bound: the tensors it reads and writes, in the
/// kernel's buffer order (reads first), its parameters and its grid.
pub(super) struct Plan {
    pub inputs: Vec<Tensor>,
    pub outputs: Vec<Tensor>,
    /// The outputs the kernel adds into, whose values before it count as inputs.
    pub updates: Vec<Tensor>,
    pub params: Vec<ParamValue>,
    pub grid: [u32; 3],
}

impl Engine {
    pub(super) fn plan(&self, node: &Node, s: Step) -> Plan {
        let c = &self.model.config;
        let w = &self.model.weights;
        let (t, u) = (s.tokens, ParamValue::U32);
        let plan = |inputs, outputs: &[Tensor], params, grid| Plan {
            inputs,
            outputs: outputs.to_vec(),
            updates: vec![],
            params,
            grid,
        };
        match node.op {
            Op::Embed { table, scale } => {
                let mut params = vec![u(t), u(c.n_embd), u(c.vocab)];
                params.extend(scale.map(ParamValue::F32));
                plan(
                    vec![Tensor::Ids, self.read_weights(table)],
                    &[Tensor::Resid(0)],
                    params,
                    embedding::grid(c.n_embd, t),
                )
            }
            Op::Product {
                w: wid,
                rows,
                x,
                y,
                tokens,
                load,
                store,
                form,
                part,
            } => {
                let key = KernelKey::of(&node.op, w, self.shape, &self.tuned);
                let placed = self.placement.programs[&key];
                let info = self.dev(placed.device).info();
                let wt = &w.tensors[wid];
                let add = match store {
                    Store::Add(r) => Some(r),
                    _ => None,
                };
                match (form, placed.launch) {
                    (Form::Float, Launch::Matvec(spec)) => {
                        let mut inputs = vec![x];
                        let mut outputs = vec![y];
                        let mut params = vec![u(rows), u(wt.cols)];
                        if let Load::Norm(g) = load {
                            inputs.push(Tensor::Weight(g));
                            params.push(ParamValue::F32(c.rms_eps));
                        }
                        if let Store::Add(r) = store {
                            inputs.push(r);
                        }
                        self.bind_rope(store, t, (&mut inputs, &mut outputs, &mut params));
                        params.extend(spec.tokens_params(tokens));
                        // A variant reading the scales through an f16 view binds the weights
                        // twice.
                        let views = if spec.binds_f16_view() { 2 } else { 1 };
                        let mut all = vec![self.read_weights(wid); views];
                        all.extend(inputs);
                        plan(all, &outputs, params, spec.grid(rows, tokens))
                    }
                    (Form::QuantizedX, _) => {
                        let per = tuning::q8_tokens_per_workgroup(tokens);
                        let mut inputs = vec![
                            Tensor::Interleaved(wid),
                            Tensor::XqWords,
                            Tensor::XqScales,
                            Tensor::XqSums,
                        ];
                        inputs.extend(add);
                        plan(
                            inputs,
                            &[y],
                            vec![u(rows), u(wt.cols), u(tokens)],
                            matvec_q8_rows::grid(rows, tokens, per),
                        )
                    }
                    (Form::QuantizedBlocks, Launch::Blocks { f16_view }) => {
                        let views = if f16_view { 2 } else { 1 };
                        let mut inputs = vec![self.read_weights(wid); views];
                        inputs.extend([Tensor::XqWords, Tensor::XqScales]);
                        let mut params = vec![u(rows), u(wt.cols)];
                        if load == Load::Rms {
                            inputs.push(Tensor::XqSquares);
                            params.push(ParamValue::F32(c.rms_eps));
                        }
                        inputs.extend(add);
                        let mut outputs = vec![y];
                        self.bind_rope(store, t, (&mut inputs, &mut outputs, &mut params));
                        let KernelKey::MatvecQ8Blocks {
                            rows: per, teams, ..
                        } = key
                        else {
                            unreachable!("a product on the file's blocks has their kernel's key")
                        };
                        plan(
                            inputs,
                            &outputs,
                            params,
                            matvec_q8_blocks::grid(rows, per, teams),
                        )
                    }
                    (Form::Tiles | Form::Widened, Launch::Tiles(spec)) => {
                        // The kernel stages the file's blocks (or the groups of them), or the
                        // weight widened to f16 before it.
                        let weights = match form {
                            Form::Widened => Tensor::Wide,
                            _ => self.staged_weights(info, wid),
                        };
                        let mut inputs = vec![weights, x];
                        inputs.extend(add);
                        let shape = (rows, wt.cols, tokens);
                        let (params, grid) = match (part, store) {
                            (Some(p), _) => (
                                spec.part_params(shape, (p.total, p.first)),
                                spec.grid(rows, tokens),
                            ),
                            (None, Store::Slices { splits }) => (
                                spec.split_params(shape, splits),
                                spec.split_grid(rows, tokens, splits),
                            ),
                            (None, _) => {
                                (spec.params(rows, wt.cols, tokens), spec.grid(rows, tokens))
                            }
                        };
                        plan(inputs, &[y], params, grid)
                    }
                    (form, launch) => unreachable!("a {form:?} product launched as {launch:?}"),
                }
            }
            // Both attention kernels read the rotated queries, the position and the layer's
            // caches, and write the split partials.
            Op::Attention {
                layer,
                form,
                window,
            } => {
                let splits = form.splits();
                let (mut params, grid) = match form {
                    AttentionForm::Split { .. } => {
                        let a = self.split_attention(t, splits);
                        let mut params = a.params();
                        params.extend(window.map(u));
                        // The variant the device compiled decides the workgroups.
                        let key = KernelKey::of(&node.op, w, self.shape, &self.tuned);
                        let grid = match self.placement.programs[&key].launch {
                            Launch::GroupedSplits => a.grouped_grid(),
                            _ => a.grid(),
                        };
                        (params, grid)
                    }
                    AttentionForm::Flash { .. } => {
                        let a = FlashAttention {
                            tokens: t,
                            heads: c.n_head,
                            kv_heads: c.n_head_kv,
                            head_dim: c.head_dim(),
                            splits,
                            window,
                        };
                        // The variant the device compiled decides the queries per workgroup.
                        let key = KernelKey::of(&node.op, w, self.shape, &self.tuned);
                        let grid = match self.placement.programs[&key].launch {
                            Launch::FlashTiles => attention_flash_tiles::grid(&a),
                            _ => a.grid(),
                        };
                        (a.params(), grid)
                    }
                };
                params.extend(self.shape.keys.params(self.options.context));
                let inputs = vec![
                    Tensor::QRot,
                    Tensor::Step,
                    Tensor::KCache(layer),
                    Tensor::VCache(layer),
                ];
                plan(inputs, &[form.output()], params, grid)
            }
            Op::Norm {
                x,
                weight: g,
                tokens,
                out,
            } => {
                let n = RmsNorm {
                    rows: tokens,
                    cols: c.n_embd,
                    eps: c.rms_eps,
                };
                plan(
                    vec![x, Tensor::Weight(g)],
                    match out {
                        NormOut::F32 => &[Tensor::Normed][..],
                        NormOut::Half => &[Tensor::XHalf],
                        NormOut::Both => &[Tensor::Normed, Tensor::XHalf],
                    },
                    n.params(),
                    n.grid(),
                )
            }
            Op::Combine { splits } => {
                let a = self.split_attention(t, splits);
                plan(
                    vec![Tensor::Part],
                    &[Tensor::Combined],
                    a.combine_params(),
                    a.combine_grid(),
                )
            }
            Op::Swiglu(_) | Op::Geglu => plan(
                vec![Tensor::Raw],
                &[Tensor::Act],
                match node.op {
                    Op::Swiglu(GateUp::Halves) => vec![u(t * c.n_ff), u(c.n_ff)],
                    _ => vec![u(t * c.n_ff)],
                },
                elementwise::grid(t * c.n_ff).unwrap_or([1, 1, 1]),
            ),
            Op::NormAdd { weight, r, out } => {
                let n = RmsNorm {
                    rows: t,
                    cols: c.n_embd,
                    eps: c.rms_eps,
                };
                plan(
                    vec![Tensor::Raw, Tensor::Weight(weight), r],
                    &[out],
                    n.params(),
                    n.grid(),
                )
            }
            Op::RopeStore { layer, mode, heads } => {
                let r = self.rope_store(t, mode, Some(heads));
                // A q8_0 cache's kernel takes a workgroup per head (`rope_store::kernel_q8`).
                let grid = match self.shape.kv {
                    KvType::Q8_0 => r.grid_q8(),
                    KvType::F16 | KvType::F32 => r.grid(),
                };
                plan(
                    vec![Tensor::Raw, Tensor::Step, self.freq(layer)],
                    &[Tensor::QRot, Tensor::KCache(layer), Tensor::VCache(layer)],
                    r.params(),
                    grid,
                )
            }
            Op::QkvBiasNorm { heads, bias, norm } => {
                let a = QkvBiasNorm {
                    tokens: t,
                    heads: c.n_head,
                    kv_heads: c.n_head_kv,
                    head_dim: c.head_dim(),
                    part: heads,
                    eps: c.rms_eps,
                    apply: Apply {
                        bias: bias.is_some(),
                        norm: norm.is_some(),
                    },
                };
                let mut inputs: Vec<Tensor> = bias.map(Tensor::Weight).into_iter().collect();
                if let Some((q, k)) = norm {
                    inputs.extend([Tensor::Weight(q), Tensor::Weight(k)]);
                }
                Plan {
                    updates: vec![Tensor::Raw],
                    ..plan(inputs, &[Tensor::Raw], a.params(), a.grid())
                }
            }
            Op::Quantize {
                x,
                cols,
                tokens,
                blocks,
                from,
            } => {
                let (inputs, params) = match from {
                    QuantizeFrom::Norm(g) => (
                        vec![x, Tensor::Weight(g)],
                        vec![u(cols), ParamValue::F32(c.rms_eps)],
                    ),
                    QuantizeFrom::NormLater(g) => (vec![x, Tensor::Weight(g)], vec![u(cols)]),
                    _ => (vec![x], vec![]),
                };
                let written = [
                    Tensor::XqWords,
                    Tensor::XqScales,
                    Tensor::XqSums,
                    Tensor::XqSquares,
                ];
                let outputs = match from {
                    QuantizeFrom::NormLater(_) => &written[..],
                    _ => &written[..3],
                };
                plan(
                    inputs,
                    outputs,
                    params,
                    quantize::grid(blocks, tokens * cols),
                )
            }
            Op::HalfX { x, cols, tokens } => plan(
                vec![x],
                &[Tensor::XHalf],
                vec![u(tokens), u(cols)],
                widen::x_grid(tokens),
            ),
            Op::Widen {
                w: wid,
                rows,
                cols,
                first,
            } => {
                let key = KernelKey::of(&node.op, w, self.shape, &self.tuned);
                let info = self.dev(self.placement.programs[&key].device).info();
                plan(
                    vec![self.staged_weights(info, wid)],
                    &[Tensor::Wide],
                    vec![u(rows), u(cols), u(first)],
                    widen::grid(rows, cols),
                )
            }
            Op::MoeRoute => {
                let r = self.moe_route(t);
                plan(
                    vec![Tensor::Raw],
                    &[Tensor::Route, Tensor::RouteWeights],
                    r.params(),
                    r.grid(),
                )
            }
            Op::MoeSort => {
                let e = self.experts();
                let sort = MoeSort {
                    tokens: t,
                    experts: e.count,
                    used: e.used,
                };
                plan(
                    vec![Tensor::Route],
                    &[Tensor::RouteCounts, Tensor::RouteLists],
                    sort.params(),
                    sort.grid(),
                )
            }
            Op::ExpertsSwiglu {
                gate,
                up,
                form,
                by_expert,
            } => {
                let m = self.matvec_ids(t, gate, matvec_ids::Out::Swiglu);
                let (mut inputs, grid) = self.experts_weights(node, &[gate, up], &m, form);
                let params = if by_expert {
                    inputs.extend([Tensor::RouteCounts, Tensor::RouteLists]);
                    matvec_ids_sorted::params(&m)
                } else {
                    inputs.push(Tensor::Route);
                    m.params()
                };
                inputs.extend(experts_x(form, Tensor::Normed));
                plan(inputs, &[Tensor::ExpertAct], params, grid)
            }
            Op::ExpertsDown { down, r, out, form } => {
                let m = self.matvec_ids(t, down, matvec_ids::Out::WeightedSum);
                let (mut inputs, grid) = self.experts_weights(node, &[down], &m, form);
                inputs.extend([Tensor::Route, Tensor::RouteWeights]);
                inputs.extend(experts_x(form, Tensor::ExpertAct));
                inputs.push(r);
                plan(inputs, &[out], m.params(), grid)
            }
            Op::ExpertRows {
                w: wid,
                x,
                y,
                part,
                on: ExpertsOn::Rows,
            } => {
                let e = self.experts();
                let wt = &w.tensors[wid];
                let (y_rows, first) = part.map_or((wt.rows / e.count, 0), |p| (p.total, p.first));
                let s = IdsRows {
                    weights: wt.ty,
                    rows: wt.rows / e.count,
                    cols: wt.cols,
                    pairs: t * e.used,
                    experts: e.count,
                    per_x: per_x(x, e),
                    y_rows,
                    first,
                };
                let inputs = vec![
                    Tensor::Interleaved(wid),
                    Tensor::XqWords,
                    Tensor::XqScales,
                    Tensor::XqSums,
                    Tensor::Route,
                ];
                plan(inputs, &[y], s.params(), s.grid())
            }
            Op::ExpertRows {
                w: wid,
                x,
                y,
                part,
                on,
            } => {
                let e = self.experts();
                let wt = &w.tensors[wid];
                let rows = wt.rows / e.count;
                let key = KernelKey::of(&node.op, w, self.shape, &self.tuned);
                let program = &self.placement.programs[&key];
                let Launch::Tiles(spec) = program.launch else {
                    unreachable!("an experts' product on tiles has their kernels")
                };
                let info = self.dev(program.device).info();
                // On tiles, x rounded to f16 by the node before.
                let xs = match on {
                    ExpertsOn::Tiles(_) => Tensor::XHalf,
                    ExpertsOn::Rows => x,
                };
                let weights = self.staged_weights(info, wid);
                let inputs = vec![weights, xs, Tensor::RouteCounts, Tensor::RouteLists];
                let mut params = match part {
                    Some(p) => spec.part_params((rows, wt.cols, t), (p.total, p.first)),
                    None => spec.params(rows, wt.cols, t),
                };
                params.push(u(per_x(x, e)));
                plan(inputs, &[y], params, spec.experts_grid(rows, t, e.count))
            }
            Op::ExpertsSwigluHalves { half } => {
                let e = self.experts();
                let n = t * e.used * e.ff;
                plan(
                    vec![Tensor::ExpertGateUp],
                    &[if half {
                        Tensor::XHalf
                    } else {
                        Tensor::ExpertAct
                    }],
                    vec![u(n), u(e.ff)],
                    if half {
                        elementwise::swiglu_halves_rounded_grid(n)
                    } else {
                        elementwise::grid(n)
                    }
                    .unwrap_or([1, 1, 1]),
                )
            }
            Op::MoeCombine { r, out } => {
                let m = MoeCombine {
                    tokens: t,
                    used: self.experts().used,
                    rows: c.n_embd,
                };
                plan(
                    vec![Tensor::ExpertOut, Tensor::RouteWeights, r],
                    &[out],
                    m.params(),
                    m.grid(),
                )
            }
            Op::SplitSum {
                y,
                add,
                tokens,
                rows,
                splits,
                ..
            } => {
                let s = SplitSum {
                    tokens,
                    rows,
                    splits,
                };
                let mut inputs = vec![Tensor::KParts];
                inputs.extend(add);
                plan(inputs, &[y], s.params(), s.grid())
            }
            Op::PickLast => plan(
                vec![Tensor::Resid(0)],
                &[Tensor::Last],
                vec![u(c.n_embd), u((t - 1) * c.n_embd), u(0)],
                elementwise::grid(c.n_embd).unwrap_or([1, 1, 1]),
            ),
            Op::Argmax => {
                let a = Argmax {
                    rows: 1,
                    cols: c.vocab,
                };
                plan(vec![Tensor::Logits], &[Tensor::Token], a.params(), a.grid())
            }
            Op::Add { .. } => unreachable!("the fusion pass folds every add into a product"),
        }
    }

    /// The rope and cache store of `tokens` tokens over the QKV product of `part`'s heads
    /// (`None`: all of them).
    pub(super) fn rope_store(
        &self,
        tokens: u32,
        mode: RopeMode,
        part: Option<HeadSpan>,
    ) -> RopeStore {
        let c = &self.model.config;
        RopeStore {
            tokens,
            heads: c.n_head,
            kv_heads: c.n_head_kv,
            head_dim: c.head_dim(),
            rot_dim: c.n_rot,
            context: self.options.context,
            mode,
            keys: self.shape.keys,
            part,
        }
    }

    /// What the embedding, or a product on float x, on tiles or on units, reads weight `id`
    /// from: its groups of blocks where the executor groups it ([`tuning::read_type`]), else
    /// the weight as the device holds it.
    fn read_weights(&self, id: WeightId) -> Tensor {
        let w = &self.model.weights;
        if tuning::read_type(w, id, self.shape.gpu_nodes) == w.tensors[id].ty {
            Tensor::Weight(id)
        } else {
            Tensor::Grouped(id)
        }
    }

    /// What a kernel staging the blocks of weight `id` on a device described by `info` reads
    /// (the tiled product, the widening): their groups where the executor groups them, else
    /// the file's layout.
    fn staged_weights(&self, info: &trine_backends::DeviceInfo, id: WeightId) -> Tensor {
        let w = &self.model.weights;
        match self.read_weights(id) {
            Tensor::Grouped(id) => Tensor::Grouped(id),
            _ => file_layout(info, w, id, w.tensors[id].ty),
        }
    }

    /// What the rope epilogue of a QKV product (`store`, of a step of `tokens`) adds to its
    /// dispatch: the position and rope's table after its inputs, the caches after its
    /// output, the rope's parameters after its own.
    fn bind_rope(
        &self,
        store: Store,
        tokens: u32,
        (inputs, outputs, params): (&mut Vec<Tensor>, &mut Vec<Tensor>, &mut Vec<ParamValue>),
    ) {
        if let Store::Rope { layer, heads } = store {
            inputs.extend([Tensor::Step, self.freq(layer)]);
            outputs.extend([Tensor::KCache(layer), Tensor::VCache(layer)]);
            let r = self.rope_store(tokens, RopeMode::Normal, Some(heads));
            params.extend(r.epilogue_params());
        }
    }

    /// The rope table layer `l` turns by: the sliding-window layers' where it is one of them.
    fn freq(&self, l: u32) -> Tensor {
        match self.model.config.window(l) {
            Some(_) => Tensor::FreqLocal,
            None => Tensor::Freq,
        }
    }

    fn moe_route(&self, tokens: u32) -> MoeRoute {
        let e = self.experts();
        MoeRoute {
            tokens,
            experts: e.count,
            used: e.used,
        }
    }

    /// The experts' product over weight `id` (all experts stacked) for `tokens` tokens.
    fn matvec_ids(&self, tokens: u32, id: WeightId, out: matvec_ids::Out) -> MatvecIds {
        let e = self.experts();
        let wt = &self.model.weights.tensors[id];
        MatvecIds {
            weights: wt.ty,
            out,
            tokens,
            experts: e.count,
            used: e.used,
            rows: wt.rows / e.count,
            cols: wt.cols,
        }
    }

    /// An experts' product's weights `ids` as its kernel binds them (each twice where the
    /// blocks kernel reads the scales through an f16 view), and its grid.
    fn experts_weights(
        &self,
        node: &Node,
        ids: &[WeightId],
        m: &MatvecIds,
        form: Form,
    ) -> (Vec<Tensor>, [u32; 3]) {
        let key = KernelKey::of(&node.op, &self.model.weights, self.shape, &self.tuned);
        let grid = match key {
            KernelKey::MatvecIds {
                blocks: Some(rows), ..
            } => matvec_ids_blocks::grid(m, rows),
            KernelKey::MatvecIdsSorted { rows, .. } => matvec_ids_sorted::grid(m, rows),
            _ => m.grid(),
        };
        let views = match self.placement.programs[&key].launch {
            Launch::Blocks { f16_view: true } if form == Form::QuantizedBlocks => 2,
            _ => 1,
        };
        let inputs = ids
            .iter()
            .flat_map(|&id| vec![Tensor::Weight(id); views])
            .collect();
        (inputs, grid)
    }

    fn experts(&self) -> Experts {
        self.model
            .config
            .experts
            .unwrap_or_else(|| unreachable!("only a model with experts builds their nodes"))
    }

    fn split_attention(&self, tokens: u32, splits: u32) -> SplitAttention {
        let c = &self.model.config;
        SplitAttention {
            tokens,
            heads: c.n_head,
            kv_heads: c.n_head_kv,
            head_dim: c.head_dim(),
            splits,
        }
    }
}

/// The x an experts' product in `form` reads: `x` itself, or its quantized words and scales.
fn experts_x(form: Form, x: Tensor) -> Vec<Tensor> {
    if form.quantizes_x() {
        vec![Tensor::XqWords, Tensor::XqScales]
    } else {
        vec![x]
    }
}

/// Weight `id` (of type `ty`) in the file's layout on a device described by `info`, for a
/// kernel that reads its blocks as the file stores them: the copy a CPU holds apart from its
/// pairs of blocks ([`holds_pairs`]), else the weight itself.
fn file_layout(
    info: &trine_backends::DeviceInfo,
    w: &crate::weights::Weights,
    id: crate::weights::WeightId,
    ty: trine_gguf::quant::WeightType,
) -> Tensor {
    if holds_pairs(info, ty, w.pairable(id)) {
        Tensor::Plain(id)
    } else {
        Tensor::Weight(id)
    }
}

/// The (token, slot) pairs a row of an experts' product's x serves: the slots a token has
/// where x's rows are the tokens' (the normed stream), one where they are the pairs' own.
fn per_x(x: Tensor, e: Experts) -> u32 {
    if x == Tensor::Normed {
        e.used
    } else {
        1
    }
}

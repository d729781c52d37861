//! The fusion pass: turns an architecture's generic graph into the nodes an executor runs,
//! driven by what the device offers ([`Offer`]). It picks each product's form (float x with
//! its neighbours folded in, quantized x, or matrix tiles) and each attention's, then folds
//! what the chosen kernels take: an rms_norm into the float products that read it, attention's
//! combine into the float product that reads it, rope with the KV-cache store and SwiGLU into
//! the product before them, and every residual add into the product that writes its input.
//! What a form does not take stays a node of its own (GeGLU and a post-norm residual add
//! always do), and a product on quantized x gets the node that quantizes its x. A product on
//! widened weights reads x rounded to f16, which the node writing x rounds as it writes where
//! every reader takes it so (a norm, the attention, a gate/up product's gated unit, the
//! experts' SwiGLU), else a node of its own. Attention through a sliding window takes the form
//! any attention would.

use super::config::Config;
use super::error::ModelError;
use super::graph::{
    AttentionForm, ExpertsOn, Form, Load, Node, NormOut, Op, QuantizeFrom, RowPart, Step, Store,
    Tensor,
};
use super::tuning;
use super::weights::{WeightId, Weights};
use trine_backends::{DeviceInfo, DeviceType};
use trine_gguf::quant::WeightType;
use trine_ops::attention_flash::FlashOut;
use trine_ops::elementwise::{self, GateUp};
use trine_ops::kv_type::KvType;
use trine_ops::matvec_q8::XBlocks;
use trine_ops::rope::RopeMode;
use trine_ops::{
    attention_flash, attention_flash_tiles, matmul_tiles, matvec_ids_blocks, matvec_q8_blocks,
    matvec_q8_rows, widen,
};

/// What a device offers the fusion pass. A checker takes the checked executor's, so that both
/// run the same nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer {
    /// A GPU: decode attention splits the keys over workgroups, decode products take float x
    /// with their neighbours folded in (a decode step there is a chain of launches, which the
    /// fusions keep short) but for the K-quants and the grouped Q4_0, Q4_1 and Q8_0, which
    /// take quantized x ([`Form::QuantizedBlocks`]: their codes decoded to floats cost more
    /// than the memory streaming them), prompt attention is flash attention. A CPU's products all take
    /// quantized x, as its packed 8-bit dot products are its fastest.
    pub gpu: bool,
    /// Matrix tiles: a GPU's prompt products run on them, those over quantized weights on W
    /// dequantised to f16 and x rounded to f16 by nodes before them ([`Form::Widened`]): the
    /// product stages f16 blocks as they are (asynchronously where the device copies them),
    /// where staging the file's blocks decodes every one in every workgroup that reads it;
    /// staged without copies too, the widened product measured faster (docs/bench/prefill.md).
    /// A mixture of experts' products stage the file's blocks (`experts_on`): each expert
    /// serves too few of a prompt's tokens to repay a widened copy.
    pub tiles: bool,
    /// Prompt flash attention cuts the keys into chunks ([`trine_backends::Tuning`]).
    pub flash_key_chunks: bool,
    /// Splits of the keys in a decode step's attention ([`tuning::gpu_splits`] of the
    /// executor's context on a GPU, [`tuning::cpu_splits`] on a CPU).
    pub decode_splits: u32,
    /// The KV cache stores floats, one element at a time: rope with the cache store folds
    /// into the QKV product, and prompt attention may run on tiles. A q8_0 cache quantizes
    /// a head's blocks together, which a product's rows, spread over workgroups, cannot.
    pub float_cache: bool,
    /// Each kernel's launch overlaps the one before it ([`trine_backends::Tuning`]): rope with
    /// the cache store stays a node after a decode product on the file's blocks, where folding
    /// it in measured slower; a step whose dispatches wait behind barriers gains from it
    /// (docs/bench/decode.md, "Fewer dispatches around the decode products").
    pub launches_overlap: bool,
    /// Shared memory a workgroup may take: prompt flash attention where its blocks fit.
    pub shared_bytes: u64,
    /// Warpgroup products: the large block from fewer rows
    /// ([`matmul_tiles::BlockSize::for_product`]).
    pub warpgroups: bool,
    /// The device's multiprocessors, where known: a prompt product on tiles splits its K
    /// where its blocks would leave most of them idle ([`tuning::k_splits`]).
    pub compute_units: Option<u32>,
}

impl Offer {
    /// The offer of the device `info` for an executor of `context` positions, a cache of
    /// `kv` and `heads` query heads over `kv_heads`.
    pub fn of(info: &DeviceInfo, kv: KvType, context: u32, (heads, kv_heads): (u32, u32)) -> Offer {
        let gpu = info.device_type != DeviceType::Cpu;
        Offer {
            gpu,
            tiles: gpu && info.tiles,
            flash_key_chunks: info.tuning.flash_key_chunks,
            decode_splits: if gpu {
                tuning::gpu_splits(context)
            } else {
                tuning::cpu_splits(info.compute_units, (heads, kv_heads))
            },
            float_cache: kv.float().is_some(),
            launches_overlap: info.tuning.launches_overlap,
            shared_bytes: info.max_shared_bytes,
            warpgroups: info.group_mma,
            compute_units: info.compute_units,
        }
    }

    /// Whether a step of `tokens` takes x quantized to 8 bits for the products on
    /// interleaved weights whose types allow it, as llama.cpp multiplies: every step on a
    /// CPU, prompt steps on a GPU.
    fn quantizes_x(self, tokens: u32) -> bool {
        !self.gpu || tokens > 1
    }
}

/// The parts a widened product takes its weight's rows in: two halves of a gate/up product
/// (SwiGLU of row pairs, whole pairs to each half), a model's widest, so that the f16 copy
/// ([`Tensor::Wide`]) holds half of it and no more than the down projection's; one for the
/// rest.
fn widened_parts(rows: u32, store: Store) -> u32 {
    if matches!(store, Store::Swiglu | Store::Geglu) && rows.is_multiple_of(4) {
        2
    } else {
        1
    }
}

/// The executor's nodes for step `s` of the generic graph `nodes`.
pub fn fuse(
    nodes: &[Node],
    c: &Config,
    w: &Weights,
    s: Step,
    offer: Offer,
) -> Result<Vec<Node>, ModelError> {
    let form = |op: &Op| match *op {
        Op::Product { w: id, tokens, .. } => Some(product_form(w, id, tokens, s, offer)),
        _ => None,
    };
    let mut out: Vec<Node> = Vec::with_capacity(nodes.len() * 2);
    // A load the next product takes, with the x it then reads.
    let mut pending: Option<(Load, Tensor)> = None;
    // A norm folded into the products that read its output, with the x they then read.
    let mut norm: Option<(Load, Tensor)> = None;
    // SwiGLU folded into the quantizer of the product after it, with the tensor it writes.
    let mut swiglu: Option<Tensor> = None;
    // The tensor whose rows the last HalfX rounded, while nothing has written it since.
    let mut halved: Option<Tensor> = None;
    // The gated unit a gate/up product on tiles wrote rounded ([`Tensor::ActHalf`]) for the
    // product that reads it next.
    let mut act_half: Option<Tensor> = None;
    // The experts' SwiGLU wrote its units rounded into [`Tensor::XHalf`] for the experts'
    // down products after it.
    let mut experts_act_rounded = false;
    // The norm before a layer's experts wrote its rows rounded into [`Tensor::XHalf`] beside
    // the f32 ones, for the experts' gate and up products.
    let mut experts_x_rounded = false;
    // The last quantizer, while nothing has written what it read since: the products of a
    // layer's QKV.
    let mut quantized_x: Option<Op> = None;
    let mut i = 0;
    while i < nodes.len() {
        let node = nodes[i];
        let next = nodes.get(i + 1);
        let next_form = next.and_then(|n| form(&n.op));
        i += 1;
        // Rope and the QKV biases between a layer's QKV products write neither the x they
        // read nor its rounded or quantized copies.
        if !matches!(
            node.op,
            Op::Product { .. } | Op::RopeStore { .. } | Op::QkvBiasNorm { .. }
        ) {
            halved = None;
            quantized_x = None;
        }
        match node.op {
            Op::Norm {
                x, weight, tokens, ..
            } => {
                // Folded where every product reading it (the products up to the next norm:
                // a layer's QKV may be several) takes float x; each then normalises x itself.
                // Experts' products read it as it is, but for a decode step's on the file's
                // blocks, whose quantizer normalises x as a dense product's does.
                let up_to_next = nodes[i..]
                    .iter()
                    .take_while(|n| !matches!(n.op, Op::Norm { .. }));
                let experts = up_to_next.clone().find_map(|n| match n.op {
                    Op::ExpertsSwiglu { gate, up, .. } => Some((gate, up)),
                    _ => None,
                });
                let readers: Vec<Option<Form>> = up_to_next
                    .filter(|n| {
                        matches!(
                            n.op,
                            Op::Product {
                                x: Tensor::Normed,
                                ..
                            }
                        )
                    })
                    .map(|n| form(&n.op))
                    .collect();
                // A GPU's decode products on the file's blocks read x through their quantizer,
                // which normalises it.
                let folds =
                    |form| next_form == Some(form) && readers.iter().all(|&f| f == Some(form));
                let fold = match experts {
                    None => folds(Form::Float) || folds(Form::QuantizedBlocks),
                    Some((gate, up)) => {
                        s.tokens == 1
                            && experts_on(w, c, &[gate, up], s, offer).is_none()
                            && experts_form(w, gate).quantizes_x()
                            && folds(Form::Float)
                    }
                };
                // Where every reader is a product on widened weights, which reads x rounded to
                // f16, the norm writes it so, and no node rounds it apart; where experts on
                // tiles read it beside a router on f32, it writes both.
                let half = experts.is_none()
                    && !readers.is_empty()
                    && readers.iter().all(|&f| f == Some(Form::Widened));
                let both = experts.is_some_and(|(gate, up)| {
                    matches!(
                        experts_on(w, c, &[gate, up], s, offer),
                        Some(ExpertsOn::Tiles(_))
                    )
                });
                if fold {
                    norm = Some((Load::Norm(weight), x));
                } else if half || both {
                    norm = None;
                    let out_kind = if half { NormOut::Half } else { NormOut::Both };
                    let op = Op::Norm {
                        x,
                        weight,
                        tokens,
                        out: out_kind,
                    };
                    out.push(Node { op, ..node });
                    halved = half.then_some(Tensor::Normed);
                    experts_x_rounded = both;
                } else {
                    norm = None;
                    out.push(node);
                }
            }
            Op::Attention { layer, window, .. } => {
                let reader = next_form.unwrap_or(Form::Float);
                // Both kernels take a sliding window.
                let form = attention_form(c, s, offer, reader);
                out.push(Node {
                    op: Op::Attention {
                        layer,
                        form,
                        window,
                    },
                    ..node
                });
                let splits = form.splits();
                // A product on float x combines the partials as it loads them, one on the
                // file's blocks in its quantizer.
                let combines = reader == Form::Float
                    || (reader == Form::QuantizedBlocks && form.output() == Tensor::Part);
                if combines {
                    pending = Some((Load::Combine { splits }, Tensor::Part));
                } else if form.output() == Tensor::Part {
                    out.push(Node {
                        op: Op::Combine { splits },
                        label: "attn_combine",
                        layer: node.layer,
                    });
                } else if form.output() == Tensor::XHalf {
                    // Written rounded for the widened product after it, which reads the
                    // attention (the graph's `Combined`) there.
                    halved = Some(Tensor::Combined);
                }
            }
            Op::Product {
                w: id,
                rows,
                x,
                y,
                tokens,
                ..
            } => {
                let form = product_form(w, id, tokens, s, offer);
                let folded_norm = norm.filter(|_| x == Tensor::Normed);
                let (load, x) = pending.take().or(folded_norm).unwrap_or((Load::None, x));
                // A quantized product reads x through its quantizer, which computes what was
                // folded: the norm, the combine, or SwiGLU from the gate/up pairs.
                let (from, quantized, load) = if !form.quantizes_x() {
                    (QuantizeFrom::Plain, x, load)
                } else if let Load::Norm(g) = load {
                    let t = &w.tensors[id];
                    let later = form == Form::QuantizedBlocks
                        && tuning::norm_in_product(t.ty, t.cols, offer.launches_overlap);
                    if later {
                        (QuantizeFrom::NormLater(g), x, Load::Rms)
                    } else {
                        (QuantizeFrom::Norm(g), x, Load::None)
                    }
                } else if let Load::Combine { splits } = load {
                    (QuantizeFrom::Combine { splits }, x, Load::None)
                } else if swiglu.take() == Some(x) {
                    (QuantizeFrom::Swiglu, Tensor::Raw, Load::None)
                } else {
                    (QuantizeFrom::Plain, x, Load::None)
                };
                let (store, y, folded) = store(form, y, next, offer);
                if folded {
                    i += 1;
                }
                let x = if form == Form::Widened && act_half == Some(x) {
                    act_half = None;
                    Tensor::ActHalf
                } else if form == Form::Widened {
                    if halved != Some(x) {
                        out.push(Node {
                            op: half_x(w, id, (x, tokens)),
                            label: "x_f16",
                            layer: node.layer,
                        });
                        halved = Some(x);
                    }
                    Tensor::XHalf
                } else {
                    x
                };
                if halved == Some(y) {
                    halved = None;
                }
                // A gated unit on tiles that the next product reads widened is written rounded
                // to f16, where that product reads x, and no node rounds it apart.
                let rounded = matches!(store, Store::Swiglu | Store::Geglu)
                    && matches!(form, Form::Tiles | Form::Widened)
                    && nodes[i..].iter().find_map(|n| match n.op {
                        Op::Product {
                            w: reader,
                            x,
                            tokens,
                            ..
                        } if x == y => Some(product_form(w, reader, tokens, s, offer)),
                        _ => None,
                    }) == Some(Form::Widened);
                let y = if rounded {
                    act_half = Some(y);
                    Tensor::ActHalf
                } else {
                    y
                };
                if form.quantizes_x() {
                    let ty = w.tensors[id].ty;
                    let op = Op::Quantize {
                        x: quantized,
                        cols: w.tensors[id].cols,
                        tokens,
                        blocks: match form {
                            Form::QuantizedBlocks => matvec_q8_blocks::X_BLOCKS,
                            _ => XBlocks::for_weights(ty),
                        },
                        from,
                    };
                    // A layer's QKV products of different types read the same quantized x.
                    if quantized_x != Some(op) {
                        out.push(Node {
                            op,
                            label: "quantize",
                            layer: node.layer,
                        });
                        quantized_x = Some(op);
                    }
                }
                // What this product writes, the next quantizer reads anew.
                if matches!(quantized_x, Some(Op::Quantize { x, .. }) if x == y) {
                    quantized_x = None;
                }
                // A prompt product on tiles whose blocks would leave most of the device idle
                // sums slices of K apart, then a node adds them up (with the residual).
                let cols = w.tensors[id].cols;
                let splits = match store {
                    Store::None | Store::Add(_)
                        if matches!(form, Form::Tiles | Form::Widened)
                            && widened_parts(rows, store) == 1 =>
                    {
                        let block =
                            matmul_tiles::BlockSize::for_product(rows, tokens, offer.warpgroups);
                        tuning::k_splits(block, (rows, cols, tokens), offer.compute_units)
                    }
                    _ => 1,
                };
                let (sums, summed) = if splits > 1 {
                    (Tensor::KParts, Store::Slices { splits })
                } else {
                    (y, store)
                };
                let product = |rows, part| Node {
                    op: Op::Product {
                        w: id,
                        rows,
                        x,
                        y: sums,
                        tokens,
                        load,
                        store: summed,
                        form,
                        part,
                    },
                    ..node
                };
                if form == Form::Widened {
                    // Each part widened, then multiplied: the f16 copy holds one part.
                    let parts = widened_parts(rows, store);
                    let (cols, per) = (w.tensors[id].cols, rows / parts);
                    for i in 0..parts {
                        let first = i * per;
                        out.push(Node {
                            op: Op::Widen {
                                w: id,
                                rows: per,
                                cols,
                                first,
                            },
                            label: "widen",
                            layer: node.layer,
                        });
                        let part = (parts > 1).then_some(RowPart { first, total: rows });
                        out.push(product(per, part));
                    }
                } else {
                    out.push(product(rows, None));
                }
                if splits > 1 {
                    out.push(Node {
                        op: Op::SplitSum {
                            y,
                            add: match store {
                                Store::Add(r) => Some(r),
                                _ => None,
                            },
                            tokens,
                            rows,
                            cols,
                            splits,
                        },
                        label: "split_sum",
                        layer: node.layer,
                    });
                }
            }
            // Unfolded by the product before it (which takes quantized x), SwiGLU folds into
            // the quantizer of the product after it where that one takes quantized x: the
            // quantizer computes it from the gate/up pairs, the same arithmetic (a file's halves
            // stay a node of their own).
            Op::Swiglu(GateUp::Pairs)
                if next_form.is_some_and(Form::quantizes_x)
                    && next.is_some_and(|n| matches!(n.op, Op::Product { x: Tensor::Act, .. })) =>
            {
                swiglu = Some(Tensor::Act);
            }
            Op::ExpertsSwiglu { gate, up, .. } => match experts_on(w, c, &[gate, up], s, offer) {
                Some(on) => {
                    let (layer, total) = (node.layer, 2 * c.experts.map_or(0, |e| e.ff));
                    let node = |op, label| Node { op, label, layer };
                    let tiles = matches!(on, ExpertsOn::Tiles(_));
                    let x = (Tensor::Normed, s.tokens);
                    match on {
                        ExpertsOn::Tiles(_) => {
                            out.push(node(Op::MoeSort, "ffn_moe_sort"));
                            if !std::mem::take(&mut experts_x_rounded) {
                                out.push(node(half_x(w, gate, x), "x_f16"));
                            }
                        }
                        ExpertsOn::Rows => out.push(node(rows_quantizer(w, gate, x), "quantize")),
                    }
                    let halves = [(gate, 0, "ffn_moe_gate"), (up, total / 2, "ffn_moe_up")];
                    for (id, first, label) in halves {
                        let op = Op::ExpertRows {
                            w: id,
                            x: Tensor::Normed,
                            y: Tensor::ExpertGateUp,
                            part: Some(RowPart { first, total }),
                            on,
                        };
                        out.push(node(op, label));
                    }
                    // Rounded to f16 as it is written where the down products on tiles read it.
                    let down = nodes[i..].iter().find_map(|n| match n.op {
                        Op::ExpertsDown { down, .. } => Some(down),
                        _ => None,
                    });
                    let ff = c.experts.map_or(0, |e| e.ff);
                    let half = tiles
                        && elementwise::swiglu_halves_rounded_check(ff).is_ok()
                        && matches!(
                            down.and_then(|d| experts_on(w, c, &[d], s, offer)),
                            Some(ExpertsOn::Tiles(_))
                        );
                    experts_act_rounded = half;
                    out.push(node(Op::ExpertsSwigluHalves { half }, "ffn_moe_swiglu"));
                }
                None => {
                    let form = experts_form(w, gate);
                    let (x, from) = match norm {
                        Some((Load::Norm(g), x)) => (x, QuantizeFrom::Norm(g)),
                        _ => (Tensor::Normed, QuantizeFrom::Plain),
                    };
                    out.extend(experts_quantizer(
                        w,
                        gate,
                        (x, s.tokens, from),
                        form,
                        node.layer,
                    ));
                    // A prompt's pairs sorted by expert, so that an expert's rows serve its
                    // tokens together.
                    let by_expert = form == Form::QuantizedBlocks && s.tokens > 1;
                    if by_expert {
                        out.push(Node {
                            op: Op::MoeSort,
                            label: "ffn_moe_sort",
                            layer: node.layer,
                        });
                    }
                    let op = Op::ExpertsSwiglu {
                        gate,
                        up,
                        form,
                        by_expert,
                    };
                    out.push(Node { op, ..node });
                }
            },
            Op::ExpertsDown {
                down, r, out: y, ..
            } => {
                // Each chosen expert's activation is a row of its own.
                let x = (Tensor::ExpertAct, s.tokens * c.experts_used());
                let rounded = std::mem::take(&mut experts_act_rounded);
                match experts_on(w, c, &[down], s, offer) {
                    Some(on) => {
                        let layer = node.layer;
                        let before = |op, label| Node { op, label, layer };
                        match on {
                            ExpertsOn::Rows => {
                                out.push(before(rows_quantizer(w, down, x), "quantize"))
                            }
                            ExpertsOn::Tiles(_) => {
                                if !rounded {
                                    out.push(before(half_x(w, down, x), "x_f16"));
                                }
                            }
                        }
                        let op = Op::ExpertRows {
                            w: down,
                            x: Tensor::ExpertAct,
                            y: Tensor::ExpertOut,
                            part: None,
                            on,
                        };
                        out.push(Node { op, ..node });
                        out.push(Node {
                            op: Op::MoeCombine { r, out: y },
                            label: "ffn_moe_combine",
                            layer: node.layer,
                        });
                    }
                    None => {
                        let form = experts_form(w, down);
                        let (x, tokens) = x;
                        let x = (x, tokens, QuantizeFrom::Plain);
                        out.extend(experts_quantizer(w, down, x, form, node.layer));
                        let op = Op::ExpertsDown {
                            down,
                            r,
                            out: y,
                            form,
                        };
                        out.push(Node { op, ..node });
                    }
                }
            }
            Op::Add { .. } => {
                return Err(ModelError::Unfused {
                    node: node.label,
                    layer: node.layer,
                })
            }
            _ => out.push(node),
        }
    }
    Ok(out)
}

/// What a product of `form` writing `y` folds from the node after it: rope with the cache
/// store (float x, or a GPU's decode product on the file's blocks where launches do not
/// overlap; the normal rope the fused kernels compute), SwiGLU of gate/up pairs (float
/// x and tiles; a file's gate and up halves lie too far apart for an epilogue), a
/// residual add of `y` (every form); with the tensor it then writes and whether it folded.
fn store(form: Form, y: Tensor, next: Option<&Node>, offer: Offer) -> (Store, Tensor, bool) {
    match next.map(|n| n.op) {
        Some(Op::RopeStore {
            layer,
            mode: RopeMode::Normal,
            heads,
        }) if offer.float_cache
            && (form == Form::Float
                || (form == Form::QuantizedBlocks && !offer.launches_overlap)) =>
        {
            (Store::Rope { layer, heads }, Tensor::QRot, true)
        }
        Some(Op::Swiglu(GateUp::Pairs)) if !form.quantizes_x() => {
            (Store::Swiglu, Tensor::Act, true)
        }
        Some(Op::Geglu) if matches!(form, Form::Tiles | Form::Widened) => {
            (Store::Geglu, Tensor::Act, true)
        }
        Some(Op::Add { x, r, out }) if x == y => (Store::Add(r), out, true),
        _ => (Store::None, y, false),
    }
}

/// A product's form: on tiles for a GPU's prompt products whose weights take them (a format
/// the staging decodes, rows of whole blocks of [`matmul_tiles::BK`]), quantized weights
/// widened to f16 first ([`Offer::tiles`]), on quantized x and the weights' blocks for a
/// GPU's one-token products whose format as the GPU holds it has byte-code units
/// ([`matvec_q8_blocks::takes`]: the K-quants, and Q4_0, Q4_1 and Q8_0 in groups,
/// [`tuning::read_type`]), on quantized x where the step quantizes it and the
/// file's weights allow ([`matvec_q8_rows::takes`]; on a GPU, which keeps its own layout for
/// its decode products beside it, only where that copy is not much larger,
/// [`matvec_q8_rows::widens`]), else on float x.
fn product_form(w: &Weights, id: WeightId, tokens: u32, s: Step, offer: Offer) -> Form {
    let t = &w.tensors[id];
    // A GPU's executor groups blocks ([`crate::planner::KernelShape::gpu_nodes`]).
    let ty = tuning::read_type(w, id, offer.gpu);
    let tiles = offer.tiles && tokens > 1 && matmul_tiles::check(t.rows, t.cols, 1).is_ok();
    if tiles && ty.is_quantized() && widen::check(ty, t.rows, t.cols).is_ok() {
        Form::Widened
    } else if tiles && matmul_tiles::takes(ty) {
        Form::Tiles
    } else if offer.gpu && tokens == 1 && matvec_q8_blocks::takes(ty, t.cols) {
        Form::QuantizedBlocks
    } else if offer.quantizes_x(s.tokens)
        && matvec_q8_rows::takes(t.ty, t.rows as usize, t.cols as usize)
        && !(offer.gpu && matvec_q8_rows::widens(t.ty))
    {
        Form::QuantizedX
    } else {
        Form::Float
    }
}

/// The form of experts' products that do not run into each pair's row ([`experts_on`]): on
/// quantized x and the file's blocks where the experts' format has byte-code units
/// ([`matvec_ids_blocks::takes`]), else on float x. The float kernel decodes each weight on
/// its own, the blocks kernel a unit of 32 codes with packed integer dots.
fn experts_form(w: &Weights, id: WeightId) -> Form {
    let t = &w.tensors[id];
    if matvec_ids_blocks::takes(t.ty, t.cols) {
        Form::QuantizedBlocks
    } else {
        Form::Float
    }
}

/// How the experts' products over weights `ids` run as products into each pair's own row
/// ([`Op::ExpertRows`]), where they do: a prompt's on matrix tiles by expert where the device
/// has tiles and their staging takes the weights' blocks (a product on the file's blocks by
/// expert, [`trine_ops::matvec_ids_sorted`], reads an expert's rows once for a few of its
/// tokens; on tiles, once for a block of them, multiplied on the matrix units), the file's
/// blocks decoded as the tiles stage them and x rounded to f16 once before; a CPU's on 16
/// interleaved rows by pair where that product takes them, as its dense products run.
fn experts_on(
    w: &Weights,
    c: &Config,
    ids: &[WeightId],
    s: Step,
    offer: Offer,
) -> Option<ExpertsOn> {
    let e = c.experts?;
    let all = |f: &dyn Fn(u32, u32, WeightType) -> bool| {
        ids.iter().all(|&id| {
            let t = &w.tensors[id];
            t.ty == tuning::read_type(w, id, offer.gpu) && f(t.rows, t.cols, t.ty)
        })
    };
    if offer.tiles && s.tokens > 1 {
        let tiles = all(&|rows, cols, ty| {
            matmul_tiles::takes(ty)
                && matmul_tiles::check(rows, cols, s.tokens).is_ok()
                && widen::x_check(cols).is_ok()
        });
        let block = tuning::experts_block(w.tensors[ids[0]].cols, offer.warpgroups);
        return tiles.then_some(ExpertsOn::Tiles(block));
    }
    let rows =
        all(&|rows, cols, ty| matvec_q8_rows::takes(ty, (rows / e.count) as usize, cols as usize));
    (!offer.gpu && rows).then_some(ExpertsOn::Rows)
}

/// x (`x`, `tokens` rows) rounded to f16 for a product on weight `id` on tiles that reads it
/// so.
fn half_x(w: &Weights, id: WeightId, (x, tokens): (Tensor, u32)) -> Op {
    Op::HalfX {
        x,
        cols: w.tensors[id].cols,
        tokens,
    }
}

/// The node quantizing x (`x`, `tokens` rows) for a CPU's experts' product over `id`
/// ([`ExpertsOn::Rows`]), in the blocks its weights' product takes.
fn rows_quantizer(w: &Weights, id: WeightId, (x, tokens): (Tensor, u32)) -> Op {
    let t = &w.tensors[id];
    Op::Quantize {
        x,
        cols: t.cols,
        tokens,
        blocks: XBlocks::for_weights(t.ty),
        from: QuantizeFrom::Plain,
    }
}

/// The node quantizing x (`tokens` rows, computed `from` what it reads) for an experts'
/// product over `id` in `form`, where it takes quantized x.
fn experts_quantizer(
    w: &Weights,
    id: WeightId,
    (x, tokens, from): (Tensor, u32, QuantizeFrom),
    form: Form,
    layer: Option<u32>,
) -> Option<Node> {
    form.quantizes_x().then(|| Node {
        op: Op::Quantize {
            x,
            cols: w.tensors[id].cols,
            tokens,
            blocks: matvec_ids_blocks::X_BLOCKS,
            from,
        },
        label: "quantize",
        layer,
    })
}

/// A step's attention: flash attention for a GPU's prompt steps (for heads it takes), on
/// tiles where the device has them, its keys in chunks where the device takes them, writing
/// the attention itself where one chunk feeds a product that does not combine
/// (`reader` not on float x); split attention otherwise, over several workgroups per head in
/// a GPU's decode steps.
fn attention_form(c: &Config, s: Step, offer: Offer, reader: Form) -> AttentionForm {
    let d = c.head_dim();
    if !(offer.gpu && s.tokens > 1 && attention_flash::fits(d, offer.shared_bytes)) {
        return AttentionForm::Split {
            splits: tuning::attention_splits(s.tokens, offer.decode_splits),
        };
    }
    let tiles =
        offer.tiles && offer.float_cache && attention_flash_tiles::fits(d, offer.shared_bytes);
    // Heads wider than 128 (Gemma 3's 256) come few to a model and in blocks of few keys:
    // one workgroup per query block and head (or part of one) leaves most of a GPU idle, so
    // their keys go in chunks on every GPU, as all keys do where the device asks for it.
    let wide = d > attention_flash::MAX_FLASH_HEAD_DIM;
    let splits = if offer.flash_key_chunks || wide {
        tuning::flash_splits(s.tokens, d, tiles)
    } else {
        1
    };
    let out = if splits == 1 && reader == Form::Widened {
        FlashOut::NormalizedHalf
    } else if splits == 1 && reader != Form::Float {
        FlashOut::Normalized
    } else {
        FlashOut::Part.for_splits(splits)
    };
    AttentionForm::Flash { tiles, out, splits }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::builder::Builder;
    use crate::model::Model;
    use trine_gguf::synth::{synth_llama, SynthShape};
    use trine_gguf::Gguf;

    fn tiny() -> Model {
        let shape = SynthShape::TINY;
        let bytes = synth_llama(shape, 3).unwrap().to_bytes();
        Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap()
    }

    const GPU: Offer = Offer {
        gpu: true,
        float_cache: true,
        tiles: false,
        flash_key_chunks: false,
        decode_splits: tuning::GPU_SPLITS,
        launches_overlap: false,
        shared_bytes: 48 * 1024,
        warpgroups: false,
        compute_units: None,
    };

    /// A layer of `mode` rope as the Llama blocks build it, fused for a GPU's decode step.
    fn decode_layer(m: &Model, mode: RopeMode) -> Vec<Node> {
        let s = Step { tokens: 1, pos: 0 };
        let mut b = Builder::new(&m.weights, s);
        b.layer(Some(0));
        b.attention_block(
            Tensor::Resid(0),
            Tensor::Resid(1),
            &m.weights.layers[0],
            mode,
        );
        fuse(&b.finish(), &m.config, &m.weights, s, GPU).unwrap()
    }

    /// Gemma 3's heads of 256 run on tiles where the kernel's blocks fit the device's shared
    /// memory, in chunks of 128 keys; else on the scalar kernel in chunks of 64. Phi-3.5's 96
    /// run on tiles in one chunk where the device does not ask for chunks.
    #[test]
    fn wide_heads_run_on_tiles_where_they_fit() {
        let mut c = tiny().config;
        let prompt = Step {
            tokens: 512,
            pos: 0,
        };
        let tiles = Offer { tiles: true, ..GPU };
        c.n_embd_head = 256;
        let form = |offer| attention_form(&c, prompt, offer, Form::Tiles);
        assert_eq!(
            form(tiles),
            AttentionForm::Flash {
                tiles: true,
                out: FlashOut::Chunks,
                splits: 4
            }
        );
        let small = Offer {
            shared_bytes: 40 * 1024,
            ..tiles
        };
        assert_eq!(
            form(small),
            AttentionForm::Flash {
                tiles: false,
                out: FlashOut::Chunks,
                splits: 8
            }
        );
        c.n_embd_head = 96;
        assert_eq!(
            attention_form(&c, prompt, tiles, Form::Tiles),
            AttentionForm::Flash {
                tiles: true,
                out: FlashOut::Normalized,
                splits: 1
            }
        );
    }

    /// On a GPU's decode step the attention block is three kernels: the QKV product with the
    /// norm before it and rope with the cache store after it, split attention, and the output
    /// projection combining the splits and adding the residual.
    #[test]
    fn a_gpu_decode_block_folds_into_its_products() {
        let m = tiny();
        let nodes = decode_layer(&m, RopeMode::Normal);
        let ops: Vec<Op> = nodes.iter().map(|n| n.op).collect();
        assert_eq!(ops.len(), 3, "{ops:#?}");
        assert!(matches!(
            ops[0],
            Op::Product {
                load: Load::Norm(_),
                store: Store::Rope { layer: 0, .. },
                y: Tensor::QRot,
                form: Form::Float,
                ..
            }
        ));
        assert!(matches!(
            ops[1],
            Op::Attention {
                form: AttentionForm::Split { splits: 8 },
                ..
            }
        ));
        assert!(matches!(
            ops[2],
            Op::Product {
                load: Load::Combine { splits: 8 },
                store: Store::Add(Tensor::Resid(0)),
                y: Tensor::Resid(1),
                ..
            }
        ));
    }

    /// NeoX rope, which the fused QKV product does not compute, stays a node of its own
    /// after the product.
    #[test]
    fn neox_rope_stays_a_node() {
        let m = tiny();
        let nodes = decode_layer(&m, RopeMode::Neox);
        let ops: Vec<Op> = nodes.iter().map(|n| n.op).collect();
        assert!(matches!(
            ops[0],
            Op::Product {
                store: Store::None,
                y: Tensor::Raw,
                ..
            }
        ));
        assert!(matches!(
            ops[1],
            Op::RopeStore {
                layer: 0,
                mode: RopeMode::Neox,
                ..
            }
        ));
    }

    /// An add that follows no product is refused with its name and layer, not run.
    #[test]
    fn an_add_without_its_product_is_a_typed_error() {
        let m = tiny();
        let s = Step { tokens: 1, pos: 0 };
        let mut b = Builder::new(&m.weights, s);
        b.layer(Some(1));
        b.add(Tensor::Resid(0), Tensor::Resid(1), None, "stray");
        match fuse(&b.finish(), &m.config, &m.weights, s, GPU) {
            Err(ModelError::Unfused { node, layer }) => {
                assert_eq!((node, layer), ("stray", Some(1)))
            }
            other => panic!("{other:?}"),
        }
    }
}

//! One forward step as a list of nodes: `tokens` new tokens at positions `pos..pos + tokens`,
//! appended to the KV cache, ending in the logits of the last one and their argmax.
//!
//! An architecture ([`crate::arch`]) builds the step from generic nodes (embedding, norm,
//! product, rope, attention, activation, add) through the shared blocks of [`builder`]; the
//! fusion pass ([`crate::fuse`]) then folds what the device's kernels take into the products
//! (norms, the attention combine, rope with the cache store, SwiGLU, residual adds) and picks
//! each product's and attention's form. The graph is data, so one executor runs it on any
//! backend and a cross-check runs two executors node by node.

pub mod builder;

use super::config::Config;
use super::weights::WeightId;
use trine_ops::attention_flash::FlashOut;
use trine_ops::elementwise::GateUp;
use trine_ops::matvec_q8::XBlocks;
use trine_ops::quantize::XLoad;
pub use trine_ops::rms_norm::NormOut;
use trine_ops::rope::RopeMode;
use trine_ops::rope_store::HeadSpan;

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
    /// f32 [tokens × q_dim]: q after rope.
    QRot,
    /// f32 [tokens × heads × splits × (head_dim + 2)]: attention's partial results, combined
    /// by the product that reads them or by [`Op::Combine`].
    Part,
    /// f32 [tokens × n_ff]: the FFN's activation.
    Act,
    /// u32 [tokens × experts used]: the experts a mixture-of-experts layer chose per token.
    Route,
    /// f32 [tokens × experts used]: the chosen experts' weights.
    RouteWeights,
    /// u32 [experts]: how many (token, slot) pairs of the step chose each expert.
    RouteCounts,
    /// u32 [experts × tokens]: each expert's pairs (`token × used + slot`), in order.
    RouteLists,
    /// f32 [tokens × experts used × expert ff]: each chosen expert's SwiGLU activation.
    ExpertAct,
    /// f32 [tokens × experts used × 2 · expert ff]: each chosen expert's gate row, then its
    /// up row, from the experts' products into each pair's row ([`Op::ExpertRows`]).
    ExpertGateUp,
    /// f32 [tokens × experts used × n_embd]: each chosen expert's down product, before
    /// [`Op::MoeCombine`] weighs and sums them.
    ExpertOut,
    /// f32 [splits × tokens × rows]: a product's sums over each slice of its K
    /// ([`Store::Slices`]), which an [`Op::SplitSum`] adds up; sized for the largest.
    KParts,
    /// f32 [n_embd]: the last token's row of the residual stream (prompt steps).
    Last,
    /// f32 [vocab].
    Logits,
    /// u32 [1]: the greedy token, the argmax of the logits.
    Token,
    /// [context × kv_dim] of the cache type, per layer.
    KCache(u32),
    VCache(u32),
    /// f32 [n_rot / 2 + 1]: rope's frequency table and magnitude.
    Freq,
    /// f32 [n_rot / 2 + 1]: the frequency table of the sliding-window layers' rope
    /// ([`crate::config::Swa::base`]).
    FreqLocal,
    Weight(WeightId),
    /// A weight in the CPU's interleaved layout for products with quantized x
    /// ([`trine_ops::matvec_q8_rows::interleave`]). An output head tied to the embedding table
    /// is held twice: the embedding reads [`Tensor::Weight`] in the file's layout.
    Interleaved(WeightId),
    /// A weight in groups of eight blocks ([`trine_gguf::quant::regroup`]): what the embedding,
    /// the widening and every product but the interleaved one read of the Q4_0, Q4_1 and Q8_0
    /// weights an executor groups ([`crate::tuning::read_type`]), so that a device holds them
    /// once, grouped (an embedding table tied to the output head included).
    Grouped(WeightId),
    /// A weight in the file's layout on a device that holds [`Tensor::Weight`] in pairs of
    /// blocks ([`crate::tuning::holds_pairs`]): what a CPU checking a GPU's products on
    /// matrix tiles reads (they stage the file's blocks).
    Plain(WeightId),
    /// f32 [tokens × n_embd]: rows after an rms_norm.
    Normed,
    /// f32 [tokens × q_dim]: the attention itself, its partials combined.
    Combined,
    /// f32 [the widest product]: a product's output before what follows it (biases and q/k
    /// norms, rope, SwiGLU, a residual add) where that is not folded into it.
    Raw,
    /// x quantized per block of 32 ([`trine_ops::quantize::kernel`]): u32 words of
    /// four codes, f32 scales, f32 `scale · Σ codes`; sized for the widest input.
    XqWords,
    XqScales,
    XqSums,
    /// f32, one per block of 32 of x: each block's sum of the squares of x, written by a
    /// quantizer that leaves the norm to the product ([`QuantizeFrom::NormLater`]).
    XqSquares,
    /// f16 [tokens × the widest input]: x rounded to f16 by an [`Op::HalfX`] for a product
    /// on f16 tiles ([`Form::Widened`]).
    XHalf,
    /// f16 [rows × cols of the largest product]: a weight dequantised to f16 by an
    /// [`Op::Widen`] for the product after it.
    Wide,
    /// f16 [tokens × n_ff]: the gated unit rounded as a gate/up product on tiles writes it,
    /// for a down projection on widened weights (apart from [`Tensor::XHalf`], which the
    /// gate/up product reads).
    ActHalf,
}

impl Tensor {
    /// Whether the tensor holds f16 values.
    pub fn is_half(self) -> bool {
        matches!(self, Tensor::XHalf | Tensor::Wide | Tensor::ActHalf)
    }
}

/// What a product does to x as it loads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Load {
    None,
    /// rms_norm, scaled by that weight.
    Norm(WeightId),
    /// x is [`Tensor::Part`]: attention's partials over `splits` chunks, combined.
    Combine {
        splits: u32,
    },
    /// x is x·g quantized by a quantizer that left the row's 1/rms to the product
    /// ([`QuantizeFrom::NormLater`]): the product scales its sums by it, worked out from
    /// [`Tensor::XqSquares`].
    Rms,
}

/// What a quantizer ([`Op::Quantize`]) computes x from; its kernel's [`XLoad`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantizeFrom {
    /// x as it is.
    Plain,
    /// x is [`Tensor::Raw`]'s gate/up pairs: SwiGLU of them.
    Swiglu,
    /// x normalised by rms_norm, scaled by that weight.
    Norm(WeightId),
    /// x scaled by that norm weight, its 1/rms left to the products after it ([`Load::Rms`]),
    /// each block's sum of squares into [`Tensor::XqSquares`].
    NormLater(WeightId),
    /// x is [`Tensor::Part`]: attention's partials over `splits` chunks, combined.
    Combine { splits: u32 },
}

impl QuantizeFrom {
    /// The kernel's load, for heads of `head_dim`.
    pub fn load(self, head_dim: u32) -> XLoad {
        match self {
            QuantizeFrom::Plain => XLoad::None,
            QuantizeFrom::Swiglu => XLoad::Swiglu,
            QuantizeFrom::Norm(_) => XLoad::Norm,
            QuantizeFrom::NormLater(_) => XLoad::NormLater,
            QuantizeFrom::Combine { splits } => XLoad::Combine { head_dim, splits },
        }
    }
}

/// What a product does to its sums before storing them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Store {
    None,
    /// Adds the tensor's matching element: the residual connection.
    Add(Tensor),
    /// W's rows are gate/up pairs; stores silu(gate) · up, half as many rows.
    Swiglu,
    /// As [`Store::Swiglu`] with GELU's tanh form for silu: a product on matrix tiles only
    /// ([`Form::Tiles`], [`Form::Widened`]).
    Geglu,
    /// W is the Q/K/V projections of `heads` (all of them where they are stacked): rope on
    /// q (into y, [`Tensor::QRot`]) and k, and k and v stored in the layer's caches at the
    /// step's position.
    Rope {
        layer: u32,
        heads: HeadSpan,
    },
    /// K in `splits` slices, each slice's sums into its slice of [`Tensor::KParts`]: a
    /// prompt product on tiles whose blocks would leave most of the device idle
    /// ([`crate::tuning::k_splits`]); an [`Op::SplitSum`] after it stores y.
    Slices {
        splits: u32,
    },
}

/// How a product multiplies, chosen by the fusion pass from what the device offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Form {
    /// Float x against W as stored, dequantised in the kernel; the load and store run
    /// inside it ([`trine_ops::matvec`]).
    Float,
    /// x quantized to 8 bits by an [`Op::Quantize`] before it, against W interleaved for
    /// packed 8-bit dot products ([`trine_ops::matvec_q8_rows`]); only a residual add is
    /// folded in.
    QuantizedX,
    /// x quantized to 8 bits by an [`Op::Quantize`] before it, against W as stored
    /// ([`trine_ops::matvec_q8_blocks`]): a GPU's decode products on the formats it takes;
    /// only a residual add is folded in.
    QuantizedBlocks,
    /// A prompt's product on matrix tiles ([`trine_ops::matmul_tiles`]): float x rounded to
    /// f16; a residual add or SwiGLU folded in.
    Tiles,
    /// A prompt's product on matrix tiles of f16 operands made by nodes before it: x rounded
    /// by an [`Op::HalfX`] into [`Tensor::XHalf`] (the product's x), W dequantised by an
    /// [`Op::Widen`] into [`Tensor::Wide`] ([`trine_ops::widen`]); a residual add or SwiGLU
    /// folded in, as on [`Form::Tiles`].
    Widened,
}

impl Form {
    /// Whether x is quantized for the product by an [`Op::Quantize`] before it.
    pub fn quantizes_x(self) -> bool {
        matches!(self, Form::QuantizedX | Form::QuantizedBlocks)
    }
}

/// How a step's attention runs, chosen by the fusion pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttentionForm {
    /// One workgroup per (token, head, split): the keys split over `splits` workgroups per
    /// head ([`trine_ops::attention_split`]).
    Split { splits: u32 },
    /// A block of query tokens per workgroup ([`trine_ops::attention_flash`]), on matrix tiles
    /// where the device has them ([`trine_ops::attention_flash_tiles`]), the keys in `splits`
    /// chunks; into [`Tensor::Part`] for a combine, or (one split) the attention itself into
    /// [`Tensor::Combined`].
    Flash {
        tiles: bool,
        out: FlashOut,
        splits: u32,
    },
}

impl AttentionForm {
    pub fn splits(self) -> u32 {
        match self {
            AttentionForm::Split { splits } | AttentionForm::Flash { splits, .. } => splits,
        }
    }

    /// The tensor it writes: the attention itself where it normalises (rounded to f16 for the
    /// product after it where that reads x so), else its partials.
    pub fn output(self) -> Tensor {
        match self {
            AttentionForm::Flash {
                out: FlashOut::Normalized,
                ..
            } => Tensor::Combined,
            AttentionForm::Flash {
                out: FlashOut::NormalizedHalf,
                ..
            } => Tensor::XHalf,
            _ => Tensor::Part,
        }
    }
}

/// How an [`Op::ExpertRows`] product runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExpertsOn {
    /// A prompt's on matrix tiles by expert, over the pairs an [`Op::MoeSort`] listed for it
    /// ([`trine_ops::matmul_tiles::TilesSpec::experts`]), in blocks of pairs by rows of this
    /// size ([`crate::tuning::experts_block`]): x rounded to f16 before it ([`Tensor::XHalf`],
    /// by an [`Op::HalfX`] or by the node writing x), the file's blocks decoded to f16 as the
    /// tiles stage them. Widening every expert's matrix to f16 first, as a dense prompt's
    /// product does, wrote and read back three times the bytes the file's blocks take, and
    /// measured slower (docs/models/qwen3moe.md).
    Tiles(trine_ops::matmul_tiles::BlockSize),
    /// A CPU's by pair on 16 interleaved rows ([`trine_ops::matvec_ids_rows`]), against x
    /// quantized by an [`Op::Quantize`] before it.
    Rows,
}

/// A product over part of its weight's rows: W's rows `first..first + rows` (the product's
/// own `rows`) are y's rows `first..` of a product of `total` rows (before a SwiGLU store
/// halves them). The executor runs its widest widened weight in halves this way, so that the
/// f16 copy ([`Tensor::Wide`]) holds half of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowPart {
    pub first: u32,
    pub total: u32,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    /// Rows of the embedding table for the step's ids, multiplied by `scale` where given, into
    /// [`Tensor::Resid`]`(0)`.
    Embed { table: WeightId, scale: Option<f32> },
    /// rms_norm of `tokens` rows of `x` scaled by `weight`, into [`Tensor::Normed`]; rounded to
    /// f16 into [`Tensor::XHalf`] instead ([`NormOut::Half`]) or as well ([`NormOut::Both`]) for
    /// products that read it so.
    Norm {
        x: Tensor,
        weight: WeightId,
        tokens: u32,
        out: NormOut,
    },
    /// `y = x·Wᵀ` for `tokens` rows of x, with what the fusion pass folded into it.
    Product {
        w: WeightId,
        /// W's rows: the outputs per token before an store halves them.
        rows: u32,
        x: Tensor,
        y: Tensor,
        tokens: u32,
        load: Load,
        store: Store,
        form: Form,
        /// Where the product is a part of W's rows (`rows` of them): which, and y's rows.
        part: Option<RowPart>,
    },
    /// Rope (`mode`) on the q and k heads of [`Tensor::Raw`] (the QKV product of `heads`)
    /// into [`Tensor::QRot`], k and v stored in the layer's caches.
    RopeStore {
        layer: u32,
        mode: RopeMode,
        heads: HeadSpan,
    },
    /// In place on [`Tensor::Raw`] (the QKV product of `heads`): the part's `bias` added,
    /// and with `norm` (the q and k norm weights) each query and key head rms-normalised
    /// ([`trine_ops::qkv_bias_norm`]).
    QkvBiasNorm {
        heads: HeadSpan,
        bias: Option<WeightId>,
        norm: Option<(WeightId, WeightId)>,
    },
    /// Attention of [`Tensor::QRot`] against the layer's caches, into [`AttentionForm::output`];
    /// with a `window`, each query sees only the keys of the last `window` positions.
    Attention {
        layer: u32,
        form: AttentionForm,
        window: Option<u32>,
    },
    /// Attention's partials over `splits` chunks combined into [`Tensor::Combined`].
    Combine { splits: u32 },
    /// SwiGLU of [`Tensor::Raw`]'s gate and up rows, laid out as the product's weight holds
    /// them, into [`Tensor::Act`].
    Swiglu(GateUp),
    /// GeGLU (GELU's tanh form) of [`Tensor::Raw`]'s gate/up row pairs into [`Tensor::Act`].
    Geglu,
    /// `out = rms_norm(Raw)·weight + r`: a post-norm residual connection
    /// ([`trine_ops::norm_add`]), which the fusion pass leaves a node of its own.
    NormAdd {
        weight: WeightId,
        r: Tensor,
        out: Tensor,
    },
    /// `out = x + r`, elementwise; the fusion pass folds every one into the product that
    /// writes `x`.
    Add { x: Tensor, r: Tensor, out: Tensor },
    /// `tokens` rows of `x` (`cols` wide) quantized in `blocks` (those the product after it
    /// takes) into [`Tensor::XqWords`], `XqScales`, `XqSums`, computed from `x` as `from`
    /// says (the fusion pass folds into it what a node before it would have computed).
    Quantize {
        x: Tensor,
        cols: u32,
        tokens: u32,
        blocks: XBlocks,
        from: QuantizeFrom,
    },
    /// `tokens` rows of `x` (`cols` wide) rounded to f16 into [`Tensor::XHalf`].
    HalfX { x: Tensor, cols: u32, tokens: u32 },
    /// Weight `w`'s rows `first..first + rows` (`cols` wide) dequantised to f16 rows into
    /// [`Tensor::Wide`].
    Widen {
        w: WeightId,
        rows: u32,
        cols: u32,
        first: u32,
    },
    /// A mixture-of-experts layer's routing ([`trine_ops::moe_route`]) from the router's
    /// logits in [`Tensor::Raw`]: the chosen experts into [`Tensor::Route`], their weights
    /// into [`Tensor::RouteWeights`].
    MoeRoute,
    /// A prompt's routing by expert ([`trine_ops::moe_sort`]): from [`Tensor::Route`], each
    /// expert's count into [`Tensor::RouteCounts`] and its pairs into [`Tensor::RouteLists`].
    MoeSort,
    /// The chosen experts' gate and up products on [`Tensor::Normed`], SwiGLU of each pair,
    /// into [`Tensor::ExpertAct`], one dispatch: on float x ([`Form::Float`],
    /// [`trine_ops::matvec_ids`]) or on x quantized by an [`Op::Quantize`] before it and the
    /// file's blocks ([`Form::QuantizedBlocks`], [`trine_ops::matvec_ids_blocks`]); there,
    /// `by_expert`, a workgroup per expert's rows over the pairs an [`Op::MoeSort`] before it
    /// listed ([`trine_ops::matvec_ids_sorted`]).
    ExpertsSwiglu {
        gate: WeightId,
        up: WeightId,
        form: Form,
        by_expert: bool,
    },
    /// The chosen experts' down products on [`Tensor::ExpertAct`] (in `form`, as
    /// [`Op::ExpertsSwiglu`]'s), weighted by [`Tensor::RouteWeights`], summed and added to
    /// residual `r` into `out`.
    ExpertsDown {
        down: WeightId,
        r: Tensor,
        out: Tensor,
        form: Form,
    },
    /// An experts' product into each (token, slot) pair's own row of `y`
    /// ([`Tensor::ExpertGateUp`], the gate and up matrices each a `part` of it;
    /// [`Tensor::ExpertOut`]): the rows of weight `w`'s matrix of the pair's expert against x's
    /// row of the pair's token ([`Tensor::Normed`]) or its own ([`Tensor::ExpertAct`]), as
    /// `on` says.
    ExpertRows {
        w: WeightId,
        x: Tensor,
        y: Tensor,
        part: Option<RowPart>,
        on: ExpertsOn,
    },
    /// SwiGLU of each pair's gate and up rows in [`Tensor::ExpertGateUp`] into
    /// [`Tensor::ExpertAct`]; where `half`, rounded to f16 into [`Tensor::XHalf`] instead, for
    /// down products on tiles, which read it so.
    ExpertsSwigluHalves { half: bool },
    /// [`Tensor::ExpertOut`]'s rows of each token's pairs weighted by
    /// [`Tensor::RouteWeights`], summed and added to residual `r` into `out`
    /// ([`trine_ops::moe_combine`]).
    MoeCombine { r: Tensor, out: Tensor },
    /// The `splits` slices of [`Tensor::KParts`] a product over `cols` columns wrote
    /// ([`Store::Slices`]), summed into `y` (`[tokens × rows]`) with residual `add`
    /// ([`trine_ops::split_sum`]).
    SplitSum {
        y: Tensor,
        add: Option<Tensor>,
        tokens: u32,
        rows: u32,
        cols: u32,
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
    pub fn output(&self, c: &Config, s: Step) -> (Tensor, std::ops::Range<usize>) {
        let t = s.tokens as usize;
        let rows = |y: Tensor, width: u32| (y, 0..t * width as usize);
        let part = |splits: u32| c.n_head * splits * (c.head_dim() + 2);
        match self.op {
            Op::Embed { .. } => rows(Tensor::Resid(0), c.n_embd),
            // A part's y is whole after the last part, and compared then.
            Op::Product {
                part: Some(p),
                rows,
                y,
                ..
            } if p.first + rows < p.total => (y, 0..0),
            Op::Product {
                rows,
                y,
                tokens,
                store,
                part,
                ..
            } => {
                let rows = part.map_or(rows, |p| p.total);
                let n = match store {
                    Store::Swiglu | Store::Geglu => rows / 2,
                    Store::Rope { .. } => c.q_dim(),
                    Store::None | Store::Add(_) => rows,
                    Store::Slices { splits } => splits * rows,
                };
                (y, 0..tokens as usize * n as usize)
            }
            Op::Attention { form, .. } => match form.output() {
                y @ (Tensor::Combined | Tensor::XHalf) => rows(y, c.q_dim()),
                part_tensor => rows(part_tensor, part(form.splits())),
            },
            // Where it writes both, the f32 rows are compared; the products reading the rounded
            // copy are checked after it.
            Op::Norm { tokens, out, .. } => {
                let y = match out {
                    NormOut::Half => Tensor::XHalf,
                    NormOut::F32 | NormOut::Both => Tensor::Normed,
                };
                (y, 0..(tokens * c.n_embd) as usize)
            }
            Op::Combine { .. } => rows(Tensor::Combined, c.q_dim()),
            Op::Swiglu(_) | Op::Geglu => rows(Tensor::Act, c.n_ff),
            Op::NormAdd { out, .. } => rows(out, c.n_embd),
            Op::RopeStore { .. } => rows(Tensor::QRot, c.q_dim()),
            Op::QkvBiasNorm { heads, .. } => rows(Tensor::Raw, heads.count * c.head_dim()),
            Op::Add { out, .. } => rows(out, c.n_embd),
            // The scales stand for the codes, which are not floats.
            Op::Quantize { cols, tokens, .. } => {
                (Tensor::XqScales, 0..(tokens * cols / 32) as usize)
            }
            Op::HalfX { cols, tokens, .. } => (Tensor::XHalf, 0..(tokens * cols) as usize),
            Op::Widen { rows, cols, .. } => (Tensor::Wide, 0..rows as usize * cols as usize),
            Op::MoeRoute => rows(Tensor::RouteWeights, c.experts_used()),
            // The lists' entries past each count are left as they were.
            Op::MoeSort => (
                Tensor::RouteCounts,
                0..c.experts.map_or(0, |e| e.count) as usize,
            ),
            Op::ExpertsSwiglu { .. } => {
                let e = c.experts.map_or(0, |e| e.used * e.ff);
                rows(Tensor::ExpertAct, e)
            }
            Op::ExpertsDown { out, .. } | Op::MoeCombine { out, .. } => rows(out, c.n_embd),
            // The gate's part, then the up's: y is whole after the up's, and compared then.
            Op::ExpertRows { part: Some(p), .. } if p.first > 0 => (
                Tensor::ExpertGateUp,
                0..t * c.experts.map_or(0, |e| e.used * 2 * e.ff) as usize,
            ),
            Op::ExpertRows { part: Some(_), .. } => (Tensor::ExpertGateUp, 0..0),
            Op::ExpertRows { y, .. } => rows(y, c.experts_used() * c.n_embd),
            Op::ExpertsSwigluHalves { half } => {
                let e = c.experts.map_or(0, |e| e.used * e.ff);
                rows(
                    if half {
                        Tensor::XHalf
                    } else {
                        Tensor::ExpertAct
                    },
                    e,
                )
            }
            Op::SplitSum {
                y, tokens, rows, ..
            } => (y, 0..(tokens * rows) as usize),
            Op::PickLast => (Tensor::Last, 0..c.n_embd as usize),
            Op::Argmax => (Tensor::Token, 0..1),
        }
    }
}

//! The planner: which kernel runs each node of a fused graph, as a key (what decides the
//! kernel) and its variants in order of preference for a device (the subgroup variant where
//! the device has subgroups, then the shared-memory one every device runs; products on tiles
//! from the fastest block the device runs down to the scalar one). The shapes come from the
//! tuning table ([`crate::tuning`]).

use super::graph::{AttentionForm, ExpertsOn, Form, Load, NormOut, Op, Store, Tensor};
use super::tuned::Tuned;
use super::tuning::{self, MatvecSize};
use super::weights::Weights;
use trine_backends::DeviceInfo;
use trine_gguf::quant::WeightType;
use trine_ir::Kernel;
use trine_ops::attention_flash::FlashOut;
use trine_ops::elementwise::{
    copy_kernel, geglu_pairs_kernel, swiglu_halves_kernel, swiglu_halves_rounded_kernel,
    swiglu_pairs_kernel, GateUp, Glu,
};
use trine_ops::key_layout::KeyLayout;
use trine_ops::kv_type::KvType;
use trine_ops::matvec::{
    Epilogue as MatvecEpilogue, MatvecSpec, Prologue as MatvecPrologue, Reduce,
};
use trine_ops::matvec_fused::{CombineShape, RopeShape};
use trine_ops::matvec_q8::XBlocks;
use trine_ops::quantize::{self, XLoad};
use trine_ops::rope::RopeMode;
use trine_ops::shape::ShapeError;
use trine_ops::support::{Float, Reduction};
use trine_ops::{
    argmax, attention_flash, attention_flash_tiles, attention_split, embedding, matmul_tiles,
    matvec, matvec_ids, matvec_ids_blocks, matvec_ids_sorted, matvec_q8_blocks, matvec_q8_rows,
    moe_combine, moe_route, moe_sort, norm_add, qkv_bias_norm, rms_norm, rope_store, split_sum,
    widen,
};

/// What every kernel of one executor shares: the KV cache type, the K cache's layout, the
/// head dimension and the values of a head rope turns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelShape {
    pub kv: KvType,
    pub keys: KeyLayout,
    pub head_dim: u32,
    /// Query heads a KV head serves.
    pub group: u32,
    /// Decode attention takes a KV head's query heads together where the device runs it
    /// ([`tuning::grouped_attention`]).
    pub grouped_attention: bool,
    pub rot_dim: u32,
    /// The executor runs a GPU's nodes (the fusion pass built them for a GPU; its checkers run
    /// the same): its kernels read Q4_0, Q4_1 and Q8_0 weights in groups of blocks
    /// ([`tuning::read_type`]), and its quantizers take [`tuning::quantize_invocations`].
    pub gpu_nodes: bool,
    /// The device has warpgroup products: a prompt product takes the large block from
    /// fewer rows ([`matmul_tiles::BlockSize::for_product`]).
    pub warpgroups: bool,
}

/// The kernel a node needs, up to its variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelKey {
    Embed {
        table: WeightType,
        /// Rows multiplied by a scale ([`embedding::scaled_kernel`]).
        scaled: bool,
    },
    /// A product on float x ([`Form::Float`]).
    Matvec {
        weights: WeightType,
        size: MatvecSize,
        prologue: MatvecPrologue,
        epilogue: MatvecEpilogue,
        /// Whether only products read the weights ([`Weights::pairable`]), so that a CPU
        /// holds them in pairs of blocks ([`MatvecSpec::pairs`]).
        pairable: bool,
    },
    /// A product on quantized x ([`Form::QuantizedX`]).
    MatvecQ8 {
        weights: WeightType,
        add: bool,
        /// Tokens each workgroup takes ([`tuning::q8_tokens_per_workgroup`]).
        tokens: u32,
    },
    /// A GPU's decode product on quantized x and the weights' blocks ([`Form::QuantizedBlocks`]).
    MatvecQ8Blocks {
        weights: WeightType,
        /// A residual add, or rope with the cache store.
        epilogue: MatvecEpilogue,
        /// Rows each team takes ([`tuning::q8_blocks_rows_per_team`]).
        rows: u32,
        /// How a workgroup's invocations divide its rows ([`tuning::q8_blocks_teams`]).
        teams: matvec_q8_blocks::Teams,
        /// Each team asks L2 for its rows first ([`tuning::q8_blocks_prefetch`]).
        prefetch: bool,
        /// x is x·g, normalised by the product ([`Load::Rms`]).
        rms: bool,
    },
    /// A prompt's product on matrix tiles ([`Form::Tiles`], [`Form::Widened`]).
    MatmulTiles(TilesKey),
    /// x rounded to f16 for a product on f16 tiles ([`Op::HalfX`]).
    HalfX,
    /// A weight dequantised to f16 rows ([`Op::Widen`]).
    Widen {
        weights: WeightType,
    },
    /// Split attention, through a sliding window where `windowed`.
    AttnSplit {
        windowed: bool,
    },
    /// Flash attention, through a sliding window where `windowed`.
    AttnFlash {
        tiles: bool,
        out: FlashOut,
        windowed: bool,
    },
    /// rms_norm, writing its rows as [`Op::Norm`]'s `out` says.
    RmsNorm {
        out: NormOut,
    },
    /// Attention's split partials combined, by splits (a compile-time constant).
    Combine {
        splits: u32,
    },
    Swiglu(GateUp),
    /// SwiGLU of gate and up halves rounded to f16 ([`Op::ExpertsSwigluHalves`] with `half`).
    SwigluHalvesRounded,
    GegluPairs,
    /// A post-norm residual connection ([`Op::NormAdd`]).
    NormAdd,
    /// A QKV product's biases and q/k head norms, in place ([`Op::QkvBiasNorm`]).
    QkvBiasNorm {
        apply: qkv_bias_norm::Apply,
    },
    RopeStore {
        mode: RopeMode,
    },
    /// x quantized in the blocks a product's weights take, computed as `load` says.
    Quantize {
        blocks: XBlocks,
        load: XLoad,
        /// Invocations a workgroup takes at least ([`tuning::quantize_invocations`]).
        invocations: u32,
    },
    /// A mixture-of-experts layer's routing ([`Op::MoeRoute`]).
    MoeRoute,
    /// A prompt's routing by expert ([`Op::MoeSort`]).
    MoeSort,
    /// A mixture-of-experts layer's pairs' rows summed onto the residual ([`Op::MoeCombine`]).
    MoeCombine,
    /// A split product's slices summed, with a residual where `add` ([`Op::SplitSum`]).
    SplitSum {
        add: bool,
    },
    /// A CPU's experts' product by pair on interleaved rows ([`Op::ExpertRows`] on
    /// [`ExpertsOn::Rows`]).
    MatvecIdsRows {
        weights: WeightType,
    },
    /// A prompt's experts' gate/up by expert ([`Op::ExpertsSwiglu`] `by_expert`): `rows` a
    /// workgroup, the pairs in chunks of `chunk` tokens.
    MatvecIdsSorted {
        weights: WeightType,
        rows: u32,
        chunk: u32,
    },
    /// The chosen experts' products ([`Op::ExpertsSwiglu`], [`Op::ExpertsDown`]): on float
    /// x, or with `blocks` (the rows each workgroup takes,
    /// [`matvec_ids_blocks::rows_per_workgroup`]) on quantized x and the file's blocks.
    MatvecIds {
        weights: WeightType,
        out: matvec_ids::Out,
        blocks: Option<u32>,
    },
    PickLast,
    Argmax,
}

/// What decides a tiled product's kernels ([`KernelKey::MatmulTiles`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TilesKey {
    pub weights: WeightType,
    pub add: bool,
    /// The gated unit of row pairs the product stores ([`matmul_tiles::TilesSpec::glu`]).
    pub glu: Option<Glu>,
    /// [`matmul_tiles::BlockSize::for_product`].
    pub block: matmul_tiles::BlockSize,
    /// Blocks of K per step ([`matmul_tiles::TilesSpec::depth_for`]).
    pub depth: u32,
    /// x stored as f16 ([`matmul_tiles::TilesSpec::half_x`]).
    pub half_x: bool,
    /// A part of a taller product's rows ([`matmul_tiles::TilesSpec::part`]).
    pub part: bool,
    /// A mixture of experts' product over a prompt's pairs
    /// ([`matmul_tiles::TilesSpec::experts`]).
    pub experts: bool,
    /// K in slices ([`matmul_tiles::TilesSpec::split`], [`Store::Slices`]).
    pub split: bool,
    /// The gated unit stored as f16 ([`matmul_tiles::TilesSpec::half_y`]).
    pub half_y: bool,
}

/// How a compiled variant is launched: what its dispatch's grid, parameters and bindings
/// follow from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Launch {
    /// A float-x product of this spec (which says whether it binds an f16 view of W).
    Matvec(MatvecSpec),
    /// A tiled product of this spec (which says its block).
    Tiles(matmul_tiles::TilesSpec),
    /// Prompt attention on matrix tiles (a block of queries per workgroup of its own).
    FlashTiles,
    /// A decode product on the file's blocks (which binds the weights a second time as an f16
    /// view where `f16_view`).
    Blocks { f16_view: bool },
    /// Decode attention's splits with a KV head's query heads in one workgroup
    /// ([`attention_split::grouped_kernel`]).
    GroupedSplits,
    /// Everything else: the grid follows from the op alone.
    Plain,
}

/// One kernel that computes a key, with how it is launched.
pub struct Variant {
    pub kernel: Kernel,
    pub launch: Launch,
}

/// How notes and errors name the op: `matvec q4_1 (wide, rms_norm, add)`.
impl std::fmt::Display for KernelKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelKey::Embed { table, scaled } => {
                let scaled = if *scaled { ", scaled" } else { "" };
                write!(f, "embedding {table}{scaled}")
            }
            KernelKey::Matvec {
                weights,
                size,
                prologue,
                epilogue,
                ..
            } => {
                let mut parts = vec![];
                match size {
                    MatvecSize::Small => {}
                    MatvecSize::Tall => parts.push("tall"),
                    MatvecSize::Wide => parts.push("wide"),
                    MatvecSize::Prompt => parts.push("prompt"),
                }
                match prologue {
                    MatvecPrologue::None => {}
                    MatvecPrologue::RmsNorm => parts.push("rms_norm"),
                    MatvecPrologue::Combine(_) => parts.push("attention combine"),
                }
                match epilogue {
                    MatvecEpilogue::None => {}
                    MatvecEpilogue::Add => parts.push("add"),
                    MatvecEpilogue::Swiglu => parts.push("swiglu"),
                    MatvecEpilogue::RopeStore(_) => parts.push("rope, kv cache store"),
                }
                write!(f, "matvec {weights}")?;
                if !parts.is_empty() {
                    write!(f, " ({})", parts.join(", "))?;
                }
                Ok(())
            }
            KernelKey::MatvecQ8 {
                weights,
                add,
                tokens,
            } => {
                let add = if *add { ", add" } else { "" };
                write!(f, "matvec {weights} × q8 ({tokens} tokens{add})")
            }
            KernelKey::MatvecQ8Blocks {
                weights,
                epilogue,
                rows,
                teams,
                prefetch,
                rms,
            } => {
                let add = match epilogue {
                    MatvecEpilogue::Add => ", add",
                    MatvecEpilogue::RopeStore(_) => ", rope, kv cache store",
                    MatvecEpilogue::None | MatvecEpilogue::Swiglu => "",
                };
                let prefetch = if *prefetch { "" } else { ", no L2 prefetch" };
                let prefetch = if *rms {
                    format!("{prefetch}, normalised")
                } else {
                    prefetch.into()
                };
                write!(
                    f,
                    "matvec {weights} blocks × q8 ({rows} rows a team of {}, {} units a step{add}{prefetch})",
                    teams.width, teams.units
                )
            }
            KernelKey::MatmulTiles(t) => {
                let out = match (t.add, t.glu) {
                    (true, _) => ", add".to_string(),
                    (false, Some(glu)) => format!(", {}", glu.name()),
                    (false, None) if t.split => ", K in slices".to_string(),
                    (false, None) => String::new(),
                };
                let block = match t.block {
                    matmul_tiles::BlockSize::Small => ", small",
                    matmul_tiles::BlockSize::Medium => "",
                    matmul_tiles::BlockSize::Large => ", large",
                };
                let (ty, depth) = (t.weights, t.depth);
                let x = if t.half_x { "f16 × " } else { "" };
                let experts = if t.experts { " by expert" } else { "" };
                let part = if t.part { ", a part of the rows" } else { "" };
                write!(
                    f,
                    "matmul {x}{ty}{experts} on tiles{block}{out}{part}, {depth} blocks a step"
                )
            }
            KernelKey::HalfX => f.write_str("x rounded to f16"),
            KernelKey::Widen { weights } => write!(f, "{weights} widened to f16"),
            KernelKey::AttnSplit { windowed: false } => f.write_str("attention (split)"),
            KernelKey::AttnSplit { windowed: true } => {
                f.write_str("attention (split, sliding window)")
            }
            KernelKey::AttnFlash {
                tiles,
                out,
                windowed,
            } => {
                let tiles = if *tiles { ", on tiles" } else { "" };
                let out = match out {
                    FlashOut::Part => "",
                    FlashOut::Normalized => ", normalised",
                    FlashOut::NormalizedHalf => ", normalised and rounded to f16",
                    FlashOut::Chunks => ", keys in chunks",
                };
                let window = if *windowed { ", sliding window" } else { "" };
                write!(f, "attention (flash{tiles}{out}{window})")
            }
            KernelKey::RmsNorm { out: NormOut::F32 } => f.write_str("rms_norm"),
            KernelKey::RmsNorm { out: NormOut::Half } => f.write_str("rms_norm rounded to f16"),
            KernelKey::RmsNorm { out: NormOut::Both } => {
                f.write_str("rms_norm, and rounded to f16 beside")
            }
            KernelKey::Combine { splits } => write!(f, "attention combine ({splits} splits)"),
            KernelKey::Swiglu(GateUp::Pairs) => f.write_str("swiglu"),
            KernelKey::Swiglu(GateUp::Halves) => f.write_str("swiglu halves"),
            KernelKey::SwigluHalvesRounded => f.write_str("swiglu halves rounded to f16"),
            KernelKey::GegluPairs => f.write_str("geglu"),
            KernelKey::NormAdd => f.write_str("rms_norm, residual add"),
            KernelKey::QkvBiasNorm { apply } => {
                let what = match (apply.bias, apply.norm) {
                    (true, true) => "bias, q/k head norms",
                    (true, false) => "bias",
                    (false, _) => "q/k head norms",
                };
                write!(f, "qkv {what}")
            }
            KernelKey::RopeStore { mode } => write!(f, "rope ({mode:?}), kv cache store"),
            KernelKey::Quantize { blocks, load, .. } => {
                let load = match load {
                    XLoad::None => String::new(),
                    XLoad::Swiglu => ", swiglu first".into(),
                    XLoad::Norm => ", normalised first".into(),
                    XLoad::NormLater => ", scaled by the norm's weight, its 1/rms left".into(),
                    XLoad::Combine { splits, .. } => format!(", {splits} splits combined first"),
                };
                write!(f, "x quantized to {}{load}", blocks.name())
            }
            KernelKey::MoeRoute => f.write_str("experts' routing"),
            KernelKey::MoeSort => f.write_str("experts' routing by expert"),
            KernelKey::MoeCombine => f.write_str("experts' rows weighted, residual add"),
            KernelKey::SplitSum { add } => f.write_str(if *add {
                "K's slices summed, residual add"
            } else {
                "K's slices summed"
            }),
            KernelKey::MatvecIdsRows { weights } => {
                write!(
                    f,
                    "matvec {weights} by pair (experts, x quantized, 16 rows)"
                )
            }
            KernelKey::MatvecIdsSorted {
                weights,
                rows,
                chunk,
            } => write!(
                f,
                "matvec {weights} by expert (gate/up, swiglu, x quantized, {rows} rows a \
                 workgroup, pairs in chunks of {chunk})"
            ),
            KernelKey::MatvecIds {
                weights,
                out,
                blocks,
            } => {
                let out = match out {
                    matvec_ids::Out::Swiglu => "gate/up, swiglu",
                    matvec_ids::Out::WeightedSum => "down, weighted sum, add",
                };
                let x = match blocks {
                    Some(rows) => format!(", x quantized, {rows} rows a workgroup"),
                    None => String::new(),
                };
                write!(f, "matvec {weights} by expert ({out}{x})")
            }
            KernelKey::PickLast => f.write_str("last-token copy"),
            KernelKey::Argmax => f.write_str("argmax"),
        }
    }
}

impl KernelKey {
    /// The key of a fused graph's node ([`crate::fuse`] leaves no [`Op::Add`]).
    pub fn of(op: &Op, w: &Weights, s: KernelShape, tuned: &Tuned) -> KernelKey {
        match *op {
            Op::Embed { table, scale } => KernelKey::Embed {
                table: tuning::read_type(w, table, s.gpu_nodes),
                scaled: scale.is_some(),
            },
            Op::Product {
                w: id,
                rows,
                y,
                tokens,
                load,
                store,
                form,
                part,
                ..
            } => {
                let t = &w.tensors[id];
                let ty = tuning::read_type(w, id, s.gpu_nodes);
                // The one-token products' epilogue (GeGLU folds into products on tiles only).
                let epilogue = || match store {
                    Store::None => MatvecEpilogue::None,
                    Store::Add(_) => MatvecEpilogue::Add,
                    Store::Swiglu => MatvecEpilogue::Swiglu,
                    Store::Geglu => unreachable!("GeGLU folds into products on tiles only"),
                    Store::Slices { .. } => unreachable!("K is split on tiles only"),
                    Store::Rope { .. } => MatvecEpilogue::RopeStore(RopeShape {
                        head_dim: s.head_dim,
                        rot_dim: s.rot_dim,
                        kv: s.kv.float().unwrap_or_else(|| {
                            unreachable!("rope folds into a product over a float cache")
                        }),
                        keys: s.keys,
                    }),
                };
                match form {
                    Form::Float => KernelKey::Matvec {
                        weights: ty,
                        size: MatvecSize::of(t.rows, t.cols, tokens),
                        prologue: match load {
                            Load::None | Load::Rms => MatvecPrologue::None,
                            Load::Norm(_) => MatvecPrologue::RmsNorm,
                            Load::Combine { splits } => MatvecPrologue::Combine(CombineShape {
                                heads: t.cols / s.head_dim,
                                head_dim: s.head_dim,
                                splits,
                            }),
                        },
                        epilogue: epilogue(),
                        pairable: w.pairable(id),
                    },
                    Form::QuantizedX => KernelKey::MatvecQ8 {
                        weights: t.ty,
                        add: matches!(store, Store::Add(_)),
                        tokens: tuning::q8_tokens_per_workgroup(tokens),
                    },
                    Form::QuantizedBlocks => {
                        let epilogue = epilogue();
                        let (rows, teams) = blocks_choice(tuned, (ty, rows, t.cols), epilogue);
                        KernelKey::MatvecQ8Blocks {
                            weights: ty,
                            epilogue,
                            rows,
                            teams,
                            prefetch: tuning::q8_blocks_prefetch(ty, t.cols),
                            rms: load == Load::Rms,
                        }
                    }
                    Form::Tiles | Form::Widened => KernelKey::MatmulTiles(TilesKey {
                        weights: if form == Form::Widened {
                            WeightType::F16
                        } else {
                            ty
                        },
                        add: matches!(store, Store::Add(_)),
                        glu: match store {
                            Store::Swiglu => Some(Glu::Swiglu),
                            Store::Geglu => Some(Glu::Geglu),
                            _ => None,
                        },
                        // A part keeps the block of the whole product it is part of.
                        block: matmul_tiles::BlockSize::for_product(
                            part.map_or(rows, |p| p.total),
                            tokens,
                            s.warpgroups,
                        ),
                        depth: matmul_tiles::TilesSpec::depth_for(t.cols),
                        half_x: form == Form::Widened,
                        part: part.is_some(),
                        experts: false,
                        split: matches!(store, Store::Slices { .. }),
                        half_y: y == Tensor::ActHalf,
                    }),
                }
            }
            Op::Attention { form, window, .. } => match form {
                AttentionForm::Split { .. } => KernelKey::AttnSplit {
                    windowed: window.is_some(),
                },
                AttentionForm::Flash { tiles, out, .. } => KernelKey::AttnFlash {
                    tiles,
                    out,
                    windowed: window.is_some(),
                },
            },
            Op::Norm { out, .. } => KernelKey::RmsNorm { out },
            Op::Combine { splits } => KernelKey::Combine { splits },
            Op::Swiglu(layout) => KernelKey::Swiglu(layout),
            Op::Geglu => KernelKey::GegluPairs,
            Op::NormAdd { .. } => KernelKey::NormAdd,
            Op::QkvBiasNorm { bias, norm, .. } => KernelKey::QkvBiasNorm {
                apply: qkv_bias_norm::Apply {
                    bias: bias.is_some(),
                    norm: norm.is_some(),
                },
            },
            Op::RopeStore { mode, .. } => KernelKey::RopeStore { mode },
            Op::Quantize { blocks, from, .. } => {
                let load = from.load(s.head_dim);
                KernelKey::Quantize {
                    blocks,
                    load,
                    invocations: tuning::quantize_invocations(blocks, load, s.gpu_nodes),
                }
            }
            Op::HalfX { .. } => KernelKey::HalfX,
            Op::Widen { w: id, .. } => KernelKey::Widen {
                weights: tuning::read_type(w, id, s.gpu_nodes),
            },
            Op::MoeRoute => KernelKey::MoeRoute,
            Op::MoeSort => KernelKey::MoeSort,
            Op::MoeCombine { .. } => KernelKey::MoeCombine,
            Op::SplitSum { add, .. } => KernelKey::SplitSum { add: add.is_some() },
            Op::ExpertsSwigluHalves { half: false } => KernelKey::Swiglu(GateUp::Halves),
            Op::ExpertsSwigluHalves { half: true } => KernelKey::SwigluHalvesRounded,
            Op::ExpertRows {
                w: id,
                on: ExpertsOn::Rows,
                ..
            } => KernelKey::MatvecIdsRows {
                weights: w.tensors[id].ty,
            },
            Op::ExpertRows {
                w: id,
                part,
                on: ExpertsOn::Tiles(block),
                ..
            } => {
                let t = &w.tensors[id];
                KernelKey::MatmulTiles(TilesKey {
                    weights: tuning::read_type(w, id, s.gpu_nodes),
                    add: false,
                    glu: None,
                    block,
                    depth: matmul_tiles::TilesSpec::depth_for(t.cols),
                    half_x: true,
                    part: part.is_some(),
                    experts: true,
                    split: false,
                    half_y: false,
                })
            }
            Op::ExpertsSwiglu {
                gate,
                by_expert: true,
                ..
            } => {
                let t = &w.tensors[gate];
                KernelKey::MatvecIdsSorted {
                    weights: t.ty,
                    rows: matvec_ids_blocks::rows_per_workgroup(
                        t.ty,
                        matvec_ids::Out::Swiglu,
                        t.cols,
                    ),
                    chunk: tuning::EXPERT_TOKENS_PER_CHUNK,
                }
            }
            Op::ExpertsSwiglu { gate: id, form, .. } | Op::ExpertsDown { down: id, form, .. } => {
                let out = match op {
                    Op::ExpertsSwiglu { .. } => matvec_ids::Out::Swiglu,
                    _ => matvec_ids::Out::WeightedSum,
                };
                let t = &w.tensors[id];
                KernelKey::MatvecIds {
                    weights: t.ty,
                    out,
                    blocks: (form == Form::QuantizedBlocks)
                        .then(|| matvec_ids_blocks::rows_per_workgroup(t.ty, out, t.cols)),
                }
            }
            Op::PickLast => KernelKey::PickLast,
            Op::Argmax => KernelKey::Argmax,
            Op::Add { .. } => unreachable!("the fusion pass folds every add into a product"),
        }
    }

    /// The kernels that compute this key, best first for a device described by `info`.
    pub fn variants(self, info: &DeviceInfo, s: KernelShape) -> Result<Vec<Variant>, ShapeError> {
        let plain = |kernel| Variant {
            kernel,
            launch: Launch::Plain,
        };
        let reductions: &[Reduction] = if info.subgroup_ops {
            &[Reduction::Subgroup, Reduction::Shared]
        } else {
            &[Reduction::Shared]
        };
        Ok(match self {
            KernelKey::Embed { table, scaled } => vec![plain(if scaled {
                embedding::scaled_kernel(table)
            } else {
                embedding::kernel(table)
            })],
            KernelKey::Matvec { .. } => {
                let reduces: &[Reduce] = if info.subgroup_ops {
                    &[Reduce::Subgroup, Reduce::Shared]
                } else {
                    &[Reduce::Shared]
                };
                // Each reduction with f16 scales where the shape wants them, then without.
                let mut specs = vec![];
                for &r in reduces {
                    let spec = self.matvec_spec(r, info);
                    specs.push(spec);
                    if spec.f16_scales {
                        specs.push(MatvecSpec {
                            f16_scales: false,
                            ..spec
                        });
                    }
                }
                specs
                    .into_iter()
                    .map(|spec| {
                        Ok(Variant {
                            kernel: matvec::kernel(spec)?,
                            launch: Launch::Matvec(spec),
                        })
                    })
                    .collect::<Result<_, ShapeError>>()?
            }
            KernelKey::MatvecQ8 {
                weights,
                add,
                tokens,
            } => vec![plain(matvec_q8_rows::kernel(weights, add, tokens)?)],
            KernelKey::MatvecQ8Blocks {
                weights,
                epilogue,
                rows,
                teams,
                prefetch,
                rms,
            } => on_blocks(info, reductions, |how, f16_view| {
                matvec_q8_blocks::kernel(
                    weights,
                    how,
                    rows,
                    teams,
                    epilogue,
                    (f16_view, prefetch, rms),
                )
            })?,
            KernelKey::MatmulTiles(key) => {
                let mut variants = vec![];
                for spec in tiles_spec(key, info).variants() {
                    let kernel = match matmul_tiles::kernel(spec) {
                        Ok(k) => k,
                        // A width that cannot share the block's tiles evenly has no tiled
                        // kernel (a typed refusal): the next variant serves it.
                        Err(_) if spec.tiles.is_some() => continue,
                        Err(e) => return Err(e),
                    };
                    variants.push(Variant {
                        kernel,
                        launch: Launch::Tiles(spec),
                    });
                }
                variants
            }
            KernelKey::AttnSplit { windowed } => {
                let kernel = if windowed {
                    attention_split::split_kernel_windowed
                } else {
                    attention_split::split_kernel
                };
                // The query heads of a KV head together where the device runs the
                // kernel's subgroups and the cache is in rows.
                let grouped = !windowed
                    && s.grouped_attention
                    && s.keys == KeyLayout::Rows
                    && info.subgroup_ops
                    && info.runs_subgroup_width(attention_split::grouped::WIDTH)
                    && attention_split::grouped_supports(s.head_dim, s.group, s.kv);
                let mut v = vec![];
                if grouped {
                    v.push(Variant {
                        kernel: attention_split::grouped_kernel(s.head_dim, s.group, s.kv)?,
                        launch: Launch::GroupedSplits,
                    });
                }
                // A CPU's (keys in columns): the query heads of a KV head in one workgroup,
                // which loads each key once for them all.
                if !windowed && s.grouped_attention && s.keys == KeyLayout::Columns && s.group > 1 {
                    for &how in reductions {
                        v.push(Variant {
                            kernel: attention_split::split_kernel_heads(
                                s.head_dim, s.kv, how, s.keys, s.group,
                            )?,
                            launch: Launch::GroupedSplits,
                        });
                    }
                }
                for &how in reductions {
                    v.push(plain(kernel(s.head_dim, s.kv, how, s.keys)?));
                }
                v
            }
            KernelKey::AttnFlash {
                tiles,
                out,
                windowed,
            } => {
                let mut variants = vec![];
                // The tiled kernel reads the K cache in rows, with subgroups of its width.
                match s.kv.float() {
                    Some(kv)
                        if tiles
                            && info.tiles
                            && info.runs_subgroup_width(attention_flash_tiles::WIDTH)
                            && s.keys == KeyLayout::Rows =>
                    {
                        variants.push(Variant {
                            kernel: attention_flash_tiles::kernel(s.head_dim, kv, out, windowed)?,
                            launch: Launch::FlashTiles,
                        });
                    }
                    _ => {}
                }
                variants.push(plain(attention_flash::kernel(
                    s.head_dim,
                    s.kv,
                    (s.keys, out),
                    windowed,
                )?));
                variants
            }
            KernelKey::RmsNorm { out } => reductions
                .iter()
                .map(|&r| plain(rms_norm::out_kernel(r, out)))
                .collect(),
            KernelKey::Combine { splits } => {
                vec![plain(attention_split::combine_kernel(s.head_dim, splits)?)]
            }
            KernelKey::Swiglu(GateUp::Pairs) => vec![plain(swiglu_pairs_kernel())],
            KernelKey::Swiglu(GateUp::Halves) => vec![plain(swiglu_halves_kernel())],
            KernelKey::SwigluHalvesRounded => vec![plain(swiglu_halves_rounded_kernel())],
            KernelKey::GegluPairs => vec![plain(geglu_pairs_kernel())],
            KernelKey::NormAdd => reductions
                .iter()
                .map(|&r| plain(norm_add::kernel(r)))
                .collect(),
            KernelKey::QkvBiasNorm { apply } => reductions
                .iter()
                .map(|&r| plain(qkv_bias_norm::kernel(apply, r)))
                .collect(),
            KernelKey::RopeStore { mode } => {
                vec![plain(match s.kv.float() {
                    Some(kv) => rope_store::kernel((s.head_dim, s.rot_dim), mode, kv, s.keys)?,
                    None => rope_store::kernel_q8((s.head_dim, s.rot_dim), mode)?,
                })]
            }
            KernelKey::Quantize {
                blocks,
                load,
                invocations,
            } => tuning::quantize_reductions(info)
                .iter()
                .map(|&how| Ok(plain(quantize::kernel(blocks, load, invocations, how)?)))
                .collect::<Result<_, ShapeError>>()?,
            KernelKey::HalfX => vec![plain(widen::x_kernel())],
            KernelKey::Widen { weights } => vec![plain(widen::kernel(weights)?)],
            KernelKey::MoeRoute => vec![plain(moe_route::kernel())],
            KernelKey::MoeSort => vec![plain(moe_sort::kernel())],
            KernelKey::MoeCombine => vec![plain(moe_combine::kernel())],
            KernelKey::SplitSum { add } => vec![plain(split_sum::kernel(add))],
            KernelKey::MatvecIdsRows { weights } => {
                vec![plain(matvec_q8_rows::experts_kernel(weights)?)]
            }
            KernelKey::MatvecIdsSorted {
                weights,
                rows,
                chunk,
            } => {
                // As the experts' products on the file's blocks.
                let views: &[bool] = if info.f16 { &[true, false] } else { &[false] };
                let mut variants = vec![];
                for &how in reductions {
                    for &f16_view in views {
                        variants.push(Variant {
                            kernel: matvec_ids_sorted::kernel(
                                weights,
                                how,
                                (rows, chunk),
                                f16_view,
                            )?,
                            launch: Launch::Blocks { f16_view },
                        });
                    }
                }
                variants
            }
            KernelKey::MatvecIds {
                weights,
                out,
                blocks: None,
            } => reductions
                .iter()
                .map(|&how| plain(matvec_ids::kernel(weights, out, how)))
                .collect(),
            KernelKey::MatvecIds {
                weights,
                out,
                blocks: Some(rows),
            } => on_blocks(info, reductions, |how, f16_view| {
                matvec_ids_blocks::kernel(weights, out, how, rows, f16_view)
            })?,
            KernelKey::PickLast => vec![plain(copy_kernel(Float::F32, Float::F32))],
            KernelKey::Argmax => reductions
                .iter()
                .map(|&r| plain(argmax::kernel(r)))
                .collect(),
        })
    }

    /// A float-x product key's kernel spec for a device with reduction `reduce`: the tuning
    /// table's shape for its size ([`tuning::matvec_spec`]), with its fusions.
    fn matvec_spec(self, reduce: Reduce, info: &DeviceInfo) -> MatvecSpec {
        let KernelKey::Matvec {
            weights,
            size,
            prologue,
            epilogue,
            pairable,
        } = self
        else {
            unreachable!("only a matvec key has a matvec spec")
        };
        MatvecSpec {
            prologue,
            epilogue,
            ..tuning::matvec_spec(weights, reduce, info, size, pairable)
        }
    }
}

/// (rows per team, teams) of a decode product on the blocks of `rows` × `cols` `ty` weights
/// ending in `epilogue`: the measured choice where `tuned` names the shape and the choice
/// fits this product (a grid within Vulkan's guaranteed 65,535 workgroups, pairs of rows for
/// rope), else
/// the tuning table's.
fn blocks_choice(
    tuned: &Tuned,
    (ty, rows, cols): (WeightType, u32, u32),
    epilogue: MatvecEpilogue,
) -> (u32, matvec_q8_blocks::Teams) {
    let rope = matches!(epilogue, MatvecEpilogue::RopeStore(_));
    tuned
        .blocks_product(ty, rows, cols)
        .filter(|&(per_team, teams)| {
            per_team.is_power_of_two()
                && matvec_q8_blocks::grid(rows, per_team, teams)[0] <= 65_535
                && (!rope || per_team.is_multiple_of(2))
        })
        .unwrap_or_else(|| {
            (
                tuning::q8_blocks_rows_per_team(rows),
                tuning::q8_blocks_teams(ty, rows, cols),
            )
        })
}

/// The variants of a product on the weights' blocks: each reduction with the scales read
/// through an f16 view where the device stores f16, then without.
fn on_blocks(
    info: &DeviceInfo,
    reductions: &[Reduction],
    kernel: impl Fn(Reduction, bool) -> Result<Kernel, ShapeError>,
) -> Result<Vec<Variant>, ShapeError> {
    let views: &[bool] = if info.f16 { &[true, false] } else { &[false] };
    let mut variants = vec![];
    for &how in reductions {
        for &f16_view in views {
            variants.push(Variant {
                kernel: kernel(how, f16_view)?,
                launch: Launch::Blocks { f16_view },
            });
        }
    }
    Ok(variants)
}

/// The tiled product of a [`KernelKey::MatmulTiles`] key on a device described by `info`:
/// tiles need one subgroup width to divide their work by ([`tuning::tile_width`]), so a device
/// without them (or a CPU checking a GPU's prompt) gets the scalar variant; f16 weights are
/// copied asynchronously where the device can, and the large block runs on warpgroup products
/// where it has them. Its [`matmul_tiles::TilesSpec::variants`] are the key's kernels.
pub fn tiles_spec(key: TilesKey, info: &DeviceInfo) -> matmul_tiles::TilesSpec {
    let spec = matmul_tiles::TilesSpec {
        weights: key.weights,
        add: key.add,
        tiles: tuning::tile_width(info),
        block: key.block,
        depth: key.depth,
        copies: false,
        half_x: key.half_x,
        group: false,
        glu: key.glu,
        part: key.part,
        experts: key.experts,
        split: key.split,
        half_y: key.half_y,
    };
    let spec = if info.async_copy { spec.copied() } else { spec };
    if info.group_mma {
        spec.grouped()
    } else {
        spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A big prompt product's kernels on a device with tiles are its spec's variants in
    /// order (on warpgroup products where the device has them, then large, medium, scalar),
    /// each launched as the spec it came from; on a device without tiles, the scalar one.
    #[test]
    fn tile_products_are_their_specs_variants() {
        let cpu = trine_backends::open(trine_backends::BackendKind::Cpu).unwrap();
        let mut info = cpu.info().clone();
        let shape = KernelShape {
            kv: KvType::F16,
            keys: KeyLayout::Rows,
            head_dim: 64,
            group: 1,
            grouped_attention: false,
            rot_dim: 64,
            gpu_nodes: false,
            warpgroups: false,
        };
        let fields = TilesKey {
            weights: WeightType::Q4_1,
            add: true,
            glu: None,
            block: matmul_tiles::BlockSize::for_product(4096, 512, false),
            depth: 2,
            half_x: false,
            part: false,
            experts: false,
            split: false,
            half_y: false,
        };
        let key = KernelKey::MatmulTiles(fields);
        for (tiles, group, count) in [(true, true, 4), (true, false, 3), (false, false, 1)] {
            info.tiles = tiles;
            info.group_mma = group;
            info.subgroup_sizes = vec![32];
            let variants = key.variants(&info, shape).unwrap();
            let specs = tiles_spec(fields, &info).variants();
            assert_eq!(variants.len(), count);
            assert_eq!(variants.len(), specs.len());
            for (v, spec) in variants.iter().zip(specs) {
                assert_eq!(v.kernel.name, spec.name());
                assert_eq!(v.launch, Launch::Tiles(spec));
            }
        }
    }

    /// Tiles take the device's one subgroup width, or 32 where a device with several pins a
    /// kernel's, and nothing on a device with several that cannot.
    #[test]
    fn tiles_take_the_one_width_or_a_pinned_32() {
        let cpu = trine_backends::open(trine_backends::BackendKind::Cpu).unwrap();
        let mut info = cpu.info().clone();
        info.tiles = true;
        for (sizes, pinned, width) in [
            (vec![32], false, Some(32)),
            (vec![8], true, Some(8)),
            (vec![32, 64], true, Some(32)),
            (vec![32, 64], false, None),
            (vec![64, 128], true, None),
        ] {
            info.subgroup_sizes = sizes.clone();
            info.subgroup_width_pinned = pinned;
            assert_eq!(
                tuning::tile_width(&info),
                width,
                "{sizes:?}, pinned {pinned}"
            );
        }
        info.tiles = false;
        info.subgroup_sizes = vec![32];
        assert_eq!(tuning::tile_width(&info), None);
    }
}

//! One forward step of the Llama graph as a list of nodes: `tokens` new tokens at positions
//! `pos..pos + tokens`, appended to the KV cache, ending in the logits of the last one.
//! The graph is data so that one executor runs it on any backend and a cross-check can run
//! two executors node by node.

use super::config::LlamaConfig;
use super::weights::{WeightId, Weights};
use trine_gguf::quant::WeightType;
use trine_ops::attention_flash::FlashOut;
use trine_ops::matvec_q8_rows;

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
    /// f32 [tokens × n_embd]: q after rope.
    QRot,
    /// f32 [tokens × heads × splits × (head_dim + 2)]: attention's partial results, combined
    /// where the output projection loads them.
    Part,
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
    /// A weight in the CPU's interleaved layout for products with quantized x
    /// ([`trine_ops::matvec_q8_rows::interleave`]). An output head tied to the embedding table
    /// is held twice: the embedding reads [`Tensor::Weight`] in the file's layout.
    Interleaved(WeightId),
    /// A weight in the file's layout on a device that holds [`Tensor::Weight`] in pairs of
    /// blocks ([`crate::kernels::holds_pairs`]): what a CPU checking a GPU's products on matrix
    /// tiles reads ([`Op::MatmulTiles`] stages the file's blocks).
    Plain(WeightId),
    /// f32 [n_embd]: one token's row after an rms_norm, for a product with quantized x.
    Normed,
    /// f32 [n_embd]: attention's split partials combined, for a product with quantized x.
    Combined,
    /// f32 [the widest product]: a product with quantized x before what the float products
    /// fuse into their epilogues (SwiGLU, rope and the KV-cache store) runs as a node.
    Raw,
    /// x quantized per block of 32 ([`trine_ops::matvec_q8::quantize_kernel`]): u32 words of
    /// four codes, f32 scales, f32 `scale · Σ codes`; sized for the widest input.
    XqWords,
    XqScales,
    XqSums,
}

/// What a matvec does to x as it loads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prologue {
    None,
    /// rms_norm, scaled by that weight.
    Norm(WeightId),
    /// x is [`Tensor::Part`]: split attention's partials over `splits` chunks, combined.
    Combine {
        splits: u32,
    },
}

/// What a matvec does to its sums before storing them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    None,
    /// Adds the tensor's matching element: the residual connection.
    Add(Tensor),
    /// W's rows are gate/up pairs; stores silu(gate) · up, half as many rows.
    Swiglu,
    /// W is the stacked Q/K/V: rope on q (into y, [`Tensor::QRot`]) and k, and k and v
    /// stored in the layer's caches at the step's position.
    RopeStore {
        layer: u32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    Embed {
        table: WeightId,
    },
    /// `y = x·Wᵀ` for `tokens` rows of x; W has `rows` rows. The prologue and epilogue run
    /// inside the matvec, not as nodes.
    Matvec {
        w: WeightId,
        rows: u32,
        x: Tensor,
        y: Tensor,
        tokens: u32,
        prologue: Prologue,
        epilogue: Epilogue,
    },
    /// Attention of [`Tensor::QRot`] against the layer's caches, the keys split over
    /// `splits` workgroups per head, into [`Tensor::Part`].
    AttnSplit {
        layer: u32,
        splits: u32,
    },
    /// Attention of a prompt step's [`Tensor::QRot`] against the layer's caches, a block of
    /// query tokens per workgroup ([`trine_ops::attention_flash`]), the keys in `splits`
    /// chunks, into [`Tensor::Part`].
    AttnFlash {
        layer: u32,
        /// On matrix tiles ([`trine_ops::attention_flash_tiles`]) where the device has them.
        tiles: bool,
        /// Into [`Tensor::Part`] for a combine to follow, or (one split) the attention itself
        /// into [`Tensor::Combined`].
        out: FlashOut,
        splits: u32,
    },
    /// rms_norm of `tokens` rows of `x` scaled by weight `g`, into [`Tensor::Normed`].
    RmsNorm {
        x: Tensor,
        g: WeightId,
        tokens: u32,
    },
    /// Attention's partials over `splits` chunks combined into [`Tensor::Combined`].
    Combine {
        splits: u32,
    },
    /// SwiGLU of [`Tensor::Raw`]'s gate/up pairs into [`Tensor::Act`].
    SwigluPairs,
    /// Rope on the q and k heads of [`Tensor::Raw`] (the stacked QKV product) into
    /// [`Tensor::QRot`], k and v stored in the layer's caches.
    RopeStore {
        layer: u32,
    },
    /// `tokens` rows of `x` (`cols` wide) quantized into [`Tensor::XqWords`], `XqScales`,
    /// `XqSums`.
    Quantize {
        x: Tensor,
        cols: u32,
        tokens: u32,
    },
    /// `y = x·Wᵀ` for `tokens` rows of x quantized ([`Op::Quantize`]) and W interleaved
    /// ([`Tensor::Interleaved`]), plus `add` where given: the CPU's product on packed 8-bit
    /// dot products ([`trine_ops::matvec_q8_rows`]).
    MatvecQ8 {
        w: WeightId,
        rows: u32,
        cols: u32,
        y: Tensor,
        add: Option<Tensor>,
        tokens: u32,
    },
    /// `y = x·Wᵀ` for `tokens` rows of float x and W as stored ([`Tensor::Weight`]), plus
    /// `add` where given, or with `swiglu` SwiGLU of each pair of rows (`rows / 2` wide): a
    /// prompt's product on matrix units ([`trine_ops::matmul_tiles`]).
    MatmulTiles {
        w: WeightId,
        rows: u32,
        cols: u32,
        x: Tensor,
        y: Tensor,
        add: Option<Tensor>,
        swiglu: bool,
        tokens: u32,
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
                let n = match epilogue {
                    Epilogue::Swiglu => rows / 2,
                    Epilogue::RopeStore { .. } => c.n_embd,
                    Epilogue::None | Epilogue::Add(_) => rows,
                };
                (y, 0..tokens as usize * n as usize)
            }
            Op::AttnSplit { splits, .. } => {
                rows(Tensor::Part, c.n_head * splits * (c.head_dim() + 2))
            }
            Op::AttnFlash {
                out: FlashOut::Part | FlashOut::Chunks,
                splits,
                ..
            } => rows(Tensor::Part, c.n_head * splits * (c.head_dim() + 2)),
            Op::AttnFlash {
                out: FlashOut::Normalized,
                ..
            } => rows(Tensor::Combined, c.n_embd),
            Op::RmsNorm { tokens, .. } => (Tensor::Normed, 0..(tokens * c.n_embd) as usize),
            Op::Combine { .. } => rows(Tensor::Combined, c.n_embd),
            Op::SwigluPairs => rows(Tensor::Act, c.n_ff),
            Op::RopeStore { .. } => rows(Tensor::QRot, c.n_embd),
            // The scales stand for the codes, which are not floats.
            Op::Quantize { cols, tokens, .. } => {
                (Tensor::XqScales, 0..(tokens * cols / 32) as usize)
            }
            Op::MatvecQ8 {
                y, rows, tokens, ..
            }
            | Op::MatmulTiles {
                y,
                rows,
                tokens,
                swiglu: false,
                ..
            } => (y, 0..(tokens * rows) as usize),
            Op::MatmulTiles {
                y,
                rows,
                tokens,
                swiglu: true,
                ..
            } => (y, 0..(tokens * rows / 2) as usize),
            Op::PickLast => (Tensor::Last, 0..c.n_embd as usize),
            Op::Argmax => (Tensor::Token, 0..1),
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

/// Keys per chunk of a prompt's flash attention: a query block's keys are walked one block
/// after another, so the last block of a 512-token prompt was a chain of 16 blocks of 32 keys
/// in one workgroup, and the chunks cut it to 4.
pub const FLASH_SPLIT_KEYS: u32 = 128;

/// The most chunks a prompt's flash attention takes ([`Tensor::Part`] holds that many per
/// token and head).
pub const MAX_FLASH_SPLITS: u32 = 4;

/// The chunks of a `tokens`-token prompt step's flash attention where the device takes them
/// ([`crate::kernels::chunked_flash`]): one per [`FLASH_SPLIT_KEYS`] tokens, at most
/// [`MAX_FLASH_SPLITS`]. With one, flash attention can write the attention itself and no
/// combine follows.
pub fn flash_splits(tokens: u32) -> u32 {
    tokens.div_ceil(FLASH_SPLIT_KEYS).clamp(1, MAX_FLASH_SPLITS)
}

/// Prompt step sizes up to `max_batch` whose graphs hold between them every kernel a prompt
/// step of up to `max_batch` tokens runs: the largest size of each chunk count, which decides
/// the combine kernel (its chunks are a compile-time constant) and whether there is one.
pub fn prompt_sizes(max_batch: u32) -> Vec<u32> {
    (1..flash_splits(max_batch))
        .map(|s| s * FLASH_SPLIT_KEYS)
        .chain([max_batch])
        .collect()
}

/// Whether a step's attention is [`Op::AttnFlash`]: prompt steps on a GPU, for heads it
/// takes. On an H100 a SmolLM2 pp512 spent 43% (CUDA) and 61% (Vulkan) of its time in the
/// one-workgroup-per-token kernel it replaces (2026-11-25). CPUs keep that kernel, which
/// their lowering vectorises across keys.
pub fn uses_flash_attention(c: &LlamaConfig, tokens: u32, gpu: bool) -> bool {
    gpu && tokens > 1 && trine_ops::attention_flash::supports(c.head_dim())
}

/// Whether a prompt step on matrix tiles multiplies weight `id` so ([`Op::MatmulTiles`]):
/// rows of whole blocks of [`trine_ops::matmul_tiles::BK`].
fn takes_tiles(w: &Weights, id: WeightId) -> bool {
    let t = &w.tensors[id];
    trine_ops::matmul_tiles::check(t.rows, t.cols, 1).is_ok()
}

/// The product of weight `id` with `tokens` rows of float `x` on matrix tiles into `y`, with
/// the residual `add` or (`swiglu`) SwiGLU of its row pairs.
fn matmul_tiles(
    w: &Weights,
    id: WeightId,
    (x, y): (Tensor, Tensor),
    (add, swiglu): (Option<Tensor>, bool),
    tokens: u32,
) -> Op {
    Op::MatmulTiles {
        w: id,
        rows: w.tensors[id].rows,
        cols: w.tensors[id].cols,
        x,
        y,
        add,
        swiglu,
        tokens,
    }
}

/// Whether a step on quantized x multiplies weight `id` so ([`Op::MatvecQ8`]): the types
/// that product takes, in whole groups of its rows.
fn takes_q8(w: &Weights, id: WeightId) -> bool {
    let t = &w.tensors[id];
    matches!(t.ty, WeightType::Q8_0 | WeightType::Q4_0 | WeightType::Q4_1)
        && t.rows.is_multiple_of(matvec_q8_rows::LANES)
        && t.cols.is_multiple_of(32)
}

/// The product of weight `id` with `tokens` rows of quantized x ([`Op::Quantize`]) into `y`.
fn q8_product(w: &Weights, id: WeightId, y: Tensor, add: Option<Tensor>, tokens: u32) -> Op {
    Op::MatvecQ8 {
        w: id,
        rows: w.tensors[id].rows,
        cols: w.tensors[id].cols,
        y,
        add,
        tokens,
    }
}

/// `tokens` rows of `x` quantized for a product with weight `id`.
fn quantize(w: &Weights, x: Tensor, id: WeightId, tokens: u32) -> Op {
    Op::Quantize {
        x,
        cols: w.tensors[id].cols,
        tokens,
    }
}

/// The nodes of one step: five per layer (a fused QKV projection with the attention norm
/// before it and rope with the KV-cache store after it; split attention; the output
/// projection combining the splits and adding the residual; gate and up with the FFN norm and
/// SwiGLU; the down projection adding the residual), then the output head with the final norm,
/// and the greedy token. With `q8` (`EngineOptions::takes_quantized_x`), every product whose
/// weights allow ([`takes_q8`]) multiplies x quantized by a node before it ([`Op::Quantize`]),
/// and what the float products fuse runs as nodes of its own: the rms_norm before ([`Op::RmsNorm`]), the
/// attention combine before ([`Op::Combine`]), SwiGLU ([`Op::SwigluPairs`]) or rope with the
/// KV-cache store ([`Op::RopeStore`]) after; the residual add stays in the product. With
/// `tiles`, a prompt step's products run on matrix tiles ([`Op::MatmulTiles`]) on float x,
/// with the same nodes around them and no quantizing, but SwiGLU in gate/up's epilogue. With
/// `chunks`, a prompt step's flash attention cuts the keys into [`flash_splits`] chunks.
pub fn build(
    c: &LlamaConfig,
    w: &Weights,
    s: Step,
    gpu: bool,
    q8: bool,
    (tiles, chunks): (bool, bool),
) -> Vec<Node> {
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
    let flash = uses_flash_attention(c, t, gpu);
    // The chunks attention cuts the keys into, which its combine puts together.
    let splits = match (flash, chunks) {
        (true, true) => flash_splits(t),
        (true, false) => 1,
        (false, _) => attention_splits(t, gpu),
    };
    for (l, lw) in w.layers.iter().enumerate() {
        let l = l as u32;
        let at = Some(l);
        let mv = |id: WeightId, x, y, prologue, epilogue| Op::Matvec {
            w: id,
            rows: w.tensors[id].rows,
            x,
            y,
            tokens: t,
            prologue,
            epilogue,
        };
        let tiled = |id: WeightId| tiles && t > 1 && takes_tiles(w, id);
        // A product on quantized x has a node quantizing x before it; one on matrix tiles
        // takes x as it is.
        let product = |id: WeightId, x, y, add, labels: [&'static str; 2]| {
            if tiled(id) {
                vec![(matmul_tiles(w, id, (x, y), (add, false), t), labels[1])]
            } else {
                vec![
                    (quantize(w, x, id, t), labels[0]),
                    (q8_product(w, id, y, add, t), labels[1]),
                ]
            }
        };
        let q8 = |id| tiled(id) || (q8 && takes_q8(w, id));
        if q8(lw.wqkv) {
            let g = lw.attn_norm;
            node(Op::RmsNorm { x, g, tokens: t }, "attn_norm", at);
            let labels = ["attn_qkv_x", "attn_qkv"];
            for (op, label) in product(lw.wqkv, Tensor::Normed, Tensor::Raw, None, labels) {
                node(op, label, at);
            }
            node(Op::RopeStore { layer: l }, "rope_store", at);
        } else {
            let qkv = mv(
                lw.wqkv,
                x,
                Tensor::QRot,
                Prologue::Norm(lw.attn_norm),
                Epilogue::RopeStore { layer: l },
            );
            node(qkv, "attn_qkv_rope", at);
        }
        // A product that reads the attention itself takes it from one-split flash attention
        // directly, without the combine's dispatch.
        let normalized = flash && splits == 1 && q8(lw.wo);
        let attention = if flash {
            Op::AttnFlash {
                layer: l,
                tiles: tiles && trine_ops::attention_flash_tiles::supports(c.head_dim()),
                out: if normalized {
                    FlashOut::Normalized
                } else {
                    FlashOut::Part.for_splits(splits)
                },
                splits,
            }
        } else {
            Op::AttnSplit { layer: l, splits }
        };
        node(attention, "attention", at);
        if q8(lw.wo) {
            if !normalized {
                node(Op::Combine { splits }, "attn_combine", at);
            }
            let labels = ["attn_output_x", "attn_output"];
            for (op, label) in product(lw.wo, Tensor::Combined, mid, Some(x), labels) {
                node(op, label, at);
            }
        } else {
            let combine = Prologue::Combine { splits };
            let wo = mv(lw.wo, Tensor::Part, mid, combine, Epilogue::Add(x));
            node(wo, "attn_output", at);
        }
        if q8(lw.w_gate_up) {
            let g = lw.ffn_norm;
            node(
                Op::RmsNorm {
                    x: mid,
                    g,
                    tokens: t,
                },
                "ffn_norm",
                at,
            );
            if tiled(lw.w_gate_up) {
                // SwiGLU in the product's epilogue: no pass of its own over gate and up.
                let io = (Tensor::Normed, Tensor::Act);
                let up = matmul_tiles(w, lw.w_gate_up, io, (None, true), t);
                node(up, "ffn_gate_up", at);
            } else {
                let labels = ["ffn_gate_up_x", "ffn_gate_up"];
                let (x, y) = (Tensor::Normed, Tensor::Raw);
                for (op, label) in product(lw.w_gate_up, x, y, None, labels) {
                    node(op, label, at);
                }
                node(Op::SwigluPairs, "ffn_swiglu", at);
            }
        } else {
            let up = mv(
                lw.w_gate_up,
                mid,
                Tensor::Act,
                Prologue::Norm(lw.ffn_norm),
                Epilogue::Swiglu,
            );
            node(up, "ffn_gate_up", at);
        }
        if q8(lw.w_down) {
            let labels = ["ffn_down_x", "ffn_down"];
            for (op, label) in product(lw.w_down, Tensor::Act, x, Some(mid), labels) {
                node(op, label, at);
            }
        } else {
            let down = mv(
                lw.w_down,
                Tensor::Act,
                x,
                Prologue::None,
                Epilogue::Add(mid),
            );
            node(down, "ffn_down", at);
        }
    }
    // One token's row is the residual stream itself; a prompt's last row is copied out.
    let last = if t == 1 {
        x
    } else {
        node(Op::PickLast, "last_token", None);
        Tensor::Last
    };
    if q8 && takes_q8(w, w.output) {
        let (g, tokens) = (w.output_norm, 1);
        node(Op::RmsNorm { x: last, g, tokens }, "output_norm", None);
        node(
            quantize(w, Tensor::Normed, w.output, tokens),
            "output_x",
            None,
        );
        let head = q8_product(w, w.output, Tensor::Logits, None, tokens);
        node(head, "output", None);
    } else {
        node(
            Op::Matvec {
                w: w.output,
                rows: c.vocab,
                x: last,
                y: Tensor::Logits,
                tokens: 1,
                prologue: Prologue::Norm(w.output_norm),
                epilogue: Epilogue::None,
            },
            "output",
            None,
        );
    }
    node(Op::Argmax, "argmax", None);
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every prompt step size up to `max_batch` cuts its attention into a number of chunks
    /// that one of [`prompt_sizes`] does, so the executor compiles its combine.
    #[test]
    fn prompt_sizes_cover_every_chunk_count() {
        for max_batch in [1, 2, 100, 128, 129, 300, 512, 2048] {
            let sizes = prompt_sizes(max_batch);
            assert!(
                sizes.iter().all(|&t| t <= max_batch),
                "{max_batch}: {sizes:?}"
            );
            assert_eq!(sizes.last(), Some(&max_batch), "{max_batch}: {sizes:?}");
            for t in 2..=max_batch {
                assert!(
                    sizes.iter().any(|&s| flash_splits(s) == flash_splits(t)),
                    "{max_batch}: {t} tokens take {} chunks, none of {sizes:?} does",
                    flash_splits(t)
                );
            }
        }
    }
}

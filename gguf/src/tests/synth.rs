//! Synthetic models: the tensor table and metadata they copy, and weights that decode to the
//! intended distributions.

use super::{small_writer, Raw};
use crate::assets::{for_test, SMOLLM2};
use crate::quant::dequantize;
use crate::synth::{synth_like, synth_smollm2_135m};
use crate::{Gguf, GgufWriter, TensorInfo, TensorType, Value};

/// A tensor's values, decoded by the plain-Rust dequantizer (independent of the encoder).
fn decode(g: &Gguf, t: &TensorInfo) -> Vec<f64> {
    let bytes = g.tensor_data(t);
    let n = t.n_elements as usize;
    let Some(wt) = t.ty.weight_type() else {
        return bytes
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f64())
            .collect();
    };
    dequantize(wt, bytes, n).unwrap()
}

/// Checks every tensor of `g`: finite; norm weights within 1 ± 0.02 (plus rounding), other
/// weights within the uniform's half-width 0.0346 (plus quantization error, which for 4-bit
/// blocks reaches a step of 0.07/15) with a standard deviation near 0.02.
fn check_weights(g: &Gguf) {
    for t in g.tensors() {
        let v = decode(g, t);
        assert_eq!(v.len() as u64, t.n_elements, "{}", t.name);
        assert!(v.iter().all(|x| x.is_finite()), "{}", t.name);
        if t.name.ends_with("norm.weight") {
            assert!(v.iter().all(|x| (x - 1.0).abs() <= 0.021), "{}", t.name);
            continue;
        }
        if t.name.ends_with(".bias") {
            assert!(v.iter().all(|x| x.abs() <= 0.5), "{}", t.name);
            continue;
        }
        assert!(v.iter().all(|x| x.abs() <= 0.04), "{}", t.name);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
        if v.len() >= 4096 {
            assert!(mean.abs() < 0.002, "{}: mean {mean}", t.name);
            assert!((0.018..0.022).contains(&std), "{}: std {std}", t.name);
        }
    }
}

fn reread(w: &GgufWriter) -> Gguf {
    Gguf::from_bytes(w.to_bytes()).unwrap()
}

/// A small model with a tensor of every type.
fn every_type() -> Gguf {
    let mut w = small_writer();
    for ty in TensorType::ALL {
        // Rows of one 256-element super-block, a whole number of every type's blocks.
        let dims = [256u64, 20];
        let bytes = vec![0; (256 * 20 / ty.block_elems() * ty.block_bytes()) as usize];
        w.add_tensor(format!("m.{ty}"), &dims, ty, bytes).unwrap();
    }
    w.add_tensor("out_norm.weight", &[64], TensorType::F32, vec![0; 256])
        .unwrap();
    reread(&w)
}

#[test]
fn synth_like_is_deterministic_and_tame_for_every_type() {
    let src = every_type();
    let a = synth_like(&src, 7).unwrap().to_bytes();
    assert_eq!(a, synth_like(&src, 7).unwrap().to_bytes());
    assert_ne!(a, synth_like(&src, 8).unwrap().to_bytes());
    let g = Gguf::from_bytes(a).unwrap();
    assert_eq!(g.metadata(), src.metadata());
    assert_eq!(g.tensors(), src.tensors());
    check_weights(&g);
}

#[test]
fn synth_like_of_the_real_file() {
    let Some(path) = for_test(SMOLLM2) else {
        return;
    };
    let real = Gguf::open(&path).unwrap();
    let g = reread(&synth_like(&real, 1).unwrap());
    assert_eq!(g.metadata(), real.metadata());
    assert_eq!(g.tensors(), real.tensors());
    check_weights(&g);
}

#[test]
fn smollm2_preset() {
    let g = reread(&synth_smollm2_135m(1).unwrap());
    // From gguf-py on the real file: len(r.tensors), sum(x.n_bytes for x in r.tensors)
    //   -> 272 96576768
    assert_eq!(g.tensors().len(), 272);
    let total: u64 = g.tensors().iter().map(|t| t.n_bytes).sum();
    assert_eq!(total, 96_576_768);
    check_weights(&g);
    let tokens = g.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 49_152);
    let types = g.get_i32_array("tokenizer.ggml.token_type").unwrap();
    assert_eq!(types.len(), 49_152);
    // GPT-2's byte alphabet follows the 17 special tokens: '!' is byte 0x21, 'Ā' byte 0x00,
    // 'Ġ' (a space) byte 0x20, 'Ń' byte 0xad.
    assert_eq!(
        (tokens[17], tokens[17 + 188], tokens[17 + 188 + 32]),
        ("!", "Ā", "Ġ")
    );
    assert_eq!(tokens[17 + 255], "Ń");
    assert_eq!(tokens[17 + 256], "<synth_273>");
    assert!(g.get_str_array("tokenizer.ggml.merges").unwrap().is_empty());

    let Some(path) = for_test(SMOLLM2) else {
        return;
    };
    let real = Gguf::open(&path).unwrap();
    let table = |g: &Gguf| -> Vec<(String, Vec<u64>, TensorType, u64)> {
        g.tensors()
            .iter()
            .map(|t| (t.name.clone(), t.dims.clone(), t.ty, t.offset))
            .collect()
    };
    assert_eq!(table(&g), table(&real));
    for key in [
        "general.architecture",
        "general.file_type",
        "general.quantization_version",
        "llama.block_count",
        "llama.context_length",
        "llama.embedding_length",
        "llama.feed_forward_length",
        "llama.attention.head_count",
        "llama.attention.head_count_kv",
        "llama.rope.freq_base",
        "llama.attention.layer_norm_rms_epsilon",
        "llama.vocab_size",
        "llama.rope.dimension_count",
        "tokenizer.ggml.model",
        "tokenizer.ggml.pre",
        "tokenizer.ggml.add_bos_token",
        "tokenizer.ggml.add_space_prefix",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.padding_token_id",
        "tokenizer.chat_template",
    ] {
        assert_eq!(g.get(key), real.get(key), "{key}");
    }
    let real_tokens = real.get_str_array("tokenizer.ggml.tokens").unwrap();
    let real_types = real.get_i32_array("tokenizer.ggml.token_type").unwrap();
    assert_eq!(tokens[..17], real_tokens[..17]);
    assert_eq!(types[..17], real_types[..17]);
    assert_eq!(types[17..252], real_types[17..252]);
    // The real vocabulary starts with 235 of the 256 byte tokens (bytes that never occur in
    // UTF-8 are left out), in the same order as the preset's complete alphabet.
    let mut alphabet = tokens[17..273].iter();
    for t in &real_tokens[17..252] {
        assert!(alphabet.any(|a| a == t), "byte token {t:?} out of order");
    }
}

#[test]
fn synth_like_refuses_nothing_a_valid_file_holds() {
    // A file with no tensors and an empty array still copies.
    let src = Gguf::from_bytes(
        Raw::new(3, 0, 1)
            .kv("tokenizer.ggml.merges", &Value::Array(vec![]))
            .0,
    )
    .unwrap();
    let g = reread(&synth_like(&src, 0).unwrap());
    assert_eq!(g.metadata(), src.metadata());
}

/// Q4_K_M as llama.cpp lays it out: Q6_K for the output head and for the value and FFN-down
/// projections of the first and last eighth of the layers and every third between, Q4_K for
/// the rest; rows that are not whole 256-element blocks fall back to Q5_0 and Q8_0.
#[test]
fn the_q4_k_m_mix_gives_llama_cpps_types() {
    use crate::synth::{synth_llama, Mix, SynthShape};
    let shape = SynthShape {
        n_embd: 256,
        n_ff: 96,
        n_layer: 8,
        output: Some(TensorType::Q8_0),
        mix: Mix::Q4KM,
        ..SynthShape::TINY
    };
    let g = reread(&synth_llama(shape, 3).unwrap());
    let ty = |name: &str| g.tensors().iter().find(|t| t.name == name).unwrap().ty;
    assert_eq!(ty("output.weight"), TensorType::Q6_K);
    assert_eq!(ty("token_embd.weight"), TensorType::Q4_K);
    for (layer, more) in [
        (0, true),
        (1, false),
        (2, false),
        (3, true),
        (6, true),
        (7, true),
    ] {
        let v = ty(&format!("blk.{layer}.attn_v.weight"));
        assert_eq!(v == TensorType::Q6_K, more, "layer {layer}");
        assert_eq!(ty(&format!("blk.{layer}.attn_q.weight")), TensorType::Q4_K);
        // The FFN's 96-element rows are not whole blocks.
        let down = if more {
            TensorType::Q8_0
        } else {
            TensorType::Q5_0
        };
        assert_eq!(
            ty(&format!("blk.{layer}.ffn_down.weight")),
            down,
            "layer {layer}"
        );
    }
    assert_eq!(
        g.metadata()
            .iter()
            .find(|(k, _)| k == "general.file_type")
            .map(|(_, v)| v.clone()),
        Some(crate::Value::U32(15))
    );
}

/// Llama 3.2 1B's `rope_freqs.weight` (heads of 64, θ 500000, factor 32, low 1, high 4, trained
/// for 8192): 1 for the 15 pairs whose wavelength is under 2048, 32 for the 14 over 8192, and
/// the three between as the converter's float32 arithmetic gives them (recomputed with numpy
/// float32 from `convert_hf_to_gguf.py`'s formula: 1.6513293, 3.2922628, 9.666731).
#[test]
fn llama_3_2_rope_freqs_are_the_converters() {
    use crate::synth::rope::Llama3Rope;
    let f = Llama3Rope::LLAMA_3_2.factors(64);
    assert_eq!(f.len(), 32);
    assert!(f[..15].iter().all(|&v| v == 1.0), "{f:?}");
    assert!(f[18..].iter().all(|&v| v == 32.0), "{f:?}");
    for (got, want) in f[15..18].iter().zip([1.6513293f32, 3.2922628, 9.666731]) {
        assert!((got / want - 1.0).abs() < 1e-6, "{f:?}");
    }
    // Llama 3.1's factor 8 leaves the same pairs alone and divides the same by 8.
    let f = Llama3Rope::LLAMA_3_1.factors(64);
    assert!(f[..15].iter().all(|&v| v == 1.0) && f[18..].iter().all(|&v| v == 8.0));
}

/// The Llama 3.2 preset's file carries the factors as an F32 tensor of head_dim/2 and its
/// base of 500000.
#[test]
fn llama3_rope_is_written_as_rope_freqs() {
    use crate::synth::rope::{Llama3Rope, ROPE_FREQS};
    use crate::synth::{synth_llama, SynthShape};
    let mut w = synth_llama(SynthShape::TINY, 1).unwrap();
    Llama3Rope::LLAMA_3_2.apply(&mut w, 16).unwrap();
    let g = reread(&w);
    let t = g.tensor(ROPE_FREQS).unwrap();
    assert_eq!((t.ty, t.dims.clone()), (TensorType::F32, vec![8]));
    let bytes = g.tensor_data(t);
    let last = f32::from_le_bytes(bytes[28..32].try_into().unwrap());
    assert_eq!(last, 32.0);
    assert_eq!(g.get_f32("llama.rope.freq_base").unwrap(), 500_000.0);
}

/// `synth_like` of a Llama 3.2 file keeps its rope scaling: `rope_freqs.weight` is copied, not
/// drawn at random like the weights (random factors would be negative half the time).
#[test]
fn synth_like_copies_rope_freqs() {
    use crate::synth::rope::{Llama3Rope, ROPE_FREQS};
    use crate::synth::{synth_llama, SynthShape};
    let mut w = synth_llama(SynthShape::TINY, 1).unwrap();
    Llama3Rope::LLAMA_3_2.apply(&mut w, 16).unwrap();
    let src = reread(&w);
    let copy = reread(&synth_like(&src, 9).unwrap());
    let data = |g: &Gguf| g.tensor_data(g.tensor(ROPE_FREQS).unwrap()).to_vec();
    assert_eq!(data(&copy), data(&src));
    let embd = |g: &Gguf| {
        g.tensor_data(g.tensor("token_embd.weight").unwrap())
            .to_vec()
    };
    assert_ne!(embd(&copy), embd(&src));
}

/// The Qwen layouts: the family's architecture and key prefix, the head size where the file
/// gives it, the tensors llama.cpp's qwen2 and qwen3 loaders read (Q, K, V biases; per-head
/// q and k norms) with their dims, Qwen's pre-tokenizer and ChatML template.
#[test]
fn qwen_layouts_carry_their_tensors_and_keys() {
    use crate::synth::{synth_llama, SynthShape};
    let dims = |g: &Gguf, name: &str| g.tensor(name).map(|t| t.dims.clone());
    for (shape, arch) in [
        (SynthShape::TINY_QWEN2, "qwen2"),
        (SynthShape::TINY_QWEN3, "qwen3"),
    ] {
        let g = reread(&synth_llama(shape, 5).unwrap());
        check_weights(&g);
        assert_eq!(g.get_str("general.architecture").unwrap(), arch);
        assert_eq!(g.get_u32(&format!("{arch}.embedding_length")).unwrap(), 64);
        assert!(g.get("llama.embedding_length").is_none());
        assert_eq!(g.get_str("tokenizer.ggml.pre").unwrap(), "qwen2");
        let template = g.get_str("tokenizer.chat_template").unwrap();
        assert!(template.contains("<|im_start|>assistant\\n"), "{arch}");
        // 9 Llama tensors a layer, and the family's own.
        let own = if arch == "qwen2" { 3 } else { 2 };
        assert_eq!(g.tensors().len(), 2 + 2 * (9 + own), "{arch}");
    }
    let q2 = reread(&synth_llama(SynthShape::TINY_QWEN2, 5).unwrap());
    assert_eq!(dims(&q2, "blk.1.attn_q.bias"), Some(vec![64]));
    assert_eq!(dims(&q2, "blk.1.attn_k.bias"), Some(vec![32]));
    assert_eq!(dims(&q2, "blk.1.attn_v.bias"), Some(vec![32]));
    assert!(q2.get("qwen2.attention.key_length").is_none());
    // Qwen3: 4 heads of 32 over a stream of 64, 2 of keys and values.
    let q3 = reread(&synth_llama(SynthShape::TINY_QWEN3, 5).unwrap());
    assert_eq!(q3.get_u32("qwen3.attention.key_length").unwrap(), 32);
    assert_eq!(q3.get_u32("qwen3.attention.value_length").unwrap(), 32);
    assert_eq!(dims(&q3, "blk.0.attn_q.weight"), Some(vec![64, 128]));
    assert_eq!(dims(&q3, "blk.0.attn_k.weight"), Some(vec![64, 64]));
    assert_eq!(dims(&q3, "blk.0.attn_output.weight"), Some(vec![128, 64]));
    assert_eq!(dims(&q3, "blk.0.attn_q_norm.weight"), Some(vec![32]));
    assert_eq!(dims(&q3, "blk.0.attn_k_norm.weight"), Some(vec![32]));
    assert!(q3.tensor("blk.0.attn_q.bias").is_none());
}

/// The Gemma 3 layout holds what llama.cpp's converter wrote into the real Gemma 3 270M file:
/// the same tensors in each block (q/k head norms, post-attention and post-FFN norms), the
/// same global tensors, and the same `gemma3.*` keys, sliding window included.
#[test]
fn gemma3_layout_has_the_real_files_names() {
    use crate::assets::GEMMA3_270M;
    use crate::synth::{synth_llama, SynthShape};
    use std::collections::BTreeSet;
    let Some(path) = for_test(GEMMA3_270M) else {
        return;
    };
    let real = Gguf::open(&path).unwrap();
    let shape = SynthShape {
        n_embd: 64,
        n_ff: 128,
        n_layer: 2,
        head_dim: Some(32),
        vocab: 320,
        ..SynthShape::GEMMA_3_1B
    };
    let synth = reread(&synth_llama(shape, 1).unwrap());
    let names = |g: &Gguf| -> BTreeSet<String> {
        g.tensors()
            .iter()
            .filter(|t| !t.name.starts_with("blk.") || t.name.starts_with("blk.0."))
            .map(|t| t.name.clone())
            .collect()
    };
    assert_eq!(names(&synth), names(&real));
    let keys = |g: &Gguf| -> BTreeSet<String> {
        g.metadata()
            .iter()
            .map(|(k, _)| k.clone())
            .filter(|k| k.starts_with("gemma3."))
            .collect()
    };
    assert_eq!(keys(&synth), keys(&real));
    let window = |g: &Gguf| g.get_u32("gemma3.attention.sliding_window").unwrap();
    assert_eq!(window(&synth), window(&real));
}

/// Qwen3-MoE's layouts: the tiny file's router and stacked experts in place of the dense
/// feed-forward tensors, with the expert keys; Qwen3-30B-A3B's table and keys as its Q4_K_M
/// file has them (not written: 17 GB).
#[test]
fn qwen3moe_layouts_carry_their_experts() {
    use crate::synth::{synth_llama, SynthShape};
    let g = reread(&synth_llama(SynthShape::TINY_QWEN3_MOE, 5).unwrap());
    check_weights(&g);
    assert_eq!(g.get_str("general.architecture").unwrap(), "qwen3moe");
    let dims = |name: &str| g.tensor(name).map(|t| t.dims.clone());
    assert_eq!(dims("blk.1.ffn_gate_inp.weight"), Some(vec![64, 8]));
    assert_eq!(dims("blk.1.ffn_gate_exps.weight"), Some(vec![64, 32, 8]));
    assert_eq!(dims("blk.1.ffn_up_exps.weight"), Some(vec![64, 32, 8]));
    assert_eq!(dims("blk.1.ffn_down_exps.weight"), Some(vec![32, 64, 8]));
    assert!(dims("blk.0.ffn_gate.weight").is_none() && dims("blk.0.ffn_down.weight").is_none());
    assert_eq!(g.get_u32("qwen3moe.expert_count").unwrap(), 8);
    assert_eq!(g.get_u32("qwen3moe.expert_used_count").unwrap(), 2);
    assert_eq!(
        g.get_u32("qwen3moe.expert_feed_forward_length").unwrap(),
        32
    );

    let big = SynthShape::QWEN3_30B_A3B;
    let keys: std::collections::HashMap<String, Value> = big.metadata().into_iter().collect();
    let u = |k: &str| match keys.get(&format!("qwen3moe.{k}")) {
        Some(Value::U32(v)) => *v,
        v => panic!("{k}: {v:?}"),
    };
    let got = [
        "block_count",
        "embedding_length",
        "feed_forward_length",
        "attention.head_count",
        "attention.head_count_kv",
        "attention.key_length",
        "attention.value_length",
        "expert_count",
        "expert_used_count",
        "expert_feed_forward_length",
    ]
    .map(u);
    assert_eq!(got, [48, 2048, 6144, 32, 4, 128, 128, 128, 8, 768]);
    let table = big.tensor_table();
    // 12 tensors a layer (Q, K, V and the output projection, the q/k norms, two norms, the
    // router and the three experts' tensors), the embedding, the final norm, the output head.
    assert_eq!(table.len(), 3 + 48 * 12);
    let find = |name: &str| {
        let (_, dims, ty) = table.iter().find(|t| t.0 == name).unwrap();
        (dims.clone(), *ty)
    };
    assert_eq!(
        find("token_embd.weight"),
        (vec![2048, 151_936], TensorType::Q4_K)
    );
    assert_eq!(
        find("output.weight"),
        (vec![2048, 151_936], TensorType::Q6_K)
    );
    assert_eq!(
        find("blk.47.ffn_gate_inp.weight"),
        (vec![2048, 128], TensorType::F32)
    );
    assert_eq!(
        find("blk.47.attn_q.weight"),
        (vec![2048, 4096], TensorType::Q4_K)
    );
    assert_eq!(
        find("blk.47.attn_k.weight"),
        (vec![2048, 512], TensorType::Q4_K)
    );
    assert_eq!(
        find("blk.47.attn_output.weight"),
        (vec![4096, 2048], TensorType::Q4_K)
    );
    let exps = |l: u32, p: &str| find(&format!("blk.{l}.ffn_{p}_exps.weight"));
    assert_eq!(exps(47, "gate"), (vec![2048, 768, 128], TensorType::Q4_K));
    assert_eq!(exps(47, "up"), (vec![2048, 768, 128], TensorType::Q4_K));
    // The layers Q4_K_M gives more bits: the first and last eighth, every third between.
    assert_eq!(exps(0, "down"), (vec![768, 2048, 128], TensorType::Q6_K));
    assert_eq!(exps(6, "down").1, TensorType::Q4_K);
    assert_eq!(exps(8, "down").1, TensorType::Q6_K);
}

/// The tiny Qwen3-30B-A3B keeps the full layout's experts' types: Q4_K gate and up, and
/// `ffn_down_exps` Q4_K or Q6_K as Q4_K_M gives the layer bits.
#[test]
fn the_tiny_qwen3_30b_a3b_has_k_quant_experts() {
    use crate::synth::{synth_llama, SynthShape};
    let g = reread(&synth_llama(SynthShape::TINY_QWEN3_30B_A3B, 5).unwrap());
    check_weights(&g);
    let t = |name: &str| {
        let t = g.tensor(name).unwrap();
        (t.dims.clone(), t.ty)
    };
    assert_eq!(
        t("blk.0.ffn_gate_exps.weight"),
        (vec![256, 256, 8], TensorType::Q4_K)
    );
    assert_eq!(t("blk.1.ffn_up_exps.weight").1, TensorType::Q4_K);
    assert_eq!(t("blk.0.ffn_down_exps.weight").1, TensorType::Q4_K);
    assert_eq!(t("blk.1.ffn_down_exps.weight").1, TensorType::Q6_K);
    assert_eq!(t("blk.1.ffn_gate_inp.weight").1, TensorType::F32);
}

/// The 7B/8B Qwen layouts, as their Q4_K_M files have them (not written: 4.7 and 5.0 GB):
/// Qwen2.5-7B's QKV biases over 28 heads of 128 and 4 of keys and values, its untied Q6_K
/// output head; Qwen3-8B's per-head q/k norms and explicit head size; the Q4_K_M recipe's
/// Q6_K value and down projections in the layers it gives more bits.
#[test]
fn qwen_7b_and_8b_layouts_carry_their_tables() {
    use crate::synth::SynthShape;
    let find = |shape: SynthShape, name: &str| {
        let table = shape.tensor_table();
        table
            .iter()
            .find(|t| t.0 == name)
            .map(|(_, dims, ty)| (dims.clone(), *ty))
    };
    let q2 = SynthShape::QWEN2_5_7B;
    assert_eq!(q2.tensor_table().len(), 2 + 1 + 28 * 12);
    assert_eq!(
        find(q2, "output.weight"),
        Some((vec![3584, 152_064], TensorType::Q6_K))
    );
    assert_eq!(
        find(q2, "blk.0.attn_k.weight"),
        Some((vec![3584, 512], TensorType::Q4_K))
    );
    assert_eq!(
        find(q2, "blk.27.attn_q.bias"),
        Some((vec![3584], TensorType::F32))
    );
    assert_eq!(
        find(q2, "blk.0.ffn_down.weight"),
        Some((vec![18944, 3584], TensorType::Q6_K))
    );
    let q3 = SynthShape::QWEN3_8B;
    assert_eq!(q3.tensor_table().len(), 2 + 1 + 36 * 11);
    assert_eq!(
        find(q3, "blk.35.attn_q.weight"),
        Some((vec![4096, 4096], TensorType::Q4_K))
    );
    assert_eq!(
        find(q3, "blk.0.attn_k_norm.weight"),
        Some((vec![128], TensorType::F32))
    );
    assert_eq!(
        find(q3, "blk.0.ffn_gate.weight"),
        Some((vec![4096, 12288], TensorType::Q4_K))
    );
    assert!(find(q3, "blk.0.attn_q.bias").is_none());
    let names: Vec<&str> = SynthShape::PRESETS.iter().map(|p| p.0).collect();
    assert!(names.contains(&"qwen2.5-7b") && names.contains(&"qwen3-8b"));
}

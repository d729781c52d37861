//! The metadata of the layouts whose files carry a SentencePiece vocabulary (`llama`
//! tokenizer model): Mistral 7B v0.3's and Phi-3.5-mini's, as their GGUF files hold them,
//! with a vocabulary of the same size and the same special tokens at the same ids. Its
//! pieces are byte fallbacks, the printable ASCII characters and a few words, scored so
//! that SentencePiece's merges are exercised; the rest is filler no text produces.

use super::{Family, SynthShape, Value};

/// llama.cpp's `llama_token_type` values.
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const NORMAL: i32 = 1;
const BYTE: i32 = 6;

/// Mistral v0.3's control tokens after `<unk>`, `<s>`, `</s>`; the full vocabulary names
/// the rest `[control_8]` (id 10) to `[control_768]` (id 770), before the bytes.
const MISTRAL_CONTROLS: [&str; 7] = [
    "[INST]",
    "[/INST]",
    "[TOOL_CALLS]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
];
const MISTRAL_FIRST_BYTE: u32 = 771;

/// Phi-3's tokens after the SentencePiece vocabulary of 32000 (the tiny layout puts them at
/// the end of its own).
const PHI3_ADDED: [&str; 11] = [
    "<|endoftext|>",
    "<|assistant|>",
    "<|placeholder1|>",
    "<|placeholder2|>",
    "<|placeholder3|>",
    "<|placeholder4|>",
    "<|system|>",
    "<|end|>",
    "<|placeholder5|>",
    "<|placeholder6|>",
    "<|user|>",
];
/// Phi-3.5-mini's vocabulary is 32064: the added tokens, then padding to a multiple of 64.
const PHI3_BASE: u32 = 32000;

const MISTRAL_TEMPLATE: &str = "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}";
const PHI3_TEMPLATE: &str = "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";

/// Words whose pieces (with and without the word-start mark) join the characters.
const WORDS: [&str; 16] = [
    "the", "of", "and", "is", "capital", "France", "Once", "upon", "time", "Hello", "world",
    "What", "in", "er", "on", "an",
];

/// The pieces after the bytes: `▁`, each printable character, then each word's prefixes of
/// two letters or more, marked `▁` and not, in order of preference.
fn pieces() -> Vec<String> {
    let mut out = vec!["▁".to_string()];
    out.extend(('!'..='~').map(String::from));
    for w in WORDS {
        for end in 2..=w.len() {
            for p in [format!("▁{}", &w[..end]), w[..end].to_string()] {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// Tokens, scores and types of a vocabulary of `n` entries.
fn vocabulary(family: Family, n: u32) -> (Vec<String>, Vec<f32>, Vec<i32>) {
    let mut v: Vec<(String, f32, i32)> = vec![
        ("<unk>".into(), 0.0, UNKNOWN),
        ("<s>".into(), 0.0, CONTROL),
        ("</s>".into(), 0.0, CONTROL),
    ];
    if family == Family::Mistral {
        v.extend(MISTRAL_CONTROLS.map(|s| (s.to_string(), 0.0, CONTROL)));
        if n > MISTRAL_FIRST_BYTE {
            let next = v.len() as u32;
            let name = |i: u32| format!("[control_{}]", i - 2);
            v.extend((next..MISTRAL_FIRST_BYTE).map(|i| (name(i), 0.0, CONTROL)));
        }
    }
    v.extend((0..=255u8).map(|b| (format!("<0x{b:02X}>"), 0.0, BYTE)));
    let scored = pieces().into_iter().enumerate();
    v.extend(scored.map(|(i, p)| (p, -(i as f32), NORMAL)));
    let added: &[&str] = if family == Family::Phi3 {
        &PHI3_ADDED
    } else {
        &[]
    };
    let base = if family == Family::Phi3 {
        phi3_endoftext(n)
    } else {
        n
    };
    let next = v.len() as u32;
    v.extend((next..base).map(|i| (format!("<synth_{i}>"), -1e4, NORMAL)));
    v.extend(added.iter().map(|s| (s.to_string(), 0.0, CONTROL)));
    let next = v.len() as u32;
    v.extend((next..n).map(|i| (format!("<|dummy_{i}|>"), 0.0, CONTROL)));
    let mut tokens = Vec::with_capacity(v.len());
    let mut scores = Vec::with_capacity(v.len());
    let mut types = Vec::with_capacity(v.len());
    for (t, s, ty) in v {
        tokens.push(t);
        scores.push(s);
        types.push(ty);
    }
    (tokens, scores, types)
}

/// Where Phi-3's added tokens start (`<|endoftext|>`, its eos) in a vocabulary of `n`:
/// 32000 in the full one, else the last [`PHI3_ADDED`]`.len()` ids.
fn phi3_endoftext(n: u32) -> u32 {
    PHI3_BASE.min(n.saturating_sub(PHI3_ADDED.len() as u32))
}

/// The file's metadata for `shape` of [`Family::Mistral`] or [`Family::Phi3`].
pub(super) fn metadata(shape: &SynthShape) -> Vec<(String, Value)> {
    let s = |v: &str| Value::String(v.to_string());
    let arch = shape.family.arch();
    let key = |k: &str| format!("{arch}.{k}");
    let u = |v: u64| Value::U32(v as u32);
    let phi3 = shape.family == Family::Phi3;
    let (tokens, scores, types) = vocabulary(shape.family, shape.vocab);
    let (name, basename, size, context, base, template) = if phi3 {
        (
            "Phi 3.5 Mini Instruct (synthetic weights)",
            "Phi-3.5",
            "mini",
            131_072,
            10_000.0,
            PHI3_TEMPLATE,
        )
    } else {
        (
            "Mistral 7B Instruct v0.3 (synthetic weights)",
            "Mistral",
            "7B",
            32_768,
            1_000_000.0,
            MISTRAL_TEMPLATE,
        )
    };
    let mut out = vec![
        ("general.architecture".into(), s(arch)),
        ("general.type".into(), s("model")),
        ("general.name".into(), s(name)),
        ("general.basename".into(), s(basename)),
        ("general.size_label".into(), s(size)),
        (key("context_length"), Value::U32(context)),
        (key("embedding_length"), u(shape.n_embd)),
        (key("feed_forward_length"), u(shape.n_ff)),
        (key("block_count"), u(shape.n_layer)),
        (key("attention.head_count"), Value::U32(shape.n_head)),
        (key("attention.head_count_kv"), Value::U32(shape.n_head_kv)),
        (key("rope.freq_base"), Value::F32(base)),
        (key("attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
        (key("rope.dimension_count"), u(shape.head_dim())),
    ];
    if phi3 {
        out.extend([
            (
                key("rope.scaling.attn_factor"),
                Value::F32(LONGROPE_ATTN_FACTOR),
            ),
            (
                key("rope.scaling.original_context_length"),
                Value::U32(4096),
            ),
            (key("attention.sliding_window"), Value::U32(262_144)),
        ]);
    } else {
        out.push((key("vocab_size"), Value::U32(shape.vocab)));
    }
    let strings = |v: Vec<String>| Value::Array(v.into_iter().map(Value::String).collect());
    out.extend([
        ("tokenizer.ggml.model".into(), s("llama")),
        ("tokenizer.ggml.pre".into(), s("default")),
        ("tokenizer.ggml.tokens".into(), strings(tokens)),
        (
            "tokenizer.ggml.scores".into(),
            Value::Array(scores.into_iter().map(Value::F32).collect()),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
    ]);
    if phi3 {
        let eos = phi3_endoftext(shape.vocab);
        out.extend([
            ("tokenizer.ggml.eos_token_id".into(), Value::U32(eos)),
            ("tokenizer.ggml.unknown_token_id".into(), Value::U32(0)),
            ("tokenizer.ggml.padding_token_id".into(), Value::U32(eos)),
            ("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)),
            ("tokenizer.ggml.add_eos_token".into(), Value::Bool(false)),
        ]);
    } else {
        out.extend([
            ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
            ("tokenizer.ggml.unknown_token_id".into(), Value::U32(0)),
            ("tokenizer.ggml.add_bos_token".into(), Value::Bool(true)),
            ("tokenizer.ggml.add_eos_token".into(), Value::Bool(false)),
        ]);
    }
    out.extend([
        ("tokenizer.chat_template".into(), s(template)),
        ("general.quantization_version".into(), Value::U32(2)),
    ]);
    out
}

/// Phi-3.5-mini's `rope.scaling.attn_factor`: LongRoPE's `√(1 + ln(131072/4096)/ln 4096)`,
/// as the converter writes it.
pub const LONGROPE_ATTN_FACTOR: f32 = 1.190_238_1;

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(shape: &SynthShape) -> Vec<String> {
        let meta = metadata(shape);
        let Some((_, Value::Array(v))) = meta.iter().find(|(k, _)| k == "tokenizer.ggml.tokens")
        else {
            panic!("no tokens")
        };
        v.iter()
            .map(|t| match t {
                Value::String(s) => s.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// The special ids of the released files' vocabularies: Phi-3's chat markers after its
    /// 32000 pieces (`<|assistant|>` 32001, `<|end|>` 32007, `<|user|>` 32010), Mistral
    /// v0.3's `[INST]` 3 and `[/INST]` 4 and its bytes from 771.
    #[test]
    fn full_vocabularies_put_the_specials_where_the_files_do() {
        let phi = tokens(&SynthShape::PHI_3_5_MINI);
        assert_eq!(phi.len(), 32_064);
        let at = |v: &[String], i: usize| v[i].clone();
        assert_eq!(at(&phi, 32_000), "<|endoftext|>");
        assert_eq!(at(&phi, 32_001), "<|assistant|>");
        assert_eq!(at(&phi, 32_007), "<|end|>");
        assert_eq!(at(&phi, 32_010), "<|user|>");
        assert_eq!(at(&phi, 3), "<0x00>");
        let mistral = tokens(&SynthShape::MISTRAL_7B);
        assert_eq!(mistral.len(), 32_768);
        assert_eq!(
            (at(&mistral, 3), at(&mistral, 4)),
            ("[INST]".into(), "[/INST]".into())
        );
        assert_eq!(at(&mistral, 10), "[control_8]");
        assert_eq!(at(&mistral, 770), "[control_768]");
        assert_eq!(at(&mistral, 771), "<0x00>");
    }
}

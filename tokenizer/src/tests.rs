//! Small hand-made vocabularies, written as real GGUF files, whose token ids are worked out by
//! hand from the BPE and SentencePiece rules; and every metadata error the loader reports.

use super::*;
use trine_gguf::{GgufError, GgufWriter, Value};

fn strings(v: &[&str]) -> Value {
    Value::Array(v.iter().map(|s| Value::String(s.to_string())).collect())
}

fn gguf(kvs: Vec<(&str, Value)>) -> Gguf {
    let mut w = GgufWriter::new();
    for (k, v) in kvs {
        w.add(k, v).unwrap();
    }
    Gguf::from_bytes(w.to_bytes()).unwrap()
}

/// Byte-level BPE: "Ġ" is the space byte. Ranks: a+b, ab+c, Ġ+a, b+c.
fn bpe_kvs() -> Vec<(&'static str, Value)> {
    vec![
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String("gpt-2".into())),
        (
            "tokenizer.ggml.tokens",
            strings(&[
                "<|endoftext|>",
                "a",
                "b",
                "c",
                "Ġ",
                "ab",
                "abc",
                "Ġa",
                "bc",
                "<|im_end|>",
                "<user>",
            ]),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array([3, 1, 1, 1, 1, 1, 1, 1, 1, 3, 4].map(Value::I32).to_vec()),
        ),
        (
            "tokenizer.ggml.merges",
            strings(&["a b", "ab c", "Ġ a", "b c"]),
        ),
    ]
}

fn with(mut kvs: Vec<(&'static str, Value)>, key: &'static str, v: Value) -> Gguf {
    kvs.retain(|(k, _)| *k != key);
    kvs.push((key, v));
    gguf(kvs)
}

fn without(mut kvs: Vec<(&'static str, Value)>, key: &str) -> Gguf {
    kvs.retain(|(k, _)| *k != key);
    gguf(kvs)
}

fn bpe() -> Tokenizer {
    Tokenizer::from_gguf(&gguf(bpe_kvs())).unwrap()
}

#[test]
fn bpe_merges_best_rank_first() {
    let t = bpe();
    // a+b (rank 0) then ab+c (rank 1).
    assert_eq!(t.encode("abc", false, false).unwrap(), [6]);
    // b+c is the only pair; "a" stays.
    assert_eq!(t.encode("bca", false, false).unwrap(), [8, 1]);
    // Ġ+a (rank 2) loses to a+b (rank 0), and Ġ+ab is no merge.
    assert_eq!(t.encode(" ab", false, false).unwrap(), [4, 5]);
    assert_eq!(t.encode("ab ab", false, false).unwrap(), [5, 4, 5]);
    // A byte with no token is dropped, as llama.cpp drops it.
    assert_eq!(t.encode("axb", false, false).unwrap(), [1, 2]);
    assert_eq!(t.encode("", false, false).unwrap(), Vec::<u32>::new());
}

#[test]
fn special_tokens_are_parsed_only_when_asked() {
    let t = bpe();
    // Unparsed, "<|im_end|>" is plain text whose bytes have no tokens.
    assert_eq!(t.encode("a<|im_end|>b", false, false).unwrap(), [1, 2]);
    assert_eq!(t.encode("a<|im_end|>b", false, true).unwrap(), [1, 9, 2]);
    // User-defined tokens are always cut out.
    assert_eq!(t.encode("a<user>b", false, false).unwrap(), [1, 10, 2]);
}

#[test]
fn bos_and_eos_follow_the_metadata() {
    let t = bpe();
    // The BPE fallback id 11 lies outside this vocab, so there is none.
    assert_eq!((t.bos(), t.eos()), (None, None));
    assert_eq!(t.encode("a", true, false).unwrap(), [1]);

    let mut kvs = bpe_kvs();
    kvs.push(("tokenizer.ggml.bos_token_id", Value::U32(0)));
    kvs.push(("tokenizer.ggml.eos_token_id", Value::U32(9)));
    kvs.push(("tokenizer.ggml.add_bos_token", Value::Bool(true)));
    kvs.push(("tokenizer.ggml.add_eos_token", Value::Bool(true)));
    let t = Tokenizer::from_gguf(&gguf(kvs)).unwrap();
    assert_eq!((t.bos(), t.eos()), (Some(0), Some(9)));
    assert_eq!(t.encode("a", true, false).unwrap(), [0, 1, 9]);
    assert_eq!(t.encode("a", false, false).unwrap(), [1]);

    let t = Tokenizer::from_gguf(&with(
        bpe_kvs(),
        "tokenizer.ggml.add_bos_token",
        Value::Bool(true),
    ))
    .unwrap();
    assert!(matches!(
        t.encode("a", true, false),
        Err(TokenizerError::MissingSpecialToken { which: "BOS" })
    ));
}

#[test]
fn end_of_generation_tokens_are_found_by_text() {
    let t = bpe();
    assert!(t.is_end_of_generation(0));
    assert!(t.is_end_of_generation(9));
    assert!(!t.is_end_of_generation(1));
    assert!(!t.is_end_of_generation(10));
    assert!(!t.is_end_of_generation(1000));
}

#[test]
fn bpe_token_bytes() {
    let t = bpe();
    assert_eq!(t.vocab_size(), 11);
    assert_eq!(t.token_bytes(7).unwrap(), b" a");
    assert_eq!(t.token_bytes(0).unwrap(), b"");
    assert_eq!(t.token_bytes(10).unwrap(), b"<user>");
    assert_eq!(t.decode(&[5, 4, 6, 9]).unwrap(), "ab abc");
    assert!(matches!(
        t.token_bytes(11),
        Err(TokenizerError::TokenIdOutOfRange {
            id: 11,
            n_tokens: 11
        })
    ));
}

/// SentencePiece with byte fallback for "é" (C3 A9) and "\n".
fn spm_kvs() -> Vec<(&'static str, Value)> {
    vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        (
            "tokenizer.ggml.tokens",
            strings(&[
                "<unk>", "<s>", "</s>", "<0x0A>", "<0xC3>", "<0xA9>", "▁", "h", "i", "▁h", "▁hi",
                "hi",
            ]),
        ),
        (
            "tokenizer.ggml.scores",
            Value::Array(
                [
                    0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -3.0, -1.0, -0.5,
                ]
                .map(Value::F32)
                .to_vec(),
            ),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(
                [2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 1]
                    .map(Value::I32)
                    .to_vec(),
            ),
        ),
    ]
}

#[test]
fn spm_merges_best_score_first_with_byte_fallback() {
    let t = Tokenizer::from_gguf(&gguf(spm_kvs())).unwrap();
    assert_eq!((t.bos(), t.eos()), (Some(1), Some(2)));
    // "▁hi": h+i (-0.5) beats ▁+h (-3), then ▁+hi makes "▁hi" (-1).
    assert_eq!(t.encode("hi", false, false).unwrap(), [10]);
    // BOS is added by default; "é" has no token and falls back to its two bytes.
    assert_eq!(t.encode("é\n", true, false).unwrap(), [1, 6, 4, 5, 3]);
    assert!(matches!(
        t.encode("z", false, false),
        Err(TokenizerError::NoByteToken { byte: b'z' })
    ));
    assert_eq!(t.decode(&[1, 10, 4, 5, 3]).unwrap(), " hié\n");
    assert!(t.is_end_of_generation(2));

    let t = Tokenizer::from_gguf(&with(
        spm_kvs(),
        "tokenizer.ggml.add_space_prefix",
        Value::Bool(false),
    ))
    .unwrap();
    assert_eq!(t.encode("hi", false, false).unwrap(), [11]);
}

/// Gemma 4's BPE: raw UTF-8 with "▁" for spaces, byte tokens <0xXX>. Ranks: a+b, ▁+a.
fn gemma4_kvs() -> Vec<(&'static str, Value)> {
    vec![
        ("tokenizer.ggml.model", Value::String("gemma4".into())),
        (
            "tokenizer.ggml.tokens",
            strings(&[
                "<pad>",
                "<eos>",
                "<bos>",
                "a",
                "b",
                "\u{2581}",
                "ab",
                "\u{2581}a",
                "\n",
                "\n\n",
                "<0x63>",
                "<0xC3>",
                "<0xA9>",
            ]),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(
                [3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 6, 6]
                    .map(Value::I32)
                    .to_vec(),
            ),
        ),
        ("tokenizer.ggml.merges", strings(&["a b", "\u{2581} a"])),
        ("tokenizer.ggml.bos_token_id", Value::U32(2)),
        ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
    ]
}

#[test]
fn gemma4_merges_chars_with_byte_fallback() {
    let t = Tokenizer::from_gguf(&gguf(gemma4_kvs())).unwrap();
    // llama.cpp adds BOS for Gemma 4 even where the file says not to.
    assert!(t.adds_bos());
    // "▁ab": a+b goes first, leaving ▁ and ab, which no merge joins.
    assert_eq!(t.encode(" ab", true, false).unwrap(), [2, 5, 6]);
    // "c" and "é" have no token: their bytes' <0xXX> tokens stand in.
    assert_eq!(t.encode("cé", false, false).unwrap(), [10, 11, 12]);
    // A run of newlines that is a token is taken whole, though no merge makes it.
    assert_eq!(t.encode("a\n\nb", false, false).unwrap(), [3, 9, 4]);
    assert_eq!(t.encode("\n\n\n", false, false).unwrap(), [8, 8, 8]);
    assert_eq!(t.decode(&[2, 5, 6, 10, 11, 12, 9]).unwrap(), " abcé\n\n");
    // tokenizer.ggml.pre does not matter to this model.
    let t = Tokenizer::from_gguf(&with(
        gemma4_kvs(),
        "tokenizer.ggml.pre",
        Value::String("bloom".into()),
    ))
    .unwrap();
    assert_eq!(t.encode(" a", false, false).unwrap(), [7]);
}

fn error(g: Gguf) -> TokenizerError {
    Tokenizer::from_gguf(&g).unwrap_err()
}

#[test]
fn unknown_names_are_errors() {
    let e = error(with(
        bpe_kvs(),
        "tokenizer.ggml.model",
        Value::String("bert".into()),
    ));
    assert!(
        matches!(&e, TokenizerError::UnknownModel { name } if name == "bert"),
        "{e}"
    );
    let e = error(with(
        bpe_kvs(),
        "tokenizer.ggml.pre",
        Value::String("bloom".into()),
    ));
    assert!(
        matches!(&e, TokenizerError::UnknownPreTokenizer { name, .. } if name == "bloom"),
        "{e}"
    );
    // The message says what would have worked.
    assert!(e.to_string().contains("llama-bpe, "), "{e}");
    let e = error(without(bpe_kvs(), "tokenizer.ggml.pre"));
    assert!(matches!(e, TokenizerError::MissingPreTokenizer), "{e}");
}

#[test]
fn missing_or_mistyped_arrays_are_errors() {
    let e = error(without(bpe_kvs(), "tokenizer.ggml.tokens"));
    assert!(
        matches!(&e, TokenizerError::Gguf(GgufError::MissingKey { key }) if key == "tokenizer.ggml.tokens"),
        "{e}"
    );
    let e = error(without(bpe_kvs(), "tokenizer.ggml.merges"));
    assert!(
        matches!(&e, TokenizerError::Gguf(GgufError::MissingKey { key }) if key == "tokenizer.ggml.merges"),
        "{e}"
    );
    let e = error(with(
        bpe_kvs(),
        "tokenizer.ggml.tokens",
        Value::Array(vec![Value::U32(1)]),
    ));
    assert!(
        matches!(&e, TokenizerError::Gguf(GgufError::WrongType { .. })),
        "{e}"
    );
    let e = error(with(bpe_kvs(), "tokenizer.ggml.tokens", strings(&[])));
    assert!(matches!(e, TokenizerError::EmptyVocab), "{e}");
    let e = error(with(
        spm_kvs(),
        "tokenizer.ggml.scores",
        Value::Array(vec![Value::F32(0.0)]),
    ));
    assert!(
        matches!(
            e,
            TokenizerError::LengthMismatch {
                key: "tokenizer.ggml.scores",
                len: 1,
                n_tokens: 12
            }
        ),
        "{e}"
    );
}

#[test]
fn bad_merges_are_errors() {
    let e = error(with(
        bpe_kvs(),
        "tokenizer.ggml.merges",
        strings(&["a b", "a q"]),
    ));
    assert!(
        matches!(&e, TokenizerError::MergeUnknownToken { index: 1, part, .. } if part == "q"),
        "{e}"
    );
    let e = error(with(bpe_kvs(), "tokenizer.ggml.merges", strings(&["c a"])));
    assert!(
        matches!(&e, TokenizerError::MergeResultUnknown { index: 0, result, .. } if result == "ca"),
        "{e}"
    );
    let e = error(with(bpe_kvs(), "tokenizer.ggml.merges", strings(&["abc"])));
    assert!(
        matches!(&e, TokenizerError::MalformedMerge { index: 0, .. }),
        "{e}"
    );
}

#[test]
fn inconsistent_tokens_are_errors() {
    let e = error(with(
        bpe_kvs(),
        "tokenizer.ggml.tokens",
        strings(&["a", "b", "a"]),
    ));
    assert!(
        matches!(&e, TokenizerError::DuplicateToken { text, first: 0, second: 2 } if text == "a"),
        "{e}"
    );
    let e = error(with(
        bpe_kvs(),
        "tokenizer.ggml.eos_token_id",
        Value::U32(50),
    ));
    assert!(
        matches!(
            e,
            TokenizerError::SpecialIdOutOfRange {
                id: 50,
                n_tokens: 11,
                ..
            }
        ),
        "{e}"
    );
    let mut tokens = spm_kvs();
    tokens[1].1 = strings(&[
        "<unk>", "<s>", "</s>", "<0xZZ>", "<0xC3>", "<0xA9>", "▁", "h", "i", "▁h", "▁hi", "hi",
    ]);
    let e = error(gguf(tokens));
    assert!(
        matches!(&e, TokenizerError::BadByteToken { id: 3, text } if text == "<0xZZ>"),
        "{e}"
    );
}

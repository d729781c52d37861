//! The tokenizer against llama.cpp's own tokenizer test data: for each `ggml-vocab-X.gguf` in
//! the asset cache, `.inp` holds texts separated by the line `__ggml_vocab_test__` and `.out`
//! the ids llama.cpp's `test-tokenizer-0` requires for each (no BOS/EOS, special tokens not
//! parsed). Every text must give exactly those ids.
//!
//! Supported and passing: llama-bpe, gpt-2, qwen2, mpt, starcoder, refact, command-r
//! (byte-level BPE) and llama-spm, phi-3 (SentencePiece). Not supported (their
//! pre-tokenizers or models are not implemented): bert-bge, deepseek-coder, deepseek-llm,
//! falcon, gemma-4, qwen35.

use trine_gguf::assets;
use trine_gguf::Gguf;
use trine_tokenizer::Tokenizer;

struct Case {
    text: String,
    ids: Vec<u32>,
}

/// The tokenizer and test cases of `ggml-vocab-{name}.gguf`, or `None` (with the reason
/// printed) when the files are not in the asset cache.
fn load(name: &str) -> Option<(Tokenizer, Vec<Case>)> {
    let rel = format!("{}/ggml-vocab-{name}.gguf", assets::VOCAB_DIR);
    let vocab = assets::for_test(&rel)?;
    let inp = assets::for_test(&format!("{rel}.inp"))?;
    let out = assets::for_test(&format!("{rel}.out"))?;
    let g = Gguf::open(&vocab).unwrap_or_else(|e| panic!("{}: {e}", vocab.display()));
    let tok = Tokenizer::from_gguf(&g).unwrap_or_else(|e| panic!("{name}: {e}"));
    let inp = std::fs::read_to_string(&inp).unwrap();
    let out = std::fs::read_to_string(&out).unwrap();
    let texts = split_tests(&inp);
    let ids: Vec<Vec<u32>> = out
        .lines()
        .map(|line| {
            line.split_whitespace()
                .map(|t| {
                    t.parse()
                        .unwrap_or_else(|e| panic!("{name}.out: {t:?}: {e}"))
                })
                .collect()
        })
        .collect();
    assert_eq!(
        texts.len(),
        ids.len(),
        "{name}: .inp and .out disagree on the test count"
    );
    assert!(!texts.is_empty(), "{name}: no test texts");
    let cases = texts
        .into_iter()
        .zip(ids)
        .map(|(text, ids)| Case {
            text: text.to_string(),
            ids,
        })
        .collect();
    Some((tok, cases))
}

/// The texts of an `.inp` file, cut as `test-tokenizer-0` cuts them: at each
/// `"\n__ggml_vocab_test__\n"`, with no empty text after the last separator.
fn split_tests(raw: &str) -> Vec<&str> {
    const SEP: &str = "\n__ggml_vocab_test__\n";
    let mut texts = Vec::new();
    let mut rest = raw;
    while !rest.is_empty() {
        match rest.find(SEP) {
            Some(at) => {
                texts.push(&rest[..at]);
                rest = &rest[at + SEP.len()..];
            }
            None => {
                texts.push(rest);
                rest = "";
            }
        }
    }
    texts
}

fn pieces(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
    ids.iter()
        .map(|&id| String::from_utf8_lossy(&tok.token_bytes(id).unwrap()).into_owned())
        .collect()
}

/// Every text of `name` must encode to llama.cpp's ids; byte-level vocabs must also decode
/// back to the text.
fn check(name: &str, round_trip: bool) {
    let Some((tok, cases)) = load(name) else {
        return;
    };
    let mut failures = Vec::new();
    for case in &cases {
        let got = tok.encode(&case.text, false, false).unwrap();
        if got != case.ids {
            failures.push(format!(
                "text {:?}\n  expected {:?} {:?}\n  got      {:?} {:?}",
                case.text,
                case.ids,
                pieces(&tok, &case.ids),
                got,
                pieces(&tok, &got)
            ));
        }
        if round_trip {
            assert_eq!(tok.decode(&got).unwrap(), case.text, "{name}: round trip");
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} texts differ from llama.cpp; the first:\n{}",
        failures.len(),
        cases.len(),
        failures[0]
    );
}

#[test]
fn llama_bpe() {
    check("llama-bpe", true);
}

#[test]
fn gpt_2() {
    check("gpt-2", true);
}

#[test]
fn qwen2() {
    check("qwen2", true);
}

#[test]
fn mpt() {
    check("mpt", true);
}

#[test]
fn starcoder() {
    check("starcoder", true);
}

#[test]
fn refact() {
    check("refact", true);
}

#[test]
fn command_r() {
    check("command-r", true);
}

#[test]
fn llama_spm() {
    check("llama-spm", false);
}

#[test]
fn phi_3() {
    check("phi-3", false);
}

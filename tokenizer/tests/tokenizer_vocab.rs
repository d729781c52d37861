//! The tokenizer against llama.cpp's own tokenizer test data: for each `ggml-vocab-X.gguf` in
//! the asset cache, `.inp` holds texts separated by the line `__ggml_vocab_test__` and `.out`
//! the ids llama.cpp's `test-tokenizer-0` requires for each (no BOS/EOS, special tokens not
//! parsed). Every text must give exactly those ids.
//!
//! Supported and passing: llama-bpe, gpt-2, qwen2, qwen35, mpt, starcoder, refact, command-r,
//! deepseek-llm, deepseek-coder, falcon (byte-level BPE), gemma-4 (Gemma 4's BPE on UTF-8) and
//! llama-spm, phi-3 (SentencePiece). Not supported: bert-bge (a WordPiece vocab). The
//! pre-tokenizers llama.cpp ships no vocab test for (gpt-4o, tekken) and Gemma 3's
//! SentencePiece vocab are checked against ids llama.cpp gave (`tokenizer_llama_cpp_ids.rs`);
//! `docs/tokenizer.md` lists every name trine runs.

mod vocab_files;

use trine_gguf::assets;
use trine_gguf::Gguf;
use trine_tokenizer::Tokenizer;

/// Every text of `ggml-vocab-{name}.gguf.inp` must encode to llama.cpp's ids; byte-level
/// vocabs must also decode back to the text. Skipped (with the reason printed) when the files
/// are not in the asset cache.
fn check(name: &str, round_trip: bool) {
    let rel = format!("{}/ggml-vocab-{name}.gguf", assets::VOCAB_DIR);
    let (Some(vocab), Some(inp), Some(out)) = (
        assets::for_test(&rel),
        assets::for_test(&format!("{rel}.inp")),
        assets::for_test(&format!("{rel}.out")),
    ) else {
        return;
    };
    let g = Gguf::open(&vocab).unwrap_or_else(|e| panic!("{}: {e}", vocab.display()));
    let tok = Tokenizer::from_gguf(&g).unwrap_or_else(|e| panic!("{name}: {e}"));
    let inp = std::fs::read_to_string(&inp).unwrap();
    let out = std::fs::read_to_string(&out).unwrap();
    vocab_files::check(name, &tok, &inp, &out, round_trip);
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

#[test]
fn gemma_4() {
    check("gemma-4", true);
}

#[test]
fn qwen35() {
    check("qwen35", true);
}

#[test]
fn deepseek_llm() {
    check("deepseek-llm", true);
}

#[test]
fn deepseek_coder() {
    check("deepseek-coder", true);
}

#[test]
fn falcon() {
    check("falcon", true);
}

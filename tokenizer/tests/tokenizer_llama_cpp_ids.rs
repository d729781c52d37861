//! Vocabs llama.cpp ships no ids for, checked against ids llama.cpp itself gave: for the texts
//! of `ggml-vocab-qwen35.gguf.inp` (llama.cpp's vocab test texts) and of
//! `fixtures/llama_cpp_ids/extra.inp` (words whose case changes inside them, upper-case words
//! with accented letters, contractions in both cases, digit runs, paths after newlines, long
//! newline runs), `scripts/reference/vocab_ids.sh` wrote llama.cpp's ids into
//! `fixtures/llama_cpp_ids/{vocab}.{texts}.out`, for
//! - `ggml-vocab-llama-bpe.gguf` with `tokenizer.ggml.pre` renamed to `gpt-4o` and `tekken`
//!   (rebuilt here in memory): pre-tokenizers without a vocab test of their own;
//! - Gemma 3 270M's SentencePiece vocab (`tokenizer.ggml.pre = "default"`, no space prefix,
//!   byte fallback);
//! - `ggml-vocab-{gemma-4,deepseek-llm,deepseek-coder,falcon}.gguf`, on more texts than their
//!   own tests have.
//!
//! Every text must give those ids and decode back to itself.

mod vocab_files;

use std::path::{Path, PathBuf};
use trine_gguf::{assets, Gguf, GgufWriter, Value};
use trine_tokenizer::Tokenizer;

const PRE_KEY: &str = "tokenizer.ggml.pre";
const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama_cpp_ids")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn open(path: &Path) -> Gguf {
    Gguf::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `vocab` with its pre-tokenizer renamed to `pre`, every other key as it was.
fn renamed(vocab: &Path, pre: &str) -> Gguf {
    let g = open(vocab);
    assert!(g.tensors().is_empty(), "{} has tensors", vocab.display());
    let mut w = GgufWriter::new();
    for (key, value) in g.metadata() {
        let value = if key == PRE_KEY {
            Value::String(pre.to_string())
        } else {
            value.clone()
        };
        w.add(key.clone(), value).unwrap();
    }
    Gguf::from_bytes(w.to_bytes()).unwrap()
}

/// A text file's stem, its texts, and llama.cpp's ids for them.
struct TextFile {
    stem: &'static str,
    inp: String,
    out: String,
}

/// The text files with llama.cpp's ids for the vocab named `name` in the fixtures; `None` when
/// the asset cache lacks llama.cpp's test texts (the reason is printed).
fn text_files(name: &str) -> Option<Vec<TextFile>> {
    let qwen35 = assets::for_test(&format!("{}/ggml-vocab-qwen35.gguf.inp", assets::VOCAB_DIR))?;
    let files = [("qwen35", qwen35), ("extra", fixtures().join("extra.inp"))]
        .into_iter()
        .map(|(stem, inp)| TextFile {
            stem,
            inp: read(&inp),
            out: read(&fixtures().join(format!("{name}.{stem}.out"))),
        })
        .collect();
    Some(files)
}

fn check(name: &str, tok: &Tokenizer) {
    let Some(files) = text_files(name) else {
        return;
    };
    for f in &files {
        vocab_files::check(&format!("{name} on {}", f.stem), tok, &f.inp, &f.out, true);
    }
}

/// The llama-bpe vocab renamed to `pre`; `None` when the asset cache lacks it.
fn llama_bpe_as(pre: &str) -> Option<Tokenizer> {
    let vocab = assets::for_test(&format!("{}/ggml-vocab-llama-bpe.gguf", assets::VOCAB_DIR))?;
    Some(Tokenizer::from_gguf(&renamed(&vocab, pre)).unwrap_or_else(|e| panic!("{pre}: {e}")))
}

#[test]
fn gpt_4o() {
    if let Some(tok) = llama_bpe_as("gpt-4o") {
        check("gpt-4o", &tok);
    }
}

#[test]
fn tekken() {
    if let Some(tok) = llama_bpe_as("tekken") {
        check("tekken", &tok);
    }
}

/// The fixtures tell the patterns apart: read with Llama 3's pattern, the same vocab misses
/// llama.cpp's gpt-4o and tekken ids for some text of each file.
#[test]
fn the_ids_need_the_named_pattern() {
    let Some(llama3) = llama_bpe_as("llama-bpe") else {
        return;
    };
    for pre in ["gpt-4o", "tekken"] {
        let Some(files) = text_files(pre) else {
            return;
        };
        for TextFile { stem, inp, out } in &files {
            let texts = vocab_files::split_texts(inp);
            let ids = vocab_files::parse_ids(out, stem);
            let differ = texts
                .iter()
                .zip(&ids)
                .filter(|(text, ids)| &llama3.encode(text, false, false).unwrap() != *ids)
                .count();
            eprintln!(
                "{pre} on {stem}: {differ} of {} texts differ under llama-bpe",
                texts.len()
            );
            assert!(
                differ > 0,
                "{pre} on {stem}: Llama 3's pattern gives the same ids"
            );
        }
    }
}

#[test]
fn gemma_3() {
    let Some(model) = assets::for_test(GEMMA3) else {
        return;
    };
    let tok = Tokenizer::from_gguf(&open(&model)).unwrap();
    assert!(tok.adds_bos());
    check("gemma-3", &tok);
}

/// A vocab of llama.cpp's vocab tests, on the texts of the fixtures.
fn check_vocab(name: &str) {
    let Some(vocab) = assets::for_test(&format!("{}/ggml-vocab-{name}.gguf", assets::VOCAB_DIR))
    else {
        return;
    };
    check(name, &Tokenizer::from_gguf(&open(&vocab)).unwrap());
}

#[test]
fn gemma_4() {
    check_vocab("gemma-4");
}

#[test]
fn deepseek_llm() {
    check_vocab("deepseek-llm");
}

#[test]
fn deepseek_coder() {
    check_vocab("deepseek-coder");
}

#[test]
fn falcon() {
    check_vocab("falcon");
}

//! Pre-tokenizers llama.cpp ships no vocab test for (gpt-4o, tekken), checked against ids
//! llama.cpp itself gave: `ggml-vocab-llama-bpe.gguf` with `tokenizer.ggml.pre` renamed, the
//! texts of `ggml-vocab-qwen35.gguf.inp` (llama.cpp's vocab test texts) and of
//! `fixtures/llama_cpp_ids/case_split.inp` (words whose case changes inside them, contractions
//! in both cases, digit runs, paths). The ids are in `fixtures/llama_cpp_ids/{pre}.{texts}.out`,
//! made by `scripts/reference/vocab_ids.sh`; the same renamed vocab is rebuilt here in
//! memory.

mod vocab_files;

use std::path::{Path, PathBuf};
use trine_gguf::{assets, Gguf, GgufWriter, Value};
use trine_tokenizer::Tokenizer;

const PRE_KEY: &str = "tokenizer.ggml.pre";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama_cpp_ids")
}

/// `vocab` with its pre-tokenizer renamed to `pre`, every other key as it was.
fn renamed(vocab: &Path, pre: &str) -> Gguf {
    let g = Gguf::open(vocab).unwrap_or_else(|e| panic!("{}: {e}", vocab.display()));
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

/// The llama-bpe vocab renamed to `tokenizer_pre`, with each text file and llama.cpp's ids for
/// it under the name `pre`; `None` when the asset cache lacks the vocab (the reason is printed).
fn cases(pre: &str, tokenizer_pre: &str) -> Option<(Tokenizer, Vec<TextFile>)> {
    let vocab = assets::for_test(&format!("{}/ggml-vocab-llama-bpe.gguf", assets::VOCAB_DIR))?;
    let qwen35 = assets::for_test(&format!("{}/ggml-vocab-qwen35.gguf.inp", assets::VOCAB_DIR))?;
    let tok = Tokenizer::from_gguf(&renamed(&vocab, tokenizer_pre))
        .unwrap_or_else(|e| panic!("{tokenizer_pre}: {e}"));
    let files = [
        ("qwen35", qwen35),
        ("case_split", fixtures().join("case_split.inp")),
    ]
    .into_iter()
    .map(|(stem, inp)| {
        let out = fixtures().join(format!("{pre}.{stem}.out"));
        let read = |p: &Path| {
            std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        };
        TextFile {
            stem,
            inp: read(&inp),
            out: read(&out),
        }
    })
    .collect();
    Some((tok, files))
}

fn check(pre: &str) {
    let Some((tok, files)) = cases(pre, pre) else {
        return;
    };
    for f in &files {
        vocab_files::check(&format!("{pre} on {}", f.stem), &tok, &f.inp, &f.out, true);
    }
}

#[test]
fn gpt_4o() {
    check("gpt-4o");
}

#[test]
fn tekken() {
    check("tekken");
}

/// The fixtures tell the patterns apart: read with Llama 3's pattern, the same vocab misses
/// llama.cpp's ids for some text of each file.
#[test]
fn the_ids_need_the_named_pattern() {
    for pre in ["gpt-4o", "tekken"] {
        let Some((llama3, files)) = cases(pre, "llama-bpe") else {
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

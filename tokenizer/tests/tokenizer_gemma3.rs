//! Gemma 3's tokenizer against ids llama.cpp gave from the real file (Gemma 3 270M): a
//! SentencePiece vocab (`tokenizer.ggml.model = "llama"`, `tokenizer.ggml.pre = "default"`)
//! that puts no space before the text (`tokenizer.ggml.add_space_prefix = false`) and spells
//! chars it lacks with byte tokens. llama.cpp ships no vocab test for it, so
//! `scripts/reference/vocab_ids.sh` wrote the ids for the texts of
//! `ggml-vocab-qwen35.gguf.inp` and `fixtures/llama_cpp_ids/case_split.inp` into
//! `fixtures/llama_cpp_ids/gemma-3.{texts}.out`.

mod vocab_files;

use std::path::Path;
use trine_gguf::{assets, Gguf};
use trine_tokenizer::Tokenizer;

const GEMMA3: &str = "gemma-3-270m-q4_k_m.gguf";

#[test]
fn gemma_3() {
    let (Some(model), Some(qwen35)) = (
        assets::for_test(GEMMA3),
        assets::for_test(&format!("{}/ggml-vocab-qwen35.gguf.inp", assets::VOCAB_DIR)),
    ) else {
        return;
    };
    let g = Gguf::open(&model).unwrap_or_else(|e| panic!("{}: {e}", model.display()));
    let tok = Tokenizer::from_gguf(&g).unwrap();
    assert!(tok.adds_bos());
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama_cpp_ids");
    for (stem, inp) in [
        ("qwen35", qwen35),
        ("case_split", fixtures.join("case_split.inp")),
    ] {
        let out = fixtures.join(format!("gemma-3.{stem}.out"));
        let read = |p: &Path| {
            std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        };
        vocab_files::check(
            &format!("gemma-3 on {stem}"),
            &tok,
            &read(&inp),
            &read(&out),
            true,
        );
    }
}

//! SmolLM2's tokenizer (byte-level BPE, pre-tokenizer `smollm`) against ids llama.cpp produced
//! from the real model file: `llama/tests/fixtures/smollm2_reference.json`, written by
//! `scripts/reference/run.sh` with llama.cpp's `llama_tokenize` and `llama_token_to_piece`.

use serde::Deserialize;
use trine_gguf::assets;
use trine_gguf::Gguf;
use trine_tokenizer::Tokenizer;

#[derive(Deserialize)]
struct Reference {
    tokenize: Vec<TokenizeCase>,
    greedy: Vec<GreedyCase>,
}

#[derive(Deserialize)]
struct TokenizeCase {
    text: String,
    add_special: bool,
    parse_special: bool,
    ids: Vec<u32>,
}

/// A prompt, tokenized with `add_special`, and the completion llama.cpp generated from it:
/// its ids and their pieces printed with special tokens shown.
#[derive(Deserialize)]
struct GreedyCase {
    prompt: String,
    parse_special: bool,
    prompt_ids: Vec<u32>,
    ids: Vec<u32>,
    stopped_at_eog: bool,
    completion: String,
}

fn load() -> Option<(Tokenizer, Reference)> {
    let model = assets::for_test(assets::SMOLLM2)?;
    let g = Gguf::open(&model).unwrap_or_else(|e| panic!("{}: {e}", model.display()));
    let tok = Tokenizer::from_gguf(&g).unwrap();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../llama/tests/fixtures/smollm2_reference.json"
    );
    let json = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    Some((tok, serde_json::from_str(&json).unwrap()))
}

#[test]
fn tokenize_matches_llama_cpp() {
    let Some((tok, reference)) = load() else {
        return;
    };
    assert!(!reference.tokenize.is_empty());
    for case in &reference.tokenize {
        let got = tok
            .encode(&case.text, case.add_special, case.parse_special)
            .unwrap();
        assert_eq!(
            got, case.ids,
            "text {:?} (add_special {}, parse_special {})",
            case.text, case.add_special, case.parse_special
        );
    }
}

#[test]
fn prompts_and_completions_match_llama_cpp() {
    let Some((tok, reference)) = load() else {
        return;
    };
    assert!(!reference.greedy.is_empty());
    for case in &reference.greedy {
        let got = tok.encode(&case.prompt, true, case.parse_special).unwrap();
        assert_eq!(got, case.prompt_ids, "prompt {:?}", case.prompt);

        // llama.cpp printed the stopping token's text; trine prints control tokens as nothing.
        let mut ids = case.ids.as_slice();
        let mut expected = case.completion.as_str();
        if case.stopped_at_eog {
            let (&last, rest) = ids.split_last().unwrap();
            assert!(
                tok.is_end_of_generation(last),
                "{last} should end generation"
            );
            assert_eq!(tok.token_bytes(last).unwrap(), b"");
            ids = rest;
            expected = expected.strip_suffix("<|im_end|>").unwrap();
        }
        assert!(ids.iter().all(|&id| !tok.is_end_of_generation(id)));
        assert_eq!(
            tok.decode(ids).unwrap(),
            expected,
            "prompt {:?}",
            case.prompt
        );
    }
}

#[test]
fn special_ids() {
    let Some((tok, _)) = load() else {
        return;
    };
    // From the model's metadata (FINDINGS.md): bos 1, eos 2, vocab 49152.
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!((tok.bos(), tok.eos()), (Some(1), Some(2)));
    assert!(tok.is_end_of_generation(2));
    assert!(!tok.is_end_of_generation(1));
}

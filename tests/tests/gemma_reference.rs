//! Gemma 3 against references committed in `llama/tests/fixtures/` by
//! `scripts/reference/gemma.sh`, on the CPU, Vulkan and wgpu backends:
//!
//! - `gemma3_tiny_f64.json`: the tiny synthetic file's graph (`trine synth-model --like
//!   gemma3-tiny --seed 5`, built here in memory) in float64 (`scripts/reference/llama_numpy.py
//!   --ids`), every step's logits. Fed the same ids, trine's logits must be within
//!   [`LOGITS_NMSE`] of them at every step: the prompt and steps run past layer 0's window of
//!   4, so a graph that ignored the window, or turned the local layer by the global rope, or
//!   dropped a post norm or the embedding scale, is off by far more.
//! - `gemma3_tiny_llama_cpp.json`: llama.cpp's CPU greedy ids on the same file.
//! - `gemma3_270m_llama_cpp.json`: llama.cpp's CPU tokenization and greedy ids on Gemma 3 270M
//!   Q4_K_M from the asset cache: its SentencePiece tokenizer must give llama.cpp's ids for
//!   every case, and the greedy ids must be llama.cpp's up to a step where its top two
//!   logits nearly tie.

use std::sync::Arc;
use trine_gguf::assets;
use trine_gguf::synth::SynthShape;
use trine_llama::Model;
use trine_tests::reference::{backends, follows_float64, greedy_cases, sizes_for, synth};
use trine_tests::{fixture, ids};

/// How far trine's logits may be from the float64 ones on the tiny file (NMSE): 4.4 times the
/// most measured when the fixture was made (3.4e-4 on vulkan and wgpu, 3.1e-4 on cpu: x
/// quantized to 8 bits). In the float64 graph itself, leaving out the window moves a step's
/// logits by 0.50 to 1.2, the post norms by 0.71 to 1.7, the embedding scale (with SiLU for
/// GELU) by 0.016 to 0.089, and turning the local layer by the global rope by 1.0e-3 to
/// 7.6e-2, above the bound at the first five of the eight steps.
const LOGITS_NMSE: f64 = 1.5e-3;

/// The top-2 gap under which 8-bit activations may flip a greedy choice on the tiny file, as
/// for the tiny Qwen files (tests/tests/qwen_reference.rs).
const TINY_FLIP_GAP: f64 = 0.02;

/// The top-2 gap under which llama.cpp's shortcuts (8-bit activations, an f16 KV cache, its
/// GELU read from a table of f16 values) may flip a greedy choice on Gemma 3 270M, as for
/// SmolLM2 (tests/tests/llama_greedy.rs).
const REAL_FLIP_GAP: f64 = 0.5;

#[test]
fn tiny_gemma3_matches_the_float64_graph_and_llama_cpp() {
    let model = synth(SynthShape::TINY_GEMMA3);
    let exact = fixture("gemma3_tiny_f64.json");
    let lcpp = fixture("gemma3_tiny_llama_cpp.json");
    let runs = backends("gemma3-tiny");
    assert!(!runs.is_empty(), "no backend ran");
    for (name, backend) in runs {
        let run = format!("gemma3-tiny on {name}");
        let on = (&model, &backend, sizes_for(&model, &exact));
        follows_float64(&run, on, &exact, LOGITS_NMSE, None);
        greedy_cases(&run, (&model, &backend, None), &lcpp, TINY_FLIP_GAP);
    }
}

#[test]
fn gemma3_270m_tokenizes_and_decodes_as_llama_cpp() {
    let Some(path) = assets::for_test(assets::GEMMA3_270M) else {
        return;
    };
    let model = Arc::new(Model::open(&path).expect("the real model opens"));
    let lcpp = fixture("gemma3_270m_llama_cpp.json");
    for case in lcpp["tokenize"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let add = case["add_special"].as_bool().unwrap();
        let special = case["parse_special"].as_bool().unwrap();
        let got = model.tokenizer.encode(text, add, special).unwrap();
        assert_eq!(
            got,
            ids(&case["ids"]),
            "{text:?} (add {add}, special {special})"
        );
    }
    // Lavapipe's steps over the 262,144-row head take most of the test's time: its backends
    // decode the first prompt only.
    for (name, backend) in backends("gemma3 270m") {
        let mut cases = lcpp.clone();
        if name != "cpu" {
            cases["greedy"].as_array_mut().unwrap().truncate(1);
        }
        let run = format!("gemma3 270m on {name}");
        greedy_cases(&run, (&model, &backend, None), &cases, REAL_FLIP_GAP);
    }
}

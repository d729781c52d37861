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

use serde_json::Value;
use std::sync::Arc;
use trine_gguf::synth::{synth_llama, SynthShape};
use trine_gguf::{assets, Gguf};
use trine_llama::{Engine, EngineOptions, Model, Session};
use trine_tests::{equal_up_to_a_near_tie, fixture, greedy, ids};

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

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array of numbers")
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

fn nmse(want: &[f64], got: &[f32]) -> f64 {
    assert_eq!(want.len(), got.len());
    let err: f64 = want
        .iter()
        .zip(got)
        .map(|(a, &b)| (a - b as f64).powi(2))
        .sum();
    err / want.iter().map(|a| a * a).sum::<f64>()
}

/// Each backend the columns name, or a printed skip (a failure where it is required).
fn backends() -> Vec<(String, Arc<dyn trine_backends::Backend>)> {
    let names: Vec<String> = ["cpu", "vulkan", "wgpu"].map(String::from).to_vec();
    let mut out = vec![];
    for col in trine_conformance::columns(&names) {
        match &col.backend {
            Ok(b) => out.push((col.name.clone(), b.clone())),
            Err(why) => {
                assert!(!col.required, "{} is required but absent: {why}", col.name);
                println!("{} skipped: {why}", col.name);
            }
        }
    }
    out
}

/// llama.cpp's greedy cases of fixture `lcpp`: trine's prompt ids its, and its greedy ids up
/// to a near tie under `gap`.
fn greedy_cases(
    run: &str,
    model: &Arc<Model>,
    backend: &Arc<dyn trine_backends::Backend>,
    lcpp: &Value,
    gap: f64,
) {
    for want in lcpp["greedy"].as_array().unwrap() {
        let text = want["prompt"].as_str().unwrap();
        let special = want["parse_special"].as_bool().unwrap();
        let prompt_ids = model.tokenizer.encode(text, true, special).unwrap();
        assert_eq!(prompt_ids, ids(&want["prompt_ids"]), "{run}: {text:?}");
        let theirs = ids(&want["ids"]);
        let got = greedy(model, backend, &prompt_ids, theirs.len());
        match equal_up_to_a_near_tie("llama.cpp", (&got, &theirs), &want["top2"], gap) {
            Ok(note) => println!("{run}: {text:?}: {note}"),
            Err(e) => panic!("{run}: {text:?}: {e}"),
        }
    }
}

#[test]
fn tiny_gemma3_matches_the_float64_graph_and_llama_cpp() {
    let bytes = synth_llama(SynthShape::TINY_GEMMA3, 5).unwrap().to_bytes();
    let model = Arc::new(Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap());
    let exact = fixture("gemma3_tiny_f64.json");
    let lcpp = fixture("gemma3_tiny_llama_cpp.json");
    let runs = backends();
    assert!(!runs.is_empty(), "no backend ran");
    for (name, backend) in runs {
        let run = format!("gemma3-tiny on {name}");
        let prompt = ids(&exact["prompt_ids"]);
        let forced = ids(&exact["ids"]);
        let steps = exact["logits"].as_array().unwrap();
        let sizes = EngineOptions::for_generation(&model.config, prompt.len(), forced.len());
        let engine = Engine::new(model.clone(), backend.clone(), sizes).unwrap();
        let mut session = Session::new(engine, None);
        let mut logits = session.feed(&prompt).unwrap();
        let mut worst: f64 = 0.0;
        for (i, want) in steps.iter().enumerate() {
            let e = nmse(&floats(want), &logits);
            assert!(e < LOGITS_NMSE, "{run}: step {i}: logits NMSE {e:.3e}");
            worst = worst.max(e);
            if i + 1 < steps.len() {
                logits = session.feed(&[forced[i]]).unwrap();
            }
        }
        println!(
            "{run}: {} steps, logits within NMSE {worst:.2e} of float64",
            steps.len()
        );
        greedy_cases(&run, &model, &backend, &lcpp, TINY_FLIP_GAP);
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
    for (name, backend) in backends() {
        let mut cases = lcpp.clone();
        if name != "cpu" {
            cases["greedy"].as_array_mut().unwrap().truncate(1);
        }
        let run = format!("gemma3 270m on {name}");
        greedy_cases(&run, &model, &backend, &cases, REAL_FLIP_GAP);
    }
}

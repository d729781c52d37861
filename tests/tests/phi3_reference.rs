//! The tiny synthetic Phi-3 and Mistral files (`trine synth-model --like phi3-tiny|mistral-tiny
//! --seed 5`, built here in memory) on the CPU, Vulkan and wgpu backends, against references
//! committed in `llama/tests/fixtures/` by `scripts/reference/phi3.sh`:
//!
//! - `FAMILY_tiny_f64[_CTX].json`: the family's graph in float64 (`scripts/reference/
//!   llama_numpy.py --ids`), every step's logits. Fed the same ids, trine's logits must be
//!   within [`LOGITS_NMSE`] of them at every step.
//! - `FAMILY_tiny_llama_cpp[_CTX].json`: llama.cpp's CPU greedy ids for text prompts. trine's
//!   prompt ids must be its (a SentencePiece vocabulary with merges and control tokens), and
//!   trine's greedy ids its up to a step where its top two logits nearly tie.
//!
//! Phi-3 runs with a KV cache of 512 positions and of 8192, on either side of its original
//! context (4096): LongRoPE's short factors turn its rope in the first, the long ones in the
//! second, in trine as in llama.cpp.

use serde_json::Value;
use std::sync::Arc;
use trine_gguf::synth::{synth_llama, SynthShape};
use trine_gguf::Gguf;
use trine_llama::{Engine, EngineOptions, Model, Session};
use trine_tests::{equal_up_to_a_near_tie, fixture, greedy_sized, ids};

/// (family, shape, KV cache positions, fixture suffix).
const RUNS: [(&str, SynthShape, u32, &str); 3] = [
    ("phi3", SynthShape::TINY_PHI3, 512, "_512"),
    ("phi3", SynthShape::TINY_PHI3, 8192, "_8192"),
    ("mistral", SynthShape::TINY_MISTRAL, 512, ""),
];

/// How far trine's logits may be from the float64 ones (NMSE): the Qwen tests' bound, 5
/// times the most they measured on files of this size.
const LOGITS_NMSE: f64 = 5e-4;

/// The top-2 gap (in logits) under which 8-bit activations may flip a greedy choice: the
/// Qwen tests' (llama.cpp's 8-bit activations moved a top logit by at most 0.0029 there).
const FLIP_GAP: f64 = 0.02;

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

fn model(shape: SynthShape) -> Arc<Model> {
    let bytes = synth_llama(shape, 5).unwrap().to_bytes();
    Arc::new(Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap())
}

/// An engine of `context` positions, in steps of at most 32 tokens (the prompts are shorter;
/// a larger batch would only prepare more kernels).
fn sizes(context: u32) -> EngineOptions {
    EngineOptions {
        context,
        max_batch: 32,
        record: true,
        cache: None,
    }
}

#[test]
fn tiny_phi3_and_mistral_files_match_the_float64_graph_and_llama_cpp() {
    let names: Vec<String> = ["cpu", "vulkan", "wgpu"].map(String::from).to_vec();
    let columns = trine_conformance::columns(&names);
    for (family, shape, context, suffix) in RUNS {
        let model = model(shape);
        let exact = fixture(&format!("{family}_tiny_f64{suffix}.json"));
        let lcpp = fixture(&format!("{family}_tiny_llama_cpp{suffix}.json"));
        let mut ran = 0;
        for col in &columns {
            let backend = match &col.backend {
                Ok(b) => b.clone(),
                Err(why) => {
                    assert!(!col.required, "{} is required but absent: {why}", col.name);
                    println!("{family}: {} skipped: {why}", col.name);
                    continue;
                }
            };
            let run = format!("{family} at {context} on {}", col.name);
            let prompt = ids(&exact["prompt_ids"]);
            let forced = ids(&exact["ids"]);
            let steps = exact["logits"].as_array().unwrap();
            let engine = Engine::new(model.clone(), backend.clone(), sizes(context)).unwrap();
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
            for want in lcpp["greedy"].as_array().unwrap() {
                let text = want["prompt"].as_str().unwrap();
                let special = want["parse_special"].as_bool().unwrap();
                let prompt_ids = model.tokenizer.encode(text, true, special).unwrap();
                assert_eq!(prompt_ids, ids(&want["prompt_ids"]), "{run}: {text:?}");
                let theirs = ids(&want["ids"]);
                let got = greedy_sized(&model, &backend, sizes(context), &prompt_ids, theirs.len());
                let top2 = &want["top2"];
                match equal_up_to_a_near_tie("llama.cpp", (&got, &theirs), top2, FLIP_GAP) {
                    Ok(note) => println!("{run}: {text:?}: {note}"),
                    Err(e) => panic!("{run}: {text:?}: {e}"),
                }
            }
            ran += 1;
        }
        assert!(ran > 0, "{family}: no backend ran");
    }
}

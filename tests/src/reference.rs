//! What the model reference tests share: the synthetic files and the backends they run on,
//! and their comparisons with the float64 graph's logits and llama.cpp's greedy ids.

use crate::{equal_up_to_a_near_tie, greedy, greedy_sized, ids};
use serde_json::Value;
use std::sync::Arc;
use trine_backends::Backend;
use trine_gguf::synth::{synth_llama, SynthShape};
use trine_gguf::Gguf;
use trine_llama::{Engine, EngineOptions, Model, Session};

/// The synthetic file of `shape` (seed 5, as `trine synth-model --seed 5` makes it), loaded.
pub fn synth(shape: SynthShape) -> Arc<Model> {
    let bytes = synth_llama(shape, 5).unwrap().to_bytes();
    Arc::new(Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap())
}

/// Each of the CPU, Vulkan and wgpu backends present, or a printed skip naming `what` (a
/// failure where the backend is required).
pub fn backends(what: &str) -> Vec<(String, Arc<dyn Backend>)> {
    let names: Vec<String> = ["cpu", "vulkan", "wgpu"].map(String::from).to_vec();
    let mut out = vec![];
    for col in trine_conformance::columns(&names) {
        match &col.backend {
            Ok(b) => out.push((col.name.clone(), b.clone())),
            Err(why) => {
                assert!(!col.required, "{} is required but absent: {why}", col.name);
                println!("{what}: {} skipped: {why}", col.name);
            }
        }
    }
    out
}

/// A fixture's array of numbers.
pub fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array of numbers")
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

/// The squared error of `got` over the energy of `want`.
pub fn nmse(want: &[f64], got: &[f32]) -> f64 {
    assert_eq!(want.len(), got.len());
    let err: f64 = want
        .iter()
        .zip(got)
        .map(|(a, &b)| (a - b as f64).powi(2))
        .sum();
    err / want.iter().map(|a| a * a).sum::<f64>()
}

/// The sizes `trine generate` would take for the float64 fixture `exact`'s prompt and ids.
pub fn sizes_for(model: &Model, exact: &Value) -> EngineOptions {
    let prompt = exact["prompt_ids"].as_array().unwrap().len();
    let forced = exact["ids"].as_array().unwrap().len();
    EngineOptions::for_generation(&model.config, prompt, forced)
}

/// Fed the float64 fixture `exact`'s prompt and ids on an engine of `sizes`, every step's
/// logits within `bound` (NMSE) of its. Where the fixture has `route_gaps`, a step whose
/// router gap is under `route_gap` (`None`: none) is not held to the bound, and fewer than
/// half may be so.
pub fn follows_float64(
    run: &str,
    (model, backend, sizes): (&Arc<Model>, &Arc<dyn Backend>, EngineOptions),
    exact: &Value,
    bound: f64,
    route_gap: Option<f64>,
) {
    let prompt = ids(&exact["prompt_ids"]);
    let forced = ids(&exact["ids"]);
    let steps = exact["logits"].as_array().unwrap();
    let engine = Engine::new(model.clone(), backend.clone(), sizes).unwrap();
    let mut session = Session::new(engine, None);
    let mut logits = session.feed(&prompt).unwrap();
    let gaps = exact.get("route_gaps").map(floats);
    let mut worst: f64 = 0.0;
    let mut excused = vec![];
    for (i, want) in steps.iter().enumerate() {
        let e = nmse(&floats(want), &logits);
        match gaps.as_ref().map(|g| g[i]) {
            Some(gap) if route_gap.is_some_and(|r| gap < r) => {
                excused.push(format!("step {i} (router gap {gap:.1e}): NMSE {e:.2e}"))
            }
            _ => {
                assert!(e < bound, "{run}: step {i}: logits NMSE {e:.3e}");
                worst = worst.max(e);
            }
        }
        if i + 1 < steps.len() {
            logits = session.feed(&[forced[i]]).unwrap();
        }
    }
    assert!(2 * excused.len() < steps.len(), "{run}: {excused:?}");
    let held = steps.len() - excused.len();
    let note = match gaps {
        Some(_) => format!("; near routing ties, not held: {excused:?}"),
        None => String::new(),
    };
    println!("{run}: {held} steps, logits within NMSE {worst:.2e} of float64{note}");
}

/// llama.cpp's greedy cases of fixture `lcpp`: trine's prompt ids its, and its greedy ids up
/// to a near tie under `gap`, on an engine of `sizes` (`None`: those `trine generate` takes).
pub fn greedy_cases(
    run: &str,
    (model, backend, sizes): (&Arc<Model>, &Arc<dyn Backend>, Option<EngineOptions>),
    lcpp: &Value,
    gap: f64,
) {
    for want in lcpp["greedy"].as_array().unwrap() {
        let text = want["prompt"].as_str().unwrap();
        let special = want["parse_special"].as_bool().unwrap();
        let prompt_ids = model.tokenizer.encode(text, true, special).unwrap();
        assert_eq!(prompt_ids, ids(&want["prompt_ids"]), "{run}: {text:?}");
        let theirs = ids(&want["ids"]);
        let got = match sizes {
            Some(s) => greedy_sized(model, backend, s, &prompt_ids, theirs.len()),
            None => greedy(model, backend, &prompt_ids, theirs.len()),
        };
        match equal_up_to_a_near_tie("llama.cpp", (&got, &theirs), &want["top2"], gap) {
            Ok(note) => println!("{run}: {text:?}: {note}"),
            Err(e) => panic!("{run}: {text:?}: {e}"),
        }
    }
}

//! Rope scaling on the tiny models with Llama 3.2's `rope_freqs.weight`, linear and YaRN
//! scaling, and Phi-4-mini's partial rotary (`trine_gguf::synth::rope::tiny`), against
//! `llama/tests/fixtures/rope_reference.json` (`scripts/reference/rope.sh`): llama.cpp's CPU
//! greedy ids and top-2 logits over a prompt of 346 tokens, and a float64 reference's, with
//! the scaling and ignoring it (turning whole heads, for partial rotary). Every backend
//! present decodes them; the GPU stand-in and the GPUs are also checked node by node by the
//! CPU. Files with scaling trine does not run, or with nonsense in it, are typed errors.

use crate::common::*;
use serde_json::Value;
use std::sync::Arc;
use trine_backends::Backend;
use trine_gguf::synth::rope::{tiny, TinyRope, ROPE_FREQS};
use trine_gguf::{Gguf, GgufWriter, TensorType, Value as Meta};
use trine_llama::{Engine, EngineOptions, Model, ModelError, Session};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/rope_reference.json"
);

/// The seed `examples/rope_models.rs` made the fixture's models from.
const SEED: u64 = 5;

/// Steps of up to 64 tokens: the 346-token prompt runs as five full steps and one of 26.
const OPTIONS: EngineOptions = EngineOptions {
    context: 384,
    max_batch: 64,
    record: true,
    cache: None,
};

/// How far trine's logits may be from the float64 reference's: float32 arithmetic with an f16
/// KV cache on a GPU moves these by a few 1e-4 (llama.cpp's float32 run is within 1e-6).
const LOGIT_TOLERANCE: f64 = 1e-3;

fn fixture() -> Value {
    let text = std::fs::read_to_string(FIXTURE).unwrap_or_else(|e| panic!("{FIXTURE}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{FIXTURE}: {e}"))
}

fn ids(v: &Value) -> Vec<u32> {
    let a = v.as_array().expect("an array of ids");
    a.iter()
        .map(|x| x.as_u64().expect("an id") as u32)
        .collect()
}

fn top2(v: &Value) -> Vec<(f64, f64)> {
    let a = v.as_array().expect("an array of pairs");
    a.iter()
        .map(|p| (p[0].as_f64().unwrap(), p[1].as_f64().unwrap()))
        .collect()
}

fn model(r: TinyRope) -> Arc<Model> {
    let bytes = tiny(r, SEED).unwrap().to_bytes();
    Arc::new(Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap())
}

/// Greedy decoding of `prompt` for `n` tokens: each step's id and its top two logits.
fn greedy(session: &mut Session, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<(f64, f64)>) {
    let mut logits = session.feed(prompt).unwrap();
    let (mut out, mut tops) = (vec![], vec![]);
    for _ in 0..n {
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        out.push(order[0] as u32);
        tops.push((logits[order[0]] as f64, logits[order[1]] as f64));
        if out.len() < n {
            logits = session.feed(&[order[0] as u32]).unwrap();
        }
    }
    (out, tops)
}

/// The largest difference of the top-1 logits of two runs over the steps they share.
fn worst_top1(a: &[(f64, f64)], b: &[(f64, f64)]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x.0 - y.0).abs())
        .fold(0.0, f64::max)
}

/// The fixture can tell right from wrong: the float64 reference agrees with llama.cpp, and
/// ignoring the scaling (or partial rotary) moves its logits by many times the tolerance.
#[test]
fn the_reference_tells_scaled_rope_from_plain() {
    let f = fixture();
    for r in TinyRope::ALL {
        let m = &f["models"][r.name()];
        let (f64_top, lcpp_top) = (top2(&m["f64"]["top2"]), top2(&m["llama_cpp"]["top2"]));
        assert_eq!(
            ids(&m["f64"]["ids"]),
            ids(&m["llama_cpp"]["ids"]),
            "{}",
            r.name()
        );
        assert!(worst_top1(&f64_top, &lcpp_top) < 1e-5, "{}", r.name());
        let ignoring = top2(&m["f64_ignoring_scaling"]["top2"]);
        let moved = worst_top1(&f64_top, &ignoring);
        assert!(
            moved > 2.0 * LOGIT_TOLERANCE,
            "{}: ignoring the scaling moves the logits by only {moved}",
            r.name()
        );
    }
}

/// On every backend present, and the GPU stand-in: each model's greedy ids equal llama.cpp's
/// and the float64 reference's (their top-2 gaps are all above 0.009, no near ties), and each
/// step's top two logits are the reference's within [`LOGIT_TOLERANCE`].
#[test]
fn greedy_ids_and_logits_match_llama_cpp_and_float64() {
    let f = fixture();
    let mut check = |name: &str, backend: Arc<dyn Backend>| {
        for r in TinyRope::ALL {
            let m = &f["models"][r.name()];
            let prompt = ids(&m["llama_cpp"]["prompt_ids"]);
            let want = ids(&m["llama_cpp"]["ids"]);
            let want_top = top2(&m["f64"]["top2"]);
            let engine = Engine::new(model(r), backend.clone(), OPTIONS).unwrap();
            let mut session = Session::new(engine, None);
            let (got, got_top) = greedy(&mut session, &prompt, want.len());
            assert_eq!(got, want, "{name}, {}", r.name());
            for (step, (g, w)) in got_top.iter().zip(&want_top).enumerate() {
                let off = (g.0 - w.0).abs().max((g.1 - w.1).abs());
                assert!(
                    off < LOGIT_TOLERANCE,
                    "{name}, {}, step {step}: top two {g:?}, the reference's {w:?}",
                    r.name()
                );
            }
            println!(
                "{name}, {}: {} ids equal llama.cpp's, top-1 logits within {:.1e} of float64",
                r.name(),
                got.len(),
                worst_top1(&got_top, &want_top)
            );
        }
    };
    check("gpu stand-in", gpu());
    let ran = on_each(&["cpu", "vulkan", "wgpu", "cuda", "hip"], &mut check);
    assert!(ran >= 1, "the cpu always runs");
}

/// The GPU stand-in and each GPU present, checked node by node by the CPU over the prompt and
/// the first steps of the YaRN model (the scaling with every part: ramp, factor, magnitude):
/// no node over its bound.
#[test]
fn scaled_rope_agrees_node_by_node() {
    let f = fixture();
    let prompt = ids(&f["models"]["yarn"]["llama_cpp"]["prompt_ids"]);
    let mut check = |name: &str, backend: Arc<dyn Backend>| {
        let main = Engine::new(model(TinyRope::Yarn), backend, OPTIONS).unwrap();
        let checker = main.checker(cpu()).unwrap();
        let mut session = Session::new(main, Some(checker));
        let (ids, _) = greedy(&mut session, &prompt, 3);
        assert_eq!(session.checks.len(), 3, "{name}: {ids:?}");
        for c in &session.checks {
            assert!(c.first_over_bound.is_none(), "{name}: {c:?}");
        }
    };
    check("gpu stand-in", gpu());
    on_each(&["vulkan", "wgpu", "cuda", "hip"], &mut check);
}

/// The llama3 model's file with its metadata and tensors changed by `edit`.
fn edited(
    edit: impl FnOnce(&mut Vec<(String, Meta)>, &mut Vec<(String, Vec<u64>, TensorType, Vec<u8>)>),
) -> Result<Model, ModelError> {
    let g = Gguf::from_bytes(tiny(TinyRope::Llama3, SEED).unwrap().to_bytes()).unwrap();
    let mut meta: Vec<(String, Meta)> = g.metadata().to_vec();
    let mut tensors: Vec<_> = g
        .tensors()
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.dims.clone(),
                t.ty,
                g.tensor_data(t).to_vec(),
            )
        })
        .collect();
    edit(&mut meta, &mut tensors);
    let mut w = GgufWriter::new();
    for (k, v) in meta {
        w.add(k, v).unwrap();
    }
    for (name, dims, ty, bytes) in tensors {
        w.add_tensor(name, &dims, ty, bytes).unwrap();
    }
    Model::from_gguf(Gguf::from_bytes(w.to_bytes()).unwrap())
}

fn set(meta: &mut Vec<(String, Meta)>, key: &str, v: Meta) {
    meta.retain(|(k, _)| k != key);
    meta.push((key.to_string(), v));
}

fn factors_to(
    tensors: &mut [(String, Vec<u64>, TensorType, Vec<u8>)],
    f: impl Fn(&mut (String, Vec<u64>, TensorType, Vec<u8>)),
) {
    let t = tensors.iter_mut().find(|t| t.0 == ROPE_FREQS).unwrap();
    f(t);
}

fn hyperparameter(r: Result<Model, ModelError>) -> (String, String) {
    match r {
        Err(ModelError::Hyperparameter { key, value, .. }) => (key, value),
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("the model opened"),
    }
}

/// Scaling trine does not run, and nonsense in it, are typed errors naming the key or tensor
/// and the value, where llama.cpp aborts or runs a wrong rope.
#[test]
fn bad_rope_scaling_is_a_typed_error() {
    let s = |v: &str| Meta::String(v.to_string());
    let e = hyperparameter(edited(|m, _| {
        set(m, "llama.rope.scaling.type", s("longrope"))
    }));
    assert_eq!(e, ("llama.rope.scaling.type".into(), "longrope".into()));
    let e = hyperparameter(edited(|m, t| {
        set(m, "llama.rope.scaling.type", s("llama3"));
        t.retain(|t| t.0 != ROPE_FREQS);
    }));
    assert_eq!(e, ("llama.rope.scaling.type".into(), "llama3".into()));
    let e = hyperparameter(edited(|m, _| {
        set(m, "llama.rope.scaling.factor", Meta::F32(-2.0))
    }));
    assert_eq!(e, ("llama.rope.scaling.factor".into(), "-2".into()));
    let e = hyperparameter(edited(|m, _| {
        set(m, "llama.rope.scaling.attn_factor", Meta::F32(f32::NAN))
    }));
    assert_eq!(e, ("llama.rope.scaling.attn_factor".into(), "NaN".into()));
    let e = hyperparameter(edited(|m, _| {
        set(m, "llama.rope.scaling.type", s("yarn"));
        set(
            m,
            "llama.rope.scaling.original_context_length",
            Meta::U32(0),
        );
    }));
    assert_eq!(
        e,
        (
            "llama.rope.scaling.original_context_length".into(),
            "0".into()
        )
    );
    let e = hyperparameter(edited(|_, t| {
        factors_to(t, |t| t.3[12..16].copy_from_slice(&0f32.to_le_bytes()))
    }));
    assert_eq!(e, ("rope_freqs.weight[3]".into(), "0".into()));
    match edited(|_, t| {
        factors_to(t, |t| {
            t.1 = vec![4];
            t.3.truncate(16);
        })
    }) {
        Err(ModelError::TensorShape {
            name,
            expected,
            found,
        }) => {
            assert_eq!(
                (name.as_str(), expected, found),
                (ROPE_FREQS, vec![8], vec![4])
            )
        }
        other => panic!("a rope_freqs of 4 factors for 8 pairs: {:?}", other.err()),
    }
    match edited(|_, t| {
        factors_to(t, |t| {
            t.2 = TensorType::F16;
            t.3.truncate(16);
        })
    }) {
        Err(ModelError::TensorType { name, ty, .. }) => {
            assert_eq!((name.as_str(), ty), (ROPE_FREQS, TensorType::F16))
        }
        other => panic!("an F16 rope_freqs: {:?}", other.err()),
    }
}

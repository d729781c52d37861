//! Steps as they run: a recorded decode step equals its nodes run one by one; NaN logits and
//! bad models, ids and steps are typed errors.

use crate::common::*;
use trine_gguf::synth::synth_llama;
use trine_gguf::synth::SynthShape;
use trine_gguf::{Gguf, GgufWriter, Value};
use trine_llama::{
    generate, Engine, EngineOptions, GenerateOptions, Model, ModelError, Sampling, Session,
};

/// A decode step replayed from its recording computes what its nodes dispatched one by one
/// compute, bit for bit, at every position; its greedy token is the host's argmax of its
/// logits; and it launches five kernels per layer (thirteen on a CPU, see
/// [`decode_dispatches`]).
#[test]
fn recorded_decode_steps_equal_node_by_node_ones() {
    let model = tiny();
    let names = ["cpu", "vulkan", "wgpu", "cuda", "hip"];
    let ran = on_each(&names, |name, backend| {
        let run = |record| {
            let sizes = EngineOptions { record, ..SIZES };
            let engine = Engine::new(model.clone(), backend.clone(), sizes).unwrap();
            assert_eq!(
                engine.dispatches_per_token(),
                decode_dispatches(backend.as_ref()),
                "{name}"
            );
            decode(&mut Session::new(engine, None))
        };
        let (recorded, direct) = (run(true), run(false));
        assert_eq!(recorded, direct, "{name}");
        for (i, (host, device)) in recorded.1.iter().enumerate() {
            assert_eq!(host, device, "{name} step {i}");
        }
    });
    assert!(ran > 0);
}

/// A device whose output head writes NaN everywhere: generation stops at the prompt's step
/// with [`ModelError::NanLogits`], greedy (the device's argmax) and sampling (the host's)
/// alike, instead of going on with a token the model did not choose; the logits read back
/// are all NaN, so the error is the head's and not the argmax's. The CPU generates.
#[test]
fn all_nan_logits_are_a_typed_error() {
    let model = tiny();
    let nan = || faulty("", &["matvec_q8_0", "matvec_q8_q8_0"], f32::NAN);
    for temperature in [0.0, 0.8] {
        let opts = GenerateOptions {
            max_tokens: 4,
            sampling: Sampling {
                temperature,
                ..Sampling::default()
            },
            stop_at_end: false,
            stop_on_divergence: false,
        };
        let mut spoilt = Session::new(Engine::new(model.clone(), nan(), SIZES).unwrap(), None);
        match generate(&mut spoilt, &[17, 90, 200], opts, |_| {}) {
            Err(ModelError::NanLogits) => {}
            Err(e) => panic!("temperature {temperature}: expected NanLogits, got {e}"),
            Ok(r) => panic!(
                "temperature {temperature}: generated {:?}",
                r.generated_tokens
            ),
        }
        let mut healthy = Session::new(Engine::new(model.clone(), cpu(), SIZES).unwrap(), None);
        let report = generate(&mut healthy, &[17, 90, 200], opts, |_| {}).unwrap();
        assert_eq!(report.generated_tokens.len(), 4);
    }
    let mut spoilt = Session::new(Engine::new(model, nan(), SIZES).unwrap(), None);
    assert!(matches!(
        spoilt.feed_greedy(&[17, 90]),
        Err(ModelError::NanLogits)
    ));
    let logits = spoilt.feed(&[200]).unwrap();
    assert!(logits.iter().all(|v| v.is_nan()), "{:?}", &logits[..4]);
}

/// The tiny model's file, rebuilt with `edit` applied to its metadata and tensors.
fn edited(edit: impl Fn(&str, &mut Option<Value>) -> bool) -> Result<Model, ModelError> {
    let g = Gguf::from_bytes(synth_llama(SynthShape::TINY, 5).unwrap().to_bytes()).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        let mut v = Some(v.clone());
        edit(k, &mut v);
        if let Some(v) = v {
            w.add(k.clone(), v).unwrap();
        }
    }
    for t in g.tensors() {
        if edit(&t.name, &mut None) {
            w.add_tensor(t.name.clone(), &t.dims, t.ty, g.tensor_data(t).to_vec())
                .unwrap();
        }
    }
    Model::from_gguf(Gguf::from_bytes(w.to_bytes()).unwrap())
}

#[test]
fn bad_models_and_steps_are_typed_errors() {
    let arch = edited(|k, v| {
        if k == "general.architecture" {
            *v = Some(Value::String("gpt2".into()));
        }
        true
    });
    assert!(matches!(arch, Err(ModelError::Architecture { found, .. }) if found == "gpt2"));
    let missing = edited(|k, _| k != "blk.1.ffn_up.weight");
    assert!(matches!(missing, Err(ModelError::MissingTensor(t)) if t == "blk.1.ffn_up.weight"));
    let heads = edited(|k, v| {
        if k == "llama.attention.head_count_kv" {
            *v = Some(Value::U32(3));
        }
        true
    });
    assert!(
        matches!(heads, Err(ModelError::Hyperparameter { .. })),
        "{:?}",
        heads.err()
    );

    let model = tiny();
    let mut s = Session::new(Engine::new(model, cpu(), SIZES).unwrap(), None);
    assert!(matches!(
        s.feed(&[SynthShape::TINY.vocab]),
        Err(ModelError::TokenOutOfRange {
            id: 320,
            vocab: 320
        })
    ));
    assert!(matches!(s.feed(&[]), Err(ModelError::EmptyPrompt)));
    s.feed(&[1; 30]).unwrap();
    assert!(matches!(
        s.feed(&[1, 2, 3]),
        Err(ModelError::ContextFull {
            needed: 33,
            max: 32
        })
    ));
}

/// Every prompt step an engine accepts runs: a GPU prepares the kernels of each size up to its
/// largest batch, in each weight type (an F32 model's products change form with the size, and
/// a 26-token step once met an attention output product no prepared size had).
#[test]
fn every_prompt_size_up_to_the_largest_batch_runs() {
    use trine_gguf::TensorType;
    for matrices in [TensorType::F32, TensorType::Q4_1] {
        let shape = SynthShape {
            matrices,
            embedding: matrices,
            ..SynthShape::TINY
        };
        let bytes = synth_llama(shape, 5).unwrap().to_bytes();
        let model =
            std::sync::Arc::new(Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap());
        let sizes = EngineOptions {
            context: 96,
            max_batch: 64,
            ..SIZES
        };
        let engine = Engine::new(model, gpu(), sizes).unwrap();
        let mut session = Session::new(engine, None);
        for n in 1..=sizes.max_batch {
            session.rewind(0);
            let ids: Vec<u32> = (0..n).map(|i| 1 + i % 50).collect();
            let logits = session
                .feed(&ids)
                .unwrap_or_else(|e| panic!("{matrices:?}, {n} tokens: {e}"));
            assert!(
                logits.iter().all(|v| v.is_finite()),
                "{matrices:?}, {n} tokens"
            );
        }
    }
}

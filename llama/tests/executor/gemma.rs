//! The Gemma 3 graph on the tiny synthetic file: each backend present, and the GPU-typed
//! stand-ins, checked node by node by the CPU past the sliding window; the nodes the family
//! adds; and malformed files refused with the tensor or key at fault.

use crate::common::*;
use std::sync::Arc;
use trine_backends::Backend;
use trine_gguf::synth::{synth_llama, SynthShape};
use trine_gguf::{Gguf, GgufWriter, TensorType, Value};
use trine_llama::graph::Op;
use trine_llama::{Engine, Model, ModelError};

const SHAPE: SynthShape = SynthShape::TINY_GEMMA3;

fn model() -> Arc<Model> {
    let bytes = synth_llama(SHAPE, 5).unwrap().to_bytes();
    Arc::new(Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap())
}

/// The prompt and decode steps on the GPU stand-in (with and without matrix tiles), on each
/// GPU backend present, and on the CPU checked by the stand-in: every node within its bound,
/// the worst under 1e-9. The steps reach position 6, past layer 0's window of 4, and every
/// node the family adds is among those compared.
#[test]
fn gemma3_backends_agree_node_by_node() {
    let model = model();
    let mut compared = vec![];
    let mut check = |name: &str, backend: Arc<dyn Backend>| {
        let main = Engine::new(model.clone(), backend, SIZES).unwrap();
        for tokens in [1, 5] {
            let windowed = count_nodes(&main, tokens, |op| {
                matches!(
                    op,
                    Op::Attention {
                        window: Some(4),
                        ..
                    }
                )
            });
            let global = count_nodes(&main, tokens, |op| {
                matches!(op, Op::Attention { window: None, .. })
            });
            assert_eq!((windowed, global), (1, 1), "{name}, {tokens} tokens");
            let post = count_nodes(&main, tokens, |op| matches!(op, Op::NormAdd { .. }));
            assert_eq!(post, 2 * SHAPE.n_layer as usize, "{name}");
            let geglu = count_nodes(&main, tokens, |op| matches!(op, Op::Geglu));
            assert_eq!(geglu, SHAPE.n_layer as usize, "{name}");
            let scaled = count_nodes(
                &main,
                tokens,
                |op| matches!(op, Op::Embed { scale: Some(s), .. } if *s == 8.0),
            );
            assert_eq!(scaled, 1, "{name}: the embedding scaled by sqrt(64)");
        }
        let checker = main.checker(cpu()).unwrap();
        for c in agree(&format!("gemma3 on {name}"), main, checker) {
            assert!(c.worst.nmse.is_some_and(|e| e < 1e-9), "{name}: {c:?}");
        }
        compared.push(name.to_string());
    };
    check("gpu stand-in", gpu());
    check("gpu stand-in with tiles", gpu_with(true));
    let ran = on_each(&["vulkan", "wgpu", "cuda", "hip"], &mut check);
    assert_eq!(compared.len(), ran + 2, "{compared:?}");
    let main = Engine::new(model.clone(), cpu(), SIZES).unwrap();
    let checker = main.checker(gpu()).unwrap();
    agree("gemma3: gpu checking cpu", main, checker);
    println!("gemma3: checked against the cpu: {compared:?}");
}

/// The tiny file's layers: layer 0 local (window 4, rope base 10000), layer 1 global (the
/// file's base 10⁶), as a sliding-window pattern of 2 makes them; the embedding scale is
/// sqrt(n_embd).
#[test]
fn gemma3_reads_its_windows_and_scales() {
    let m = model();
    let c = &m.config;
    let swa = c.swa.as_ref().unwrap();
    assert_eq!(
        (swa.window, swa.local.clone(), swa.base),
        (4, vec![true, false], 10_000.0)
    );
    assert_eq!((c.window(0), c.window(1)), (Some(4), None));
    assert_eq!(m.rope.short.base, 1_000_000.0);
    assert_eq!(m.rope_local.as_ref().unwrap().base, 10_000.0);
    assert_eq!(m.weights.embedding_scale, Some(8.0));
    assert!(m.weights.layers.iter().all(|l| l.post_norms.is_some()));
}

/// The tiny Gemma 3 file, rebuilt with tensor `name` replaced by an F32 one of `dims`
/// (`None`: left out), or with metadata key `name` set to `value` (added where absent).
fn edited(name: &str, dims: Option<&[u64]>, value: Option<Value>) -> ModelError {
    let g = Gguf::from_bytes(synth_llama(SHAPE, 5).unwrap().to_bytes()).unwrap();
    let mut w = GgufWriter::new();
    let mut set = false;
    for (k, v) in g.metadata() {
        let v = match &value {
            Some(new) if k == name => {
                set = true;
                new.clone()
            }
            _ => v.clone(),
        };
        w.add(k.clone(), v).unwrap();
    }
    if let (Some(v), false) = (&value, set) {
        w.add(name.to_string(), v.clone()).unwrap();
    }
    for t in g.tensors() {
        if t.name != name {
            w.add_tensor(t.name.clone(), &t.dims, t.ty, g.tensor_data(t).to_vec())
                .unwrap();
        } else if let Some(dims) = dims {
            let n: u64 = dims.iter().product();
            w.add_tensor(
                t.name.clone(),
                dims,
                TensorType::F32,
                vec![0; 4 * n as usize],
            )
            .unwrap();
        }
    }
    match Model::from_gguf(Gguf::from_bytes(w.to_bytes()).unwrap()) {
        Ok(_) => panic!("{name}: the edited file loaded"),
        Err(e) => e,
    }
}

#[test]
fn malformed_gemma3_files_are_typed_errors() {
    for name in [
        "blk.1.post_ffw_norm.weight",
        "blk.0.post_attention_norm.weight",
    ] {
        match edited(name, None, None) {
            ModelError::MissingTensor(t) => assert_eq!(t, name),
            e => panic!("{e:?}"),
        }
    }
    let name = "blk.0.post_attention_norm.weight";
    match edited(name, Some(&[63]), None) {
        ModelError::TensorShape {
            name: t,
            expected,
            found,
        } => assert_eq!((t.as_str(), expected, found), (name, vec![64], vec![63])),
        e => panic!("{e:?}"),
    }
    let name = "blk.1.attn_q_norm.weight";
    match edited(name, Some(&[64]), None) {
        ModelError::TensorShape {
            name: t,
            expected,
            found,
        } => assert_eq!((t.as_str(), expected, found), (name, vec![32], vec![64])),
        e => panic!("{e:?}"),
    }
    let key = "gemma3.final_logit_softcapping";
    match edited(key, None, Some(Value::F32(30.0))) {
        ModelError::Hyperparameter { key: k, value, .. } => {
            assert_eq!((k.as_str(), value.as_str()), (key, "30"))
        }
        e => panic!("{e:?}"),
    }
    let key = "gemma3.rope.freq_base_swa";
    match edited(key, None, Some(Value::F32(-1.0))) {
        ModelError::Hyperparameter { key: k, value, .. } => {
            assert_eq!((k.as_str(), value.as_str()), (key, "-1"))
        }
        e => panic!("{e:?}"),
    }
    // A Qwen3 file carrying Gemma's post norms would run without them: refused.
    let qwen3_with_post_norms = {
        let g = Gguf::from_bytes(synth_llama(SHAPE, 5).unwrap().to_bytes()).unwrap();
        let mut w = GgufWriter::new();
        for (k, v) in g.metadata() {
            let k = k.replace("gemma3.", "qwen3.");
            let v = match k.as_str() {
                "general.architecture" => Value::String("qwen3".into()),
                _ => v.clone(),
            };
            w.add(k, v).unwrap();
        }
        for t in g.tensors() {
            w.add_tensor(t.name.clone(), &t.dims, t.ty, g.tensor_data(t).to_vec())
                .unwrap();
        }
        Model::from_gguf(Gguf::from_bytes(w.to_bytes()).unwrap())
    };
    match qwen3_with_post_norms {
        Err(ModelError::UnusedTensor { name, arch, .. }) => {
            assert_eq!(
                (name.as_str(), arch),
                ("blk.0.post_attention_norm.weight", "qwen3")
            )
        }
        other => panic!("{:?}", other.err()),
    }
}

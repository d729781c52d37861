//! The Qwen2 and Qwen3 graphs on tiny synthetic files: each backend present, and the
//! GPU-typed stand-ins, checked node by node by the CPU; the nodes the families add; and
//! their malformed files refused with the tensor or key at fault.

use crate::common::*;
use std::sync::Arc;
use trine_backends::Backend;
use trine_gguf::synth::{synth_llama, SynthShape};
use trine_gguf::{Gguf, GgufWriter, TensorType, Value};
use trine_llama::graph::Op;
use trine_llama::{Engine, Model, ModelError};
use trine_ops::rope::RopeMode;

const FAMILIES: [(&str, SynthShape); 2] = [
    ("qwen2", SynthShape::TINY_QWEN2),
    ("qwen3", SynthShape::TINY_QWEN3),
];

fn model(shape: SynthShape) -> Arc<Model> {
    let bytes = synth_llama(shape, 5).unwrap().to_bytes();
    Arc::new(Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap())
}

/// Each family's prompt and decode steps on the GPU stand-in (with and without matrix tiles),
/// on each GPU backend present, and on the CPU checked by the stand-in: every node within its
/// bound, the worst under 1e-9, and the nodes the family adds among those compared.
#[test]
fn qwen_backends_agree_node_by_node() {
    for (family, shape) in FAMILIES {
        let model = model(shape);
        let mut compared = vec![];
        let mut check = |name: &str, backend: Arc<dyn Backend>| {
            let main = Engine::new(model.clone(), backend, SIZES).unwrap();
            let added = count_nodes(&main, 1, |op| matches!(op, Op::QkvBiasNorm { .. }));
            assert!(added >= shape.n_layer as usize, "{family} on {name}");
            // Qwen rotates NeoX pairs, which only the rope-store node computes.
            let neox = |op: &Op| {
                matches!(
                    op,
                    Op::RopeStore {
                        mode: RopeMode::Neox,
                        ..
                    }
                )
            };
            for tokens in [1, 5] {
                let ropes = count_nodes(&main, tokens, neox);
                assert!(ropes >= shape.n_layer as usize, "{family} on {name}");
                let all = count_nodes(&main, tokens, |op| matches!(op, Op::RopeStore { .. }));
                assert_eq!(ropes, all, "{family} on {name}");
            }
            let checker = main.checker(cpu()).unwrap();
            for c in agree(&format!("{family} on {name}"), main, checker) {
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
        agree(&format!("{family}: gpu checking cpu"), main, checker);
        println!("{family}: checked against the cpu: {compared:?}");
    }
}

/// Qwen3's q is wider than the residual stream (4 heads of 32 over 64): the QKV product's
/// rows, the output projection's columns and the head size all follow the file's
/// `qwen3.attention.key_length`, not `n_embd / n_head`.
#[test]
fn qwen3_takes_the_head_size_from_the_file() {
    let m = model(SynthShape::TINY_QWEN3);
    let c = &m.config;
    assert_eq!(
        (c.n_embd, c.head_dim(), c.q_dim(), c.kv_dim()),
        (64, 32, 128, 64)
    );
    let w = &m.weights;
    let layer = &w.layers[0];
    assert_eq!(w.tensors[layer.wo].cols, 128);
    let rows: u32 = layer.qkv.iter().map(|p| w.tensors[p.w].rows).sum();
    assert_eq!(rows, 128 + 2 * 64);
}

/// A family's file, rebuilt with tensor `name` replaced by `dims` (`None`: left out), or with
/// metadata key `name` set to `value`.
fn edited(shape: SynthShape, name: &str, dims: Option<&[u64]>, value: Option<Value>) -> ModelError {
    let g = Gguf::from_bytes(synth_llama(shape, 5).unwrap().to_bytes()).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        let v = match &value {
            Some(new) if k == name => new.clone(),
            _ => v.clone(),
        };
        w.add(k.clone(), v).unwrap();
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
fn malformed_qwen_files_are_typed_errors() {
    let (q2, q3) = (SynthShape::TINY_QWEN2, SynthShape::TINY_QWEN3);
    let name = "blk.1.attn_k.bias";
    match edited(q2, name, None, None) {
        ModelError::MissingTensor(t) => assert_eq!(t, name),
        e => panic!("{e:?}"),
    }
    match edited(q2, name, Some(&[31]), None) {
        ModelError::TensorShape {
            name: t,
            expected,
            found,
        } => assert_eq!((t.as_str(), expected, found), (name, vec![32], vec![31])),
        e => panic!("{e:?}"),
    }
    let name = "blk.0.attn_q_norm.weight";
    match edited(q3, name, Some(&[64]), None) {
        ModelError::TensorShape {
            name: t,
            expected,
            found,
        } => assert_eq!((t.as_str(), expected, found), (name, vec![32], vec![64])),
        e => panic!("{e:?}"),
    }
    match edited(q3, "blk.0.attn_k_norm.weight", None, None) {
        ModelError::MissingTensor(t) => assert_eq!(t, "blk.0.attn_k_norm.weight"),
        e => panic!("{e:?}"),
    }
    // A Llama file carrying biases would run without them: refused, not run wrong.
    let llama_with_bias = {
        let g = Gguf::from_bytes(synth_llama(q2, 5).unwrap().to_bytes()).unwrap();
        let mut w = GgufWriter::new();
        for (k, v) in g.metadata() {
            let k = k.replace("qwen2.", "llama.");
            let v = match k.as_str() {
                "general.architecture" => Value::String("llama".into()),
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
    match llama_with_bias {
        Err(ModelError::UnusedTensor { name, arch, .. }) => {
            assert_eq!((name.as_str(), arch), ("blk.0.attn_q.bias", "llama"))
        }
        other => panic!("{:?}", other.err()),
    }
    match edited(
        q3,
        "qwen3.attention.value_length",
        None,
        Some(Value::U32(16)),
    ) {
        ModelError::Hyperparameter { key, value, .. } => {
            assert_eq!(
                (key.as_str(), value.as_str()),
                ("qwen3.attention.value_length", "16")
            )
        }
        e => panic!("{e:?}"),
    }
    match edited(
        q3,
        "general.architecture",
        None,
        Some(Value::String("qwen2moe".into())),
    ) {
        ModelError::Architecture { found, supported } => {
            assert_eq!(found, "qwen2moe");
            assert_eq!(supported, "llama, qwen2, qwen3, gemma3, phi3, qwen3moe");
        }
        e => panic!("{e:?}"),
    }
}

//! The Qwen3-MoE graph on the tiny synthetic file: each backend present, and the GPU-typed
//! stand-ins, checked node by node by the CPU; the experts' nodes in every layer; malformed
//! files refused with the tensor or key at fault.

use crate::common::*;
use std::sync::Arc;
use trine_backends::Backend;
use trine_gguf::synth::{synth_llama, SynthShape};
use trine_gguf::{Gguf, GgufWriter, TensorType, Value};
use trine_llama::graph::Op;
use trine_llama::{Engine, Model, ModelError};

const SHAPE: SynthShape = SynthShape::TINY_QWEN3_MOE;

fn model() -> Arc<Model> {
    let bytes = synth_llama(SHAPE, 5).unwrap().to_bytes();
    Arc::new(Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap())
}

/// Prompt and decode steps on the GPU stand-in (with and without matrix tiles), on each GPU
/// backend present, and on the CPU checked by the stand-in: every node within its bound, the
/// worst under 1e-9, and the routing and both experts' products in every layer.
#[test]
fn qwen3moe_backends_agree_node_by_node() {
    let model = model();
    let mut compared = vec![];
    let mut check = |name: &str, backend: Arc<dyn Backend>| {
        let main = Engine::new(model.clone(), backend, SIZES).unwrap();
        for tokens in [1, 5] {
            let experts = |op: &Op| {
                matches!(
                    op,
                    Op::MoeRoute | Op::ExpertsSwiglu { .. } | Op::ExpertsDown { .. }
                )
            };
            let n = count_nodes(&main, tokens, experts);
            assert_eq!(n, 3 * SHAPE.n_layer as usize, "{name}, {tokens} tokens");
            let dense = count_nodes(&main, tokens, |op| matches!(op, Op::Swiglu(_)));
            assert_eq!(dense, 0, "{name}");
        }
        let checker = main.checker(cpu()).unwrap();
        for c in agree(&format!("qwen3moe on {name}"), main, checker) {
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
    agree("qwen3moe: gpu checking cpu", main, checker);
    println!("qwen3moe: checked against the cpu: {compared:?}");
}

/// The tiny file rebuilt with tensor `name` replaced by an f32 one of `dims` (`None`: left
/// out), or with metadata key `name` set to `value`; the error loading it.
fn edited(name: &str, dims: Option<&[u64]>, value: Option<Value>) -> ModelError {
    let g = Gguf::from_bytes(synth_llama(SHAPE, 5).unwrap().to_bytes()).unwrap();
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
            let bytes = vec![0; 4 * n as usize];
            w.add_tensor(t.name.clone(), dims, TensorType::F32, bytes)
                .unwrap();
        }
    }
    match Model::from_gguf(Gguf::from_bytes(w.to_bytes()).unwrap()) {
        Ok(_) => panic!("{name}: the edited file loaded"),
        Err(e) => e,
    }
}

#[test]
fn malformed_qwen3moe_files_are_typed_errors() {
    let router = "blk.1.ffn_gate_inp.weight";
    match edited(router, None, None) {
        ModelError::MissingTensor(t) => assert_eq!(t, router),
        e => panic!("{e:?}"),
    }
    // Experts fewer than expert_count says: the stacked tensor's last dimension.
    let up = "blk.0.ffn_up_exps.weight";
    match edited(up, Some(&[64, 32, 7]), None) {
        ModelError::TensorShape {
            name,
            expected,
            found,
        } => assert_eq!(
            (name.as_str(), expected, found),
            (up, vec![64, 32, 8], vec![64, 32, 7])
        ),
        e => panic!("{e:?}"),
    }
    // expert_count disagreeing with the tensors: the router is the first to say so.
    match edited("qwen3moe.expert_count", None, Some(Value::U32(16))) {
        ModelError::TensorShape {
            name,
            expected,
            found,
        } => assert_eq!(
            (name.as_str(), expected, found),
            ("blk.0.ffn_gate_inp.weight", vec![64, 16], vec![64, 8])
        ),
        e => panic!("{e:?}"),
    }
    for (key, value) in [
        ("qwen3moe.expert_used_count", 9),
        ("qwen3moe.expert_used_count", 0),
        ("qwen3moe.expert_count", 0),
    ] {
        match edited(key, None, Some(Value::U32(value))) {
            ModelError::Hyperparameter {
                key: k, value: v, ..
            } => {
                assert_eq!((k.as_str(), v), (key, value.to_string()))
            }
            e => panic!("{key} = {value}: {e:?}"),
        }
    }
}

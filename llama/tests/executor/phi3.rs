//! The Phi-3 graph on the tiny synthetic file, and Mistral's layout: Phi-3's fused tensors run
//! as the file holds them, its SwiGLU over gate and up halves, its LongRoPE factors chosen by
//! the KV cache's context; every backend present and the GPU-typed stand-ins checked node by
//! node by the CPU; malformed files refused with the tensor at fault.

use crate::common::*;
use std::sync::Arc;
use trine_backends::Backend;
use trine_gguf::synth::rope::{ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT};
use trine_gguf::synth::{synth_llama, SynthShape};
use trine_gguf::{Gguf, GgufWriter, TensorType};
use trine_llama::graph::Op;
use trine_llama::weights::{Ffn, Source};
use trine_llama::{Architecture, Engine, Model, ModelError};
use trine_ops::elementwise::GateUp;
use trine_ops::rope::RopeMode;

fn model(shape: SynthShape) -> Arc<Model> {
    let bytes = synth_llama(shape, 5).unwrap().to_bytes();
    Arc::new(Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap())
}

/// Each layer's QKV and gate/up products read the file's `attn_qkv` and `ffn_up` in place:
/// one product each, of the tensor's own name, type and rows, its bytes not copied.
#[test]
fn phi3_runs_its_fused_tensors_as_stored() {
    let m = model(SynthShape::TINY_PHI3);
    assert_eq!(m.config.arch, Architecture::Phi3);
    let w = &m.weights;
    for (l, layer) in w.layers.iter().enumerate() {
        assert_eq!(layer.qkv.len(), 1);
        let qkv = &w.tensors[layer.qkv[0].w];
        assert_eq!(qkv.name, format!("blk.{l}.attn_qkv.weight"));
        // 4 query heads and 2 each of keys and values, of 16.
        assert_eq!((qkv.rows, qkv.cols, layer.qkv[0].heads.count), (128, 64, 8));
        let Ffn::Dense {
            gate_up, layout, ..
        } = layer.ffn
        else {
            panic!("layer {l}: Phi-3's feed-forward block is dense");
        };
        let up = &w.tensors[gate_up];
        assert_eq!(up.name, format!("blk.{l}.ffn_up.weight"));
        assert_eq!((up.rows, up.cols, layout), (256, 64, GateUp::Halves));
        for t in [qkv, up] {
            assert!(matches!(t.source, Source::File(_)), "{} copied", t.name);
            assert_eq!(t.ty, TensorType::Q4_1.weight_type().unwrap(), "{}", t.name);
        }
    }
}

/// LongRoPE: the short factors up to the original context (4096), the long ones beyond it,
/// each the file's own tensor, with the file's attention factor under both.
#[test]
fn phi3_chooses_longrope_factors_by_context() {
    let m = model(SynthShape::TINY_PHI3);
    let g = &m.gguf;
    let read = |name: &str| -> Vec<f32> {
        g.tensor_data(g.tensor(name).unwrap())
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    let attn = g.get_f32("phi3.rope.scaling.attn_factor").unwrap();
    for (context, name) in [
        (512, ROPE_FACTORS_SHORT),
        (4096, ROPE_FACTORS_SHORT),
        (4097, ROPE_FACTORS_LONG),
        (8192, ROPE_FACTORS_LONG),
    ] {
        let r = m.rope.for_context(context);
        assert_eq!(r.factors, read(name), "{context}");
        assert_eq!(r.attn_factor, attn, "{context}");
    }
    assert_ne!(read(ROPE_FACTORS_SHORT), read(ROPE_FACTORS_LONG));
}

/// The prompt and decode steps on the GPU stand-in (with and without matrix tiles), on each
/// GPU backend present, and on the CPU checked by the stand-in: every node within its bound,
/// the worst under 1e-9, with NeoX rope and a SwiGLU node over halves in every layer.
#[test]
fn phi3_backends_agree_node_by_node() {
    let shape = SynthShape::TINY_PHI3;
    let model = model(shape);
    let mut compared = vec![];
    let mut check = |name: &str, backend: Arc<dyn Backend>| {
        let main = Engine::new(model.clone(), backend, SIZES).unwrap();
        for tokens in [1, 5] {
            let halves = count_nodes(&main, tokens, |op| matches!(op, Op::Swiglu(GateUp::Halves)));
            assert_eq!(halves, shape.n_layer as usize, "{name}");
            let neox = |op: &Op| {
                matches!(
                    op,
                    Op::RopeStore {
                        mode: RopeMode::Neox,
                        ..
                    }
                )
            };
            assert_eq!(
                count_nodes(&main, tokens, neox),
                shape.n_layer as usize,
                "{name}"
            );
        }
        let checker = main.checker(cpu()).unwrap();
        for c in agree(&format!("phi3 on {name}"), main, checker) {
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
    agree("phi3: gpu checking cpu", main, checker);
    println!("phi3: checked against the cpu: {compared:?}");
}

/// Mistral's layout is Llama's graph over a SentencePiece vocabulary: it loads as `llama`,
/// separate projections stacked as for Llama, and its steps agree with the GPU stand-in's.
#[test]
fn mistral_layout_runs_as_llama() {
    let m = model(SynthShape::TINY_MISTRAL);
    assert_eq!(m.config.arch, Architecture::Llama);
    assert!(matches!(
        m.weights.layers[0].ffn,
        Ffn::Dense {
            layout: GateUp::Pairs,
            ..
        }
    ));
    assert_eq!(m.tokenizer.encode("Hello", true, false).unwrap()[0], 1);
    let main = Engine::new(m.clone(), gpu(), SIZES).unwrap();
    let checker = main.checker(cpu()).unwrap();
    agree("mistral on the gpu stand-in", main, checker);
}

/// The tiny Phi-3 file rebuilt with tensor `name` replaced by an F32 one of `dims` (`None`:
/// left out).
fn edited(name: &str, dims: Option<&[u64]>) -> ModelError {
    let g = Gguf::from_bytes(synth_llama(SynthShape::TINY_PHI3, 5).unwrap().to_bytes()).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        w.add(k.clone(), v.clone()).unwrap();
    }
    for t in g.tensors() {
        if t.name != name {
            w.add_tensor(t.name.clone(), &t.dims, t.ty, g.tensor_data(t).to_vec())
                .unwrap();
        } else if let Some(dims) = dims {
            let n: u64 = dims.iter().product();
            let ones = (0..n).flat_map(|_| 1f32.to_le_bytes()).collect();
            w.add_tensor(t.name.clone(), dims, TensorType::F32, ones)
                .unwrap();
        }
    }
    match Model::from_gguf(Gguf::from_bytes(w.to_bytes()).unwrap()) {
        Ok(_) => panic!("{name}: the edited file loaded"),
        Err(e) => e,
    }
}

#[test]
fn malformed_phi3_files_are_typed_errors() {
    for name in ["blk.1.attn_qkv.weight", "blk.0.ffn_up.weight"] {
        match edited(name, None) {
            ModelError::MissingTensor(t) => assert_eq!(t, name),
            e => panic!("{e:?}"),
        }
    }
    match edited("blk.0.attn_qkv.weight", Some(&[64, 64])) {
        ModelError::TensorShape {
            name,
            expected,
            found,
        } => assert_eq!(
            (name.as_str(), expected, found),
            ("blk.0.attn_qkv.weight", vec![64, 128], vec![64, 64])
        ),
        e => panic!("{e:?}"),
    }
    // The gate/up tensor of ff rows, not 2·ff: a file of separate halves mislabelled.
    match edited("blk.1.ffn_up.weight", Some(&[64, 128])) {
        ModelError::TensorShape { name, expected, .. } => {
            assert_eq!(
                (name.as_str(), expected),
                ("blk.1.ffn_up.weight", vec![64, 256])
            )
        }
        e => panic!("{e:?}"),
    }
    for name in [ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT] {
        match edited(name, Some(&[16])) {
            ModelError::TensorShape {
                name: t,
                expected,
                found,
            } => assert_eq!((t.as_str(), expected, found), (name, vec![8], vec![16])),
            e => panic!("{e:?}"),
        }
    }
}

//! The Phi-3 graph on the tiny synthetic file, and Mistral's layout: Phi-3's fused tensors run
//! as the file holds them, its SwiGLU over gate and up halves, its LongRoPE factors chosen by
//! the KV cache's context; Phi-4-mini's layout, rope on the first three quarters of each
//! head; every backend present and the GPU-typed stand-ins checked node by node by the CPU;
//! malformed files refused with the tensor or key at fault.

use crate::common::*;
use trine_gguf::synth::rope::{ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT};
use trine_gguf::synth::SynthShape;
use trine_gguf::{TensorType, Value};
use trine_llama::graph::Op;
use trine_llama::weights::{DenseWeights, Ffn, Source};
use trine_llama::{Architecture, Engine, ModelError};
use trine_ops::elementwise::GateUp;
use trine_ops::rope::RopeMode;

const SHAPE: SynthShape = SynthShape::TINY_PHI3;
const PHI4: SynthShape = SynthShape::TINY_PHI4;

/// Each layer's QKV and gate/up products read the file's `attn_qkv` and `ffn_up` in place:
/// one product each, of the tensor's own name, type and rows, its bytes not copied.
#[test]
fn phi3_runs_its_fused_tensors_as_stored() {
    let m = synth(SHAPE);
    assert_eq!(m.config.arch, Architecture::Phi3);
    let w = &m.weights;
    for (l, layer) in w.layers.iter().enumerate() {
        assert_eq!(layer.qkv.len(), 1);
        let qkv = &w.tensors[layer.qkv[0].w];
        assert_eq!(qkv.name, format!("blk.{l}.attn_qkv.weight"));
        // 4 query heads and 2 each of keys and values, of 16.
        assert_eq!((qkv.rows, qkv.cols, layer.qkv[0].heads.count), (128, 64, 8));
        let Ffn::Dense(f) = layer.ffn else {
            panic!("layer {l}: Phi-3's feed-forward block is dense");
        };
        let up = &w.tensors[f.gate_up];
        assert_eq!(up.name, format!("blk.{l}.ffn_up.weight"));
        assert_eq!((up.rows, up.cols, f.layout), (256, 64, GateUp::Halves));
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
    let m = synth(SHAPE);
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

/// Every backend of [`backends_agree`], with NeoX rope and a SwiGLU node over halves in every
/// layer.
#[test]
fn phi3_backends_agree_node_by_node() {
    backends_agree("phi3", synth(SHAPE), |name, main| {
        for tokens in [1, 5] {
            let halves = count_nodes(main, tokens, |op| matches!(op, Op::Swiglu(GateUp::Halves)));
            assert_eq!(halves, SHAPE.n_layer as usize, "{name}");
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
                count_nodes(main, tokens, neox),
                SHAPE.n_layer as usize,
                "{name}"
            );
        }
    });
}

/// Mistral's layout is Llama's graph over a SentencePiece vocabulary: it loads as `llama`,
/// separate projections stacked as for Llama, and its steps agree with the GPU stand-in's.
#[test]
fn mistral_layout_runs_as_llama() {
    let m = synth(SynthShape::TINY_MISTRAL);
    assert_eq!(m.config.arch, Architecture::Llama);
    assert!(matches!(
        m.weights.layers[0].ffn,
        Ffn::Dense(DenseWeights {
            layout: GateUp::Pairs,
            ..
        })
    ));
    assert_eq!(m.tokenizer.encode("Hello", true, false).unwrap()[0], 1);
    let main = Engine::new(m.clone(), gpu(), SIZES).unwrap();
    let checker = main.checker(cpu()).unwrap();
    agree("mistral on the gpu stand-in", main, checker);
}

#[test]
fn malformed_phi3_files_are_typed_errors() {
    for name in ["blk.1.attn_qkv.weight", "blk.0.ffn_up.weight"] {
        assert_missing(edited(SHAPE, name, None, None), name);
    }
    let name = "blk.0.attn_qkv.weight";
    assert_shape(
        edited(SHAPE, name, Some(&[64, 64]), None),
        name,
        &[64, 128],
        &[64, 64],
    );
    // The gate/up tensor of ff rows, not 2·ff: a file of separate halves mislabelled.
    match edited(SHAPE, "blk.1.ffn_up.weight", Some(&[64, 128]), None) {
        ModelError::TensorShape { name, expected, .. } => {
            assert_eq!(
                (name.as_str(), expected),
                ("blk.1.ffn_up.weight", vec![64, 256])
            )
        }
        e => panic!("{e:?}"),
    }
    for name in [ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT] {
        assert_shape(edited(SHAPE, name, Some(&[16]), None), name, &[8], &[16]);
    }
}

/// Phi-4-mini's layout turns the first 12 values of each head of 16: the file's
/// `rope.dimension_count`, its LongRoPE factors one per turned pair, its table of 6 angles.
#[test]
fn phi4_turns_part_of_each_head() {
    let m = synth(PHI4);
    assert_eq!(m.config.arch, Architecture::Phi3);
    assert_eq!((m.config.head_dim(), m.config.n_rot), (16, 12));
    for context in [512, 8192] {
        let r = m.rope.for_context(context);
        assert_eq!(r.factors.len(), 6, "{context}");
        assert_eq!(r.table(m.config.n_rot).len(), 7, "{context}");
    }
    assert_eq!(m.tokenizer.encode("Hi", false, false).unwrap().len(), 2);
}

/// Every backend of [`backends_agree`] with partial rotary in every layer's rope node.
#[test]
fn phi4_backends_agree_node_by_node() {
    backends_agree("phi4", synth(PHI4), |name, main| {
        for tokens in [1, 5] {
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
                count_nodes(main, tokens, neox),
                PHI4.n_layer as usize,
                "{name}"
            );
        }
    });
}

/// `rope.dimension_count` odd, zero or beyond the head is refused with its value; factors of
/// a whole head's pairs where rope turns part of it are refused with their shape.
#[test]
fn malformed_partial_rotary_is_a_typed_error() {
    let key = "phi3.rope.dimension_count";
    for n in [11, 0, 18] {
        let e = edited(PHI4, key, None, Some(Value::U32(n)));
        assert_hyperparameter(e, key, &n.to_string());
    }
    for name in [ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT] {
        assert_shape(edited(PHI4, name, Some(&[8]), None), name, &[6], &[8]);
    }
}

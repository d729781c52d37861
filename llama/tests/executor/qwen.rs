//! The Qwen2 and Qwen3 graphs on tiny synthetic files: each backend present, and the
//! GPU-typed stand-ins, checked node by node by the CPU; the nodes the families add; and
//! their malformed files refused with the tensor or key at fault.

use crate::common::*;
use trine_gguf::synth::SynthShape;
use trine_gguf::Value;
use trine_llama::graph::Op;
use trine_llama::ModelError;
use trine_ops::rope::RopeMode;

const FAMILIES: [(&str, SynthShape); 2] = [
    ("qwen2", SynthShape::TINY_QWEN2),
    ("qwen3", SynthShape::TINY_QWEN3),
];

/// Each family on every backend of [`backends_agree`], the nodes it adds among those compared.
#[test]
fn qwen_backends_agree_node_by_node() {
    for (family, shape) in FAMILIES {
        backends_agree(family, synth(shape), |name, main| {
            let added = count_nodes(main, 1, |op| matches!(op, Op::QkvBiasNorm { .. }));
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
                let ropes = count_nodes(main, tokens, neox);
                assert!(ropes >= shape.n_layer as usize, "{family} on {name}");
                let all = count_nodes(main, tokens, |op| matches!(op, Op::RopeStore { .. }));
                assert_eq!(ropes, all, "{family} on {name}");
            }
        });
    }
}

/// Qwen3's q is wider than the residual stream (4 heads of 32 over 64): the QKV product's
/// rows, the output projection's columns and the head size all follow the file's
/// `qwen3.attention.key_length`, not `n_embd / n_head`.
#[test]
fn qwen3_takes_the_head_size_from_the_file() {
    let m = synth(SynthShape::TINY_QWEN3);
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

#[test]
fn malformed_qwen_files_are_typed_errors() {
    let (q2, q3) = (SynthShape::TINY_QWEN2, SynthShape::TINY_QWEN3);
    let name = "blk.1.attn_k.bias";
    assert_missing(edited(q2, name, None, None), name);
    assert_shape(edited(q2, name, Some(&[31]), None), name, &[32], &[31]);
    let name = "blk.0.attn_q_norm.weight";
    assert_shape(edited(q3, name, Some(&[64]), None), name, &[32], &[64]);
    let name = "blk.0.attn_k_norm.weight";
    assert_missing(edited(q3, name, None, None), name);
    // A Llama file carrying biases would run without them: refused, not run wrong.
    match relabelled(q2, "qwen2", "llama") {
        Err(ModelError::UnusedTensor { name, arch, .. }) => {
            assert_eq!((name.as_str(), arch), ("blk.0.attn_q.bias", "llama"))
        }
        other => panic!("{:?}", other.err()),
    }
    let key = "qwen3.attention.value_length";
    assert_hyperparameter(edited(q3, key, None, Some(Value::U32(16))), key, "16");
    // Rope over part of a head, which llama.cpp's Qwen graphs assert against.
    let key = "qwen3.rope.dimension_count";
    assert_hyperparameter(edited(q3, key, None, Some(Value::U32(16))), key, "16");
    let arch = Value::String("qwen2moe".into());
    match edited(q3, "general.architecture", None, Some(arch)) {
        ModelError::Architecture { found, supported } => {
            assert_eq!(found, "qwen2moe");
            assert_eq!(supported, "llama, qwen2, qwen3, gemma3, phi3, qwen3moe");
        }
        e => panic!("{e:?}"),
    }
}

//! The Gemma 3 graph on the tiny synthetic file: each backend present, and the GPU-typed
//! stand-ins, checked node by node by the CPU past the sliding window; the nodes the family
//! adds; and malformed files refused with the tensor or key at fault.

use crate::common::*;
use trine_gguf::synth::SynthShape;
use trine_gguf::Value;
use trine_llama::graph::{AttentionForm, Op, Store};
use trine_llama::{Engine, EngineOptions, ModelError, Session};

const SHAPE: SynthShape = SynthShape::TINY_GEMMA3;

/// The prompt and decode steps on every backend of [`backends_agree`] reach position 6, past
/// layer 0's window of 4, and every node the family adds is among those compared (GeGLU in
/// the gate/up product's store on tiles).
#[test]
fn gemma3_backends_agree_node_by_node() {
    backends_agree("gemma3", synth(SHAPE), |name, main| {
        for tokens in [1, 5] {
            let windowed = count_nodes(main, tokens, |op| {
                matches!(
                    op,
                    Op::Attention {
                        window: Some(4),
                        ..
                    }
                )
            });
            let global = count_nodes(main, tokens, |op| {
                matches!(op, Op::Attention { window: None, .. })
            });
            assert_eq!((windowed, global), (1, 1), "{name}, {tokens} tokens");
            let post = count_nodes(main, tokens, |op| matches!(op, Op::NormAdd { .. }));
            assert_eq!(post, 2 * SHAPE.n_layer as usize, "{name}");
            // GeGLU is a node of its own but in a prompt on tiles, whose gate/up product
            // stores it (every part of a product in parts).
            let geglu = count_nodes(main, tokens, |op| matches!(op, Op::Geglu));
            let stored = count_nodes(main, tokens, |op| {
                matches!(
                    op,
                    Op::Product {
                        store: Store::Geglu,
                        ..
                    }
                )
            });
            let layers = SHAPE.n_layer as usize;
            if tokens > 1 && name.ends_with("with tiles") {
                assert_eq!(geglu, 0, "{name}");
                assert!(stored >= layers, "{name}");
            } else {
                assert_eq!((geglu, stored), (layers, 0), "{name}, {tokens} tokens");
            }
            let scaled = count_nodes(
                main,
                tokens,
                |op| matches!(op, Op::Embed { scale: Some(s), .. } if *s == 8.0),
            );
            assert_eq!(scaled, 1, "{name}: the embedding scaled by sqrt(64)");
        }
    });
}

/// Heads of 256, as Gemma 3's, in a prompt step of 136 tokens on the GPU stand-in: flash
/// attention with its keys in three chunks of 64 (wide heads leave a GPU idle in one) and
/// their combine, checked node by node by the CPU through the step and the two decode steps
/// after it, past the window.
#[test]
fn wide_heads_take_their_keys_in_chunks() {
    let model = synth(SynthShape {
        head_dim: Some(256),
        ..SHAPE
    });
    let options = EngineOptions {
        context: 160,
        max_batch: 136,
        ..SIZES
    };
    let main = Engine::new(model, gpu(), options).unwrap();
    let chunked = count_nodes(&main, 136, |op| {
        matches!(
            op,
            Op::Attention {
                form: AttentionForm::Flash {
                    tiles: false,
                    splits: 3,
                    ..
                },
                ..
            }
        )
    });
    assert_eq!(chunked, SHAPE.n_layer as usize);
    let checker = main.checker(cpu()).unwrap();
    let mut session = Session::new(main, Some(checker));
    let prompt: Vec<u32> = (0..136).map(|i| (i * 37 + 11) % 256).collect();
    let mut next = trine_llama::sampler::argmax(&session.feed(&prompt).unwrap()).unwrap();
    for _ in 0..2 {
        next = trine_llama::sampler::argmax(&session.feed(&[next]).unwrap()).unwrap();
    }
    assert_eq!(session.checks.len(), 3);
    for c in &session.checks {
        assert!(c.first_over_bound.is_none(), "{c:?}");
        assert!(c.worst.nmse.is_some_and(|e| e < 1e-9), "{c:?}");
    }
}

/// The tiny file's layers: layer 0 local (window 4, rope base 10000), layer 1 global (the
/// file's base 10⁶), as a sliding-window pattern of 2 makes them; the embedding scale is
/// sqrt(n_embd).
#[test]
fn gemma3_reads_its_windows_and_scales() {
    let m = synth(SHAPE);
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

#[test]
fn malformed_gemma3_files_are_typed_errors() {
    for name in [
        "blk.1.post_ffw_norm.weight",
        "blk.0.post_attention_norm.weight",
    ] {
        assert_missing(edited(SHAPE, name, None, None), name);
    }
    let name = "blk.0.post_attention_norm.weight";
    assert_shape(edited(SHAPE, name, Some(&[63]), None), name, &[64], &[63]);
    let name = "blk.1.attn_q_norm.weight";
    assert_shape(edited(SHAPE, name, Some(&[64]), None), name, &[32], &[64]);
    let key = "gemma3.final_logit_softcapping";
    assert_hyperparameter(edited(SHAPE, key, None, Some(Value::F32(30.0))), key, "30");
    let key = "gemma3.rope.freq_base_swa";
    assert_hyperparameter(edited(SHAPE, key, None, Some(Value::F32(-1.0))), key, "-1");
    // A Qwen3 file carrying Gemma's post norms would run without them: refused.
    match relabelled(SHAPE, "gemma3", "qwen3") {
        Err(ModelError::UnusedTensor { name, arch, .. }) => {
            assert_eq!(
                (name.as_str(), arch),
                ("blk.0.post_attention_norm.weight", "qwen3")
            )
        }
        other => panic!("{:?}", other.err()),
    }
}

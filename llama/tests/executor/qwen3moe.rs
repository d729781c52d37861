//! The Qwen3-MoE graph on the tiny synthetic file: each backend present, and the GPU-typed
//! stand-ins, checked node by node by the CPU; the experts' nodes in every layer; malformed
//! files refused with the tensor or key at fault.

use crate::common::*;
use trine_gguf::synth::SynthShape;
use trine_gguf::Value;
use trine_llama::graph::{ExpertsOn, Form, NormOut, Op, QuantizeFrom, Step, Tensor};
use trine_llama::Engine;

const SHAPE: SynthShape = SynthShape::TINY_QWEN3_MOE;

/// Every backend of [`backends_agree`], with the routing and both experts' products in every
/// layer: a prompt's on a device with tiles as products by expert over the sorted pairs (gate
/// and up each a part of the pairs' rows, SwiGLU of them, down, then the weighted sum onto the
/// residual) on the file's blocks, nothing widened, x rounded to f16 for gate/up and again for
/// down by the nodes writing it; every step's on a CPU device (lavapipe's Vulkan) as
/// the same products by pair on interleaved rows; every other step's as products by pair on
/// the file's blocks.
#[test]
fn qwen3moe_backends_agree_node_by_node() {
    backends_agree("qwen3moe", synth(SHAPE), |name, main| {
        let layers = SHAPE.n_layer as usize;
        for tokens in [1, 5] {
            let count = |which: fn(&Op) -> bool| count_nodes(main, tokens, which);
            assert_eq!(count(|op| matches!(op, Op::MoeRoute)), layers, "{name}");
            let by_pair =
                count(|op| matches!(op, Op::ExpertsSwiglu { .. } | Op::ExpertsDown { .. }));
            let on_tiles = count(|op| {
                matches!(
                    op,
                    Op::ExpertRows {
                        on: ExpertsOn::Tiles(_),
                        ..
                    }
                )
            });
            let widens = count(|op| matches!(op, Op::Widen { .. }));
            let halves = count(|op| matches!(op, Op::HalfX { .. }));
            let rounded = count(|op| matches!(op, Op::ExpertsSwigluHalves { half: true }));
            let both = count(|op| {
                matches!(
                    op,
                    Op::Norm {
                        out: NormOut::Both,
                        ..
                    }
                )
            });
            let on_rows = count(|op| {
                matches!(
                    op,
                    Op::ExpertRows {
                        on: ExpertsOn::Rows,
                        ..
                    }
                )
            });
            if tokens > 1 && name.ends_with("with tiles") {
                assert!(on_tiles > 0, "{name}");
            }
            let around =
                count(|op| matches!(op, Op::ExpertsSwigluHalves { .. } | Op::MoeCombine { .. }));
            let sorts = count(|op| matches!(op, Op::MoeSort));
            if on_tiles > 0 {
                assert_eq!((by_pair, on_tiles, on_rows), (0, 3 * layers, 0), "{name}");
                assert_eq!((around, sorts), (2 * layers, layers), "{name}");
                // The experts' products stage the file's blocks: the only widenings are the
                // dense products' on widened weights, one each.
                let dense = count(|op| {
                    matches!(
                        op,
                        Op::Product {
                            form: Form::Widened,
                            ..
                        }
                    )
                });
                assert_eq!(widens, dense, "{name}");
                // No x rounded by a node of its own: the norm before the experts writes their
                // gate and up x rounded beside the router's f32, the experts' SwiGLU the down
                // products'.
                assert_eq!((halves, rounded, both), (0, layers, layers), "{name}");
            } else if on_rows > 0 {
                assert_eq!((by_pair, on_rows), (0, 3 * layers), "{name}");
                assert_eq!((around, sorts), (2 * layers, 0), "{name}");
            } else {
                assert_eq!(by_pair, 2 * layers, "{name}, {tokens} tokens");
            }
            let dense = count_nodes(main, tokens, |op| matches!(op, Op::Swiglu(_)));
            assert_eq!(dense, 0, "{name}");
        }
    });
}

/// Qwen3-30B-A3B's types at a test's size: both experts' products in every layer on
/// quantized x and the file's Q4_K and Q6_K blocks, each after the node quantizing its x (the
/// normed stream, which a decode step's quantizer normalises itself, no norm node before the
/// router; the chosen experts' activations, a row each), on every backend; a prompt's gate/up
/// by expert, after the routing's sort. A prompt on tiles takes neither
/// ([`qwen3moe_backends_agree_node_by_node`]).
#[test]
fn qwen3moe_k_quant_experts_take_quantized_x() {
    let shape = SynthShape::TINY_QWEN3_30B_A3B;
    backends_agree("qwen3-30b-a3b-tiny", synth(shape), |name, main| {
        for tokens in [1, 5] {
            if count_nodes(main, tokens, |op| matches!(op, Op::ExpertRows { .. })) > 0 {
                continue;
            }
            let nodes = main.graph(Step { tokens, pos: 0 }).unwrap();
            let mut blocks = 0;
            let norms = nodes
                .iter()
                .filter(|n| matches!(n.op, Op::Norm { .. }))
                .count();
            // The output head's norm folds into its product in either step.
            let unfolded = if tokens == 1 {
                0
            } else {
                shape.n_layer as usize
            };
            assert_eq!(norms, unfolded, "{name}, {tokens} tokens");
            for (i, n) in nodes.iter().enumerate() {
                let (form, x, rows, sorted) = match n.op {
                    Op::ExpertsSwiglu {
                        form, by_expert, ..
                    } => {
                        assert_eq!(by_expert, tokens > 1, "{name}: {n:?}");
                        // None: the residual stream, normalised by the quantizer.
                        let x = (tokens > 1).then_some(Tensor::Normed);
                        (form, x, tokens, by_expert)
                    }
                    Op::ExpertsDown { form, .. } => {
                        (form, Some(Tensor::ExpertAct), 2 * tokens, false)
                    }
                    _ => continue,
                };
                assert_eq!(form, Form::QuantizedBlocks, "{name}: {n:?}");
                let before = i - 1 - usize::from(sorted);
                if sorted {
                    assert_eq!(nodes[i - 1].op, Op::MoeSort, "{name}");
                }
                assert!(
                    matches!(nodes[before].op, Op::Quantize { x: q, tokens: t, from, .. }
                    if t == rows && match x {
                        Some(x) => q == x && from == QuantizeFrom::Plain,
                        None => matches!((q, from), (Tensor::Resid(_), QuantizeFrom::Norm(_))),
                    }),
                    "{name}: {:?} before {n:?}",
                    nodes[before]
                );
                blocks += 1;
            }
            assert_eq!(
                blocks,
                2 * shape.n_layer as usize,
                "{name}, {tokens} tokens"
            );
        }
    });
}

#[test]
fn malformed_qwen3moe_files_are_typed_errors() {
    let router = "blk.1.ffn_gate_inp.weight";
    assert_missing(edited(SHAPE, router, None, None), router);
    // Experts fewer than expert_count says: the stacked tensor's last dimension.
    let up = "blk.0.ffn_up_exps.weight";
    let e = edited(SHAPE, up, Some(&[64, 32, 7]), None);
    assert_shape(e, up, &[64, 32, 8], &[64, 32, 7]);
    // expert_count disagreeing with the tensors: the router is the first to say so.
    let e = edited(SHAPE, "qwen3moe.expert_count", None, Some(Value::U32(16)));
    assert_shape(e, "blk.0.ffn_gate_inp.weight", &[64, 16], &[64, 8]);
    for (key, value) in [
        ("qwen3moe.expert_used_count", 9),
        ("qwen3moe.expert_used_count", 0),
        ("qwen3moe.expert_count", 0),
        ("qwen3moe.expert_count", 513),
    ] {
        let e = edited(SHAPE, key, None, Some(Value::U32(value)));
        assert_hyperparameter(e, key, &value.to_string());
    }
}

/// A prompt's experts on tiles (x and W rounded to f16) against the products by pair on
/// 8-bit x and the file's blocks, Qwen3-30B-A3B's types at a test's size: the logits after
/// the prompt and after each decode step (which takes the products by pair on both) agree to
/// within the 8-bit x's rounding, where an expert's pairs read or written at the wrong rows
/// would leave nothing alike.
#[test]
fn qwen3moe_prompt_experts_on_tiles_agree_with_products_by_pair() {
    let model = synth(SynthShape::TINY_QWEN3_30B_A3B);
    let ids = [5, 17, 3, 99, 42, 7, 8];
    let want = logits(model.clone(), gpu(), SIZES, &ids);
    let got = logits(model, gpu_with(true), SIZES, &ids);
    assert_logits_within(&want, &got, 1e-3);
}

/// A device with tiles that cannot bind one expert matrix (every expert's rows of one
/// projection, the file's Q4_K or Q6_K blocks) leaves the experts' products to the CPU, saying
/// why, and a prompt's and two decode steps' logits are the device's own, where those kernels
/// binding more than the device can would fail at the first prompt.
#[test]
fn experts_larger_than_a_binding_run_on_the_cpu() {
    let shape = SynthShape::TINY_QWEN3_30B_A3B;
    let trine_gguf::synth::Family::Qwen3Moe {
        experts, expert_ff, ..
    } = shape.family
    else {
        unreachable!("a Qwen3-MoE layout")
    };
    let elements = u64::from(experts) * expert_ff * shape.n_embd;
    let (q4_k, q6_k) = (elements / 256 * 144, elements / 256 * 210);
    let model = synth(shape);
    let ids = [5, 17, 3, 99, 42, 7, 8];
    let want = logits(model.clone(), gpu_with(true), SIZES, &ids);
    let limit = q4_k - 1;
    let engine = Engine::new(model.clone(), gpu_with_tiles_binding(limit), SIZES).unwrap();
    let notes = engine.placement_notes().join("\n");
    let products = [
        (
            "matmul f16 × q4_k by expert on tiles, a part of the rows, 2 blocks a step",
            q4_k,
        ),
        (
            "matmul f16 × q6_k by expert on tiles, 2 blocks a step",
            q6_k,
        ),
    ];
    for (product, bytes) in products {
        let why = format!(
            "runs on the cpu: narrow could not run it (it binds a weight of {bytes} bytes, more \
             than the device's largest binding of {limit})"
        );
        assert!(notes.contains(&format!("{product} {why}")), "{notes}");
    }
    let got = logits(model, gpu_with_tiles_binding(limit), SIZES, &ids);
    assert_logits_within(&want, &got, 1e-9);
}

/// The CPU's experts on interleaved rows by pair against the GPU stand-in's products by pair
/// on the file's blocks, Qwen3-30B-A3B's types at a test's size: both take 8-bit x (in blocks
/// of their own), so the logits of the prompt and of each decode step agree to within that
/// rounding, where a pair's rows read from the wrong expert would leave nothing alike.
#[test]
fn qwen3moe_cpu_experts_on_rows_agree_with_products_on_blocks() {
    let model = synth(SynthShape::TINY_QWEN3_30B_A3B);
    let ids = [5, 17, 3, 99, 42, 7, 8];
    let cpu_nodes = Engine::new(model.clone(), cpu(), SIZES).unwrap();
    let rows = count_nodes(&cpu_nodes, 1, |op| {
        matches!(
            op,
            Op::ExpertRows {
                on: ExpertsOn::Rows,
                ..
            }
        )
    });
    assert_eq!(rows, 3 * SynthShape::TINY_QWEN3_30B_A3B.n_layer as usize);
    let want = logits(model.clone(), gpu(), SIZES, &ids);
    let got = logits(model, cpu(), SIZES, &ids);
    assert_logits_within(&want, &got, 1e-3);
}

/// Each step's logits of `got` within NMSE `bound` of `want`'s.
fn assert_logits_within(want: &[Vec<f32>], got: &[Vec<f32>], bound: f64) {
    assert_eq!(want.len(), got.len());
    for (step, (w, g)) in want.iter().zip(got).enumerate() {
        let w: Vec<f64> = w.iter().map(|&v| f64::from(v)).collect();
        let g: Vec<f64> = g.iter().map(|&v| f64::from(v)).collect();
        let e = trine_ops::compare::nmse(&w, &g).unwrap();
        println!("step {step}: nmse {e:.3e}");
        assert!(e < bound, "step {step}: nmse {e:.3e}");
    }
}

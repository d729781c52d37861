//! The cross-check: two executors in lock-step, node by node, on the nodes the checked one
//! runs; it names the first op that goes wrong and agrees where nothing does.

use crate::common::*;
use std::sync::Arc;
use trine_backends::Backend;
use trine_gguf::synth::SynthShape;
use trine_gguf::TensorType;
use trine_llama::graph::{AttentionForm, Form, NormOut, Op, Step, Store, Tensor};
use trine_llama::{Engine, ModelError, Session};
use trine_ops::attention_flash::FlashOut;
use trine_ops::compare::nmse;
use trine_ops::kv_type::KvType;

#[test]
fn the_cross_check_names_the_first_op_that_goes_wrong() {
    let model = tiny();
    let main = Engine::new(model.clone(), cpu(), SIZES).unwrap();
    let checker = Engine::new(model, faulty("", &["attention_split"], 0.0), SIZES).unwrap();
    let mut session = Session::new(main, Some(checker));
    run(&mut session);
    assert_eq!(session.checks.len(), 3);
    for c in &session.checks {
        let first = c
            .first_over_bound
            .as_ref()
            .expect("a zeroed attention output is caught");
        assert_eq!((first.op, first.layer), ("attention", Some(0)));
        assert_eq!(
            first.nmse,
            Some(1.0),
            "all-zero output against a nonzero one"
        );
    }
}

/// A device whose output head (the Q8_0 product, on float x in prompts and on quantized x in
/// the CPU's decode steps) is off by one part in 10⁴ everywhere (NMSE 1e-8), or whose
/// attention is off by one part in 100 (NMSE 1e-4), is named at the first node it spoils:
/// both are under the 5e-4 the cross-check allowed before its bounds were measured.
#[test]
fn the_cross_check_catches_small_uniform_errors() {
    let model = tiny();
    let spoilt: [(&[&str], _, _, _); 2] = [
        (&["attention_split"], "attention", Some(0), 1e-2),
        (&["matvec_q8_0", "matvec_q8_q8_0"], "output", None, 1e-4),
    ];
    for (kernel, op, layer, error) in spoilt {
        let main = Engine::new(model.clone(), cpu(), SIZES).unwrap();
        let checker = Engine::new(model.clone(), faulty("", kernel, 1.0 + error), SIZES);
        let mut session = Session::new(main, Some(checker.unwrap()));
        run(&mut session);
        for c in &session.checks {
            let first = c
                .first_over_bound
                .as_ref()
                .unwrap_or_else(|| panic!("{kernel:?}: an error of {error} is not caught: {c:?}"));
            assert_eq!((first.op, first.layer), (op, layer), "{kernel:?}");
            let e = first.nmse.unwrap();
            let want = (error * error) as f64;
            assert!(
                (e - want).abs() < want / 10.0,
                "{kernel:?}: NMSE {e}, want {want}"
            );
        }
    }
}

/// A GPU can check a CPU whose products take quantized x: it compiles and runs the CPU's nodes
/// (the quantizing ones, the products on interleaved weights, the nodes the float products
/// fuse), prompt and decode steps alike, and every node agrees within its bound.
#[test]
fn a_gpu_checks_a_cpu_that_quantizes_x() {
    let model = tiny();
    let main = Engine::new(model, cpu(), SIZES).unwrap();
    let checker = main.checker(gpu()).unwrap();
    agree("gpu checking cpu", main, checker);
}

/// A GPU's prompt steps take quantized x and its decode steps the fused float products; a
/// CPU checking it runs the same nodes and agrees at every one.
#[test]
fn a_gpus_prompts_take_quantized_x_and_its_decode_steps_do_not() {
    let model = tiny();
    let main = Engine::new(model, gpu(), SIZES).unwrap();
    let q8 = |tokens| {
        let quantized = |op: &Op| {
            matches!(
                op,
                Op::Product {
                    form: Form::QuantizedX,
                    ..
                }
            )
        };
        count_nodes(&main, tokens, quantized)
    };
    // Four products per layer and the head.
    assert_eq!(q8(5), 4 * SynthShape::TINY.n_layer as usize + 1);
    assert_eq!(q8(1), 0);
    let checker = main.checker(cpu()).unwrap();
    agree("cpu checking a gpu", main, checker);
}

/// A GPU with matrix tiles multiplies its prompts' products through them, and a CPU checks
/// them node by node: on f16 weights as the file holds them (`Form::Tiles`), and on quantized
/// weights widened to f16 first (`Form::Widened`) whether or not the device copies blocks
/// asynchronously. The CPU holds its Q4 weights in pairs of blocks, so it reads the file's
/// layout for these products from a copy of its own (reading the pairs gave NaN).
#[test]
fn a_cpu_checks_a_gpus_prompts_on_matrix_tiles() {
    let layers = SynthShape::TINY.n_layer as usize;
    let float = synth(SynthShape {
        matrices: TensorType::F16,
        ..SynthShape::TINY
    });
    for (model, form) in [(float, Form::Tiles), (tiny(), Form::Widened)] {
        let main = Engine::new(model, gpu_with(true), SIZES).unwrap();
        let count = |tokens, tiled: bool| {
            let which = |op: &Op| match op {
                Op::Product { form: f, .. } if *f == form => tiled,
                Op::Product {
                    form: Form::QuantizedX | Form::Float,
                    ..
                } => !tiled,
                _ => false,
            };
            count_nodes(&main, tokens, which)
        };
        // Four products per layer, gate/up's widened in two halves; the head multiplies one
        // token.
        let tiled = if form == Form::Widened { 5 } else { 4 };
        assert_eq!(count(5, true), tiled * layers, "{form:?}");
        assert_eq!(count(5, false), 1, "{form:?}");
        assert_eq!(count(1, true), 0, "{form:?}");
        let checker = main.checker(cpu()).unwrap();
        agree(
            &format!("cpu checking a gpu with tiles, {form:?}"),
            main,
            checker,
        );
    }
}

/// A GPU of few multiprocessors splits the K of a prompt's FFN down product (2,048 columns,
/// one block of rows) in two slices and sums them after it with the residual: its logits are
/// those of the same GPU summing K whole, and the CPU running its nodes agrees node by node.
#[test]
fn a_gpu_of_few_units_splits_a_long_k() {
    let model = synth(SynthShape {
        n_embd: 256,
        n_ff: 2048,
        matrices: TensorType::Q8_0,
        ..SynthShape::TINY
    });
    let layers = SynthShape::TINY.n_layer as usize;
    let main = Engine::new(model.clone(), gpu_with_units(4), SIZES).unwrap();
    let sliced = |op: &Op| {
        matches!(
            op,
            Op::Product {
                store: Store::Slices { splits: 2 },
                y: Tensor::KParts,
                ..
            }
        )
    };
    let sums = |op: &Op| {
        matches!(
            op,
            Op::SplitSum {
                splits: 2,
                add: Some(_),
                ..
            }
        )
    };
    assert_eq!(count_nodes(&main, 5, sliced), layers);
    assert_eq!(count_nodes(&main, 5, sums), layers);
    assert_eq!(count_nodes(&main, 1, sliced), 0);
    let ids = [17, 90, 200, 3, 45, 7, 8];
    let whole = logits(model.clone(), gpu_with(true), SIZES, &ids);
    let split = logits(model.clone(), gpu_with_units(4), SIZES, &ids);
    for (step, (a, b)) in whole.iter().zip(&split).enumerate() {
        let widen = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
        let e = nmse(&widen(a), &widen(b)).unwrap();
        // The slices' sums are the whole sum's in another order; the f16 rounding of x
        // before the products after them turns some last-bit differences into f16 steps
        // (1.7e-6 measured). A slice lost or read twice moves them by 1e-4 and more.
        assert!(e < 2e-5, "step {step}: NMSE {e}");
    }
    let checker = main.checker(cpu()).unwrap();
    agree("cpu checking a gpu splitting K", main, checker);
    // Each GPU backend present runs the same nodes (the split products and their sums) and
    // agrees with the stand-in node by node.
    let mut compared = vec![];
    let ran = on_each(&["vulkan", "wgpu", "cuda", "hip"], |name, backend| {
        let main = Engine::new(model.clone(), gpu_with_units(4), SIZES).unwrap();
        let checker = main.checker(backend).unwrap();
        agree(&format!("{name} checking a gpu splitting K"), main, checker);
        compared.push(name.to_string());
    });
    assert_eq!(compared.len(), ran, "{compared:?}");
}

/// A GPU that copies f16 blocks asynchronously multiplies its prompts' products on
/// quantized weights widened to f16, x rounded to f16 once for the products that read it (by
/// the norms and the gate/up product as they write it, else by a node of its own), and a CPU
/// checks every node of it: the rounded x, each widened weight (exactly) and the products.
#[test]
fn a_cpu_checks_a_gpus_prompts_on_widened_weights() {
    let model = tiny();
    let main = Engine::new(model, gpu_copying(), SIZES).unwrap();
    let count = |tokens, op: fn(&Op) -> bool| count_nodes(&main, tokens, op);
    let widened = |op: &Op| {
        matches!(
            op,
            Op::Product {
                form: Form::Widened,
                x: Tensor::XHalf | Tensor::ActHalf,
                ..
            }
        )
    };
    let widen = |op: &Op| matches!(op, Op::Widen { .. });
    let half_x = |op: &Op| matches!(op, Op::HalfX { .. });
    let layers = SynthShape::TINY.n_layer as usize;
    // Four products per layer, each with its weight widened and its x rounded as the node
    // before it writes it (the norms, the attention, the gate/up product), none by a node of
    // its own; the gate/up product in two halves, each widened before it, so that the f16
    // copy holds half of the widest weight.
    let half_norm = |op: &Op| {
        matches!(
            op,
            Op::Norm {
                out: NormOut::Half,
                ..
            }
        )
    };
    let half_act = |op: &Op| {
        matches!(
            op,
            Op::Product {
                y: Tensor::ActHalf,
                ..
            }
        )
    };
    assert_eq!(count(5, widened), 5 * layers);
    assert_eq!(count(5, widen), 5 * layers);
    let half_attention = |op: &Op| {
        matches!(
            op,
            Op::Attention {
                form: AttentionForm::Flash {
                    out: FlashOut::NormalizedHalf,
                    ..
                },
                ..
            }
        )
    };
    assert_eq!(count(5, half_x), 0);
    assert_eq!(count(5, half_attention), layers);
    assert_eq!(count(5, half_norm), 2 * layers);
    assert_eq!(count(5, half_act), 2 * layers);
    assert_eq!(count(1, half_norm) + count(1, half_act), 0);
    assert_eq!(count(1, widen), 0);
    let c = &main.model().config;
    let halves: Vec<_> = main
        .graph(Step { tokens: 5, pos: 0 })
        .unwrap()
        .into_iter()
        .filter_map(|n| match n.op {
            Op::Product {
                part: Some(p),
                rows,
                ..
            } => Some((p.first, rows, p.total)),
            _ => None,
        })
        .collect();
    let half = c.n_ff;
    assert_eq!(halves.len(), 2 * layers);
    for pair in halves.chunks(2) {
        assert_eq!(pair, [(0, half, 2 * half), (half, half, 2 * half)]);
    }
    let checker = main.checker(cpu()).unwrap();
    agree("cpu checking a gpu widening its weights", main, checker);
}

/// Each GPU backend present, and the GPU-typed stand-in (a CPU taking the GPUs' kernel shapes
/// and f16 caches), checked node by node by the CPU: every node within its bound and the
/// worst under 1e-9. The stand-in always runs, so the test cannot pass on a machine without
/// a GPU having compared nothing.
#[test]
fn backends_agree_node_by_node() {
    let model = tiny();
    let mut compared = vec![];
    let mut check = |name: &str, backend: Arc<dyn Backend>| {
        let main = Engine::new(model.clone(), backend, SIZES).unwrap();
        let checker = main.checker(cpu()).unwrap();
        for c in agree(name, main, checker) {
            assert!(c.worst.nmse.is_some_and(|e| e < 1e-9), "{name}: {c:?}");
        }
        compared.push(name.to_string());
    };
    check("gpu stand-in", gpu());
    let ran = on_each(&["vulkan", "wgpu", "cuda", "hip"], &mut check);
    assert_eq!(compared.len(), ran + 1, "{compared:?}");
    println!("checked against the cpu: {compared:?}");
}

/// A checker takes the checked engine's KV cache type and K layout (f16 in rows on a GPU,
/// where a CPU keeps f32 with the keys in columns): one made with `Engine::checker` agrees node
/// by node, one that keeps its own is refused with the two forms, before any node runs.
#[test]
fn a_checker_keeps_the_checked_engines_cache_type() {
    let model = tiny();
    let main = Engine::new(model.clone(), gpu(), SIZES).unwrap();
    assert_eq!(main.kv_type(), KvType::F16);
    let own = Engine::new(model.clone(), cpu(), SIZES).unwrap();
    assert_eq!(own.kv_type(), KvType::F32);
    let mut session = Session::new(main, Some(own));
    match session.feed(&[17, 90]) {
        Err(ModelError::CheckerKv { main, checker }) => {
            assert_eq!((main, checker), ("f16", "f32 with the keys in columns"))
        }
        other => panic!("a checker with its own cache type ran: {other:?}"),
    }
    let main = Engine::new(model, gpu(), SIZES).unwrap();
    let checker = main.checker(cpu()).unwrap();
    assert_eq!(checker.kv_type(), KvType::F16);
    assert_eq!(checker.cache_form(), "f16");
    agree("a checker with the gpu's cache", main, checker);
}

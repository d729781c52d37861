//! Models in every block format run whole: a model whose matrices are K-quants, IQ4, the
//! 5-bit formats or the legacy ones (which a GPU holds in groups of blocks) gives the logits of
//! its twin whose matrices are the same weights decoded to f32 by the GGUF reader's reference
//! (no kernel in that decoding), on the CPU and on the GPU-shaped stand-ins (prompts on
//! tiles, and not); and a GPU checking the CPU agrees node by node. So does a model whose layers mix types within their Q, K and V, as llama.cpp's
//! recipes lay them out, with every matrix in its own type.

use crate::common::*;
use std::sync::Arc;
use trine_gguf::quant::{dequantize, quantize};
use trine_gguf::synth::{synth_llama, SynthShape};
use trine_gguf::{Gguf, GgufWriter, TensorType};
use trine_llama::graph::{Form, NormOut, Op, QuantizeFrom, Store};
use trine_llama::tuning::read_type;
use trine_llama::weights::Source;
use trine_llama::{Engine, Model};
use trine_ops::compare::nmse;
use trine_ops::matvec_q8_blocks;

/// The bound of a model's logits against its decoded twin's where its products take x
/// quantized to 8 bits: x's rounding (below).
const X_ROUNDING: f64 = 1e-3;

/// A Llama as small as [`SynthShape::TINY`] but as wide as a 256-element block.
fn shape(matrices: TensorType, embedding: TensorType) -> SynthShape {
    SynthShape {
        n_embd: 256,
        n_ff: 512,
        matrices,
        embedding,
        ..SynthShape::TINY
    }
}

/// `g` with each quantized tensor that `to` gives a type for decoded and stored in it.
fn retyped(g: &Gguf, to: impl Fn(&str) -> Option<TensorType>) -> Gguf {
    let mut w = GgufWriter::new();
    for (key, value) in g.metadata() {
        w.add(key.clone(), value.clone()).unwrap();
    }
    for t in g.tensors() {
        let data = g.tensor_data(t);
        let from = t.ty.weight_type().filter(|ty| ty.is_quantized());
        match (from, to(&t.name)) {
            (Some(ty), Some(new)) => {
                let n = t.dims.iter().product::<u64>() as usize;
                let values: Vec<f32> = dequantize(ty, data, n)
                    .unwrap()
                    .iter()
                    .map(|&v| v as f32)
                    .collect();
                let bytes = match new.weight_type().filter(|ty| ty.is_quantized()) {
                    Some(q) => quantize(q, &values).unwrap(),
                    None => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
                };
                w.add_tensor(t.name.clone(), &t.dims, new, bytes).unwrap();
            }
            _ => w
                .add_tensor(t.name.clone(), &t.dims, t.ty, data.to_vec())
                .unwrap(),
        }
    }
    Gguf::from_bytes(w.to_bytes()).unwrap()
}

/// `g` with every quantized tensor decoded to f32.
fn decoded(g: &Gguf) -> Gguf {
    retyped(g, |_| Some(TensorType::F32))
}

/// Runs `g` and its decoded twin on the CPU and the GPU-shaped stand-ins and checks their
/// logits agree, then a GPU checking the CPU node by node and the CPU checking a GPU.
fn runs_as_its_decoded_twin(name: &str, g: Gguf) {
    let twin = Arc::new(Model::from_gguf(decoded(&g)).unwrap());
    let model = Arc::new(Model::from_gguf(g).unwrap());
    let mut ids = vec![17, 90, 200, 3, 45];
    for _ in 0..2 {
        let last = logits(twin.clone(), cpu(), SIZES, &ids).pop().unwrap();
        ids.push(trine_llama::sampler::argmax(&last).unwrap());
    }
    // Each backend against the twin on itself: the KV cache's type and the attention's
    // form are the backend's, the same for both. Bounds: where a product multiplies these
    // formats with x quantized to 8 bits (as llama.cpp does: every one on the CPU, a GPU's
    // decode products on the K-quants it takes whole), the twin's f32 matrices take float x,
    // so x's rounding shows (worst measured 1.8e-4 over these models; the products themselves
    // are held to their f64 references by the conformance cases, and the node by node checks
    // below run the same forms on both sides); elsewhere the GPU-shaped stand-ins' f16 cache
    // rounds keys and values that differ in their last f32 bits to neighbouring halves now
    // and then, a step of up to 2⁻¹¹ in that element (worst measured 7.9e-9, under the 2.4e-7
    // of every element so moved).
    let w = &model.weights;
    let blocks = (0..w.tensors.len())
        .any(|id| matvec_q8_blocks::takes(read_type(w, id, true), w.tensors[id].cols));
    let gpu_bound = if blocks { X_ROUNDING } else { 1e-7 };
    let backends = [
        ("cpu", cpu(), X_ROUNDING),
        ("gpu", gpu(), gpu_bound),
        ("gpu with tiles", gpu_with(true), gpu_bound),
        ("gpu copying f16 blocks", gpu_copying(), gpu_bound),
    ];
    for (backend_name, backend, bound) in backends {
        let want = logits(twin.clone(), backend.clone(), SIZES, &ids);
        let got = logits(model.clone(), backend, SIZES, &ids);
        for (step, (g, w)) in got.iter().zip(&want).enumerate() {
            let widen = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
            let e = nmse(&widen(w), &widen(g)).unwrap();
            assert!(e < bound, "{name} on {backend_name}, step {step}: NMSE {e}");
        }
    }
    let main = Engine::new(model.clone(), cpu(), SIZES).unwrap();
    let checker = main.checker(gpu()).unwrap();
    agree(name, main, checker);
    // A GPU's decode products on the K-quants' and the groups' blocks, checked by the CPU
    // running them.
    let main = Engine::new(model.clone(), gpu(), SIZES).unwrap();
    let on_blocks = |op: &Op| {
        matches!(
            op,
            Op::Product {
                form: Form::QuantizedBlocks,
                ..
            }
        )
    };
    // A prompt's products take the prompt's tokens; only its output head multiplies one.
    assert!(count_nodes(&main, 5, on_blocks) <= 1, "{name}: prompts");
    assert_eq!(
        count_nodes(&main, 1, on_blocks) > 0,
        blocks,
        "{name}: decode"
    );
    // SwiGLU folds into the gate/up product on float x, or into the quantizer of the down
    // projection on quantized x.
    let swiglus = count_nodes(&main, 1, |op| matches!(op, Op::Swiglu(_)));
    assert_eq!(swiglus, 0, "{name}: SwiGLU nodes of a decode step");
    // Where every product of a decode step takes the file's blocks, their quantizers
    // normalise and combine, and the QKV products rotate and store the keys: no node of
    // its own for any of them.
    let on_floats = count_nodes(&main, 1, |op| {
        matches!(
            op,
            Op::Product {
                form: Form::Float,
                ..
            }
        )
    });
    let between = count_nodes(&main, 1, |op| {
        matches!(
            op,
            Op::Norm { .. } | Op::Combine { .. } | Op::RopeStore { .. }
        )
    });
    if on_floats == 0 {
        assert_eq!(
            between, 0,
            "{name}: norm, combine and rope nodes of a decode step"
        );
        // Where launches overlap, rope stays a node of its own (measured slower folded
        // there), one per QKV product; and the CPU checking that step agrees.
        let overlapping = Engine::new(model, gpu_overlapping(), SIZES).unwrap();
        let ropes = count_nodes(&overlapping, 1, |op| matches!(op, Op::RopeStore { .. }));
        let qkv = count_nodes(&main, 1, |op| {
            matches!(
                op,
                Op::Product {
                    store: Store::Rope { .. },
                    ..
                }
            )
        });
        assert!(
            ropes > 0 && ropes == qkv,
            "{name}: {ropes} rope nodes, {qkv} QKV products"
        );
        // Rows of 256 leave the norm in the quantizer there too (`grouped.rs` has the
        // products that take it).
        let later = count_nodes(&overlapping, 1, |op| {
            matches!(
                op,
                Op::Quantize {
                    from: QuantizeFrom::NormLater(_),
                    ..
                }
            )
        });
        assert_eq!(later, 0, "{name}");
        let checker = overlapping.checker(cpu()).unwrap();
        agree(name, overlapping, checker);
    }
    let checker = main.checker(cpu()).unwrap();
    agree(name, main, checker);
}

#[test]
fn every_block_format_runs_as_its_decoded_twin() {
    let pairs = [
        (TensorType::Q4_K, TensorType::Q6_K),
        (TensorType::Q5_K, TensorType::Q3_K),
        (TensorType::Q2_K, TensorType::Q5_0),
        (TensorType::IQ4_XS, TensorType::IQ4_NL),
        (TensorType::Q5_1, TensorType::Q4_K),
        (TensorType::Q4_0, TensorType::Q8_0),
        (TensorType::Q8_0, TensorType::Q4_1),
        (TensorType::Q4_1, TensorType::Q4_0),
    ];
    for (matrices, embedding) in pairs {
        let bytes = synth_llama(shape(matrices, embedding), 7)
            .unwrap()
            .to_bytes();
        let g = Gguf::from_bytes(bytes).unwrap();
        runs_as_its_decoded_twin(&format!("{matrices}/{embedding}"), g);
    }
}

/// Layer 0 as Q4_K_M lays out a layer that gets more bits (V in Q6_K), layer 1 with three
/// types (Q in Q6_K, K in Q4_K, V in Q5_0): Q, K and V run as products of their own types,
/// the heads of each in their place, none widened to f32 nor copied where it stands alone.
#[test]
fn layers_mixing_types_in_their_qkv_run_each_matrix_in_its_type() {
    let bytes = synth_llama(shape(TensorType::Q4_K, TensorType::Q6_K), 7)
        .unwrap()
        .to_bytes();
    let base = Gguf::from_bytes(bytes).unwrap();
    let mixed = || {
        retyped(&base, |name| match name {
            "blk.0.attn_v.weight" | "blk.1.attn_q.weight" => Some(TensorType::Q6_K),
            "blk.1.attn_v.weight" => Some(TensorType::Q5_0),
            _ => None,
        })
    };
    let model = Model::from_gguf(mixed()).unwrap();
    let w = &model.weights;
    let parts = |l: usize| {
        w.layers[l]
            .qkv
            .iter()
            .map(|p| (w.tensors[p.w].ty.to_string(), p.heads.first, p.heads.count))
            .collect::<Vec<_>>()
    };
    let c = &model.config;
    let (h, kv) = (c.n_head, c.n_head_kv);
    let part = |ty: &str, first, count| (ty.to_string(), first, count);
    assert_eq!(
        parts(0),
        [part("q4_k", 0, h + kv), part("q6_k", h + kv, kv)]
    );
    assert_eq!(
        parts(1),
        [
            part("q6_k", 0, h),
            part("q4_k", h, kv),
            part("q5_0", h + kv, kv)
        ]
    );
    // The parts that stand alone are the file's tensors, not copies.
    let alone = w.layers[1].qkv.iter().map(|p| &w.tensors[p.w].source);
    assert!(alone.into_iter().all(|s| matches!(s, Source::File(_))));
    // A prompt's QKV parts on widened weights share x rounded once, as the norm writes it: no
    // x_f16 node is left, the norms, the attention and the gate/up product writing theirs
    // rounded.
    let copying = Engine::new(Arc::new(model), gpu_copying(), SIZES).unwrap();
    let layers = copying.model().config.n_layer as usize;
    let halves = count_nodes(&copying, 5, |op| matches!(op, Op::HalfX { .. }));
    assert_eq!(halves, 0, "x_f16 nodes");
    let norms = count_nodes(&copying, 5, |op| {
        matches!(
            op,
            Op::Norm {
                out: NormOut::Half,
                ..
            }
        )
    });
    assert_eq!(norms, 2 * layers, "norms rounding to f16");
    runs_as_its_decoded_twin("mixed qkv", mixed());
}

/// A matrix in a type the file format has but no kernel decodes (Q8_K, ggml's activation
/// type) is refused at load with an error naming the tensor, its type and the types trine
/// runs, not widened or run wrong.
#[test]
fn a_matrix_no_kernel_decodes_is_refused_by_name() {
    let bytes = synth_llama(shape(TensorType::Q8_K, TensorType::Q4_K), 7)
        .unwrap()
        .to_bytes();
    let Err(err) = Model::from_gguf(Gguf::from_bytes(bytes).unwrap()) else {
        panic!("a Q8_K model loaded");
    };
    let text = err.to_string();
    assert!(
        text.contains("blk.0.") && text.contains("q8_k") && text.contains("q4_k, q5_k, q6_k"),
        "{text}"
    );
}

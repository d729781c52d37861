//! Models in every block format run whole: a model whose matrices are K-quants, IQ4 or the
//! 5-bit formats gives the logits of its twin whose matrices are the same weights decoded
//! to f32 by the GGUF reader's reference (no kernel in that decoding), on the CPU and on the
//! GPU-shaped stand-ins (prompts on tiles, and not); and a GPU checking the CPU agrees node
//! by node.

use crate::common::*;
use std::sync::Arc;
use trine_gguf::quant::dequantize;
use trine_gguf::synth::{synth_llama, SynthShape};
use trine_gguf::{Gguf, GgufWriter, TensorType};
use trine_llama::{Engine, Model, Session};
use trine_ops::compare::nmse;

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

/// `g` with every quantized tensor decoded to f32.
fn decoded(g: &Gguf) -> Gguf {
    let mut w = GgufWriter::new();
    for (key, value) in g.metadata() {
        w.add(key.clone(), value.clone()).unwrap();
    }
    for t in g.tensors() {
        let data = g.tensor_data(t);
        match t.ty.weight_type().filter(|ty| ty.is_quantized()) {
            Some(ty) => {
                let n = t.dims.iter().product::<u64>() as usize;
                let values = dequantize(ty, data, n).unwrap();
                let bytes: Vec<u8> = values
                    .iter()
                    .flat_map(|&v| (v as f32).to_le_bytes())
                    .collect();
                w.add_tensor(t.name.clone(), &t.dims, TensorType::F32, bytes)
                    .unwrap();
            }
            None => w
                .add_tensor(t.name.clone(), &t.dims, t.ty, data.to_vec())
                .unwrap(),
        }
    }
    Gguf::from_bytes(w.to_bytes()).unwrap()
}

/// Logits of a 5-token prompt, then of one step per further id.
fn logits(
    model: Arc<Model>,
    backend: Arc<dyn trine_backends::Backend>,
    ids: &[u32],
) -> Vec<Vec<f32>> {
    let mut session = Session::new(Engine::new(model, backend, SIZES).unwrap(), None);
    let mut out = vec![session.feed(&ids[..5]).unwrap()];
    for &id in &ids[5..] {
        out.push(session.feed(&[id]).unwrap());
    }
    out
}

#[test]
fn every_block_format_runs_as_its_decoded_twin() {
    let pairs = [
        (TensorType::Q4_K, TensorType::Q6_K),
        (TensorType::Q5_K, TensorType::Q3_K),
        (TensorType::Q2_K, TensorType::Q5_0),
        (TensorType::IQ4_XS, TensorType::IQ4_NL),
        (TensorType::Q5_1, TensorType::Q4_K),
    ];
    for (matrices, embedding) in pairs {
        let bytes = synth_llama(shape(matrices, embedding), 7)
            .unwrap()
            .to_bytes();
        let g = Gguf::from_bytes(bytes).unwrap();
        let twin = Arc::new(Model::from_gguf(decoded(&g)).unwrap());
        let model = Arc::new(Model::from_gguf(g).unwrap());
        let mut ids = vec![17, 90, 200, 3, 45];
        for _ in 0..2 {
            let last = logits(twin.clone(), cpu(), &ids).pop().unwrap();
            ids.push(trine_llama::sampler::argmax(&last).unwrap());
        }
        // Each backend against the twin on itself: the KV cache's type and the attention's
        // form are the backend's, the same for both. Bounds: the CPU's f32 cache leaves only
        // the order of f32 sums (worst measured 1.6e-13 over these models); the GPU-shaped
        // stand-ins' f16 cache rounds keys and values that differ in their last f32 bits to
        // neighbouring halves now and then, a step of up to 2⁻¹¹ in that element (worst
        // measured 7.9e-9, under the 2.4e-7 of every element so moved).
        let backends = [
            ("cpu", cpu(), 1e-11),
            ("gpu", gpu(), 1e-7),
            ("gpu with tiles", gpu_with(true), 1e-7),
        ];
        for (name, backend, bound) in backends {
            let want = logits(twin.clone(), backend.clone(), &ids);
            let got = logits(model.clone(), backend, &ids);
            for (step, (g, w)) in got.iter().zip(&want).enumerate() {
                let widen = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
                let e = nmse(&widen(w), &widen(g)).unwrap();
                assert!(
                    e < bound,
                    "{matrices}/{embedding} on {name}, step {step}: NMSE {e}"
                );
            }
        }
        let main = Engine::new(model.clone(), cpu(), SIZES).unwrap();
        let checker = main.checker(gpu()).unwrap();
        agree(&format!("{matrices}/{embedding}"), main, checker);
    }
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

//! Q4_0 and Q8_0 models whose rows are whole groups of eight blocks, on the GPU stand-in and
//! each GPU backend present: every product of a decode step multiplies x quantized to 8 bits
//! with the weights in groups (byte-code units), each node agrees with the CPU running the same
//! nodes on the same groups, and the greedy tokens are those of the CPU's own engine, which
//! reads the file's blocks.

use crate::common::*;
use std::sync::Arc;
use trine_backends::{Backend, DeviceType};
use trine_gguf::synth::{synth_llama, SynthShape};
use trine_gguf::{Gguf, TensorType};
use trine_llama::graph::{Form, Op};
use trine_llama::sampler::argmax;
use trine_llama::{Engine, Model, Session};

/// A Llama as small as [`SynthShape::TINY`] with every width a multiple of 256, so that
/// every weight but the norms is grouped on a GPU: an output head of type `output`, or tied
/// to the embedding table (`None`), which the embedding then reads grouped too.
fn model(matrices: TensorType, embedding: TensorType, output: Option<TensorType>) -> Arc<Model> {
    let shape = SynthShape {
        n_embd: 256,
        n_ff: 512,
        matrices,
        embedding,
        output,
        ..SynthShape::TINY
    };
    let bytes = synth_llama(shape, 11).unwrap().to_bytes();
    Arc::new(Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap())
}

/// The greedy tokens after a 5-token prompt, 6 of them.
fn greedy(model: Arc<Model>, backend: Arc<dyn Backend>) -> Vec<u32> {
    let mut session = Session::new(Engine::new(model, backend, SIZES).unwrap(), None);
    let mut next = argmax(&session.feed(&[17, 90, 200, 3, 45]).unwrap()).unwrap();
    let mut ids = vec![next];
    for _ in 0..5 {
        next = argmax(&session.feed(&[next]).unwrap()).unwrap();
        ids.push(next);
    }
    ids
}

/// Whether every product of `engine`'s decode step multiplies on byte-code units.
fn decode_on_units(engine: &Engine) -> bool {
    let products = count_nodes(engine, 1, |op| matches!(op, Op::Product { .. }));
    let on_units = count_nodes(engine, 1, |op| {
        matches!(
            op,
            Op::Product {
                form: Form::QuantizedBlocks,
                ..
            }
        )
    });
    on_units == products
}

/// Each backend present runs the GPU stand-in's nodes (a backend on a CPU device, such as
/// lavapipe, would otherwise take the CPU's forms) as its checker, and its own engine checked
/// by the CPU, with the CPU's greedy tokens.
#[test]
fn grouped_q4_0_and_q8_0_agree_with_the_cpu_on_every_gpu() {
    for (matrices, embedding, output) in [
        (TensorType::Q4_0, TensorType::Q8_0, Some(TensorType::Q4_0)),
        (TensorType::Q8_0, TensorType::Q4_0, None),
    ] {
        let name = format!("{matrices}/{embedding}, output {output:?}");
        let model = model(matrices, embedding, output);
        let want = greedy(model.clone(), cpu());
        let stand_in = || Engine::new(model.clone(), gpu(), SIZES).unwrap();
        let main = stand_in();
        assert!(decode_on_units(&main), "{name}");
        let checker = main.checker(cpu()).unwrap();
        agree(&format!("{name}: cpu checking the stand-in"), main, checker);
        assert_eq!(greedy(model.clone(), gpu()), want, "{name} on the stand-in");
        // With prompts on tiles, which read the groups too, a GPU holds each weight once (a tied
        // table too, read by the embedding and the head).
        let tiles = Engine::new(model.clone(), gpu_with(true), SIZES).unwrap();
        let w = &model.weights;
        let file: u64 = (0..w.tensors.len())
            .map(|id| w.bytes(&model.gguf, id).len() as u64)
            .sum();
        assert_eq!(tiles.footprint().unwrap().weights, file, "{name}");
        // A stand-in that widens its prompts' weights to f16 widens the groups.
        let main = Engine::new(model.clone(), gpu_copying(), SIZES).unwrap();
        let widen = count_nodes(&main, 5, |op| matches!(op, Op::Widen { .. }));
        // Four products a layer, gate/up's in two halves.
        assert_eq!(widen, 5 * SynthShape::TINY.n_layer as usize, "{name}");
        let checker = main.checker(cpu()).unwrap();
        agree(
            &format!("{name}: cpu checking the widening stand-in"),
            main,
            checker,
        );
        assert_eq!(
            greedy(model.clone(), gpu_copying()),
            want,
            "{name} widening"
        );
        let mut compared = vec![];
        let mut check = |backend_name: &str, backend: Arc<dyn Backend>| {
            let main = stand_in();
            let checker = main.checker(backend.clone()).unwrap();
            agree(
                &format!("{name}: {backend_name} checking the stand-in"),
                main,
                checker,
            );
            let main = Engine::new(model.clone(), backend.clone(), SIZES).unwrap();
            let gpu = backend.info().device_type != DeviceType::Cpu;
            assert_eq!(decode_on_units(&main), gpu, "{name} on {backend_name}");
            let checker = main.checker(cpu()).unwrap();
            agree(&format!("{name} on {backend_name}"), main, checker);
            let got = greedy(model.clone(), backend);
            assert_eq!(got, want, "{name} on {backend_name}: greedy tokens");
            compared.push(backend_name.to_string());
        };
        let ran = on_each(&["vulkan", "wgpu", "cuda", "hip"], &mut check);
        assert_eq!(compared.len(), ran, "{compared:?}");
        println!("{name}: checked against the stand-in and the cpu: {compared:?}");
    }
}

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
use trine_llama::graph::{Form, Load, Op, QuantizeFrom};
use trine_llama::sampler::argmax;
use trine_llama::{Engine, Model, Session};

/// A Llama as small as [`SynthShape::TINY`] with every width a multiple of 256, so that
/// every weight but the norms is grouped on a GPU: an output head of type `output`, or tied
/// to the embedding table (`None`), which the embedding then reads grouped too. A stream of
/// `n_embd` (heads of 64 however wide it is).
fn model(
    (matrices, embedding, output): (TensorType, TensorType, Option<TensorType>),
    n_embd: u64,
) -> Arc<Model> {
    let shape = SynthShape {
        n_embd,
        n_ff: 512,
        head_dim: Some(64),
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

/// Whether every product of `engine`'s decode step multiplies on byte-code units, and whether
/// every norm before them is left to them (`later`: their quantizer scales x by the norm's
/// weight and each product by 1/rms) or done in their quantizer.
fn decode_on_units(engine: &Engine, later: bool) -> bool {
    let quantizers = |later: bool| {
        count_nodes(engine, 1, |op| match op {
            Op::Quantize {
                from: QuantizeFrom::NormLater(_),
                ..
            } => later,
            Op::Quantize {
                from: QuantizeFrom::Norm(_),
                ..
            } => !later,
            _ => false,
        })
    };
    let normalising = count_nodes(engine, 1, |op| {
        matches!(
            op,
            Op::Product {
                form: Form::QuantizedBlocks,
                load: Load::Rms,
                ..
            }
        )
    });
    // A layer's two norms and the output head's.
    let per_step = 2 * SynthShape::TINY.n_layer as usize + 1;
    let placed = quantizers(later) == per_step
        && quantizers(!later) == 0
        && (normalising >= per_step) == later;
    if !placed {
        return false;
    }
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
    // Rows of 4,096 are where products on launches that overlap normalise x themselves.
    for ((matrices, embedding, output), n_embd) in [
        (
            (TensorType::Q4_0, TensorType::Q8_0, Some(TensorType::Q4_0)),
            256,
        ),
        ((TensorType::Q8_0, TensorType::Q4_0, None), 256),
        (
            (TensorType::Q8_0, TensorType::Q8_0, Some(TensorType::Q4_1)),
            4096,
        ),
    ] {
        let name = format!("{matrices}/{embedding}, output {output:?}, width {n_embd}");
        let model = model((matrices, embedding, output), n_embd);
        let wide = n_embd >= 4096;
        let want = greedy(model.clone(), cpu());
        let stand_in = || Engine::new(model.clone(), gpu(), SIZES).unwrap();
        let main = stand_in();
        assert!(decode_on_units(&main, false), "{name}");
        let checker = main.checker(cpu()).unwrap();
        agree(&format!("{name}: cpu checking the stand-in"), main, checker);
        assert_eq!(greedy(model.clone(), gpu()), want, "{name} on the stand-in");
        // Where launches overlap, the products in rows of 4,096 normalise x themselves.
        let overlapping = || Engine::new(model.clone(), gpu_overlapping(), SIZES).unwrap();
        let main = overlapping();
        assert!(decode_on_units(&main, wide), "{name}: overlapping");
        let checker = main.checker(cpu()).unwrap();
        agree(
            &format!("{name}: cpu checking the overlapping stand-in"),
            main,
            checker,
        );
        assert_eq!(
            greedy(model.clone(), gpu_overlapping()),
            want,
            "{name} on the overlapping stand-in"
        );
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
            for main in [stand_in(), overlapping()] {
                let checker = main.checker(backend.clone()).unwrap();
                agree(
                    &format!("{name}: {backend_name} checking the stand-ins"),
                    main,
                    checker,
                );
            }
            let main = Engine::new(model.clone(), backend.clone(), SIZES).unwrap();
            let info = backend.info();
            let gpu = info.device_type != DeviceType::Cpu;
            assert_eq!(
                decode_on_units(&main, wide && info.tuning.launches_overlap),
                gpu,
                "{name} on {backend_name}"
            );
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

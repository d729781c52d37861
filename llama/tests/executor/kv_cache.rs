//! The KV cache in q8_0 (`--cache-type q8_0`, llama.cpp's `-ctk/-ctv q8_0`): a model runs on
//! the CPU and the GPU stand-ins with its keys and values quantized, as close to the logits
//! of an f32 cache as q8_0's rounding allows, and a GPU checking the CPU, both in q8_0, agrees
//! node by node; a head size that q8_0's blocks do not tile is refused by name.

use crate::common::*;
use std::sync::Arc;
use trine_gguf::synth::{synth_llama, SynthShape};
use trine_gguf::Gguf;
use trine_llama::{Engine, EngineOptions, Model, ModelError};
use trine_ops::compare::nmse;
use trine_ops::kv_type::KvType;

/// A Llama as small as [`SynthShape::TINY`] with heads of 64, two q8_0 blocks each.
fn model() -> Arc<Model> {
    let shape = SynthShape {
        n_embd: 256,
        n_ff: 512,
        ..SynthShape::TINY
    };
    let bytes = synth_llama(shape, 11).unwrap().to_bytes();
    Arc::new(Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap())
}

fn with(cache: KvType) -> EngineOptions {
    EngineOptions {
        cache: Some(cache),
        ..SIZES
    }
}

#[test]
fn a_q8_0_cache_runs_close_to_an_f32_one_on_every_backend() {
    let model = model();
    let ids = [17, 90, 200, 3, 45, 7, 250, 31];
    // Bound: q8_0 moves each cached element by up to half a step of its block (max/254);
    // measured worst 2.2e-4 over these steps (the CPU's decode steps; the GPU stand-ins'
    // 2.1e-4 at the prompt, 3e-5 to 6e-5 after), and never 0, which is what an f32 cache
    // standing in for q8_0 would give.
    let backends = [
        ("cpu", cpu()),
        ("gpu", gpu()),
        ("gpu with tiles", gpu_with(true)),
    ];
    for (name, backend) in backends {
        let want = logits(model.clone(), backend.clone(), with(KvType::F32), &ids);
        let got = logits(model.clone(), backend, with(KvType::Q8_0), &ids);
        for (step, (g, w)) in got.iter().zip(&want).enumerate() {
            let widen = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
            let e = nmse(&widen(w), &widen(g)).unwrap();
            assert!(e > 0.0 && e < 1e-3, "{name}, step {step}: NMSE {e}");
        }
    }
    let main = Engine::new(model, cpu(), with(KvType::Q8_0)).unwrap();
    assert_eq!((main.kv_type(), main.cache_form()), (KvType::Q8_0, "q8_0"));
    let checker = main.checker(gpu()).unwrap();
    assert_eq!(checker.kv_type(), KvType::Q8_0);
    agree("q8_0 cache", main, checker);
}

#[test]
fn a_head_size_q8_0_blocks_do_not_tile_is_refused() {
    // The tiny model's heads are 16 wide, half a q8_0 block.
    let Err(err) = Engine::new(tiny(), cpu(), with(KvType::Q8_0)) else {
        panic!("a q8_0 cache of 16-wide heads was built");
    };
    assert!(
        matches!(err, ModelError::CacheType { ty: "q8_0", .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("head_dim") && text.contains("32"), "{text}");
}

/// A CPU's decode attention takes each KV head's query heads in one workgroup
/// (`split_kernel_heads`, which loads each key once for them): over a long context the tiny
/// model's logits over a prompt and six decode steps are those of a CPU that refuses that
/// kernel and runs a workgroup per head, within the attention's rounding; and each is its
/// kernel's: spoiling that kernel's output changes every decode step's.
#[test]
fn a_cpu_takes_a_kv_heads_queries_together() {
    let ids = [17, 90, 200, 3, 45, 7, 300, 12, 9, 140, 66];
    let long = EngineOptions {
        context: 2048,
        ..SIZES
    };
    let widen = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    let want = logits(
        tiny(),
        faulty("attention_split_heads", &[], 1.0),
        long,
        &ids,
    );
    let got = logits(tiny(), cpu(), long, &ids);
    for (step, (g, w)) in got.iter().zip(&want).enumerate() {
        let e = nmse(&widen(w), &widen(g)).unwrap();
        assert!(e < 1e-10, "step {step}: NMSE {e:e}");
    }
    // Each run's attention is the kernel it names: spoiling it changes every decode step.
    let spoiled = [
        (faulty("", &["attention_split_heads"], 0.0), &got),
        (
            faulty("attention_split_heads", &["attention_split_s"], 0.0),
            &want,
        ),
    ];
    for (backend, clean) in spoiled {
        let s = logits(tiny(), backend, long, &ids);
        for (step, (s, c)) in s.iter().zip(clean).enumerate().skip(1) {
            let e = nmse(&widen(c), &widen(s)).unwrap();
            assert!(
                e > 1e-4,
                "step {step}: the kernel spoiled did not run (NMSE {e:e})"
            );
        }
    }
}

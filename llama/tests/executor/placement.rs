//! Where kernels and buffers go: a kernel the device lacks runs on the CPU; a model is checked
//! against the device's memory before the first step; uploads and allocations happen once.

use crate::common::*;
use trine_backends::BackendError;
use trine_llama::{Engine, ModelError, Session};

/// A GPU whose driver refuses the float products' kernels runs them on the CPU, which joins
/// the executor for them (with a note naming each and why), and the logits are the GPU's
/// within the products' rounding: the CPU's kernels sum in another order.
#[test]
fn a_kernel_the_device_lacks_runs_on_the_cpu() {
    let model = tiny();
    let reference = run(&mut Session::new(
        Engine::new(model.clone(), gpu(), SIZES).unwrap(),
        None,
    ));
    assert!(reference.iter().flatten().all(|v| v.is_finite()));
    let engine = Engine::new(model, gpu_refusing("matvec_q4_1"), SIZES).unwrap();
    let devices: Vec<&str> = engine.devices().map(|d| d.name()).collect();
    assert_eq!(devices, ["faulty", "cpu"]);
    let notes = engine.placement_notes().join("\n");
    for fused in ["rms_norm, rope, kv cache store", "attention combine, add"] {
        let note = format!("matvec q4_1 ({fused}) runs on the cpu: faulty could not run it");
        assert!(notes.contains(&note), "{notes}");
    }
    let got = run(&mut Session::new(engine, None));
    assert_eq!(got.len(), reference.len());
    for (step, (a, b)) in got.iter().zip(&reference).enumerate() {
        let a: Vec<f64> = a.iter().map(|&v| f64::from(v)).collect();
        let b: Vec<f64> = b.iter().map(|&v| f64::from(v)).collect();
        let e = trine_ops::compare::nmse(&a, &b).unwrap();
        assert!(e < 1e-9, "step {step}: NMSE {e:e}");
    }
}

/// A device that cannot bind the embedding table whole (lavapipe binds 128 MiB, a 1B layout's
/// table is 148 MB) leaves the kernels that read it, the embedding and the output head tied
/// to it, to the CPU, saying why, and the logits are the device's own within rounding.
#[test]
fn a_weight_larger_than_the_devices_largest_binding_is_read_on_the_cpu() {
    let model = tiny();
    let table = model
        .weights
        .bytes(&model.gguf, model.weights.token_embd)
        .len() as u64;
    let reference = run(&mut Session::new(
        Engine::new(model.clone(), gpu(), SIZES).unwrap(),
        None,
    ));
    let engine = Engine::new(model, gpu_binding(table - 1), SIZES).unwrap();
    let devices: Vec<&str> = engine.devices().map(|d| d.name()).collect();
    assert_eq!(devices, ["narrow", "cpu"]);
    let notes = engine.placement_notes().join("\n");
    let why = format!(
        "runs on the cpu: narrow could not run it (it binds a weight of {table} bytes, more \
         than the device's largest binding of {})",
        table - 1
    );
    assert!(notes.contains(&format!("embedding q8_0 {why}")), "{notes}");
    assert!(notes.lines().count() >= 2, "the tied output head: {notes}");
    let got = run(&mut Session::new(engine, None));
    for (step, (a, b)) in got.iter().zip(&reference).enumerate() {
        let a: Vec<f64> = a.iter().map(|&v| f64::from(v)).collect();
        let b: Vec<f64> = b.iter().map(|&v| f64::from(v)).collect();
        let e = trine_ops::compare::nmse(&a, &b).unwrap();
        assert!(e < 1e-9, "step {step}: NMSE {e:e}");
    }
}

/// After `Session::prepare` (which `trine generate` runs before starting its clocks) a
/// prompt step and a decode step allocate nothing and write only their ids and position, so
/// the prefill's time is the prompt's work, not the model's upload; without it the first step
/// uploads every weight.
#[test]
fn prepared_steps_upload_and_allocate_nothing() {
    use std::sync::atomic::Ordering::Relaxed;
    let prompt = vec![1; SIZES.max_batch as usize];
    let steps = |prepare: bool| {
        let dev = small(u64::MAX, None);
        let mut session = Session::new(Engine::new(tiny(), dev.clone(), SIZES).unwrap(), None);
        if prepare {
            session.prepare().unwrap();
        }
        let before = (
            dev.hooks.allocated.load(Relaxed),
            dev.hooks.written.load(Relaxed),
        );
        session.feed_greedy(&prompt).unwrap();
        session.feed_greedy(&[2]).unwrap();
        (
            dev.hooks.allocated.load(Relaxed) - before.0,
            dev.hooks.written.load(Relaxed) - before.1,
        )
    };
    let model = tiny();
    let weights: usize = (0..model.weights.tensors.len())
        .map(|id| model.weights.bytes(&model.gguf, id).len())
        .sum();
    let (allocated, written) = steps(true);
    assert_eq!(allocated, 0);
    // Each step's ids (4 bytes a token) and its 16-byte step buffer.
    assert!(
        written <= 4 * (prompt.len() as u64 + 1) + 2 * 16,
        "{written} bytes written"
    );
    let (allocated, written) = steps(false);
    assert!(
        allocated > 0 && written > weights as u64,
        "{allocated} {written}"
    );
}

/// The executor says before the first step how much memory a model needs on its device, and
/// refuses a device with less; the number is what the steps then allocate, to the byte.
#[test]
fn a_model_larger_than_the_device_is_refused_before_the_first_step() {
    let model = tiny();
    let roomy = small(u64::MAX, None);
    let engine = Engine::new(model.clone(), roomy.clone(), SIZES).unwrap();
    let needed = engine.bytes_needed(0).unwrap();
    let mut session = Session::new(engine, None);
    session.feed(&[1; SIZES.max_batch as usize]).unwrap();
    session.feed_greedy(&[2]).unwrap();
    let allocated = roomy
        .hooks
        .allocated
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        needed, allocated,
        "the largest prompt step and a decode step"
    );

    // Free memory where the device reports it, else its size.
    for (size, free, what) in [
        (u64::MAX, Some(needed - 1), "free"),
        (needed - 1, None, "in all"),
    ] {
        match Engine::new(model.clone(), small(size, free), SIZES) {
            Err(ModelError::DoesNotFit {
                needed: n,
                available,
                what: w,
                ..
            }) => assert_eq!((n, available, w), (needed, needed - 1, what)),
            Err(e) => panic!("expected DoesNotFit, got {e}"),
            Ok(_) => panic!("a device with {} bytes {what} took {needed}", needed - 1),
        }
    }
    let exact = small(u64::MAX, Some(needed));
    let mut session = Session::new(Engine::new(model, exact, SIZES).unwrap(), None);
    session.feed(&[3, 4]).unwrap();
}

/// A device that runs out of memory part-way, in `Session::prepare` or in the steps that
/// allocate as they go, stops the executor with the backend's typed out-of-memory error
/// naming the device, the bytes of the buffer asked for and the bytes left (one short: the
/// budget is a byte under what the model needs), not a panic or an untyped failure; with that
/// byte the same steps run.
#[test]
fn an_allocation_that_fails_is_the_typed_out_of_memory_error() {
    use std::sync::atomic::Ordering::Relaxed;
    let model = tiny();
    let needed = Engine::new(model.clone(), small(u64::MAX, None), SIZES)
        .unwrap()
        .bytes_needed(0)
        .unwrap();
    let go = |session: &mut Session, prepare: bool| {
        if prepare {
            session.prepare()
        } else {
            session.feed(&[1; SIZES.max_batch as usize])?;
            session.feed_greedy(&[2]).map(drop)
        }
    };
    for prepare in [true, false] {
        let dev = overcommitted(needed - 1);
        let mut session = Session::new(
            Engine::new(model.clone(), dev.clone(), SIZES).unwrap(),
            None,
        );
        match go(&mut session, prepare) {
            Err(ModelError::Backend { backend, source }) => match *source {
                BackendError::OutOfMemory { bytes, free } => {
                    assert_eq!(backend, "small");
                    assert_eq!(free, Some(bytes - 1), "prepare {prepare}");
                    assert_eq!(dev.hooks.allocated.load(Relaxed) + bytes, needed);
                    let message = ModelError::backend(&backend, *source).to_string();
                    let want = format!("allocating {bytes} bytes ({} bytes free)", bytes - 1);
                    assert!(message.contains(&want), "{message}");
                }
                other => panic!("prepare {prepare}: expected OutOfMemory, got {other}"),
            },
            Err(e) => panic!("prepare {prepare}: expected OutOfMemory, got {e}"),
            Ok(()) => panic!("prepare {prepare}: {needed} bytes fit in {}", needed - 1),
        }
        let dev = overcommitted(needed);
        let mut session = Session::new(Engine::new(model.clone(), dev, SIZES).unwrap(), None);
        go(&mut session, prepare).unwrap();
    }
}

//! The executor on a tiny synthetic Llama (2 layers, 64 wide, GQA 4/2, Q4_1 projections, a
//! Q8_0 tied embedding): per-kernel fallback to the CPU, the cross-check naming a broken op,
//! agreement between backends, and typed errors for bad models and steps.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use trine_backends::{
    Backend, BackendError, BackendKind, BufferHandle, DeviceInfo, DeviceType, Dispatch, ProgramId,
};
use trine_gguf::synth::{synth_llama, SynthShape};
use trine_gguf::{Gguf, GgufWriter, TensorType, Value};
use trine_ir::Kernel;
use trine_llama::graph::{Form, Op, Step};
use trine_llama::{
    generate, Engine, EngineOptions, GenerateOptions, Model, ModelError, Sampling, Session,
};
use trine_ops::support::Float;

const TINY: SynthShape = SynthShape {
    n_embd: 64,
    n_ff: 128,
    n_layer: 2,
    n_head: 4,
    n_head_kv: 2,
    vocab: 320,
    matrices: TensorType::Q4_1,
    embedding: TensorType::Q8_0,
};

const SIZES: EngineOptions = EngineOptions {
    context: 32,
    max_batch: 8,
    record: true,
};

fn tiny() -> Arc<Model> {
    let bytes = synth_llama(TINY, 5).unwrap().to_bytes();
    Arc::new(Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap())
}

fn cpu() -> Arc<dyn Backend> {
    trine_backends::open(BackendKind::Cpu).unwrap()
}

/// A CPU that refuses to compile some kernels, or multiplies the last output of others by
/// `factor` after running them (0 zeroes it): a driver that lacks an op, and one that computes
/// it wrong.
struct Faulty {
    inner: Arc<dyn Backend>,
    info: DeviceInfo,
    refuse: &'static str,
    spoil: &'static [&'static str],
    factor: f32,
    spoiled: Mutex<HashSet<ProgramId>>,
}

impl Faulty {
    fn device(
        refuse: &'static str,
        spoil: &'static [&'static str],
        factor: f32,
    ) -> Arc<dyn Backend> {
        let inner = cpu();
        Arc::new(Faulty {
            info: inner.info().clone(),
            inner,
            refuse,
            spoil,
            factor,
            spoiled: Mutex::new(HashSet::new()),
        })
    }

    /// A CPU that says it is a discrete GPU with 16-bit storage: an executor on it keeps its
    /// KV cache in f16 and takes the GPUs' kernel shapes.
    fn gpu() -> Arc<dyn Backend> {
        Self::gpu_with(false)
    }

    /// [`Faulty::gpu`] that refuses to compile the kernels whose names start with `refuse`.
    fn gpu_refusing(refuse: &'static str) -> Arc<dyn Backend> {
        Self::stand_in(false, refuse)
    }

    /// [`Faulty::gpu`] that says it has matrix tiles: its prompts take the tiled products,
    /// which the CPU beneath runs as their scalar variant.
    fn gpu_with(tiles: bool) -> Arc<dyn Backend> {
        Self::stand_in(tiles, "")
    }

    fn stand_in(tiles: bool, refuse: &'static str) -> Arc<dyn Backend> {
        let inner = cpu();
        let mut info = inner.info().clone();
        info.device_type = DeviceType::Discrete;
        info.f16 = true;
        info.tiles = tiles;
        Arc::new(Faulty {
            info,
            inner,
            refuse,
            spoil: &[],
            factor: 1.0,
            spoiled: Mutex::new(HashSet::new()),
        })
    }
}

impl Backend for Faulty {
    fn name(&self) -> &'static str {
        "faulty"
    }
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn alloc(&self, bytes: u64) -> Result<BufferHandle, BackendError> {
        self.inner.alloc(bytes)
    }
    fn free(&self, buffer: BufferHandle) {
        self.inner.free(buffer)
    }
    fn write(&self, b: BufferHandle, offset: u64, data: &[u8]) -> Result<(), BackendError> {
        self.inner.write(b, offset, data)
    }
    fn read(&self, b: BufferHandle, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.inner.read(b, offset, out)
    }
    fn compile(&self, kernel: &Kernel) -> Result<ProgramId, BackendError> {
        if !self.refuse.is_empty() && kernel.name.starts_with(self.refuse) {
            return Err(BackendError::Unsupported {
                kernel: kernel.name.clone(),
                what: "a feature this test withholds".into(),
            });
        }
        let id = self.inner.compile(kernel)?;
        if self.spoil.iter().any(|p| kernel.name.starts_with(p)) {
            self.spoiled.lock().unwrap().insert(id);
        }
        Ok(id)
    }
    fn dispatch(&self, d: &Dispatch<'_>) -> Result<(), BackendError> {
        self.inner.dispatch(d)?;
        if self.spoiled.lock().unwrap().contains(&d.program) {
            let out = d.bindings.last().expect("a kernel with an output");
            let mut bytes = vec![0; out.size as usize];
            self.inner.read(out.buffer, out.offset, &mut bytes)?;
            for word in bytes.chunks_exact_mut(4) {
                let v = f32::from_le_bytes(word.try_into().unwrap()) * self.factor;
                word.copy_from_slice(&v.to_le_bytes());
            }
            self.inner.write(out.buffer, out.offset, &bytes)?;
        }
        Ok(())
    }
    fn synchronize(&self) -> Result<(), BackendError> {
        self.inner.synchronize()
    }
}

/// Logits after a prompt and two greedy steps.
fn run(session: &mut Session) -> Vec<Vec<f32>> {
    let mut out = vec![session.feed(&[17, 90, 200, 3, 45]).unwrap()];
    for _ in 0..2 {
        let next = trine_llama::sampler::argmax(out.last().unwrap()).unwrap();
        out.push(session.feed(&[next]).unwrap());
    }
    out
}

/// A GPU whose driver refuses the float products' kernels runs them on the CPU, which joins
/// the executor for them (with a note naming each and why), and the logits are the GPU's
/// within the products' rounding: the CPU's kernels sum in another order.
#[test]
fn a_kernel_the_device_lacks_runs_on_the_cpu() {
    let model = tiny();
    let reference = run(&mut Session::new(
        Engine::new(model.clone(), Faulty::gpu(), SIZES).unwrap(),
        None,
    ));
    assert!(reference.iter().flatten().all(|v| v.is_finite()));
    let engine = Engine::new(model, Faulty::gpu_refusing("matvec_q4_1"), SIZES).unwrap();
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

#[test]
fn the_cross_check_names_the_first_op_that_goes_wrong() {
    let model = tiny();
    let main = Engine::new(model.clone(), cpu(), SIZES).unwrap();
    let checker = Engine::new(model, Faulty::device("", &["attention_split"], 0.0), SIZES).unwrap();
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

/// A GPU can check a CPU whose products take quantized x: it compiles and runs the CPU's nodes
/// (the quantizing ones, the products on interleaved weights, the nodes the float products
/// fuse), prompt and decode steps alike, and every node agrees within its bound.
#[test]
fn a_gpu_checks_a_cpu_that_quantizes_x() {
    let model = tiny();
    let main = Engine::new(model, cpu(), SIZES).unwrap();
    let checker = main.checker(Faulty::gpu()).unwrap();
    let mut session = Session::new(main, Some(checker));
    run(&mut session);
    assert_eq!(session.checks.len(), 3);
    for c in &session.checks {
        assert!(c.first_over_bound.is_none(), "{c:?}");
    }
}

/// A GPU's prompt steps take quantized x and its decode steps the fused float products; a
/// CPU checking it runs the same nodes and agrees at every one.
#[test]
fn a_gpus_prompts_take_quantized_x_and_its_decode_steps_do_not() {
    let model = tiny();
    let main = Engine::new(model, Faulty::gpu(), SIZES).unwrap();
    let q8 = |tokens| {
        main.graph(Step { tokens, pos: 0 })
            .unwrap()
            .iter()
            .filter(|n| {
                matches!(
                    n.op,
                    Op::Product {
                        form: Form::QuantizedX,
                        ..
                    }
                )
            })
            .count()
    };
    // Four products per layer and the head.
    assert_eq!(q8(5), 4 * TINY.n_layer as usize + 1);
    assert_eq!(q8(1), 0);
    let checker = main.checker(cpu()).unwrap();
    let mut session = Session::new(main, Some(checker));
    run(&mut session);
    for c in &session.checks {
        assert!(c.first_over_bound.is_none(), "{c:?}");
    }
}

/// A GPU with matrix tiles multiplies its prompts' products on float x through them, and a
/// CPU checks them node by node: the CPU holds its Q4 weights in pairs of blocks, so it reads
/// the file's layout for these products from a copy of its own (reading the pairs gave NaN).
#[test]
fn a_cpu_checks_a_gpus_prompts_on_matrix_tiles() {
    let model = tiny();
    let main = Engine::new(model, Faulty::gpu_with(true), SIZES).unwrap();
    let count = |tokens, tiled: bool| {
        main.graph(Step { tokens, pos: 0 })
            .unwrap()
            .iter()
            .filter(|n| match n.op {
                Op::Product {
                    form: Form::Tiles, ..
                } => tiled,
                Op::Product {
                    form: Form::QuantizedX,
                    ..
                }
                | Op::Quantize { .. } => !tiled,
                _ => false,
            })
            .count()
    };
    // Four products per layer; the head multiplies one token.
    assert_eq!(count(5, true), 4 * TINY.n_layer as usize);
    assert_eq!(count(5, false), 2);
    assert_eq!(count(1, true), 0);
    let checker = main.checker(cpu()).unwrap();
    let mut session = Session::new(main, Some(checker));
    run(&mut session);
    assert_eq!(session.checks.len(), 3);
    for c in &session.checks {
        assert!(c.first_over_bound.is_none(), "{c:?}");
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
        let checker = Engine::new(
            model.clone(),
            Faulty::device("", kernel, 1.0 + error),
            SIZES,
        );
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

/// A CPU that reports `size` bytes of memory, of which `free` are free where that is `Some`
/// (as CUDA, HIP and Vulkan with VK_EXT_memory_budget report it; wgpu reports only the size),
/// and counts what is allocated on it: a device the model may not fit. Allocations past
/// `budget` fail as a driver's do, with the bytes asked and what is left.
struct Small {
    inner: Arc<dyn Backend>,
    info: DeviceInfo,
    free: Option<u64>,
    budget: u64,
    allocated: std::sync::atomic::AtomicU64,
    written: std::sync::atomic::AtomicU64,
}

impl Small {
    fn device(size: u64, free: Option<u64>) -> Arc<Small> {
        Small::with_budget(size, free, u64::MAX)
    }

    /// A device that says it has memory to spare but runs out after `budget` bytes: a driver
    /// that overcommits, or another process taking memory after the executor checked.
    fn overcommitted(budget: u64) -> Arc<Small> {
        Small::with_budget(u64::MAX, None, budget)
    }

    fn with_budget(size: u64, free: Option<u64>, budget: u64) -> Arc<Small> {
        let inner = cpu();
        let mut info = inner.info().clone();
        info.memory.device_local = size;
        Arc::new(Small {
            inner,
            info,
            free,
            budget,
            allocated: 0.into(),
            written: 0.into(),
        })
    }
}

impl Backend for Small {
    fn name(&self) -> &'static str {
        "small"
    }
    fn info(&self) -> &DeviceInfo {
        &self.info
    }
    fn alloc(&self, bytes: u64) -> Result<BufferHandle, BackendError> {
        use std::sync::atomic::Ordering::Relaxed;
        let before = self.allocated.load(Relaxed);
        if before.saturating_add(bytes) > self.budget {
            return Err(BackendError::OutOfMemory {
                bytes,
                free: Some(self.budget - before),
            });
        }
        self.allocated.fetch_add(bytes, Relaxed);
        self.inner.alloc(bytes)
    }
    fn free_memory(&self) -> Option<u64> {
        self.free
    }
    fn free(&self, buffer: BufferHandle) {
        self.inner.free(buffer)
    }
    fn write(&self, b: BufferHandle, offset: u64, data: &[u8]) -> Result<(), BackendError> {
        self.written
            .fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
        self.inner.write(b, offset, data)
    }
    fn read(&self, b: BufferHandle, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.inner.read(b, offset, out)
    }
    fn compile(&self, kernel: &Kernel) -> Result<ProgramId, BackendError> {
        self.inner.compile(kernel)
    }
    fn dispatch(&self, d: &Dispatch<'_>) -> Result<(), BackendError> {
        self.inner.dispatch(d)
    }
    fn synchronize(&self) -> Result<(), BackendError> {
        self.inner.synchronize()
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
        let dev = Small::device(u64::MAX, None);
        let mut session = Session::new(Engine::new(tiny(), dev.clone(), SIZES).unwrap(), None);
        if prepare {
            session.prepare().unwrap();
        }
        let before = (dev.allocated.load(Relaxed), dev.written.load(Relaxed));
        session.feed_greedy(&prompt).unwrap();
        session.feed_greedy(&[2]).unwrap();
        (
            dev.allocated.load(Relaxed) - before.0,
            dev.written.load(Relaxed) - before.1,
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
    let roomy = Small::device(u64::MAX, None);
    let engine = Engine::new(model.clone(), roomy.clone(), SIZES).unwrap();
    let needed = engine.bytes_needed(0).unwrap();
    let mut session = Session::new(engine, None);
    session.feed(&[1; SIZES.max_batch as usize]).unwrap();
    session.feed_greedy(&[2]).unwrap();
    let allocated = roomy.allocated.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        needed, allocated,
        "the largest prompt step and a decode step"
    );

    // Free memory where the device reports it, else its size.
    for (size, free, what) in [
        (u64::MAX, Some(needed - 1), "free"),
        (needed - 1, None, "in all"),
    ] {
        match Engine::new(model.clone(), Small::device(size, free), SIZES) {
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
    let exact = Small::device(u64::MAX, Some(needed));
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
    let needed = Engine::new(model.clone(), Small::device(u64::MAX, None), SIZES)
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
        let dev = Small::overcommitted(needed - 1);
        let mut session = Session::new(
            Engine::new(model.clone(), dev.clone(), SIZES).unwrap(),
            None,
        );
        match go(&mut session, prepare) {
            Err(ModelError::Backend { backend, source }) => match *source {
                BackendError::OutOfMemory { bytes, free } => {
                    assert_eq!(backend, "small");
                    assert_eq!(free, Some(bytes - 1), "prepare {prepare}");
                    assert_eq!(dev.allocated.load(Relaxed) + bytes, needed);
                    let message = ModelError::backend(&backend, *source).to_string();
                    let want = format!("allocating {bytes} bytes ({} bytes free)", bytes - 1);
                    assert!(message.contains(&want), "{message}");
                }
                other => panic!("prepare {prepare}: expected OutOfMemory, got {other}"),
            },
            Err(e) => panic!("prepare {prepare}: expected OutOfMemory, got {e}"),
            Ok(()) => panic!("prepare {prepare}: {needed} bytes fit in {}", needed - 1),
        }
        let dev = Small::overcommitted(needed);
        let mut session = Session::new(Engine::new(model.clone(), dev, SIZES).unwrap(), None);
        go(&mut session, prepare).unwrap();
    }
}

/// A device whose output head writes NaN everywhere: generation stops at the prompt's step
/// with [`ModelError::NanLogits`], greedy (the device's argmax) and sampling (the host's)
/// alike, instead of going on with a token the model did not choose; the logits read back
/// are all NaN, so the error is the head's and not the argmax's. The CPU generates.
#[test]
fn all_nan_logits_are_a_typed_error() {
    let model = tiny();
    let nan = || Faulty::device("", &["matvec_q8_0", "matvec_q8_q8_0"], f32::NAN);
    for temperature in [0.0, 0.8] {
        let opts = GenerateOptions {
            max_tokens: 4,
            sampling: Sampling {
                temperature,
                ..Sampling::default()
            },
            stop_at_end: false,
            stop_on_divergence: false,
        };
        let mut spoilt = Session::new(Engine::new(model.clone(), nan(), SIZES).unwrap(), None);
        match generate(&mut spoilt, &[17, 90, 200], opts, |_| {}) {
            Err(ModelError::NanLogits) => {}
            Err(e) => panic!("temperature {temperature}: expected NanLogits, got {e}"),
            Ok(r) => panic!(
                "temperature {temperature}: generated {:?}",
                r.generated_tokens
            ),
        }
        let mut healthy = Session::new(Engine::new(model.clone(), cpu(), SIZES).unwrap(), None);
        let report = generate(&mut healthy, &[17, 90, 200], opts, |_| {}).unwrap();
        assert_eq!(report.generated_tokens.len(), 4);
    }
    let mut spoilt = Session::new(Engine::new(model, nan(), SIZES).unwrap(), None);
    assert!(matches!(
        spoilt.feed_greedy(&[17, 90]),
        Err(ModelError::NanLogits)
    ));
    let logits = spoilt.feed(&[200]).unwrap();
    assert!(logits.iter().all(|v| v.is_nan()), "{:?}", &logits[..4]);
}

/// Runs `f(name, backend)` on each of `names` that is present; an absent one is skipped with
/// its reason, or fails the test where `TRINE_REQUIRE_BACKENDS` names it. Returns how many ran.
fn on_each(names: &[&str], mut f: impl FnMut(&str, Arc<dyn Backend>)) -> usize {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut ran = 0;
    for col in trine_conformance::columns(&names) {
        match col.backend {
            Ok(b) => {
                f(&col.name, b);
                ran += 1;
            }
            Err(why) => {
                assert!(!col.required, "{} is required but absent: {why}", col.name);
                println!("{} skipped: {why}", col.name);
            }
        }
    }
    ran
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
        let mut session = Session::new(main, Some(checker));
        run(&mut session);
        assert_eq!(session.checks.len(), 3, "{name}");
        for c in &session.checks {
            assert!(c.first_over_bound.is_none(), "{name}: {c:?}");
            assert!(c.worst.nmse.is_some_and(|e| e < 1e-9), "{name}: {c:?}");
        }
        compared.push(name.to_string());
    };
    check("gpu stand-in", Faulty::gpu());
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
    let main = Engine::new(model.clone(), Faulty::gpu(), SIZES).unwrap();
    assert_eq!(main.kv_type(), Float::F16);
    let own = Engine::new(model.clone(), cpu(), SIZES).unwrap();
    assert_eq!(own.kv_type(), Float::F32);
    let mut session = Session::new(main, Some(own));
    match session.feed(&[17, 90]) {
        Err(ModelError::CheckerKv { main, checker }) => {
            assert_eq!((main, checker), ("f16", "f32 with the keys in columns"))
        }
        other => panic!("a checker with its own cache type ran: {other:?}"),
    }
    let main = Engine::new(model, Faulty::gpu(), SIZES).unwrap();
    let checker = main.checker(cpu()).unwrap();
    assert_eq!(checker.kv_type(), Float::F16);
    assert_eq!(checker.cache_form(), "f16");
    let mut session = Session::new(main, Some(checker));
    run(&mut session);
    for c in &session.checks {
        assert!(c.first_over_bound.is_none(), "{c:?}");
    }
}

/// Logits of 12 decode steps after a prompt, and each step's greedy token from the host's
/// argmax of its logits and from the device's.
fn decode(session: &mut Session) -> (Vec<Vec<f32>>, Vec<(u32, u32)>) {
    let mut logits = vec![];
    let mut ids = vec![];
    let mut next = session.feed_greedy(&[17, 90, 200, 3, 45]).unwrap();
    for _ in 0..12 {
        let l = session.feed(&[next]).unwrap();
        next = session.greedy_token().unwrap();
        ids.push((trine_llama::sampler::argmax(&l).unwrap(), next));
        logits.push(l);
    }
    (logits, ids)
}

/// Dispatches of a decode step of the tiny model on `backend`: five per layer and three more;
/// on a CPU, whose products take quantized x, fourteen per layer
/// (each of the four products after a quantizing dispatch; the QKV and gate/up products
/// after an rms_norm and before rope-store or SwiGLU, the output projection after the
/// attention combine) and five more (the head's rms_norm and quantizing dispatch).
fn decode_dispatches(backend: &dyn Backend) -> usize {
    let layers = TINY.n_layer as usize;
    if backend.info().device_type == DeviceType::Cpu {
        14 * layers + 5
    } else {
        5 * layers + 3
    }
}

/// A decode step replayed from its recording computes what its nodes dispatched one by one
/// compute, bit for bit, at every position; its greedy token is the host's argmax of its
/// logits; and it launches five kernels per layer (fourteen on a CPU, see
/// [`decode_dispatches`]).
#[test]
fn recorded_decode_steps_equal_node_by_node_ones() {
    let model = tiny();
    let names = ["cpu", "vulkan", "wgpu", "cuda", "hip"];
    let ran = on_each(&names, |name, backend| {
        let run = |record| {
            let sizes = EngineOptions { record, ..SIZES };
            let engine = Engine::new(model.clone(), backend.clone(), sizes).unwrap();
            assert_eq!(
                engine.dispatches_per_token(),
                decode_dispatches(backend.as_ref()),
                "{name}"
            );
            decode(&mut Session::new(engine, None))
        };
        let (recorded, direct) = (run(true), run(false));
        assert_eq!(recorded, direct, "{name}");
        for (i, (host, device)) in recorded.1.iter().enumerate() {
            assert_eq!(host, device, "{name} step {i}");
        }
    });
    assert!(ran > 0);
}

/// The tiny model's file, rebuilt with `edit` applied to its metadata and tensors.
fn edited(edit: impl Fn(&str, &mut Option<Value>) -> bool) -> Result<Model, ModelError> {
    let g = Gguf::from_bytes(synth_llama(TINY, 5).unwrap().to_bytes()).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        let mut v = Some(v.clone());
        edit(k, &mut v);
        if let Some(v) = v {
            w.add(k.clone(), v).unwrap();
        }
    }
    for t in g.tensors() {
        if edit(&t.name, &mut None) {
            w.add_tensor(t.name.clone(), &t.dims, t.ty, g.tensor_data(t).to_vec())
                .unwrap();
        }
    }
    Model::from_gguf(Gguf::from_bytes(w.to_bytes()).unwrap())
}

#[test]
fn bad_models_and_steps_are_typed_errors() {
    let arch = edited(|k, v| {
        if k == "general.architecture" {
            *v = Some(Value::String("gpt2".into()));
        }
        true
    });
    assert!(matches!(arch, Err(ModelError::Architecture { found, .. }) if found == "gpt2"));
    let missing = edited(|k, _| k != "blk.1.ffn_up.weight");
    assert!(matches!(missing, Err(ModelError::MissingTensor(t)) if t == "blk.1.ffn_up.weight"));
    let heads = edited(|k, v| {
        if k == "llama.attention.head_count_kv" {
            *v = Some(Value::U32(3));
        }
        true
    });
    assert!(
        matches!(heads, Err(ModelError::Hyperparameter { .. })),
        "{:?}",
        heads.err()
    );

    let model = tiny();
    let mut s = Session::new(Engine::new(model, cpu(), SIZES).unwrap(), None);
    assert!(matches!(
        s.feed(&[TINY.vocab]),
        Err(ModelError::TokenOutOfRange {
            id: 320,
            vocab: 320
        })
    ));
    assert!(matches!(s.feed(&[]), Err(ModelError::EmptyPrompt)));
    s.feed(&[1; 30]).unwrap();
    assert!(matches!(
        s.feed(&[1, 2, 3]),
        Err(ModelError::ContextFull {
            needed: 33,
            max: 32
        })
    ));
}

//! What the executor's tests share: a tiny synthetic Llama, the sizes its executors are built
//! for, the steps they run, and the stand-in devices (a GPU-typed CPU, a driver that refuses
//! or spoils kernels, a device with little memory) made as proxies of the CPU backend.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use trine_backends::proxy::{Hooks, Proxy};
use trine_backends::{
    Backend, BackendError, BackendKind, BufferHandle, DeviceType, Dispatch, ProgramId,
};
use trine_gguf::synth::{synth_llama, SynthShape};
use trine_gguf::{Gguf, GgufWriter, TensorType, Value};
use trine_ir::Kernel;
use trine_llama::graph::{Op, Step};
use trine_llama::{Engine, EngineOptions, Model, ModelError, Session, StepCheck};

pub const SIZES: EngineOptions = EngineOptions {
    context: 32,
    max_batch: 8,
    record: true,
    cache: None,
};

/// Logits of a 5-token prompt, then of one step per further id.
pub fn logits(
    model: Arc<Model>,
    backend: Arc<dyn Backend>,
    options: EngineOptions,
    ids: &[u32],
) -> Vec<Vec<f32>> {
    let mut session = Session::new(Engine::new(model, backend, options).unwrap(), None);
    let mut out = vec![session.feed(&ids[..5]).unwrap()];
    for &id in &ids[5..] {
        out.push(session.feed(&[id]).unwrap());
    }
    out
}

pub fn tiny() -> Arc<Model> {
    synth(SynthShape::TINY)
}

/// The synthetic file of `shape` (seed 5), loaded.
pub fn synth(shape: SynthShape) -> Arc<Model> {
    let bytes = synth_llama(shape, 5).unwrap().to_bytes();
    Arc::new(Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap())
}

pub fn cpu() -> Arc<dyn Backend> {
    trine_backends::open(BackendKind::Cpu).unwrap()
}

/// A driver that refuses to compile the kernels whose names start with `refuse`, or
/// multiplies the last output of those whose names start with one of `spoil` by `factor`
/// after running them (0 zeroes it): one that lacks an op, and one that computes it wrong.
pub struct Faults {
    refuse: &'static str,
    spoil: &'static [&'static str],
    factor: f32,
    spoiled: Mutex<HashSet<ProgramId>>,
}

impl Hooks for Faults {
    fn compile(&self, inner: &dyn Backend, kernel: &Kernel) -> Result<ProgramId, BackendError> {
        if !self.refuse.is_empty() && kernel.name.starts_with(self.refuse) {
            return Err(BackendError::Unsupported {
                kernel: kernel.name.clone(),
                what: "a feature this test withholds".into(),
            });
        }
        let id = inner.compile(kernel)?;
        if self.spoil.iter().any(|p| kernel.name.starts_with(p)) {
            self.spoiled.lock().unwrap().insert(id);
        }
        Ok(id)
    }
    fn dispatch(&self, inner: &dyn Backend, d: &Dispatch<'_>) -> Result<(), BackendError> {
        inner.dispatch(d)?;
        if self.spoiled.lock().unwrap().contains(&d.program) {
            let out = d.bindings.last().expect("a kernel with an output");
            let mut bytes = vec![0; out.size as usize];
            inner.read(out.buffer, out.offset, &mut bytes)?;
            for word in bytes.chunks_exact_mut(4) {
                let v = f32::from_le_bytes(word.try_into().unwrap()) * self.factor;
                word.copy_from_slice(&v.to_le_bytes());
            }
            inner.write(out.buffer, out.offset, &bytes)?;
        }
        Ok(())
    }
}

fn faults(refuse: &'static str, spoil: &'static [&'static str], factor: f32) -> Faults {
    Faults {
        refuse,
        spoil,
        factor,
        spoiled: Mutex::new(HashSet::new()),
    }
}

/// The CPU with [`Faults`].
pub fn faulty(
    refuse: &'static str,
    spoil: &'static [&'static str],
    factor: f32,
) -> Arc<dyn Backend> {
    Arc::new(Proxy::new(
        cpu(),
        "faulty",
        |_| {},
        faults(refuse, spoil, factor),
    ))
}

/// A CPU that says it is a discrete GPU with 16-bit storage (and matrix tiles with `tiles`,
/// which the CPU beneath runs as their scalar variant), refusing the kernels whose names start
/// with `refuse`: an executor on it keeps its KV cache in f16 and takes the GPUs' graph and
/// kernel shapes.
/// A GPU-typed CPU that binds at most `limit` bytes in one binding (lavapipe binds 128 MiB).
pub fn gpu_binding(limit: u64) -> Arc<dyn Backend> {
    let describe = move |info: &mut trine_backends::DeviceInfo| {
        info.device_type = DeviceType::Discrete;
        info.f16 = true;
        info.max_binding_bytes = limit;
    };
    Arc::new(Proxy::new(cpu(), "narrow", describe, faults("", &[], 1.0)))
}

/// [`gpu_binding`] with matrix tiles: its prompts' products on tiles, quantized weights
/// widened to f16 first.
pub fn gpu_with_tiles_binding(limit: u64) -> Arc<dyn Backend> {
    let describe = move |info: &mut trine_backends::DeviceInfo| {
        info.device_type = DeviceType::Discrete;
        info.f16 = true;
        info.tiles = true;
        info.max_binding_bytes = limit;
    };
    Arc::new(Proxy::new(cpu(), "narrow", describe, faults("", &[], 1.0)))
}

fn stand_in(tiles: bool, copies: bool, refuse: &'static str) -> Arc<dyn Backend> {
    let describe = move |info: &mut trine_backends::DeviceInfo| {
        info.device_type = DeviceType::Discrete;
        info.f16 = true;
        info.tiles = tiles;
        info.async_copy = copies;
    };
    Arc::new(Proxy::new(
        cpu(),
        "faulty",
        describe,
        faults(refuse, &[], 1.0),
    ))
}

pub fn gpu() -> Arc<dyn Backend> {
    stand_in(false, false, "")
}

pub fn gpu_refusing(refuse: &'static str) -> Arc<dyn Backend> {
    stand_in(false, false, refuse)
}

pub fn gpu_with(tiles: bool) -> Arc<dyn Backend> {
    stand_in(tiles, false, "")
}

/// A stand-in with tiles and `units` multiprocessors: its prompt products whose blocks would
/// leave most of them idle split their K.
pub fn gpu_with_units(units: u32) -> Arc<dyn Backend> {
    let describe = move |info: &mut trine_backends::DeviceInfo| {
        info.device_type = DeviceType::Discrete;
        info.f16 = true;
        info.tiles = true;
        info.compute_units = Some(units);
    };
    Arc::new(Proxy::new(cpu(), "faulty", describe, faults("", &[], 1.0)))
}

/// A stand-in whose launches overlap the kernel before them, as CUDA's on sm_90 do.
pub fn gpu_overlapping() -> Arc<dyn Backend> {
    let describe = |info: &mut trine_backends::DeviceInfo| {
        info.device_type = DeviceType::Discrete;
        info.f16 = true;
        info.tuning.launches_overlap = true;
    };
    Arc::new(Proxy::new(cpu(), "faulty", describe, faults("", &[], 1.0)))
}

/// A stand-in with tiles that copies blocks asynchronously: its prompts' products on
/// quantized weights take them widened to f16 (`Form::Widened`).
pub fn gpu_copying() -> Arc<dyn Backend> {
    stand_in(true, true, "")
}

/// A device that reports `free` bytes free where that is `Some` (as CUDA, HIP and Vulkan with
/// VK_EXT_memory_budget report it; wgpu reports only the size) and counts what is allocated
/// and written on it. Allocations past `budget` fail as a driver's do, with the bytes asked
/// and what is left.
pub struct Budget {
    free: Option<u64>,
    budget: u64,
    pub allocated: AtomicU64,
    pub written: AtomicU64,
}

impl Hooks for Budget {
    fn alloc(&self, inner: &dyn Backend, bytes: u64) -> Result<BufferHandle, BackendError> {
        let before = self.allocated.load(Relaxed);
        if before.saturating_add(bytes) > self.budget {
            return Err(BackendError::OutOfMemory {
                bytes,
                free: Some(self.budget - before),
            });
        }
        self.allocated.fetch_add(bytes, Relaxed);
        inner.alloc(bytes)
    }
    fn write(
        &self,
        inner: &dyn Backend,
        b: BufferHandle,
        offset: u64,
        data: &[u8],
    ) -> Result<(), BackendError> {
        self.written.fetch_add(data.len() as u64, Relaxed);
        inner.write(b, offset, data)
    }
    fn free_memory(&self, _: &dyn Backend) -> Option<u64> {
        self.free
    }
}

/// A CPU that reports `size` bytes of memory, of which `free` are free: a device the model may
/// not fit.
pub fn small(size: u64, free: Option<u64>) -> Arc<Proxy<Budget>> {
    with_budget(size, free, u64::MAX)
}

/// A device that says it has memory to spare but runs out after `budget` bytes: a driver
/// that overcommits, or another process taking memory after the executor checked.
pub fn overcommitted(budget: u64) -> Arc<Proxy<Budget>> {
    with_budget(u64::MAX, None, budget)
}

fn with_budget(size: u64, free: Option<u64>, budget: u64) -> Arc<Proxy<Budget>> {
    let hooks = Budget {
        free,
        budget,
        allocated: 0.into(),
        written: 0.into(),
    };
    let describe = |info: &mut trine_backends::DeviceInfo| info.memory.device_local = size;
    Arc::new(Proxy::new(cpu(), "small", describe, hooks))
}

/// Logits after a prompt and two greedy steps.
pub fn run(session: &mut Session) -> Vec<Vec<f32>> {
    let mut out = vec![session.feed(&[17, 90, 200, 3, 45]).unwrap()];
    for _ in 0..2 {
        let next = trine_llama::sampler::argmax(out.last().unwrap()).unwrap();
        out.push(session.feed(&[next]).unwrap());
    }
    out
}

/// Logits of 12 decode steps after a prompt, and each step's greedy token from the host's
/// argmax of its logits and from the device's.
pub fn decode(session: &mut Session) -> (Vec<Vec<f32>>, Vec<(u32, u32)>) {
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
/// on a CPU, whose products take quantized x, thirteen per layer
/// (each of the four products after a quantizing dispatch; the QKV and gate/up products
/// after an rms_norm, QKV before rope-store, the down projection's quantizer computing
/// SwiGLU itself, the output projection after the attention combine) and five more (the
/// head's rms_norm and quantizing dispatch).
pub fn decode_dispatches(backend: &dyn Backend) -> usize {
    let layers = SynthShape::TINY.n_layer as usize;
    if backend.info().device_type == DeviceType::Cpu {
        13 * layers + 5
    } else {
        5 * layers + 3
    }
}

/// Runs `f(name, backend)` on each of `names` that is present; an absent one is skipped with
/// its reason, or fails the test where `TRINE_REQUIRE_BACKENDS` names it. Returns how many ran.
pub fn on_each(names: &[&str], mut f: impl FnMut(&str, Arc<dyn Backend>)) -> usize {
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

/// [`run`] on `main`, checked node by node by `checker`: each of its three steps checked and
/// no node beyond its bound (`what` names the run in failures). The checks, for more.
pub fn agree(what: &str, main: Engine, checker: Engine) -> Vec<StepCheck> {
    let mut session = Session::new(main, Some(checker));
    run(&mut session);
    assert_eq!(session.checks.len(), 3, "{what}");
    for c in &session.checks {
        assert!(c.first_over_bound.is_none(), "{what}: {c:?}");
    }
    session.checks
}

/// The nodes of `engine`'s `tokens`-token step whose op `which` takes.
pub fn count_nodes(engine: &Engine, tokens: u32, which: impl Fn(&Op) -> bool) -> usize {
    let nodes = engine.graph(Step { tokens, pos: 0 }).unwrap();
    nodes.iter().filter(|n| which(&n.op)).count()
}

/// `family`'s prompt and decode steps on the GPU stand-in (with and without matrix tiles), on
/// each GPU backend present, and on the CPU checked by the stand-in: every node within its
/// bound, the worst under 1e-9. `nodes(name, engine)` asserts the family's own nodes in each
/// engine before it runs.
pub fn backends_agree(family: &str, model: Arc<Model>, nodes: impl Fn(&str, &Engine)) {
    let mut compared = vec![];
    let mut check = |name: &str, backend: Arc<dyn Backend>| {
        let main = Engine::new(model.clone(), backend, SIZES).unwrap();
        nodes(name, &main);
        let checker = main.checker(cpu()).unwrap();
        for c in agree(&format!("{family} on {name}"), main, checker) {
            assert!(c.worst.nmse.is_some_and(|e| e < 1e-9), "{name}: {c:?}");
        }
        compared.push(name.to_string());
    };
    check("gpu stand-in", gpu());
    check("gpu stand-in with tiles", gpu_with(true));
    let ran = on_each(&["vulkan", "wgpu", "cuda", "hip"], &mut check);
    assert_eq!(compared.len(), ran + 2, "{compared:?}");
    let main = Engine::new(model, cpu(), SIZES).unwrap();
    let checker = main.checker(gpu()).unwrap();
    agree(&format!("{family}: gpu checking cpu"), main, checker);
    println!("{family}: checked against the cpu: {compared:?}");
}

/// The synthetic file of `shape`, rebuilt with tensor `name` replaced by a zeroed F32 one of
/// `dims` (`None`: left out), or with metadata key `name` set to `value` (added where
/// absent); the error loading it.
pub fn edited(
    shape: SynthShape,
    name: &str,
    dims: Option<&[u64]>,
    value: Option<Value>,
) -> ModelError {
    let g = Gguf::from_bytes(synth_llama(shape, 5).unwrap().to_bytes()).unwrap();
    let mut w = GgufWriter::new();
    let mut set = false;
    for (k, v) in g.metadata() {
        let v = match &value {
            Some(new) if k == name => {
                set = true;
                new.clone()
            }
            _ => v.clone(),
        };
        w.add(k.clone(), v).unwrap();
    }
    if let (Some(v), false) = (&value, set) {
        w.add(name.to_string(), v.clone()).unwrap();
    }
    for t in g.tensors() {
        if t.name != name {
            w.add_tensor(t.name.clone(), &t.dims, t.ty, g.tensor_data(t).to_vec())
                .unwrap();
        } else if let Some(dims) = dims {
            let n: u64 = dims.iter().product();
            let zeros = vec![0; 4 * n as usize];
            w.add_tensor(t.name.clone(), dims, TensorType::F32, zeros)
                .unwrap();
        }
    }
    match Model::from_gguf(Gguf::from_bytes(w.to_bytes()).unwrap()) {
        Ok(_) => panic!("{name}: the edited file loaded"),
        Err(e) => e,
    }
}

/// The synthetic file of `shape` relabelled as architecture `arch` (its keys' `from.` prefix
/// renamed `arch.`), tensors untouched: what loading it gives.
pub fn relabelled(shape: SynthShape, from: &str, arch: &str) -> Result<Model, ModelError> {
    let g = Gguf::from_bytes(synth_llama(shape, 5).unwrap().to_bytes()).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in g.metadata() {
        let k = k.replace(&format!("{from}."), &format!("{arch}."));
        let v = match k.as_str() {
            "general.architecture" => Value::String(arch.into()),
            _ => v.clone(),
        };
        w.add(k, v).unwrap();
    }
    for t in g.tensors() {
        w.add_tensor(t.name.clone(), &t.dims, t.ty, g.tensor_data(t).to_vec())
            .unwrap();
    }
    Model::from_gguf(Gguf::from_bytes(w.to_bytes()).unwrap())
}

/// Asserts `e` names tensor `name` as missing.
pub fn assert_missing(e: ModelError, name: &str) {
    match e {
        ModelError::MissingTensor(t) => assert_eq!(t, name),
        e => panic!("{name}: {e:?}"),
    }
}

/// Asserts `e` names tensor `name` as of shape `found` where `expected` was.
pub fn assert_shape(e: ModelError, name: &str, expected: &[u64], found: &[u64]) {
    match e {
        ModelError::TensorShape {
            name: t,
            expected: x,
            found: f,
        } => assert_eq!((t.as_str(), &x[..], &f[..]), (name, expected, found)),
        e => panic!("{name}: {e:?}"),
    }
}

/// Asserts `e` refuses key `key` for its value `value`.
pub fn assert_hyperparameter(e: ModelError, key: &str, value: &str) {
    match e {
        ModelError::Hyperparameter {
            key: k, value: v, ..
        } => {
            assert_eq!((k.as_str(), v.as_str()), (key, value))
        }
        e => panic!("{key} = {value}: {e:?}"),
    }
}

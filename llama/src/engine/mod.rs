//! The executor: runs the graph's nodes on their devices, keeping every tensor resident where
//! it was last written and copying it (through the host) only when a node on another device
//! reads it. Weights and rope's frequency table are uploaded from the host on first use.
//!
//! A decode step (one token) whose nodes all run on one device is recorded once
//! ([`Backend::record`]) and replayed at every position: the position and the token id are
//! written to small device buffers that the kernels read, so one host write of each, one
//! replay and a 4-byte read of the greedy token make a whole step.

mod cost;
mod plan;
mod residency;

pub use cost::BlocksProduct;
pub use residency::Footprint;

use super::config::Config;
use super::error::ModelError;
use super::fuse::{fuse, Offer};
use super::graph::{Form, Node, Op, Step, Tensor};
use super::model::Model;
use super::placement::Placement;
use super::planner::{KernelKey, KernelShape};
use super::tuned::Tuned;
use super::tuning;
use std::collections::HashMap;
use std::sync::Arc;
use trine_backends::{Backend, Binding, BufferHandle, Dispatch, ProgramId, Recording};
use trine_ir::ParamValue;
use trine_ops::key_layout::KeyLayout;
use trine_ops::kv_type::KvType;

/// Sizes an executor is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineOptions {
    /// KV cache positions.
    pub context: u32,
    /// Most tokens in one step (longer prompts are fed in chunks of this size).
    pub max_batch: u32,
    /// Record decode steps and replay them (where every node runs on one device); off, each
    /// node is dispatched on its own, as cross-checks do.
    pub record: bool,
    /// The KV cache's type (llama.cpp's `-ctk`/`-ctv`); `None`, the device's
    /// ([`tuning::kv_type`]).
    pub cache: Option<KvType>,
}

impl EngineOptions {
    /// The sizes `trine generate` runs a prompt of `prompt` tokens and `max_tokens` more
    /// with: the whole run in the cache (capped by the model's trained context), prompts in
    /// steps of at most 512 tokens, decode steps recorded.
    pub fn for_generation(c: &Config, prompt: usize, max_tokens: usize) -> EngineOptions {
        let needed = prompt.saturating_add(max_tokens).max(1);
        let context = u32::try_from(needed)
            .unwrap_or(u32::MAX)
            .min(c.context_length);
        EngineOptions {
            context,
            max_batch: context.min(512),
            record: true,
            cache: None,
        }
    }
}

/// A tensor's buffers, one slot per device, and which of them hold its current value.
struct Resident {
    bytes: u64,
    bufs: Vec<Option<BufferHandle>>,
    valid: Vec<bool>,
}

pub struct Engine {
    model: Arc<Model>,
    placement: Placement,
    shape: KernelShape,
    /// The choices measured on the primary device, over the tuning table's defaults.
    tuned: Arc<Tuned>,
    /// Bytes of [`Tensor::Wide`]: the largest weight part a step widens.
    wide_bytes: u64,
    /// Bytes of [`Tensor::KParts`]: the largest product a step splits, all its slices.
    parts_bytes: u64,
    options: EngineOptions,
    tensors: HashMap<Tensor, Resident>,
    /// What the fusion pass builds the nodes for: the primary device's offer, or the checked
    /// executor's.
    offer: Offer,
    /// The recorded decode step, made at the first one.
    decode: Option<Recording>,
}

/// A node's dispatch with its buffers bound.
struct Bound {
    device: usize,
    program: ProgramId,
    grid: [u32; 3],
    bindings: Vec<Binding>,
    params: Vec<ParamValue>,
}

impl Engine {
    /// An engine on `backend`, with the kernel choices `cargo xtask tune` measured on its
    /// device where the cache holds them ([`Tuned::load`]), else the defaults; a table that
    /// cannot be used is said in [`Engine::placement_notes`].
    pub fn new(
        model: Arc<Model>,
        backend: Arc<dyn Backend>,
        options: EngineOptions,
    ) -> Result<Engine, ModelError> {
        let info = backend.info();
        let (tuned, note) = match Tuned::load(info) {
            Ok(Some(t)) => {
                let note = format!("{}: {}", backend.name(), t.summary());
                (t, Some(note))
            }
            Ok(None) => (Tuned::empty(info), None),
            Err(e) => (
                Tuned::empty(info),
                Some(format!("{}: default kernel choices: {e}", backend.name())),
            ),
        };
        let mut engine = Engine::with_tuned(model, backend, options, Arc::new(tuned))?;
        engine.placement.notes.extend(note);
        Ok(engine)
    }

    /// An engine on `backend` that takes the kernel choices of `tuned` over the defaults:
    /// what `cargo xtask tune` times its candidates with.
    pub fn with_tuned(
        model: Arc<Model>,
        backend: Arc<dyn Backend>,
        options: EngineOptions,
        tuned: Arc<Tuned>,
    ) -> Result<Engine, ModelError> {
        let info = backend.info();
        let kv = options.cache.unwrap_or_else(|| tuning::kv_type(info));
        let keys = tuning::key_layout(info, kv);
        let head_dim = model.config.head_dim();
        kv.check("kv cache", keys, head_dim)
            .map_err(|e| ModelError::CacheType {
                ty: kv.name(),
                why: e.to_string(),
            })?;
        let heads = (model.config.n_head, model.config.n_head_kv);
        let offer = Offer::of(info, kv, options.context, heads);
        let shape = KernelShape {
            kv,
            keys,
            head_dim,
            group: model.config.n_head / model.config.n_head_kv,
            grouped_attention: tuning::grouped_attention(
                options.context,
                offer.gpu,
                (model.config.n_head_kv, head_dim),
            ),
            rot_dim: model.config.n_rot,
            gpu_nodes: offer.gpu,
            warpgroups: info.group_mma,
        };
        Engine::build(model, backend, options, (shape, tuned), offer)
    }

    /// An engine on `backend` that can check this one node by node ([`crate::Session::new`]):
    /// the same model, sizes, nodes, KV cache type and K cache layout, whatever `backend`
    /// would pick, since it runs this engine's nodes and takes its caches as they are.
    pub fn checker(&self, backend: Arc<dyn Backend>) -> Result<Engine, ModelError> {
        let model = self.model.clone();
        let tuned = self.tuned.clone();
        Engine::build(
            model,
            backend,
            self.options,
            (self.shape, tuned),
            self.offer,
        )
    }

    /// An engine whose kernels are compiled for the nodes of every step size it accepts, one
    /// token to `max_batch`, as `offer` fuses them: what it will run, nothing more. Each size's
    /// graph is built, since which sizes change a node's kernel (a product's form, the
    /// attention's splits and combine) depends on the weights' types and the device.
    fn build(
        model: Arc<Model>,
        backend: Arc<dyn Backend>,
        options: EngineOptions,
        (shape, tuned): (KernelShape, Arc<Tuned>),
        offer: Offer,
    ) -> Result<Engine, ModelError> {
        if options.context == 0 || options.max_batch == 0 || options.max_batch > options.context {
            return Err(ModelError::ContextFull {
                needed: options.max_batch as usize,
                max: options.context as usize,
            });
        }
        let mut keys: Vec<KernelKey> = vec![];
        // The largest weight each key's kernels bind, which a device may not bind whole.
        let mut binds: HashMap<KernelKey, u64> = HashMap::new();
        // The f16 copy holds the largest part any step widens.
        let mut wide_bytes = 0u64;
        let mut parts_bytes = 0u64;
        for tokens in 1..=options.max_batch {
            let step = Step { tokens, pos: 0 };
            for n in graph(&model, step, offer)? {
                match n.op {
                    Op::Widen { rows, cols, .. } => {
                        wide_bytes = wide_bytes.max(2 * u64::from(rows) * u64::from(cols));
                    }
                    Op::SplitSum {
                        tokens,
                        rows,
                        splits,
                        ..
                    } => {
                        let n = u64::from(splits) * u64::from(tokens) * u64::from(rows);
                        parts_bytes = parts_bytes.max(4 * n);
                    }
                    _ => {}
                }
                let key = KernelKey::of(&n.op, &model.weights, shape, &tuned);
                let weight = bound_weight(&model, &n.op);
                let largest = binds.entry(key).or_insert_with(|| {
                    keys.push(key);
                    0
                });
                *largest = (*largest).max(weight);
            }
        }
        let placement = Placement::new(backend, &keys, shape, &binds)?;
        let engine = Engine {
            model,
            placement,
            shape,
            tuned,
            wide_bytes,
            parts_bytes,
            options,
            tensors: HashMap::new(),
            offer,
            decode: None,
        };
        engine.check_fits()?;
        Ok(engine)
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    pub fn options(&self) -> EngineOptions {
        self.options
    }

    /// The backend asked for, then any that took over kernels it could not run.
    pub fn devices(&self) -> impl Iterator<Item = &Arc<dyn Backend>> {
        self.placement.devices.iter()
    }

    pub fn placement_notes(&self) -> &[String] {
        &self.placement.notes
    }

    pub fn kv_type(&self) -> KvType {
        self.shape.kv
    }

    /// How the KV cache is kept, in words: its type, and the K cache's layout where it is not
    /// in rows. A checker must keep it the same way ([`Engine::checker`]).
    pub fn cache_form(&self) -> &'static str {
        match (self.shape.kv, self.shape.keys) {
            (KvType::F16, KeyLayout::Rows) => "f16",
            (KvType::F32, KeyLayout::Rows) => "f32",
            (KvType::Q8_0, KeyLayout::Rows) => "q8_0",
            (KvType::F16, KeyLayout::Columns) => "f16 with the keys in columns",
            (KvType::F32, KeyLayout::Columns) => "f32 with the keys in columns",
            (KvType::Q8_0, KeyLayout::Columns) => "q8_0 with the keys in columns",
        }
    }

    /// Checks a step against the sizes the executor was built for.
    pub fn check_step(&self, s: Step) -> Result<(), ModelError> {
        let needed = s.pos as usize + s.tokens as usize;
        if s.tokens == 0 {
            return Err(ModelError::EmptyPrompt);
        }
        if s.tokens > self.options.max_batch || needed > self.options.context as usize {
            return Err(ModelError::ContextFull {
                needed,
                max: self.options.context as usize,
            });
        }
        Ok(())
    }

    /// The nodes of step `s` on this executor's devices.
    pub fn graph(&self, s: Step) -> Result<Vec<Node>, ModelError> {
        graph(&self.model, s, self.offer)
    }

    /// Dispatches per decode step: what one token costs the device in launches (the
    /// recording's, once a step has been recorded).
    pub fn dispatches_per_token(&self) -> usize {
        match &self.decode {
            Some(r) => r.len(),
            None => self
                .graph(Step { tokens: 1, pos: 0 })
                .map_or(0, |nodes| nodes.len()),
        }
    }

    /// Writes the step's token ids where the embedding runs, and its position on every
    /// device (the kernels that read it may sit on any of them).
    pub fn set_ids(&mut self, ids: &[u32], pos: u32) -> Result<(), ModelError> {
        self.model.check_ids(ids)?;
        let key = KernelKey::of(
            &Op::Embed {
                table: self.model.weights.token_embd,
                scale: self.model.weights.embedding_scale,
            },
            &self.model.weights,
            self.shape,
            &self.tuned,
        );
        let d = self.placement.programs[&key].device;
        let buf = self.buffer(Tensor::Ids, d)?;
        self.dev(d)
            .write(buf, 0, bytemuck::cast_slice(ids))
            .map_err(|e| self.err(d, e))?;
        self.mark_written(Tensor::Ids, d);
        let step = [pos, 0, 0, 0];
        for d in 0..self.placement.devices.len() {
            let buf = self.buffer(Tensor::Step, d)?;
            self.dev(d)
                .write(buf, 0, bytemuck::cast_slice(&step))
                .map_err(|e| self.err(d, e))?;
        }
        if let Some(r) = self.tensors.get_mut(&Tensor::Step) {
            r.valid.iter_mut().for_each(|v| *v = true);
        }
        Ok(())
    }

    /// Runs every node of step `s` (queued), after [`Engine::set_ids`]: a decode step by
    /// replaying its recording where it has one, otherwise node by node.
    pub fn run_step(&mut self, s: Step) -> Result<(), ModelError> {
        if s.tokens > 1 || !self.options.record || self.placement.devices.len() > 1 {
            let nodes = self.graph(s)?;
            return nodes.iter().try_for_each(|n| self.run(n, s));
        }
        if self.decode.is_none() {
            // Binding marks every output written on device 0, the only one: replays leave
            // residency as it is, so they need no bookkeeping per node.
            let bound = self
                .graph(s)?
                .iter()
                .map(|n| self.bind(n, s))
                .collect::<Result<Vec<_>, _>>()?;
            let list: Vec<Dispatch> = bound
                .iter()
                .map(|b| Dispatch {
                    program: b.program,
                    grid: b.grid,
                    bindings: &b.bindings,
                    params: &b.params,
                })
                .collect();
            let r = self.dev(0).record(&list).map_err(|e| self.err(0, e))?;
            self.decode = Some(r);
        }
        let r = self.decode.as_ref().expect("recorded above");
        self.dev(0).replay(r).map_err(|e| self.err(0, e))
    }

    /// Runs one node of step `s` (queued: a later read waits for it).
    pub fn run(&mut self, node: &Node, s: Step) -> Result<(), ModelError> {
        self.launch(node, s, false).map(|_| ())
    }

    /// Runs one node alone and returns its device time (timestamps where the backend has
    /// them), for profiles and benches.
    pub fn run_timed(&mut self, node: &Node, s: Step) -> Result<std::time::Duration, ModelError> {
        self.launch(node, s, true)
            .map(|t| t.unwrap_or(std::time::Duration::ZERO))
    }

    fn launch(
        &mut self,
        node: &Node,
        s: Step,
        timed: bool,
    ) -> Result<Option<std::time::Duration>, ModelError> {
        let b = self.bind(node, s)?;
        let d = b.device;
        let dispatch = Dispatch {
            program: b.program,
            grid: b.grid,
            bindings: &b.bindings,
            params: &b.params,
        };
        let time = if timed {
            Some(
                self.dev(d)
                    .dispatch_timed(&dispatch)
                    .map_err(|e| self.err(d, e))?,
            )
        } else {
            self.dev(d)
                .dispatch(&dispatch)
                .map_err(|e| self.err(d, e))?;
            None
        };
        Ok(time)
    }

    /// Makes a node's inputs current on its device and binds its buffers; its outputs count
    /// as written there from now on.
    fn bind(&mut self, node: &Node, s: Step) -> Result<Bound, ModelError> {
        let key = KernelKey::of(&node.op, &self.model.weights, self.shape, &self.tuned);
        let placed = *self
            .placement
            .programs
            .get(&key)
            .ok_or_else(|| ModelError::Unprepared {
                node: node.label,
                tokens: s.tokens,
                key: format!("{key:?}"),
            })?;
        let (d, program) = (placed.device, placed.program);
        let plan = self.plan(node, s);
        let mut bindings = Vec::with_capacity(plan.inputs.len() + plan.outputs.len());
        for &t in &plan.inputs {
            self.make_valid(t, d)?;
            bindings.push(self.binding(t, d)?);
        }
        for &t in &plan.outputs {
            if matches!(t, Tensor::KCache(_) | Tensor::VCache(_)) || plan.updates.contains(&t) {
                // A partial write: the rest of the cache must be here too.
                self.make_valid(t, d)?;
            }
            bindings.push(self.binding(t, d)?);
        }
        for &t in &plan.outputs {
            self.mark_written(t, d);
        }
        Ok(Bound {
            device: d,
            program,
            grid: plan.grid,
            bindings,
            params: plan.params,
        })
    }

    /// Elements `range` of tensor `t` as f32, from the device that holds its current value.
    pub fn read(
        &mut self,
        t: Tensor,
        range: std::ops::Range<usize>,
    ) -> Result<Vec<f32>, ModelError> {
        if matches!(t, Tensor::KCache(_) | Tensor::VCache(_)) {
            // Whole blocks of the cache's type, decoded, then the range cut out of them.
            let kv = self.shape.kv;
            let block = kv.block() as usize;
            let first = range.start / block * block;
            let end = range.end.next_multiple_of(block);
            let at = kv.bytes_for(first as u64);
            let len = kv.bytes_for((end - first) as u64) as usize;
            let Some(bytes) = self.current_bytes(t, at, len)? else {
                return Ok(vec![]);
            };
            return Ok(kv.decode(&bytes)[range.start - first..range.end - first].to_vec());
        }
        let size = if t.is_half() { 2 } else { 4 };
        let at = (range.start * size) as u64;
        let Some(bytes) = self.current_bytes(t, at, range.len() * size)? else {
            return Ok(vec![]);
        };
        Ok(if t.is_half() {
            bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect()
        } else if matches!(t, Tensor::Ids | Tensor::Step | Tensor::Token) {
            bytes
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32)
                .collect()
        } else {
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        })
    }

    /// The activations node `node` reads: what a cross-check hands from one executor to the
    /// other so that each node is judged on the same inputs. Weights, the frequency table and
    /// the caches are not among them: the caches are filled by the nodes before, as a weight
    /// widened to f16 is (checked where it is made).
    pub fn activation_inputs(&self, node: &Node, s: Step) -> Vec<Tensor> {
        let plan = self.plan(node, s);
        plan.inputs
            .into_iter()
            .chain(plan.updates)
            .filter(|t| {
                !matches!(
                    t,
                    Tensor::Weight(_)
                        | Tensor::Interleaved(_)
                        | Tensor::Grouped(_)
                        | Tensor::Plain(_)
                        | Tensor::Wide
                        | Tensor::Freq
                        | Tensor::FreqLocal
                        | Tensor::Step
                        | Tensor::KCache(_)
                        | Tensor::VCache(_)
                )
            })
            .collect()
    }

    /// Tensor `t`'s whole buffer, from the device holding its current value; `None` when
    /// nothing has written it yet.
    pub fn export(&mut self, t: Tensor) -> Result<Option<Vec<u8>>, ModelError> {
        let len = self.tensors.get(&t).map_or(0, |r| r.bytes as usize);
        self.current_bytes(t, 0, len)
    }

    /// `len` bytes of tensor `t` from byte `offset`, read from the device holding its current
    /// value; `None` when nothing has written it yet.
    fn current_bytes(
        &mut self,
        t: Tensor,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, ModelError> {
        let Some(r) = self.tensors.get(&t) else {
            return Ok(None);
        };
        let Some(d) = r.valid.iter().position(|&v| v) else {
            return Ok(None);
        };
        let buf = r.bufs[d].expect("a valid copy has a buffer");
        let mut bytes = vec![0u8; len];
        self.dev(d)
            .read(buf, offset, &mut bytes)
            .map_err(|e| self.err(d, e))?;
        Ok(Some(bytes))
    }

    /// Replaces tensor `t`'s value with `bytes` (from [`Engine::export`] of an executor of the
    /// same model and sizes), on the primary device.
    pub fn import(&mut self, t: Tensor, bytes: &[u8]) -> Result<(), ModelError> {
        let buf = self.buffer(t, 0)?;
        self.dev(0)
            .write(buf, 0, bytes)
            .map_err(|e| self.err(0, e))?;
        self.mark_written(t, 0);
        Ok(())
    }

    /// The greedy token of the last step (the argmax of its logits): 4 bytes from the device.
    pub fn read_token(&mut self) -> Result<u32, ModelError> {
        // No token before the first step, as no step comes before a prompt.
        let bytes = self
            .current_bytes(Tensor::Token, 0, 4)?
            .ok_or(ModelError::EmptyPrompt)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// Waits for everything queued on every device.
    pub fn synchronize(&self) -> Result<(), ModelError> {
        for (d, dev) in self.placement.devices.iter().enumerate() {
            dev.synchronize().map_err(|e| self.err(d, e))?;
        }
        Ok(())
    }

    fn dev(&self, d: usize) -> &Arc<dyn Backend> {
        &self.placement.devices[d]
    }

    fn err(&self, d: usize, e: trine_backends::BackendError) -> ModelError {
        ModelError::backend(self.dev(d).name(), e)
    }
}

/// The executor's nodes of step `s` of `model`: its architecture's graph, fused for `offer`.
fn graph(model: &Model, s: Step, offer: Offer) -> Result<Vec<Node>, ModelError> {
    let generic = model.config.arch.graph(&model.weights, s);
    fuse(&generic, &model.config, &model.weights, s, offer)
}

/// The largest weight buffer `op`'s kernel binds: the file's weight, or for a product on
/// widened weights the f16 part it reads (a widening binds both).
fn bound_weight(model: &Model, op: &Op) -> u64 {
    let w = &model.weights;
    let file = |id| w.bytes(&model.gguf, id).len() as u64;
    let wide = |rows: u32, cols: u32| 2 * u64::from(rows) * u64::from(cols);
    match *op {
        Op::Product {
            form: Form::Widened,
            w: id,
            rows,
            ..
        } => wide(rows, w.tensors[id].cols),
        Op::Widen {
            w: id, rows, cols, ..
        } => file(id).max(wide(rows, cols)),
        Op::Product { w: id, .. } | Op::Embed { table: id, .. } | Op::ExpertRows { w: id, .. } => {
            file(id)
        }
        _ => 0,
    }
}

//! The executor: runs the graph's nodes on their devices, keeping every tensor resident where
//! it was last written and copying it (through the host) only when a node on another device
//! reads it. Weights and rope's frequency table are uploaded from the host on first use.

use super::error::ModelError;
use super::graph::{self, Node, Op, Step, Tensor};
use super::kernels::{matvec_spec, KernelKey, KernelShape};
use super::model::Model;
use super::placement::Placement;
use crate::ops::elementwise;
use crate::ops::matvec::Reduce;
use crate::ops::rms_norm::RmsNorm;
use crate::ops::rope::{Rope, RopeMode};
use crate::ops::support::Float;
use crate::ops::{attention::Attention, embedding};
use half::f16;
use std::collections::HashMap;
use std::sync::Arc;
use trine_backends::{Backend, Binding, BufferHandle, Dispatch};
use trine_ir::ParamValue;

/// Sizes an executor is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineOptions {
    /// KV cache positions.
    pub context: u32,
    /// Most tokens in one step (longer prompts are fed in chunks of this size).
    pub max_batch: u32,
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
    options: EngineOptions,
    tensors: HashMap<Tensor, Resident>,
}

impl Engine {
    pub fn new(
        model: Arc<Model>,
        backend: Arc<dyn Backend>,
        options: EngineOptions,
    ) -> Result<Engine, ModelError> {
        let c = &model.config;
        if options.context == 0 || options.max_batch == 0 || options.max_batch > options.context {
            return Err(ModelError::ContextFull {
                needed: options.max_batch as usize,
                max: options.context as usize,
            });
        }
        // The cache in f16 halves its size and matches llama.cpp's default cache type; f32
        // where the device has no 16-bit storage.
        let kv = if backend.info().f16 {
            Float::F16
        } else {
            Float::F32
        };
        let shape = KernelShape {
            kv,
            head_dim: c.head_dim(),
        };
        let keys: Vec<KernelKey> = graph::build(c, &model.weights, Step { tokens: 1, pos: 0 })
            .iter()
            .map(|n| KernelKey::of(&n.op, &model.weights))
            .collect();
        let placement = Placement::new(backend, &keys, shape)?;
        Ok(Engine {
            model,
            placement,
            shape,
            options,
            tensors: HashMap::new(),
        })
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

    pub fn kv_type(&self) -> Float {
        self.shape.kv
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

    /// Writes the step's token ids where the embedding runs.
    pub fn set_ids(&mut self, ids: &[u32]) -> Result<(), ModelError> {
        self.model.check_ids(ids)?;
        let key = KernelKey::of(
            &Op::Embed {
                table: self.model.weights.token_embd,
            },
            &self.model.weights,
        );
        let d = self.placement.programs[&key].0;
        let buf = self.buffer(Tensor::Ids, d)?;
        self.dev(d)
            .write(buf, 0, bytemuck::cast_slice(ids))
            .map_err(|e| self.err(d, e))?;
        self.mark_written(Tensor::Ids, d);
        Ok(())
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
        let key = KernelKey::of(&node.op, &self.model.weights);
        let (d, program) = self.placement.programs[&key];
        let (inputs, output, params, grid) = self.plan(node, s);
        let mut bindings = Vec::with_capacity(inputs.len() + 1);
        for &t in &inputs {
            self.make_valid(t, d)?;
            bindings.push(self.binding(t, d)?);
        }
        if let Op::CacheStore { cache, .. } = node.op {
            // A partial write: the rest of the cache must be here too.
            self.make_valid(cache, d)?;
        }
        bindings.push(self.binding(output, d)?);
        let dispatch = Dispatch {
            program,
            grid,
            bindings: &bindings,
            params: &params,
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
        self.mark_written(output, d);
        Ok(time)
    }

    /// Elements `range` of tensor `t` as f32, from the device that holds its current value.
    pub fn read(
        &mut self,
        t: Tensor,
        range: std::ops::Range<usize>,
    ) -> Result<Vec<f32>, ModelError> {
        let d = self
            .tensors
            .get(&t)
            .and_then(|r| r.valid.iter().position(|&v| v));
        let Some(d) = d else {
            return Ok(vec![]);
        };
        let f16_elems =
            matches!(t, Tensor::KCache(_) | Tensor::VCache(_)) && self.shape.kv == Float::F16;
        let size = if f16_elems { 2 } else { 4 };
        let buf = self.buffer(t, d)?;
        let mut bytes = vec![0u8; range.len() * size];
        self.dev(d)
            .read(buf, (range.start * size) as u64, &mut bytes)
            .map_err(|e| self.err(d, e))?;
        Ok(if f16_elems {
            bytes
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
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
    /// the caches are not among them: the caches are filled by the nodes before.
    pub fn activation_inputs(&self, node: &Node, s: Step) -> Vec<Tensor> {
        let (inputs, ..) = self.plan(node, s);
        inputs
            .into_iter()
            .filter(|t| {
                !matches!(
                    t,
                    Tensor::Weight(_) | Tensor::Freq | Tensor::KCache(_) | Tensor::VCache(_)
                )
            })
            .collect()
    }

    /// Tensor `t`'s whole buffer, from the device holding its current value; `None` when
    /// nothing has written it yet.
    pub fn export(&mut self, t: Tensor) -> Result<Option<Vec<u8>>, ModelError> {
        let Some(r) = self.tensors.get(&t) else {
            return Ok(None);
        };
        let Some(d) = r.valid.iter().position(|&v| v) else {
            return Ok(None);
        };
        let (buf, mut bytes) = (r.bufs[d], vec![0u8; r.bytes as usize]);
        let buf = buf.expect("a valid copy has a buffer");
        self.dev(d)
            .read(buf, 0, &mut bytes)
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

    /// Waits for everything queued on every device.
    pub fn synchronize(&self) -> Result<(), ModelError> {
        for (d, dev) in self.placement.devices.iter().enumerate() {
            dev.synchronize().map_err(|e| self.err(d, e))?;
        }
        Ok(())
    }

    /// The node's input tensors (in the kernel's buffer order), its output, its parameters
    /// and its grid.
    fn plan(&self, node: &Node, s: Step) -> (Vec<Tensor>, Tensor, Vec<ParamValue>, [u32; 3]) {
        let c = &self.model.config;
        let w = &self.model.weights;
        let (t, u) = (s.tokens, ParamValue::U32);
        let (out, _) = node.output(c, s);
        let elementwise = |n: u32| elementwise::grid(n).unwrap_or([1, 1, 1]);
        match node.op {
            Op::Embed { table } => (
                vec![Tensor::Ids, Tensor::Weight(table)],
                out,
                vec![u(t), u(c.n_embd), u(c.vocab)],
                embedding::grid(c.n_embd, t),
            ),
            Op::RmsNorm { x, w: wid, y, rows } => {
                let norm = RmsNorm {
                    rows,
                    cols: c.n_embd,
                    eps: c.rms_eps,
                };
                (vec![x, Tensor::Weight(wid)], y, norm.params(), norm.grid())
            }
            Op::Matvec {
                w: wid,
                rows,
                x,
                y,
                tokens,
            } => {
                let key = KernelKey::of(&node.op, w);
                let info = self.dev(self.placement.programs[&key].0).info();
                let spec = matvec_spec(w.tensors[wid].ty, Reduce::Shared, info);
                let cols = w.tensors[wid].cols;
                // A variant reading the scales through an f16 view binds the weights twice.
                let views = self.placement.buffers[&key].len() - 2;
                let mut inputs = vec![Tensor::Weight(wid); views];
                inputs.push(x);
                (inputs, y, vec![u(rows), u(cols)], spec.grid(rows, tokens))
            }
            Op::Rope { x, y, heads } => {
                let r = self.rope(t, heads, s.pos);
                (vec![x, Tensor::Freq], y, r.params(), r.grid())
            }
            Op::CacheStore { x, cache } => {
                let n = t * c.kv_dim();
                (
                    vec![x],
                    cache,
                    vec![u(n), u(0), u(s.pos * c.kv_dim())],
                    elementwise(n),
                )
            }
            Op::Attention { layer } => {
                let a = Attention {
                    tokens: t,
                    kv_len: s.pos + t,
                    heads: c.n_head,
                    kv_heads: c.n_head_kv,
                    head_dim: c.head_dim(),
                    offset: s.pos,
                };
                (
                    vec![Tensor::QRot, Tensor::KCache(layer), Tensor::VCache(layer)],
                    Tensor::Attn,
                    a.params(),
                    a.grid(),
                )
            }
            Op::Add { a, b, y } => (
                vec![a, b],
                y,
                vec![u(t * c.n_embd)],
                elementwise(t * c.n_embd),
            ),
            Op::Swiglu => (
                vec![Tensor::Gate, Tensor::Up],
                Tensor::Act,
                vec![u(t * c.n_ff)],
                elementwise(t * c.n_ff),
            ),
            Op::PickLast => (
                vec![Tensor::Resid(0)],
                Tensor::Last,
                vec![u(c.n_embd), u((t - 1) * c.n_embd), u(0)],
                elementwise(c.n_embd),
            ),
        }
    }

    fn rope(&self, tokens: u32, heads: u32, pos: u32) -> Rope {
        let c = &self.model.config;
        Rope {
            tokens,
            heads,
            head_dim: c.head_dim(),
            offset: pos,
            base: c.rope_base,
            mode: RopeMode::Normal,
        }
    }

    /// Bytes of a tensor's buffer.
    fn bytes(&self, t: Tensor) -> u64 {
        let c = &self.model.config;
        let (b, ctx) = (self.options.max_batch as u64, self.options.context as u64);
        let f32s = |n: u64| n * 4;
        match t {
            Tensor::Ids => f32s(b),
            Tensor::Resid(_) | Tensor::Normed | Tensor::Q | Tensor::QRot => {
                f32s(b * c.n_embd as u64)
            }
            Tensor::Attn | Tensor::Proj => f32s(b * c.n_embd as u64),
            Tensor::K | Tensor::V | Tensor::KRot => f32s(b * c.kv_dim() as u64),
            Tensor::Gate | Tensor::Up | Tensor::Act => f32s(b * c.n_ff as u64),
            Tensor::Last | Tensor::LastNormed => f32s(c.n_embd as u64),
            Tensor::Logits => f32s(c.vocab as u64),
            Tensor::KCache(_) | Tensor::VCache(_) => {
                let elem = if self.shape.kv == Float::F16 { 2 } else { 4 };
                (ctx * c.kv_dim() as u64 * elem).next_multiple_of(4)
            }
            Tensor::Freq => f32s(c.head_dim() as u64 / 2),
            Tensor::Weight(id) => self.model.weights.bytes(&self.model.gguf, id).len() as u64,
        }
    }

    /// Contents the host holds for tensors that never change.
    fn constant(&self, t: Tensor) -> Option<Vec<u8>> {
        match t {
            Tensor::Weight(id) => Some(self.model.weights.bytes(&self.model.gguf, id).to_vec()),
            Tensor::Freq => {
                let c = &self.model.config;
                let f = self.rope(1, c.n_head, 0).frequencies();
                Some(bytemuck::cast_slice(&f).to_vec())
            }
            _ => None,
        }
    }

    fn dev(&self, d: usize) -> &Arc<dyn Backend> {
        &self.placement.devices[d]
    }

    fn err(&self, d: usize, e: trine_backends::BackendError) -> ModelError {
        ModelError::backend(self.dev(d).name(), e)
    }

    /// Tensor `t`'s buffer on device `d`, allocated on first use.
    fn buffer(&mut self, t: Tensor, d: usize) -> Result<BufferHandle, ModelError> {
        let n = self.placement.devices.len();
        let bytes = self.bytes(t);
        let r = self.tensors.entry(t).or_insert_with(|| Resident {
            bytes,
            bufs: vec![None; n],
            valid: vec![false; n],
        });
        if let Some(b) = r.bufs[d] {
            return Ok(b);
        }
        let b = self.placement.devices[d]
            .alloc(bytes)
            .map_err(|e| ModelError::backend(self.placement.devices[d].name(), e))?;
        r.bufs[d] = Some(b);
        Ok(b)
    }

    fn binding(&mut self, t: Tensor, d: usize) -> Result<Binding, ModelError> {
        let buffer = self.buffer(t, d)?;
        Ok(Binding {
            buffer,
            offset: 0,
            size: self.tensors[&t].bytes,
        })
    }

    /// Makes device `d`'s copy of `t` current: uploads a constant, or copies the value from the
    /// device that wrote it last. A tensor nothing has written yet (a fresh cache) needs nothing.
    fn make_valid(&mut self, t: Tensor, d: usize) -> Result<(), ModelError> {
        let buf = self.buffer(t, d)?;
        let r = &self.tensors[&t];
        if r.valid[d] {
            return Ok(());
        }
        let data = match self.constant(t) {
            Some(data) => data,
            None => match r.valid.iter().position(|&v| v) {
                Some(from) => {
                    let src = r.bufs[from].expect("a valid copy has a buffer");
                    let mut data = vec![0u8; r.bytes as usize];
                    self.dev(from)
                        .read(src, 0, &mut data)
                        .map_err(|e| self.err(from, e))?;
                    data
                }
                None => return Ok(()),
            },
        };
        self.dev(d)
            .write(buf, 0, &data)
            .map_err(|e| self.err(d, e))?;
        self.tensors.get_mut(&t).expect("allocated above").valid[d] = true;
        Ok(())
    }

    fn mark_written(&mut self, t: Tensor, d: usize) {
        if let Some(r) = self.tensors.get_mut(&t) {
            r.valid.iter_mut().for_each(|v| *v = false);
            r.valid[d] = true;
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        for r in self.tensors.values() {
            for (d, b) in r.bufs.iter().enumerate() {
                if let Some(b) = b {
                    self.placement.devices[d].free(*b);
                }
            }
        }
    }
}

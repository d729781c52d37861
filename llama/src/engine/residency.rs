//! Where tensors live: a buffer per device, allocated on first use, and which copies hold the
//! current value. Constants (weights, rope's frequencies) are uploaded from the host where
//! first needed; other tensors are copied through the host from the device that wrote them.

use super::{Engine, Resident};
use crate::error::ModelError;
use crate::graph::{Step, Tensor};
use crate::planner::KernelKey;
use crate::tuning::{self, holds_pairs};
use std::borrow::Cow;
use std::collections::HashSet;
use trine_backends::{Binding, BufferHandle};
use trine_gguf::quant::regroup;
use trine_ops::blocks::pair_blocks;
use trine_ops::key_layout::KeyLayout;
use trine_ops::{matvec_q8, matvec_q8_rows};

/// What an engine holds on its devices, in bytes ([`Engine::footprint`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Footprint {
    /// The model's weight tensors as the devices hold them (quantized blocks stay blocks).
    pub weights: u64,
    /// Keys and values of every layer, for the engine's context.
    pub kv_cache: u64,
    /// Everything else: activations sized for the largest step, attention's partials, the
    /// quantized x, logits, rope's table.
    pub activations: u64,
    /// The weights a decode step reads: every product's, the embedding table left out (a
    /// step reads one row of it), and of a mixture of experts the chosen experts' share. A
    /// decode step streams at least this from memory.
    pub decode_reads: u64,
}

impl Engine {
    /// Every tensor the largest prompt step and a decode step bind, with the device of the
    /// node that binds it, once each.
    fn bound_tensors(&self) -> Result<HashSet<(Tensor, usize)>, ModelError> {
        let mut bound = HashSet::new();
        for tokens in [self.options.max_batch, 1] {
            let s = Step { tokens, pos: 0 };
            for node in self.graph(s)? {
                let key = KernelKey::of(&node.op, &self.model.weights, self.shape, &self.tuned);
                if let Some(placed) = self.placement.programs.get(&key) {
                    let d = placed.device;
                    let plan = self.plan(&node, s);
                    bound.extend(plan.inputs.into_iter().chain(plan.outputs).map(|t| (t, d)));
                }
            }
        }
        Ok(bound)
    }

    /// Bytes of the buffers device `d` will hold once the largest prompt step and a decode
    /// step have run: every tensor a node placed there binds, once (weights, the KV cache,
    /// activations sized for the largest step).
    pub fn bytes_needed(&self, d: usize) -> Result<u64, ModelError> {
        Ok(self
            .bound_tensors()?
            .into_iter()
            .filter(|&(_, on)| on == d)
            .map(|(t, _)| self.bytes(t))
            .sum())
    }

    /// Bytes of the buffers the engine's devices hold once the largest prompt step and a
    /// decode step have run, by kind. A weight held twice (an output head tied to the
    /// embedding table, a CPU checker's copy in the file's layout) counts twice.
    pub fn footprint(&self) -> Result<Footprint, ModelError> {
        let mut f = Footprint::default();
        let decode = Step { tokens: 1, pos: 0 };
        let mut read = HashSet::new();
        for node in self.graph(decode)? {
            // The embedding reads one row of its table per token, not the table.
            if matches!(node.op, crate::graph::Op::Embed { .. }) {
                continue;
            }
            // The experts' products read a token's chosen experts' slices only.
            let share = match (node.op, self.model.config.experts) {
                (
                    crate::graph::Op::ExpertsSwiglu { .. }
                    | crate::graph::Op::ExpertsDown { .. }
                    | crate::graph::Op::ExpertRows { .. },
                    Some(e),
                ) => (u64::from(e.used), u64::from(e.count)),
                _ => (1, 1),
            };
            for t in self.plan(&node, decode).inputs {
                if matches!(
                    t,
                    Tensor::Weight(_) | Tensor::Interleaved(_) | Tensor::Grouped(_)
                ) && read.insert(t)
                {
                    f.decode_reads += self.bytes(t) * share.0 / share.1;
                }
            }
        }
        for (t, _) in self.bound_tensors()? {
            let bytes = self.bytes(t);
            match t {
                Tensor::Weight(_)
                | Tensor::Interleaved(_)
                | Tensor::Grouped(_)
                | Tensor::Plain(_) => f.weights += bytes,
                Tensor::KCache(_) | Tensor::VCache(_) => f.kv_cache += bytes,
                _ => f.activations += bytes,
            }
        }
        Ok(f)
    }

    /// Allocates every buffer the largest prompt step and a decode step bind, uploads every
    /// constant they read (weights, rope's table) to the device that reads it, and waits for
    /// the uploads: afterwards a step's time is its own work, not the model's upload (what
    /// `trine generate` calls before it starts its clocks). Steps run the same without it.
    pub fn prepare(&mut self) -> Result<(), ModelError> {
        for (t, d) in self.bound_tensors()? {
            // Allocates `t` on `d`, and uploads it if it is a constant; before the first step
            // nothing else has a value to copy.
            self.make_valid(t, d)?;
        }
        self.synchronize()
    }

    /// Checks, before anything is allocated, that each device can hold what it will be given:
    /// otherwise the first step would fail part-way (or, on a GPU whose driver overcommits,
    /// page), after minutes of uploads. The device's free memory where its backend reports
    /// it, else its memory size.
    pub(super) fn check_fits(&self) -> Result<(), ModelError> {
        for (d, dev) in self.placement.devices.iter().enumerate() {
            let needed = self.bytes_needed(d)?;
            let (available, free) = match dev.free_memory() {
                Some(free) => (free, true),
                None => (dev.info().memory.device_local, false),
            };
            // A device that reports no memory size (0) cannot be judged here.
            if available > 0 && needed > available {
                return Err(ModelError::DoesNotFit {
                    device: dev.info().name.clone(),
                    needed,
                    available,
                    what: if free { "free" } else { "in all" },
                });
            }
        }
        Ok(())
    }

    /// Bytes of a tensor's buffer.
    pub(super) fn bytes(&self, t: Tensor) -> u64 {
        let c = &self.model.config;
        let (b, ctx) = (self.options.max_batch as u64, self.options.context as u64);
        let f32s = |n: u64| n * 4;
        match t {
            Tensor::Ids => f32s(b),
            Tensor::Step => f32s(4),
            Tensor::Token => f32s(1),
            Tensor::Resid(_) => f32s(b * c.n_embd as u64),
            Tensor::QRot => f32s(b * c.q_dim() as u64),
            Tensor::Part => {
                // Prompt steps split up to MAX_FLASH_SPLITS times per token (wide heads off
                // the tiles MAX_WIDE_FLASH_SPLITS, the most), decode steps on a GPU several
                // times per head; a CPU checking a GPU's nodes runs them with the GPU's splits.
                let prompt = u64::from(tuning::flash_splits(
                    self.options.max_batch,
                    c.head_dim(),
                    false,
                ));
                let rows = (b * prompt).max(u64::from(tuning::gpu_splits(self.options.context)));
                f32s(rows * c.n_head as u64 * (c.head_dim() as u64 + 2))
            }
            Tensor::Act => f32s(b * c.n_ff as u64),
            Tensor::ActHalf => (2 * b * c.n_ff as u64).next_multiple_of(4),
            Tensor::Route | Tensor::RouteWeights => f32s(b * c.experts_used() as u64),
            Tensor::RouteCounts => f32s(c.experts.map_or(0, |e| e.count) as u64),
            Tensor::RouteLists => f32s(b * c.experts.map_or(0, |e| e.count) as u64),
            Tensor::ExpertAct => f32s(b * c.experts.map_or(0, |e| e.used * e.ff) as u64),
            Tensor::ExpertGateUp => f32s(b * c.experts.map_or(0, |e| 2 * e.used * e.ff) as u64),
            Tensor::ExpertOut => f32s(b * (c.experts_used() * c.n_embd) as u64),
            Tensor::Last => f32s(c.n_embd as u64),
            Tensor::Logits => f32s(c.vocab as u64),
            Tensor::KCache(_) | Tensor::VCache(_) => {
                // Keys in columns hold a block of positions past the context.
                let keys = match t {
                    Tensor::KCache(_) => self.shape.keys,
                    _ => KeyLayout::Rows,
                };
                let elements = keys.k_elements(ctx as u32, c.n_head_kv, c.head_dim());
                self.shape.kv.bytes_for(elements).next_multiple_of(4)
            }
            Tensor::Freq | Tensor::FreqLocal => f32s(c.n_rot as u64 / 2 + 1),
            // Grouping moves the file's bytes, adding none.
            Tensor::Weight(id) | Tensor::Plain(id) | Tensor::Grouped(id) => {
                self.model.weights.bytes(&self.model.gguf, id).len() as u64
            }
            Tensor::Interleaved(id) => {
                let t = &self.model.weights.tensors[id];
                matvec_q8_rows::interleaved_bytes(t.ty, t.rows as usize, t.cols as usize) as u64
            }
            Tensor::Normed => f32s(b * c.n_embd as u64),
            Tensor::Combined => f32s(b * c.q_dim() as u64),
            // Gate and up stacked, the stacked QKV rows or the router's logits, whichever is
            // wider.
            Tensor::Raw => {
                let router = c.experts.map_or(0, |e| e.count);
                let widest = (2 * c.n_ff).max(c.q_dim() + 2 * c.kv_dim()).max(router);
                f32s(b * widest as u64)
            }
            // The widest product input: the residual stream, attention's output, the FFN's
            // activation or the chosen experts' activations, a row each.
            Tensor::XqWords => f32s(b * widest_input(c) / 4),
            Tensor::XqScales | Tensor::XqSums | Tensor::XqSquares => {
                f32s(b * widest_input(c) / u64::from(matvec_q8::X_BLOCK))
            }
            Tensor::XHalf => (2 * b * widest_input(c)).next_multiple_of(4),
            // The largest part a step widens (the gate/up product's half, where it is one).
            Tensor::Wide => self.wide_bytes.max(4),
            Tensor::KParts => self.parts_bytes.max(4),
        }
    }

    /// Contents device `d` gets for tensors that never change. Weights are borrowed from the
    /// mapped file (or the load-time copy), not copied again, unless the device holds them in
    /// pairs of blocks ([`crate::tuning::holds_pairs`]), in groups of blocks
    /// ([`Tensor::Grouped`]) or interleaved.
    pub(super) fn constant(&self, t: Tensor, d: usize) -> Option<Cow<'_, [u8]>> {
        match t {
            Tensor::Weight(id) => {
                let w = &self.model.weights;
                let bytes = w.bytes(&self.model.gguf, id);
                let t = &w.tensors[id];
                Some(if holds_pairs(self.dev(d).info(), t.ty, w.pairable(id)) {
                    Cow::Owned(pair_blocks(t.ty, bytes, t.cols as usize))
                } else {
                    Cow::Borrowed(bytes)
                })
            }
            Tensor::Plain(id) => Some(Cow::Borrowed(
                self.model.weights.bytes(&self.model.gguf, id),
            )),
            Tensor::Interleaved(id) => {
                let w = &self.model.weights;
                let t = &w.tensors[id];
                let bytes = w.bytes(&self.model.gguf, id);
                let (rows, cols) = (t.rows as usize, t.cols as usize);
                // The graph gives this product only weights whose shape and type it takes.
                let laid = matvec_q8_rows::interleave(t.ty, bytes, rows, cols)
                    .expect("a product with quantized x on a weight it takes");
                Some(Cow::Owned(laid))
            }
            Tensor::Grouped(id) => {
                let w = &self.model.weights;
                // The graph groups only weights of whole groups of a type that has them.
                let grouped = regroup(w.tensors[id].ty, w.bytes(&self.model.gguf, id))
                    .expect("a grouped product's weights are whole groups");
                Some(Cow::Owned(grouped))
            }
            Tensor::Freq => {
                let rope = self.model.rope.for_context(self.options.context);
                let f = rope.table(self.model.config.n_rot);
                Some(Cow::Owned(bytemuck::cast_slice(&f).to_vec()))
            }
            Tensor::FreqLocal => {
                let rope = self.model.rope_local.as_ref()?;
                let f = rope.table(self.model.config.n_rot);
                Some(Cow::Owned(bytemuck::cast_slice(&f).to_vec()))
            }
            _ => None,
        }
    }

    /// Tensor `t`'s buffer on device `d`, allocated on first use.
    pub(super) fn buffer(&mut self, t: Tensor, d: usize) -> Result<BufferHandle, ModelError> {
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

    pub(super) fn binding(&mut self, t: Tensor, d: usize) -> Result<Binding, ModelError> {
        let buffer = self.buffer(t, d)?;
        Ok(Binding {
            buffer,
            offset: 0,
            size: self.tensors[&t].bytes,
        })
    }

    /// Makes device `d`'s copy of `t` current: uploads a constant, or copies the value from the
    /// device that wrote it last. A tensor nothing has written yet (a fresh cache) needs nothing.
    pub(super) fn make_valid(&mut self, t: Tensor, d: usize) -> Result<(), ModelError> {
        let buf = self.buffer(t, d)?;
        let r = &self.tensors[&t];
        if r.valid[d] {
            return Ok(());
        }
        let data = match self.constant(t, d) {
            Some(data) => data,
            None => match r.valid.iter().position(|&v| v) {
                Some(from) => {
                    let src = r.bufs[from].expect("a valid copy has a buffer");
                    let mut data = vec![0u8; r.bytes as usize];
                    self.dev(from)
                        .read(src, 0, &mut data)
                        .map_err(|e| self.err(from, e))?;
                    Cow::Owned(data)
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

    pub(super) fn mark_written(&mut self, t: Tensor, d: usize) {
        if let Some(r) = self.tensors.get_mut(&t) {
            r.valid.iter_mut().for_each(|v| *v = false);
            r.valid[d] = true;
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Some(r) = self.decode.take() {
            self.placement.devices[0].release(r);
        }
        for r in self.tensors.values() {
            for (d, b) in r.bufs.iter().enumerate() {
                if let Some(b) = b {
                    self.placement.devices[d].free(*b);
                }
            }
        }
    }
}

fn widest_input(c: &crate::config::Config) -> u64 {
    let experts = c.experts.map_or(0, |e| e.used * e.ff);
    u64::from(c.n_embd.max(c.n_ff).max(c.q_dim()).max(experts))
}

//! What a bench reads off a node: the kernel its device compiled, and the bytes the node
//! moves.

use super::Engine;
use crate::graph::{Load, Node, Op, Step, Store, Tensor};
use crate::planner::KernelKey;
use std::collections::HashSet;
use trine_gguf::quant::WeightType;
use trine_ops::matvec_q8_blocks::Teams;

/// What [`Engine::blocks_product`] reads off a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlocksProduct {
    pub weights: WeightType,
    pub rows: u32,
    pub cols: u32,
    pub per_team: u32,
    pub teams: Teams,
}

impl Engine {
    /// The backend that runs `node` and the name of the kernel it compiled for it (the
    /// variant that compiled, a fallback where the best one did not); `None` for a node of a
    /// step this executor was not built for.
    pub fn kernel_of(&self, node: &Node) -> Option<(&str, &str)> {
        let key = KernelKey::of(&node.op, &self.model.weights, self.shape, &self.tuned);
        let placed = self.placement.programs.get(&key)?;
        let name = self.placement.kernels.get(&placed.program)?.as_str();
        Some((self.dev(placed.device).name(), name))
    }

    /// A GPU decode product on the weights' blocks as this executor runs `node`: the weights'
    /// type as the device reads them, the product's rows and columns, and its rows per team
    /// and teams ([`KernelKey::MatvecQ8Blocks`]); `None` for any other node.
    pub fn blocks_product(&self, node: &Node) -> Option<BlocksProduct> {
        let key = KernelKey::of(&node.op, &self.model.weights, self.shape, &self.tuned);
        match (key, &node.op) {
            (
                KernelKey::MatvecQ8Blocks {
                    weights,
                    rows: per_team,
                    teams,
                    ..
                },
                &Op::Product { w, rows, .. },
            ) => Some(BlocksProduct {
                weights,
                rows,
                cols: self.model.weights.tensors[w].cols,
                per_team,
                teams,
            }),
            _ => None,
        }
    }

    /// Bytes node `node` of step `s` reads plus bytes it writes, each tensor it binds counted
    /// once: weights whole, in the layout its device holds them; the KV cache up to the
    /// step's last position where the node reads it, the step's positions where it writes
    /// them; activations for the rows the node takes (a prompt's output head takes one).
    pub fn traffic(&self, node: &Node, s: Step) -> u64 {
        let plan = self.plan(node, s);
        let mut seen = HashSet::new();
        let reads: u64 = plan
            .inputs
            .iter()
            .chain(&plan.updates)
            .filter(|&&t| seen.insert(t))
            .map(|&t| self.tensor_traffic(t, node, s, true))
            .sum();
        let mut seen = HashSet::new();
        let writes: u64 = plan
            .outputs
            .iter()
            .filter(|&&t| seen.insert(t))
            .map(|&t| self.tensor_traffic(t, node, s, false))
            .sum();
        reads + writes
    }

    /// The bytes of tensor `t` that `node` reads (`read`) or writes.
    fn tensor_traffic(&self, t: Tensor, node: &Node, s: Step, read: bool) -> u64 {
        let c = &self.model.config;
        let rows = u64::from(match node.op {
            Op::Product { tokens, .. }
            | Op::SplitSum { tokens, .. }
            | Op::Norm { tokens, .. }
            | Op::Quantize { tokens, .. }
            | Op::HalfX { tokens, .. } => tokens,
            Op::PickLast | Op::Argmax => 1,
            _ => s.tokens,
        });
        let f32s = |per_row: u32| rows * u64::from(per_row) * 4;
        let splits = match node.op {
            Op::Attention { form, .. } => form.splits(),
            Op::Combine { splits }
            | Op::Product {
                load: Load::Combine { splits },
                ..
            } => splits,
            _ => 1,
        };
        let cols = match node.op {
            Op::Quantize { cols, .. } | Op::HalfX { cols, .. } => cols,
            Op::Product { w, .. } | Op::ExpertRows { w, .. } => self.model.weights.tensors[w].cols,
            _ => c.n_embd,
        };
        match t {
            // An embedding reads the table's rows of the step's ids.
            Tensor::Weight(_) | Tensor::Grouped(_) if matches!(node.op, Op::Embed { .. }) => {
                self.bytes(t) * rows / u64::from(c.vocab)
            }
            // The experts' products read the chosen experts' slices, at most all of them.
            Tensor::Weight(_) | Tensor::Grouped(_) | Tensor::Plain(_) | Tensor::Interleaved(_)
                if matches!(
                    node.op,
                    Op::ExpertsSwiglu { .. } | Op::ExpertsDown { .. } | Op::ExpertRows { .. }
                ) =>
            {
                let e = c.experts.map_or(1, |e| e.count);
                let chosen = u64::from(c.experts_used()) * rows;
                self.bytes(t) * chosen.min(u64::from(e)) / u64::from(e)
            }
            Tensor::Weight(_)
            | Tensor::Interleaved(_)
            | Tensor::Grouped(_)
            | Tensor::Plain(_)
            | Tensor::Freq
            | Tensor::FreqLocal => match node.op {
                // A part of a weight widened reads its rows, in whatever layout it is staged.
                Op::Widen { w, rows: part, .. } => {
                    let all = u64::from(self.model.weights.tensors[w].rows);
                    self.bytes(t) * u64::from(part) / all
                }
                _ => self.bytes(t),
            },
            Tensor::Step => 16,
            Tensor::Ids | Tensor::Token => rows * 4,
            Tensor::KCache(_) | Tensor::VCache(_) => {
                let positions = if read { s.pos + s.tokens } else { s.tokens };
                self.shape
                    .kv
                    .bytes_for(u64::from(positions) * u64::from(c.kv_dim()))
            }
            Tensor::Resid(_) | Tensor::Last | Tensor::Normed => f32s(c.n_embd),
            Tensor::QRot | Tensor::Combined => f32s(c.q_dim()),
            // A part of the gate/up product writes its share of the activations.
            Tensor::Act | Tensor::ActHalf => {
                let bytes = match t {
                    Tensor::ActHalf => f32s(c.n_ff) / 2,
                    _ => f32s(c.n_ff),
                };
                match node.op {
                    Op::Product {
                        rows,
                        part: Some(p),
                        ..
                    } => bytes * u64::from(rows) / u64::from(p.total),
                    _ => bytes,
                }
            }
            Tensor::Route | Tensor::RouteWeights => f32s(c.experts_used()),
            Tensor::RouteCounts => u64::from(c.experts.map_or(0, |e| e.count)) * 4,
            Tensor::RouteLists => f32s(c.experts.map_or(0, |e| e.count)),
            Tensor::ExpertAct => f32s(c.experts.map_or(0, |e| e.used * e.ff)),
            // A part of the gate/up pairs writes its half of each pair's row.
            Tensor::ExpertGateUp => match node.op {
                Op::ExpertRows { part: Some(_), .. } => {
                    f32s(c.experts.map_or(0, |e| e.used * e.ff))
                }
                _ => f32s(c.experts.map_or(0, |e| 2 * e.used * e.ff)),
            },
            Tensor::ExpertOut => f32s(c.experts_used() * c.n_embd),
            Tensor::Logits => f32s(c.vocab),
            Tensor::Part => f32s(c.n_head * splits * (c.head_dim() + 2)),
            // The product's rows: gate and up stacked, or Q, K and V.
            Tensor::Raw => f32s(match node.op {
                Op::Product { rows, .. } => rows,
                Op::Swiglu(_) | Op::Geglu => 2 * c.n_ff,
                _ => c.q_dim() + 2 * c.kv_dim(),
            }),
            // Every slice of the split product's rows.
            Tensor::KParts => match node.op {
                Op::Product {
                    rows,
                    store: Store::Slices { splits },
                    ..
                }
                | Op::SplitSum { rows, splits, .. } => f32s(splits * rows),
                _ => 0,
            },
            // A byte per element, and a scale and a sum per block of 32.
            Tensor::XqWords => rows * u64::from(cols),
            Tensor::XqScales | Tensor::XqSums | Tensor::XqSquares => f32s(cols / 32),
            Tensor::XHalf => rows * u64::from(cols) * 2,
            // The weight's rows, widened.
            Tensor::Wide => match node.op {
                Op::Widen { rows, cols, .. } => u64::from(rows) * u64::from(cols) * 2,
                Op::Product { w, rows, .. } => {
                    u64::from(rows) * u64::from(self.model.weights.tensors[w].cols) * 2
                }
                // Every expert's matrix, which a prompt's pairs read at most once each.
                Op::ExpertRows { w, .. } => {
                    let t = &self.model.weights.tensors[w];
                    u64::from(t.rows) * u64::from(t.cols) * 2
                }
                _ => 0,
            },
        }
    }
}

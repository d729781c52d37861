//! A generation session: feeds tokens through the executor step by step, keeps the position
//! in the KV cache, and with a checker runs a second executor in lock-step, node by node,
//! comparing every node's output (NaN/Inf pattern, then NMSE against the op's bound).
//!
//! The checker runs each node on the main executor's inputs (copied over before the node), so
//! a node's difference is that op's alone, as in the conformance suite, and not the drift the
//! two devices' rounding accumulates over 30 layers; the tokens fed are the main executor's.

use super::config::Config;
use super::engine::Engine;
use super::error::ModelError;
use super::graph::{AttentionForm, Node, NormOut, Op, Step, Tensor};
use super::sampler::argmax;
use super::weights::Weights;
use serde::Serialize;
use std::ops::Range;
use trine_ops::compare::nmse;

/// The worst node of one cross-checked step, and the first whose difference exceeds its
/// bound, if any.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepCheck {
    /// 0 for the prompt, then one per generated token.
    pub step: usize,
    pub tokens: u32,
    pub worst: NodeDiff,
    pub first_over_bound: Option<NodeDiff>,
    /// Each backend's greedy token after the step, where the session has a run of the
    /// checker's own ([`Session::with_reference`]); `None` without one, or where either's
    /// logits are all NaN.
    pub choices: Option<Choices>,
}

/// The token each backend would pick greedily after a step, the checked one from its logits,
/// the checker from a run of its own (its own activations and KV cache, fed the same tokens),
/// and how close each one's choice was. Nodes within their bounds on the same inputs still
/// drift apart over the layers and the steps, which is enough to pick differently where the
/// two best logits nearly tie: the first step where the choices differ is where a run on the
/// checker writes another text.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Choices {
    pub main: u32,
    pub checker: u32,
    /// The main backend's largest logit less its second.
    pub main_gap: f32,
    /// The checker's largest logit less its second.
    pub checker_gap: f32,
}

impl Choices {
    fn of(main: &[f32], checker: &[f32]) -> Option<Choices> {
        Some(Choices {
            main: argmax(main)?,
            checker: argmax(checker)?,
            main_gap: top2_gap(main),
            checker_gap: top2_gap(checker),
        })
    }

    pub fn differ(&self) -> bool {
        self.main != self.checker
    }
}

/// The largest of `v` less the second largest, NaN ignored; 0 for fewer than two values.
pub fn top2_gap(v: &[f32]) -> f32 {
    let mut top = [f32::NEG_INFINITY; 2];
    for &x in v.iter().filter(|x| !x.is_nan()) {
        if x > top[0] {
            top = [x, top[0]];
        } else if x > top[1] {
            top[1] = x;
        }
    }
    if top[1] == f32::NEG_INFINITY {
        0.0
    } else {
        top[0] - top[1]
    }
}

/// The largest top-2 logit gap at which two backends may choose different tokens: with x
/// quantized to 8 bits for the products (as llama.cpp computes), backends round x's blocks
/// apart where a value sits on a rounding boundary, which moved SmolLM2's logits by up to
/// 0.4 in llama.cpp (`tests/tests/llama_greedy.rs`). A parting at a larger gap is a real
/// difference.
pub const NEAR_TIE: f32 = 0.5;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeDiff {
    pub op: &'static str,
    pub layer: Option<u32>,
    /// `None` when the NaN/Inf patterns differ (see `reason`).
    pub nmse: Option<f64>,
    pub bound: f64,
    pub reason: Option<String>,
}

impl NodeDiff {
    fn exceeds(&self) -> bool {
        self.nmse.is_none_or(|e| e > self.bound)
    }

    /// The NMSE as a multiple of the bound: infinite for differing NaN/Inf patterns or any
    /// difference where the bound is exact, 0 for none (also where the bound is 0).
    fn severity(&self) -> f64 {
        match self.nmse {
            None => f64::INFINITY,
            Some(0.0) => 0.0,
            Some(e) => e / self.bound,
        }
    }
}

pub struct Session {
    engine: Engine,
    checker: Option<Engine>,
    /// A run on the checker's backend with its own state, fed the main run's tokens.
    reference: Option<Engine>,
    pos: u32,
    steps: usize,
    pub checks: Vec<StepCheck>,
}

impl Session {
    pub fn new(engine: Engine, checker: Option<Engine>) -> Session {
        Session {
            engine,
            checker,
            reference: None,
            pos: 0,
            steps: 0,
            checks: vec![],
        }
    }

    /// With `reference`, an executor of its own on the checker's backend (made with
    /// [`Engine::new`], not [`Engine::checker`]), fed the same tokens: each cross-checked step
    /// then also records both runs' greedy choices ([`StepCheck::choices`]).
    pub fn with_reference(mut self, reference: Engine) -> Session {
        self.reference = Some(reference);
        self
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The main executor, its KV cache filled by the steps so far.
    pub fn into_engine(self) -> Engine {
        self.engine
    }

    pub fn checker(&self) -> Option<&Engine> {
        self.checker.as_ref()
    }

    /// [`Engine::prepare`] on the executor and its checker: the model uploaded and every buffer
    /// allocated before the first step.
    pub fn prepare(&mut self) -> Result<(), ModelError> {
        self.engine.prepare()?;
        if let Some(r) = self.reference.as_mut() {
            r.prepare()?;
        }
        self.checker.as_mut().map_or(Ok(()), Engine::prepare)
    }

    /// Tokens in the KV cache.
    pub fn position(&self) -> u32 {
        self.pos
    }

    /// Forgets the tokens from position `pos` on (a conversation whose text changed there):
    /// the next step writes its keys and values over theirs, and attention never reads past
    /// the step's own position. A `pos` past the current position changes nothing.
    pub fn rewind(&mut self, pos: u32) {
        self.pos = self.pos.min(pos);
    }

    /// Appends `ids` to the context and returns the logits after the last of them. Prompts
    /// longer than the executor's batch go in chunks; a cross-check covers every chunk and
    /// counts as one step.
    pub fn feed(&mut self, ids: &[u32]) -> Result<Vec<f32>, ModelError> {
        self.advance(ids)?;
        let vocab = self.engine.model().config.vocab as usize;
        self.engine.read(Tensor::Logits, 0..vocab)
    }

    /// As [`Session::feed`], returning the greedy token instead of the logits: 4 bytes read
    /// back per step instead of the vocabulary.
    pub fn feed_greedy(&mut self, ids: &[u32]) -> Result<u32, ModelError> {
        self.advance(ids)?;
        self.greedy_token()
    }

    /// The device's argmax of the last step's logits.
    pub fn greedy_token(&mut self) -> Result<u32, ModelError> {
        match self.engine.read_token()? {
            trine_ops::argmax::NONE => Err(ModelError::NanLogits),
            id => Ok(id),
        }
    }

    fn advance(&mut self, ids: &[u32]) -> Result<(), ModelError> {
        if ids.is_empty() {
            return Err(ModelError::EmptyPrompt);
        }
        let batch = self.engine.options().max_batch as usize;
        let mut worst: Option<NodeDiff> = None;
        let mut first: Option<NodeDiff> = None;
        for chunk in ids.chunks(batch) {
            let s = Step {
                tokens: chunk.len() as u32,
                pos: self.pos,
            };
            self.engine.check_step(s)?;
            self.engine.set_ids(chunk, s.pos)?;
            let Some(ch) = self.checker.as_mut() else {
                self.engine.run_step(s)?;
                self.pos += s.tokens;
                continue;
            };
            if ch.cache_form() != self.engine.cache_form() {
                return Err(ModelError::CheckerKv {
                    main: self.engine.cache_form(),
                    checker: ch.cache_form(),
                });
            }
            ch.check_step(s)?;
            ch.set_ids(chunk, s.pos)?;
            for node in &self.engine.graph(s)? {
                let ch = self.checker.as_mut().expect("checked above");
                for t in self.engine.activation_inputs(node, s) {
                    if let Some(bytes) = self.engine.export(t)? {
                        ch.import(t, &bytes)?;
                    }
                }
                self.engine.run(node, s)?;
                ch.run(node, s)?;
                let model = self.engine.model();
                let (t, range) = node.output(&model.config, s);
                let bound = cross_check_bound(node, reduction(node, &model.config, &model.weights));
                let (mut a, mut b) = (vec![], vec![]);
                for part in compared(node, range) {
                    a.extend(self.engine.read(t, part.clone())?);
                    b.extend(ch.read(t, part)?);
                }
                let diff = compare(node.label, node.layer, bound, &a, &b);
                if first.is_none() && diff.exceeds() {
                    first = Some(diff.clone());
                }
                if worst
                    .as_ref()
                    .is_none_or(|w| diff.severity() > w.severity())
                {
                    worst = Some(diff);
                }
            }
            if let Some(r) = self.reference.as_mut() {
                r.check_step(s)?;
                r.set_ids(chunk, s.pos)?;
                r.run_step(s)?;
            }
            self.pos += s.tokens;
        }
        let choices = match self.reference.as_mut() {
            Some(r) if worst.is_some() => {
                let vocab = self.engine.model().config.vocab as usize;
                let main = self.engine.read(Tensor::Logits, 0..vocab)?;
                Choices::of(&main, &r.read(Tensor::Logits, 0..vocab)?)
            }
            _ => None,
        };
        if let Some(worst) = worst {
            self.checks.push(StepCheck {
                step: self.steps,
                tokens: ids.len() as u32,
                worst,
                first_over_bound: first,
                choices,
            });
        }
        self.steps += 1;
        Ok(())
    }
}

/// How far a node's output on two backends may differ (NMSE) when both run it on the same
/// inputs: 100 times the worst measured for its kind of op, by `trine generate --cross-check
/// cpu` on SmolLM2-135M-Instruct Q4_1 over the prompts of
/// `llama/tests/fixtures/smollm2_reference_f64.json`, every node of every step, on the
/// devices whose records are in `docs/models/`. The conformance bounds are for a kernel
/// against its f64 reference; these are for two f32 devices on one step, which is what a
/// cross-check sees.
///
/// A node that sums `k` terms per output (a product's columns, a norm's row) is bounded for
/// its length: two devices that sum in different orders round each partial sum by up to half
/// an ulp, independently, so the difference of their sums is a random walk of `k` steps, each
/// about as large as the partial sums, which themselves grow as `√k` times a term (terms of
/// either sign); against the sum's own `√k` that is a relative difference growing as `√k`, an
/// NMSE growing as `k`. The measured bounds are for SmolLM2's longest reduction,
/// [`MEASURED_REDUCTION`] (its FFN down projection), and grow linearly past it: an 8B layout's
/// down projection (14,336) gets 9.3 times the bound, where its first false alarm was 1.2
/// times over.
///
/// A node that rounds its f32 results to f16 as it writes them ([`rounds_to_half`]) adds the
/// values that round to different neighbours on the two devices
/// ([`trine_ops::case::rounded_to_half`]).
fn cross_check_bound(node: &Node, k: u32) -> f64 {
    let grown = f64::from(k.max(MEASURED_REDUCTION)) / f64::from(MEASURED_REDUCTION);
    let bound = grown * measured_bound(node);
    if rounds_to_half(node) {
        trine_ops::case::rounded_to_half(bound)
    } else {
        bound
    }
}

/// Whether a node computes in f32 and rounds each result to f16 as it writes it (x for the
/// products on widened weights after it).
fn rounds_to_half(node: &Node) -> bool {
    matches!(
        node.op,
        Op::Norm {
            out: NormOut::Half,
            ..
        } | Op::Product {
            y: Tensor::ActHalf,
            ..
        } | Op::ExpertsSwigluHalves { half: true }
    )
}

/// The terms SmolLM2-135M's longest reductions sum, where the bounds were measured.
const MEASURED_REDUCTION: u32 = 1536;

/// The terms a node sums per output element: a product's columns, a norm's row; 1 for the
/// nodes that sum nothing or whose bound is not one of rounding (attention's, measured apart).
fn reduction(node: &Node, c: &Config, w: &Weights) -> u32 {
    match node.op {
        Op::Product { w: id, .. } => w.tensors[id].cols,
        Op::Norm { .. } | Op::NormAdd { .. } | Op::ExpertsSwiglu { .. } => c.n_embd,
        Op::ExpertRows { w: id, .. } => w.tensors[id].cols,
        Op::SplitSum { cols, .. } => cols,
        // Each chosen expert's row, weighted and summed.
        Op::ExpertsDown { .. } => c.experts.map_or(1, |e| e.ff * e.used),
        _ => 1,
    }
}

/// The bound measured for a node's kind at reductions up to [`MEASURED_REDUCTION`].
fn measured_bound(node: &Node) -> f64 {
    match node.op {
        // Every product, whatever its form: exact integer dots or float sums in another
        // order, at most 2.9e-12 measured. The nodes around the products on quantized x or
        // tiles (the plain rms_norm, the combine, SwiGLU, rope-store) are the same arithmetic
        // the float products fuse, and take their bound.
        Op::Product { .. }
        | Op::Norm { .. }
        | Op::Combine { .. }
        | Op::Swiglu(_)
        | Op::Geglu
        | Op::NormAdd { .. }
        | Op::QkvBiasNorm { .. }
        | Op::RopeStore { .. }
        | Op::ExpertsSwiglu { .. }
        | Op::ExpertsDown { .. }
        | Op::ExpertRows { .. }
        | Op::ExpertsSwigluHalves { .. }
        | Op::MoeCombine { .. }
        | Op::SplitSum { .. } => 2.9e-10,
        // The chosen experts' weights: an exp of each logit and a division, the products'
        // arithmetic; the experts chosen are the same ids on both where the logits agree.
        Op::MoeRoute => 2.9e-10,
        // The quantizer's scales, most rounded to f16 from a division that Vulkan lets be
        // 2.5 ulp off: a scale can land on the neighbouring f16, a step of at most 2⁻¹⁰ of it
        // (NVIDIA's Vulkan driver moved some of an 8B layout's, NMSE 9.9e-10). The bound is
        // every scale so moved; a wrong scale (a wrong maximum, a lost block) is off by far
        // more.
        Op::Quantize { .. } => 1.0 / (1024.0 * 1024.0),
        // Each value decoded in f32 as every kernel decodes it and rounded once to f16:
        // exact everywhere.
        Op::HalfX { .. } | Op::Widen { .. } => 0.0,
        // Attention's partials: at most 6.3e-8 measured. The checker keeps its own KV cache
        // (caches are not copied across), so keys and values it rounded to f16 itself can
        // differ from the main backend's in the last bit. Flash attention without tiles sums
        // the same terms grouped by blocks of keys.
        Op::Attention {
            form: AttentionForm::Split { .. } | AttentionForm::Flash { tiles: false, .. },
            ..
        } => 6.3e-6,
        // On tiles, queries, keys, values and p are rounded to f16, where the checker's scalar
        // kernel keeps f32: the tiled kernel's own bound against its reference.
        Op::Attention { .. } => trine_ops::attention_flash_tiles::NMSE,
        // An embedding row gather, a row copy and an argmax: exact everywhere measured.
        // The routing's counts by expert: integers.
        Op::Embed { .. } | Op::PickLast | Op::Argmax | Op::Add { .. } | Op::MoeSort => 0.0,
    }
}

/// Rows of a widened weight the cross-check compares: spread evenly through it, the first
/// and the last among them.
const WIDENED_ROWS: u32 = 64;

/// The parts of a node's output `range` the cross-check reads and compares: all of it, but
/// for a widened weight ([`Op::Widen`]), the file's blocks decoded to f16 (as large as the
/// weight, which every prompt step widens again): [`WIDENED_ROWS`] of its rows. A decoder
/// that is wrong is wrong in every row sampled, an address that is wrong far into the
/// weight shows in the last rows, and any other row that differs shows in the product that
/// reads it.
fn compared(node: &Node, range: Range<usize>) -> Vec<Range<usize>> {
    match node.op {
        Op::Widen { rows, cols, .. } if rows > WIDENED_ROWS => {
            let (rows, cols, n) = (rows as usize, cols as usize, WIDENED_ROWS as usize);
            (0..n)
                .map(|i| {
                    let row = range.start + i * (rows - 1) / (n - 1) * cols;
                    row..row + cols
                })
                .collect()
        }
        _ => vec![range],
    }
}

fn compare(op: &'static str, layer: Option<u32>, bound: f64, a: &[f32], b: &[f32]) -> NodeDiff {
    let a: Vec<f64> = a.iter().map(|&v| v as f64).collect();
    let b: Vec<f64> = b.iter().map(|&v| v as f64).collect();
    let (nmse, reason) = match nmse(&a, &b) {
        Ok(e) => (Some(e), None),
        Err(r) => (None, Some(r)),
    };
    NodeDiff {
        op,
        layer,
        nmse,
        bound,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A summing node's bound grows with its reduction past the measured length, linearly;
    /// shorter ones keep the measured bound, and a node that sums nothing keeps its own.
    #[test]
    fn bounds_grow_with_the_terms_summed() {
        let node = |op| Node {
            op,
            label: "n",
            layer: None,
        };
        let norm = node(Op::Norm {
            x: Tensor::Resid(0),
            weight: 0,
            tokens: 1,
            out: NormOut::F32,
        });
        let at = |k| cross_check_bound(&norm, k);
        assert_eq!(at(576), at(MEASURED_REDUCTION));
        assert_eq!(at(2 * MEASURED_REDUCTION), 2.0 * at(MEASURED_REDUCTION));
        // The 8B layout's down projection: its false alarm, 3.36e-10, is within.
        assert!(at(14_336) > 3.36e-10 && at(MEASURED_REDUCTION) < 3.36e-10);
        let argmax = node(Op::Argmax);
        assert_eq!(cross_check_bound(&argmax, 1), 0.0);
        // Rounded to f16 as written: values either side of a halfway point on the two
        // devices. Measured on a 2,639-token prompt of the tiny layouts: 3.5e-10 (the norm),
        // 6.4e-10 (a gate/up product's gated unit), over the f32 bound, within this one.
        let half = node(Op::Norm {
            x: Tensor::Resid(0),
            weight: 0,
            tokens: 1,
            out: NormOut::Half,
        });
        let rounded = cross_check_bound(&half, 576);
        assert!(rounded > 6.4e-10 && rounded < 1e-7, "{rounded}");
    }

    /// A widened weight is compared on rows spread through it, whole rows, the first and
    /// the last among them; a smaller one, and every other node, whole.
    #[test]
    fn widened_weights_are_compared_on_spread_rows() {
        let widen = |rows| Node {
            op: Op::Widen {
                w: 0,
                rows,
                cols: 4096,
                first: 0,
            },
            label: "widen",
            layer: Some(0),
        };
        let whole = 0..14_336 * 4096;
        let parts = compared(&widen(14_336), whole.clone());
        assert_eq!(parts.len(), WIDENED_ROWS as usize);
        assert_eq!(parts[0], 0..4096);
        assert_eq!(parts[parts.len() - 1], 14_335 * 4096..whole.end);
        assert!(parts.iter().all(|p| p.len() == 4096 && p.start % 4096 == 0));
        assert!(parts.windows(2).all(|w| w[0].end <= w[1].start));
        let small = 0..64 * 4096;
        assert_eq!(compared(&widen(64), small.clone()), [small]);
        let norm = Node {
            op: Op::Norm {
                x: Tensor::Resid(0),
                weight: 0,
                tokens: 3,
                out: NormOut::F32,
            },
            label: "norm",
            layer: Some(0),
        };
        let rows = 0..3 * 4096;
        assert_eq!(compared(&norm, rows.clone()), [rows]);
    }
}

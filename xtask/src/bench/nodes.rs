//! What the bench measures: every node of the executor's decode step and prompt step on a
//! synthetic model ([`trine_benches::steps`]), timed as the executor dispatches it, with the
//! bytes it moves and the arithmetic it does.
//!
//! Timing. The nodes run in the step's order, each alone with its device time taken
//! ([`trine_llama::Engine::run_timed`]: timestamps where the backend has them, the host clock
//! around the dispatch on the CPU), and the step is repeated under the measurement policy:
//! between two runs of a node the rest of the step runs, as in the executor, so a node finds
//! in the caches what a step leaves there, not only its own weights from the repetition
//! before. A model of one layer (the default) has a small step, whose weights a large cache
//! may hold between repetitions (SmolLM2's 31 MB, most of it the output head): its products
//! then pass the copy roof. With several layers (`--layers`) the nodes of one kind in every
//! layer are pooled into one summary, and a step reads most weights from memory, as a whole
//! model's does.
//!
//! Conventions. Bytes: [`trine_llama::Engine::traffic`]: each tensor a node binds read or
//! written once; weights whole, in the layout the device holds; the KV cache up to the step's
//! last position where read. Flops: multiply-adds count 2; a product 2·rows·cols per token,
//! attention 4·head_dim per visible key of each query token and head (q·k and the weighted
//! sum of v), rms_norm 4 per element, SwiGLU 5 per output element, rope 6 per rotated pair;
//! the embedding, copies, quantizing x, the attention combine and the argmax count none.

use super::measure::{measure, Policy};
use std::time::Duration;
use trine_benches::steps::Prepared;
use trine_llama::graph::{Form, Node, Op, Step, Store};
use trine_llama::{Engine, ModelError};

/// A product node's `(m, n, k)`: `y[m × n] = x[m × k]·Wᵀ`, and whether it runs on matrix
/// tiles (a GPU's prompt product, cuBLAS's peer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Product {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub tiles: bool,
}

pub fn product(engine: &Engine, node: &Node) -> Option<Product> {
    let w = &engine.model().weights;
    let p = |(m, n, k), tiles| Some(Product { m, n, k, tiles });
    match node.op {
        Op::Product {
            w: id,
            rows,
            tokens,
            form,
            ..
        } => p(
            (tokens, rows, w.tensors[id].cols),
            matches!(form, Form::Tiles | Form::Widened),
        ),
        _ => None,
    }
}

/// Keys the query tokens of step `s` see between them: token `i` sees `pos + i + 1`.
fn visible_keys(s: Step) -> u64 {
    let (pos, t) = (u64::from(s.pos), u64::from(s.tokens));
    t * pos + t * (t + 1) / 2
}

/// Floating-point operations of `node` in step `s` (see the module's conventions).
pub fn flops(engine: &Engine, node: &Node, s: Step) -> u64 {
    let c = &engine.model().config;
    let (d, hd) = (u64::from(c.n_embd), u64::from(c.head_dim()));
    let rope = |t: u64| 6 * t * u64::from(c.n_head + c.n_head_kv) * u64::from(c.n_rot) / 2;
    if let Some(p) = product(engine, node) {
        let fused = match node.op {
            Op::Product {
                store: Store::Rope { .. },
                tokens,
                ..
            } => rope(u64::from(tokens)),
            Op::Product {
                store: Store::Swiglu,
                tokens,
                ..
            } => 5 * u64::from(tokens * c.n_ff),
            _ => 0,
        };
        return 2 * u64::from(p.m) * u64::from(p.n) * u64::from(p.k) + fused;
    }
    match node.op {
        Op::Attention { .. } => 4 * u64::from(c.n_head) * hd * visible_keys(s),
        Op::Norm { tokens, .. } => 4 * u64::from(tokens) * d,
        Op::Swiglu(_) => 5 * u64::from(s.tokens * c.n_ff),
        Op::RopeStore { .. } => rope(u64::from(s.tokens)),
        Op::QkvBiasNorm { heads, .. } => 4 * u64::from(s.tokens * heads.count) * hd,
        _ => 0,
    }
}

/// What the table shows as a node's shape: a product's `m×n×k`, attention's query tokens
/// and keys, the tokens (rows) of the rest.
pub fn shape(engine: &Engine, node: &Node, s: Step) -> String {
    if let Some(p) = product(engine, node) {
        return format!("{}x{}x{}", p.m, p.n, p.k);
    }
    match node.op {
        Op::Attention { .. } => format!("{}t x {} keys", s.tokens, s.pos + s.tokens),
        Op::Norm { tokens, .. } | Op::Quantize { tokens, .. } => format!("{tokens}t"),
        Op::PickLast | Op::Argmax => "1t".into(),
        _ => format!("{}t", s.tokens),
    }
}

/// Times every node of step `i` (see the module's documentation), the step repeated under
/// `policy` (its warm-up and limits count whole steps): each node's samples.
pub fn time_step(
    p: &mut Prepared,
    i: usize,
    policy: &Policy,
) -> Result<Vec<Vec<Duration>>, ModelError> {
    p.enter(i)?;
    let n = p.steps[i].nodes.len();
    let mut samples = vec![vec![]; n];
    let mut runs = 0;
    measure(policy, || {
        let mut total = Duration::ZERO;
        for (k, s) in samples.iter_mut().enumerate() {
            let t = p.time(i, k)?;
            total += t;
            if runs >= policy.warmup {
                s.push(t);
            }
        }
        runs += 1;
        Ok::<_, ModelError>(total)
    })?;
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use trine_gguf::synth::{synth_llama, SynthShape};
    use trine_gguf::Gguf;
    use trine_llama::Model;

    /// On a tiny model on the CPU, a decode step's output projection and attention move and
    /// compute what their tensors and shapes say.
    #[test]
    fn a_decode_steps_bytes_and_flops_by_hand() {
        let shape = SynthShape {
            n_layer: 1,
            ..SynthShape::TINY
        };
        let bytes = synth_llama(shape, 1).unwrap().to_bytes();
        let model = Arc::new(Model::from_gguf(Gguf::from_bytes(bytes).unwrap()).unwrap());
        let cpu = trine_backends::open(trine_backends::BackendKind::Cpu).unwrap();
        let p = trine_benches::steps::prepare(model, cpu, 4).unwrap();
        let (e, tg) = (&p.engine, &p.steps[0]);
        assert_eq!(tg.step, Step { tokens: 1, pos: 4 });
        let node = |label| tg.nodes.iter().find(|n| n.label == label).unwrap();
        // 64 × 64 Q4_1 in the CPUs' interleaved blocks of 20 bytes; x quantized (64 code
        // bytes, 2 scales and 2 sums); the residual added and the output, 64 floats each.
        let wo = node("attn_output");
        assert_eq!(e.traffic(wo, tg.step), 128 * 20 + 64 + 16 + 256 + 256);
        assert_eq!(flops(e, wo, tg.step), 2 * 64 * 64);
        let p = product(e, wo).unwrap();
        assert_eq!((p.m, p.n, p.k, p.tiles), (1, 64, 64, false));
        // q (64 floats), the step, 5 positions of K and V (2 heads of 16, f32 on a CPU), and
        // one split's partials per head (16 values, a maximum and a sum).
        let attn = node("attention");
        assert_eq!(
            e.traffic(attn, tg.step),
            256 + 16 + 2 * 5 * 32 * 4 + 4 * 18 * 4
        );
        assert_eq!(flops(e, attn, tg.step), 4 * 4 * 16 * 5);
        assert!(e.kernel_of(attn).is_some_and(|(dev, _)| dev == "cpu"));
    }

    #[test]
    fn keys_seen_by_a_step() {
        // A decode step at position 128 sees 129 keys; a prompt of 4 tokens 1 + 2 + 3 + 4.
        assert_eq!(
            visible_keys(Step {
                tokens: 1,
                pos: 128
            }),
            129
        );
        assert_eq!(visible_keys(Step { tokens: 4, pos: 0 }), 10);
        assert_eq!(visible_keys(Step { tokens: 2, pos: 3 }), 4 + 5);
    }
}

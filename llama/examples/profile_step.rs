//! Device time of every node of one step, summed by op label: where a token's (or a prompt's)
//! time goes on a backend.
//! `cargo run --release -p trine-llama --example profile_step -- MODEL.gguf [BACKEND] [POS] [TOKENS]`
//! profiles a step of TOKENS tokens (default 1, a decode step) after POS tokens of context.

use std::collections::BTreeMap;
use std::sync::Arc;
use trine_backends::BackendKind;
use trine_llama::graph::Step;
use trine_llama::{Engine, EngineOptions, Model, Session};
use trine_ops::case::Rng;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args
        .get(1)
        .ok_or("usage: profile_step MODEL.gguf [BACKEND] [POS] [TOKENS]")?;
    let kind = args
        .get(2)
        .map_or(Some(BackendKind::Cpu), |b| BackendKind::parse(b));
    let kind = kind.ok_or("unknown backend")?;
    let pos: u32 = args.get(3).map_or(Ok(32), |p| p.parse())?;
    let tokens: u32 = args.get(4).map_or(Ok(1), |t| t.parse())?;
    let model = Arc::new(Model::open(path.as_ref())?);
    let backend = trine_backends::open(kind)?;
    let sizes = EngineOptions {
        context: pos + tokens,
        max_batch: pos.max(tokens),
        record: false,
        cache: None,
    };
    let mut session = Session::new(Engine::new(model.clone(), backend, sizes)?, None);
    // Random tokens, as the bench's prompts are: a mixture of experts routes a prompt of one
    // repeated token to the same few experts, whose products then read a fraction of the
    // weights a real prompt's do.
    let vocab = model.config.vocab;
    let mut rng = Rng::new(u64::from(tokens));
    let mut ids = |n: u32| -> Vec<u32> { (0..n).map(|_| rng.u32() % vocab).collect() };
    if pos > 0 {
        session.feed(&ids(pos))?;
    }
    let mut engine = session.into_engine();
    engine.prepare()?;
    let s = Step { tokens, pos };
    engine.set_ids(&ids(tokens), pos)?;
    let graph = engine.graph(s)?;
    // The whole step once untimed first: a Vulkan driver's first dispatch of a pipeline can
    // cost many times its later ones, which a step run again and again does not pay. The
    // step recomputes from its ids, so the timed pass sees the same values.
    for node in &graph {
        engine.run(node, s)?;
    }
    let mut by_op: BTreeMap<&str, (u32, f64)> = BTreeMap::new();
    let mut total = 0.0;
    for node in &graph {
        let t = engine.run_timed(node, s)?.as_secs_f64() * 1e6;
        let e = by_op.entry(node.label).or_default();
        e.0 += 1;
        e.1 += t;
        total += t;
    }
    let mut rows: Vec<_> = by_op.into_iter().collect();
    rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
    println!("{:<14} {:>6} {:>10} {:>6}", "op", "nodes", "µs", "%");
    for (op, (n, us)) in rows {
        println!("{op:<14} {n:>6} {us:>10.1} {:>6.1}", 100.0 * us / total);
    }
    println!("total {total:.1} µs for a step of {tokens} token(s) at position {pos}");
    Ok(())
}

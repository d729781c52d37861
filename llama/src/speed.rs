//! llama-bench's two measurements, with its conventions so the numbers compare directly:
//! `pp N` feeds a prompt of N random tokens as one step into an empty cache; `tg N` generates
//! N tokens one step at a time from an empty cache. Each is run once to warm up (uploads,
//! pipeline creation), then `reps` times; tokens per second is N over the wall time of a run
//! (a prompt step ends with its logits on the host, as `llama_decode` leaves them; a
//! generated token is the device's argmax, 4 bytes read back, where llama-bench's
//! `llama_decode` also copies the step's logits to the host).

use super::engine::Engine;
use super::error::ModelError;
use super::session::Session;
use serde::Serialize;
use std::time::Instant;
use trine_ops::case::Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Test {
    /// Prompt processing.
    Pp,
    /// Text generation.
    Tg,
}

#[derive(Clone, Debug, Serialize)]
pub struct Speed {
    /// `pp512`, `tg128`: llama-bench's names.
    pub test: String,
    pub tokens: u32,
    /// Tokens per second of each repetition.
    pub samples: Vec<f64>,
    pub mean_tps: f64,
    pub stddev_tps: f64,
}

/// Runs `test` over `tokens` tokens `reps` times (after one warm-up) on `engine`, each
/// after `depth` tokens already in the KV cache (llama-bench's `-d`: a prompt fed before the
/// test, not timed); the context must hold `depth + tokens` positions. Returns the engine for
/// the next test.
pub fn measure(
    engine: Engine,
    test: Test,
    (tokens, depth): (u32, u32),
    reps: usize,
) -> Result<(Speed, Engine), ModelError> {
    let vocab = engine.model().config.vocab;
    let mut rng = Rng::new(u64::from(tokens));
    let prompt: Vec<u32> = (0..tokens).map(|_| rng.u32() % vocab).collect();
    let before: Vec<u32> = (0..depth).map(|_| rng.u32() % vocab).collect();
    let mut engine = engine;
    let mut samples = Vec::with_capacity(reps);
    for rep in 0..=reps {
        let mut session = Session::new(engine, None);
        if depth > 0 {
            session.feed(&before)?;
        }
        let t = Instant::now();
        match test {
            Test::Pp => {
                session.feed(&prompt)?;
            }
            Test::Tg => {
                let mut next = prompt[0];
                for _ in 0..tokens {
                    next = session.feed_greedy(&[next])?;
                }
            }
        }
        let seconds = t.elapsed().as_secs_f64();
        if rep > 0 {
            samples.push(f64::from(tokens) / seconds);
        }
        engine = session.into_engine();
    }
    let n = samples.len().max(1) as f64;
    let mean = samples.iter().sum::<f64>() / n;
    let var = samples.iter().map(|s| (s - mean) * (s - mean)).sum::<f64>() / (n - 1.0).max(1.0);
    let name = match test {
        Test::Pp => "pp",
        Test::Tg => "tg",
    };
    let at = if depth > 0 {
        format!(" @ d{depth}")
    } else {
        String::new()
    };
    Ok((
        Speed {
            test: format!("{name}{tokens}{at}"),
            tokens,
            samples,
            mean_tps: mean,
            stddev_tps: var.sqrt(),
        },
        engine,
    ))
}

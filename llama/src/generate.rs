//! Text generation: the prompt in one step (prefill), then one token per step (decode) until
//! the token budget or an end-of-generation token, streaming text as it completes, with
//! tokens per second for each phase.

use super::error::ModelError;
use super::sampler::{Sampler, Sampling};
use super::session::{Session, StepCheck};
use serde::Serialize;
use std::time::Instant;
use trine_tokenizer::TextStream;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GenerateOptions {
    /// Tokens to generate at most.
    pub max_tokens: usize,
    pub sampling: Sampling,
    /// Stop at the first end-of-generation token (it is kept in the ids, not in the text).
    pub stop_at_end: bool,
    /// Stop after the first cross-checked step with a node over its bound.
    pub stop_on_divergence: bool,
}

/// What a run produced, as `trine generate --json` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The backend asked for, and every device that ran part of the graph.
    pub backend: String,
    pub devices: Vec<String>,
    pub checked_against: Option<String>,
    pub prompt_tokens: usize,
    pub prompt_ids: Vec<u32>,
    pub generated_tokens: Vec<u32>,
    pub text: String,
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
    pub prefill_tps: f64,
    /// Generated tokens after the first (the first comes from the prefill's logits) per
    /// second of decode steps.
    pub decode_tps: f64,
    /// One record per cross-checked step; empty without a checker.
    pub cross_check: Vec<StepCheck>,
    /// Whether any step had a node over its bound.
    pub diverged: bool,
    pub notes: Vec<String>,
}

/// Generates after `prompt` (token ids), calling `on_text` with each piece of text as it
/// becomes valid UTF-8.
pub fn generate(
    session: &mut Session,
    prompt: &[u32],
    opts: GenerateOptions,
    mut on_text: impl FnMut(&str),
) -> Result<Report, ModelError> {
    let mut sampler = Sampler::new(opts.sampling)?;
    // Greedy decoding takes the device's argmax: 4 bytes read back per step, not the logits.
    let greedy = opts.sampling.temperature == 0.0;
    let mut step = |session: &mut Session, ids: &[u32]| -> Result<u32, ModelError> {
        if greedy {
            session.feed_greedy(ids)
        } else {
            sampler.sample(&session.feed(ids)?)
        }
    };
    // The prefill's clock times the prompt's step, not the model's upload.
    session.prepare()?;
    let t0 = Instant::now();
    let mut id = step(session, prompt)?;
    let prefill = t0.elapsed().as_secs_f64();
    let mut stream = TextStream::new();
    let mut text = String::new();
    let mut ids = vec![];
    let t1 = Instant::now();
    while ids.len() < opts.max_tokens {
        ids.push(id);
        let tok = &session.engine().model().tokenizer;
        if opts.stop_at_end && tok.is_end_of_generation(id) {
            break;
        }
        let piece = stream.push(&tok.token_bytes(id)?);
        on_text(&piece);
        text.push_str(&piece);
        let diverged = session
            .checks
            .last()
            .is_some_and(|c| c.first_over_bound.is_some());
        if ids.len() == opts.max_tokens || (opts.stop_on_divergence && diverged) {
            break;
        }
        id = step(session, &[id])?;
    }
    let rest = stream.finish();
    on_text(&rest);
    text.push_str(&rest);
    let decode = t1.elapsed().as_secs_f64();
    let decode_steps = ids.len().saturating_sub(1);
    let engine = session.engine();
    let mut notes = engine.placement_notes().to_vec();
    if let Some(ch) = session.checker() {
        notes.extend(ch.placement_notes().iter().cloned());
        notes.push("timings include the cross-check, which runs both backends node by node".into());
    }
    let checks = session.checks.clone();
    Ok(Report {
        backend: engine
            .devices()
            .next()
            .map_or_else(String::new, |d| d.name().to_string()),
        devices: engine.devices().map(|d| d.info().name.clone()).collect(),
        checked_against: session
            .checker()
            .and_then(|c| c.devices().next())
            .map(|d| d.name().to_string()),
        prompt_tokens: prompt.len(),
        prompt_ids: prompt.to_vec(),
        generated_tokens: ids,
        text,
        prefill_seconds: prefill,
        decode_seconds: decode,
        prefill_tps: rate(prompt.len(), prefill),
        decode_tps: rate(decode_steps, decode),
        diverged: checks.iter().any(|c| c.first_over_bound.is_some()),
        cross_check: checks,
        notes,
    })
}

fn rate(n: usize, seconds: f64) -> f64 {
    if seconds > 0.0 {
        n as f64 / seconds
    } else {
        0.0
    }
}

//! Text generation: the prompt in one step (prefill), then one token per step (decode) until
//! the token budget or an end-of-generation token, streaming text as it completes, with
//! tokens per second for each phase, stopping at the context's end.

use super::error::ModelError;
use super::sampler::{Sampler, Sampling};
use super::session::{Session, StepCheck};
use serde::Serialize;
use std::ops::ControlFlow;
use std::time::Instant;
use thiserror::Error;
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

/// Why a run stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// `max_tokens` were generated.
    Budget,
    /// The model wrote an end-of-generation token.
    EndOfGeneration,
    /// The context is full: no position is left to feed the last token back.
    ContextFull,
    /// A cross-checked step went over a bound, with `stop_on_divergence`.
    Divergence,
    /// `on_text` asked to stop (its reader went away).
    Caller,
    /// An error ([`Interrupted`] carries it).
    Error,
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
    /// KV cache positions the executor had: the prompt and the generated tokens but the last
    /// fit in them.
    pub context: usize,
    /// How the KV cache was kept ([`crate::Engine::cache_form`]).
    pub kv_cache: String,
    pub stopped: Stop,
    /// What stopped the run, where it was an error.
    pub error: Option<String>,
    /// One record per cross-checked step; empty without a checker.
    pub cross_check: Vec<StepCheck>,
    /// Whether any step had a node over its bound.
    pub diverged: bool,
    pub notes: Vec<String>,
}

/// A run that failed, and what it had generated before the failure.
#[derive(Debug, Error)]
#[error("{error}")]
pub struct Interrupted {
    #[source]
    pub error: ModelError,
    pub report: Box<Report>,
}

/// Generates after `prompt` (token ids), calling `on_text` with each piece of text as it
/// becomes valid UTF-8.
pub fn generate(
    session: &mut Session,
    prompt: &[u32],
    opts: GenerateOptions,
    mut on_text: impl FnMut(&str),
) -> Result<Report, ModelError> {
    generate_streaming(session, prompt, opts, |piece| {
        on_text(piece);
        ControlFlow::Continue(())
    })
    .map_err(|i| i.error)
}

/// [`generate()`], where `on_text` can stop the run ([`Stop::Caller`]: no more steps, no more
/// text), and a failure keeps the report of what was generated before it.
///
/// A prompt that does not fit in the context is refused before any step
/// ([`ModelError::ContextFull`]); a run that fills the context stops there
/// ([`Stop::ContextFull`]) with everything it generated.
pub fn generate_streaming(
    session: &mut Session,
    prompt: &[u32],
    opts: GenerateOptions,
    on_text: impl FnMut(&str) -> ControlFlow<()>,
) -> Result<Report, Box<Interrupted>> {
    let mut sampler = match Sampler::new(opts.sampling) {
        Ok(s) => s,
        Err(error) => {
            let report = Run::default().report(session, prompt, Stop::Error, Some(&error));
            return Err(Box::new(Interrupted {
                error,
                report: Box::new(report),
            }));
        }
    };
    generate_with(session, &mut sampler, prompt, opts, on_text)
}

/// [`generate_streaming`] with the caller's sampler in place of one made from
/// `opts.sampling`, so that a conversation keeps one: its generator goes on drawing, and its
/// penalties' window holds the context of the earlier turns (the caller empties it with
/// [`Sampler::forget`] where the context is rebuilt). `prompt` goes after the tokens the
/// session holds already; the sampler takes it and every generated token into its window.
pub fn generate_with(
    session: &mut Session,
    sampler: &mut Sampler,
    prompt: &[u32],
    opts: GenerateOptions,
    on_text: impl FnMut(&str) -> ControlFlow<()>,
) -> Result<Report, Box<Interrupted>> {
    let mut run = Run::default();
    let outcome = run.steps(session, sampler, prompt, opts, on_text);
    let (stopped, error) = match outcome {
        Ok(stop) => (stop, None),
        Err(e) => (Stop::Error, Some(e)),
    };
    let report = run.report(session, prompt, stopped, error.as_ref());
    match error {
        None => Ok(report),
        Some(error) => Err(Box::new(Interrupted {
            error,
            report: Box::new(report),
        })),
    }
}

/// What a run has produced so far.
#[derive(Default)]
struct Run {
    ids: Vec<u32>,
    text: String,
    prefill: f64,
    decode_start: Option<Instant>,
}

impl Run {
    fn steps(
        &mut self,
        session: &mut Session,
        sampler: &mut Sampler,
        prompt: &[u32],
        opts: GenerateOptions,
        mut on_text: impl FnMut(&str) -> ControlFlow<()>,
    ) -> Result<Stop, ModelError> {
        let context = session.engine().options().context as usize;
        let at = session.position() as usize;
        // Refused before the prefill, which would otherwise run up to the context's end first.
        if prompt.len() > context.saturating_sub(at) {
            return Err(ModelError::ContextFull {
                needed: at + prompt.len(),
                max: context,
            });
        }
        for &id in prompt {
            sampler.accept(id);
        }
        // Greedy decoding without penalties takes the device's argmax: 4 bytes read back per
        // step, not the logits.
        let greedy = sampler.config().is_plain_greedy();
        let mut step = |session: &mut Session, ids: &[u32]| -> Result<u32, ModelError> {
            let id = if greedy {
                session.feed_greedy(ids)?
            } else {
                sampler.sample(&session.feed(ids)?)?
            };
            sampler.accept(id);
            Ok(id)
        };
        // The prefill's clock times the prompt's step, not the model's upload.
        session.prepare()?;
        let t0 = Instant::now();
        let mut id = step(session, prompt)?;
        self.prefill = t0.elapsed().as_secs_f64();
        self.decode_start = Some(Instant::now());
        let mut stream = TextStream::new();
        let mut stop = Stop::Budget;
        while self.ids.len() < opts.max_tokens {
            self.ids.push(id);
            let tok = &session.engine().model().tokenizer;
            if opts.stop_at_end && tok.is_end_of_generation(id) {
                stop = Stop::EndOfGeneration;
                break;
            }
            let piece = stream.push(&tok.token_bytes(id)?);
            self.text.push_str(&piece);
            if on_text(&piece).is_break() {
                return Ok(Stop::Caller);
            }
            let diverged = session
                .checks
                .last()
                .is_some_and(|c| c.first_over_bound.is_some());
            if self.ids.len() == opts.max_tokens {
                break;
            }
            if opts.stop_on_divergence && diverged {
                stop = Stop::Divergence;
                break;
            }
            if session.position() as usize >= context {
                stop = Stop::ContextFull;
                break;
            }
            id = step(session, &[id])?;
        }
        let rest = stream.finish();
        self.text.push_str(&rest);
        if on_text(&rest).is_break() {
            return Ok(Stop::Caller);
        }
        Ok(stop)
    }

    fn report(
        self,
        session: &Session,
        prompt: &[u32],
        stopped: Stop,
        error: Option<&ModelError>,
    ) -> Report {
        let decode = self.decode_start.map_or(0.0, |t| t.elapsed().as_secs_f64());
        let decode_steps = self.ids.len().saturating_sub(1);
        let engine = session.engine();
        let mut notes = engine.placement_notes().to_vec();
        if let Some(ch) = session.checker() {
            notes.extend(ch.placement_notes().iter().cloned());
            notes.push(
                "timings include the cross-check, which runs both backends node by node".into(),
            );
        }
        let checks = session.checks.clone();
        Report {
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
            generated_tokens: self.ids,
            text: self.text,
            prefill_seconds: self.prefill,
            decode_seconds: decode,
            prefill_tps: rate(prompt.len(), self.prefill),
            decode_tps: rate(decode_steps, decode),
            context: engine.options().context as usize,
            kv_cache: engine.cache_form().to_string(),
            stopped,
            error: error.map(|e| e.to_string()),
            diverged: checks.iter().any(|c| c.first_over_bound.is_some()),
            cross_check: checks,
            notes,
        }
    }
}

fn rate(n: usize, seconds: f64) -> f64 {
    if seconds > 0.0 {
        n as f64 / seconds
    } else {
        0.0
    }
}

//! `trine chat`: a conversation with a model through its chat template. Each line of stdin is
//! the user's next message; the reply streams to stdout, followed by a newline, and a line on
//! stderr says how many tokens the turn prefilled, how many the KV cache held already, and
//! why the reply ended. The conversation ends at the end of stdin.

use super::generate::{announce, backends, open_model, output_failed, GenerateError};
use super::out;
use super::sampling::SamplingArgs;
use super::template::{chat_template, TemplateError};
use super::Failure;
use clap::Args as ClapArgs;
use std::io::{self, BufRead, IsTerminal};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use thiserror::Error;
use trine::run::{place, session_on, Choice, RunError};
use trine_backends::probe::{timeout_from_env, ProbeError};
use trine_llama::{Chat, EngineOptions, GenerateOptions, ModelError, Sampler, Stop, Turn};
use trine_ops::kv_type::KvType;

#[derive(ClapArgs)]
pub struct Args {
    /// A Llama-family GGUF file with a chat template (or give one with --chat-template).
    #[arg(long)]
    model: PathBuf,
    /// A system message that opens the conversation.
    #[arg(long, allow_hyphen_values = true, value_name = "TEXT")]
    system: Option<String>,
    /// Format with this Jinja chat template instead of the model's own.
    #[arg(long, value_name = "FILE")]
    chat_template: Option<PathBuf>,
    /// Tokens per reply at most (1 or more); a reply ends earlier at the model's end of turn.
    #[arg(short = 'n', long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    n: u32,
    /// KV cache positions the whole conversation may fill; 0 is the model's trained context.
    #[arg(short = 'c', long, default_value_t = 4096)]
    ctx_size: u32,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Where to run: auto (the fastest backend that works here) or one backend.
    #[arg(long, default_value = "auto", value_parser = backends(true))]
    backend: String,
    /// The KV cache's type: f32, f16 or q8_0. Default: the device's.
    #[arg(long)]
    cache_type: Option<KvType>,
}

#[derive(Debug, Error)]
pub enum ChatError {
    #[error("cannot find this program's own path to probe with: {0}")]
    OwnPath(io::Error),
    #[error(transparent)]
    ProbeTimeout(#[from] ProbeError),
    /// Boxed: generate's error is large, and this one is every result of the command.
    #[error(transparent)]
    Open(Box<GenerateError>),
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error(transparent)]
    Sampling(ModelError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("reading stdin: {0}")]
    Input(io::Error),
    #[error(
        "turn {turn}: the conversation needs {needed} KV cache positions, more than the {max} \
         it has: start a new chat, or give a larger --ctx-size (the model's trained context \
         is {trained})"
    )]
    ContextFull {
        turn: usize,
        needed: usize,
        max: usize,
        trained: u32,
    },
    #[error("turn {turn}: {source}")]
    Turn { turn: usize, source: ModelError },
}

impl From<GenerateError> for ChatError {
    fn from(e: GenerateError) -> ChatError {
        ChatError::Open(Box::new(e))
    }
}

impl Failure for ChatError {
    fn status(&self) -> u8 {
        match self {
            ChatError::ProbeTimeout(_) | ChatError::Template(_) | ChatError::Sampling(_) => 2,
            ChatError::Open(e) => e.status(),
            _ => 1,
        }
    }
}

pub fn run(a: Args) -> Result<ExitCode, ChatError> {
    let exe = std::env::current_exe().map_err(ChatError::OwnPath)?;
    let timeout = timeout_from_env()?;
    let choice = Choice::parse(&a.backend)?;
    let (sampling, seed_drawn) = a.sampling.sampling();
    let sampler = Sampler::new(sampling).map_err(ChatError::Sampling)?;
    let model = Arc::new(open_model(&a.model)?);
    let template = chat_template(&model, &a.model, a.chat_template.as_deref())?;
    let trained = model.config.context_length;
    let context = match a.ctx_size {
        0 => trained,
        n => n.min(trained),
    };

    let placed = place(&exe, choice, timeout)?;
    announce(&placed, choice);
    if seed_drawn {
        eprintln!(
            "seed {0} (drawn for this run: --seed {0} repeats it)",
            sampling.seed
        );
    }
    let sizes = EngineOptions {
        context,
        max_batch: context.min(512),
        record: true,
        cache: a.cache_type,
    };
    let mut session = session_on(&model, placed.backend, None, sizes)?;
    let mut chat = Chat::new(template, a.system.as_deref(), sampler);
    let opts = GenerateOptions {
        max_tokens: a.n as usize,
        sampling,
        stop_at_end: true,
        stop_on_divergence: false,
    };

    let stdin = io::stdin();
    let interactive = stdin.is_terminal();
    let mut lines = stdin.lock().lines();
    let mut turn = 0;
    loop {
        if interactive {
            eprint!("> ");
        }
        let Some(line) = lines.next() else {
            return Ok(ExitCode::SUCCESS);
        };
        let line = line.map_err(ChatError::Input)?;
        if line.trim().is_empty() {
            continue;
        }
        turn += 1;
        let mut write_failed = None;
        let result = chat.turn(&mut session, &line, opts, |piece| match out::write(piece) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                write_failed = Some(e);
                ControlFlow::Break(())
            }
        });
        if let Some(e) = write_failed {
            return output_failed(e).map_err(ChatError::from);
        }
        let t = result.map_err(|e| match e {
            ModelError::ContextFull { needed, max } => ChatError::ContextFull {
                turn,
                needed,
                max,
                trained,
            },
            source => ChatError::Turn { turn, source },
        })?;
        if let Err(e) = out::write("\n") {
            return output_failed(e).map_err(ChatError::from);
        }
        eprintln!("{}", summary(turn, &t, opts.max_tokens));
    }
}

/// One line on what a turn cost and why its reply ended.
fn summary(turn: usize, t: &Turn, max_tokens: usize) -> String {
    let r = &t.report;
    let why = match r.stopped {
        Stop::EndOfGeneration => "the model ended its turn".to_string(),
        Stop::Budget => format!("cut at -n {max_tokens} tokens"),
        Stop::ContextFull => "the context is full".to_string(),
        Stop::Divergence | Stop::Caller | Stop::Error => format!("{:?}", r.stopped),
    };
    format!(
        "[turn {turn}: {} tokens prefilled ({} held in the KV cache already), {} generated at \
         {:.1} tokens/s; {why}]",
        r.prompt_tokens,
        t.reused,
        r.generated_tokens.len(),
        r.decode_tps
    )
}

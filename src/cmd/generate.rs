//! `trine generate`: text from a GGUF model on a backend, optionally cross-checked.
//!
//! Everything that can be refused is refused before any work: arguments, the probe timeout,
//! the model file, a prompt longer than the model's context. The backend is then chosen and
//! named on stderr with the reason, with a warning for a path that is much slower than it
//! needs to be, before the first step.

use super::out;
use super::sampling::SamplingArgs;
use super::template::{chat_template, TemplateError};
use super::Failure;
use clap::builder::PossibleValuesParser;
use clap::Args as ClapArgs;
use serde_json::json;
use std::io;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use thiserror::Error;
use trine::run::{open_probed, place, session_on, Choice, Placed, RunError};
use trine_backends::cache;
use trine_backends::cpu::{INTERPRETED, INTERPRETER_DRIVER};
use trine_backends::probe::{timeout_from_env, ProbeError};
use trine_backends::{BackendKind, DeviceInfo, Tier};
use trine_llama::{
    generate_streaming, prompt_ids, EngineOptions, GenerateOptions, Interrupted, Model, ModelError,
    Report, Sampling, Stop, NEAR_TIE,
};
use trine_ops::kv_type::KvType;
use trine_tokenizer::{Message, TokenizerError};

#[derive(ClapArgs)]
pub struct Args {
    /// A Llama-family GGUF file.
    #[arg(long)]
    model: PathBuf,
    /// The text to continue. Special-token text in it (e.g. `<|im_start|>`) is read as
    /// that token unless --no-special; it may begin with '-'.
    #[arg(long, allow_hyphen_values = true)]
    prompt: String,
    /// Tokens to generate at most (1 or more); fewer where the model writes an
    /// end-of-text token or its context is full first.
    #[arg(short = 'n', long, default_value_t = 64, allow_negative_numbers = true, value_parser = tokens)]
    n: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Where to run: auto (the fastest backend that works here: a GPU, else the cpu backend)
    /// or one backend.
    #[arg(long, default_value = "auto", value_parser = backends(true))]
    backend: String,
    /// Run this backend in lock-step, each node on the same inputs, and report per step the
    /// first op whose output differs beyond its bound; and, from a run of its own fed the
    /// same tokens, where its greedy choice first differs. Another backend than the one that
    /// runs.
    #[arg(long, value_parser = backends(false))]
    cross_check: Option<String>,
    /// Stop the run at the first step that diverges.
    #[arg(long)]
    stop_on_divergence: bool,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    json: bool,
    /// Treat special-token text in the prompt (e.g. `<|im_start|>`) as plain text.
    #[arg(long, conflicts_with = "chat")]
    no_special: bool,
    /// Send the prompt as one user message through the model's chat template, with the
    /// assistant's turn opened after it.
    #[arg(long)]
    chat: bool,
    /// With --chat: a system message before the prompt.
    #[arg(
        long,
        requires = "chat",
        allow_hyphen_values = true,
        value_name = "TEXT"
    )]
    system: Option<String>,
    /// With --chat: format with this Jinja chat template instead of the model's own.
    #[arg(long, requires = "chat", value_name = "FILE")]
    chat_template: Option<PathBuf>,
    /// The KV cache's type: f32, f16 or q8_0 (llama.cpp's `-ctk`/`-ctv`; q8_0 takes 56% of
    /// f16's memory). Default: the device's, f16 on GPUs, f32 on CPUs.
    #[arg(long)]
    cache_type: Option<KvType>,
}

/// The backends' names, in placement order, after `auto` where it is allowed.
pub fn backends(auto: bool) -> PossibleValuesParser {
    let names = BackendKind::ALL.iter().map(|k| k.name());
    PossibleValuesParser::new(auto.then_some("auto").into_iter().chain(names))
}

fn tokens(s: &str) -> Result<usize, String> {
    match s.parse::<i64>() {
        Ok(n) if n >= 1 => usize::try_from(n).map_err(|e| e.to_string()),
        Ok(_) => Err("generate at least 1 token".into()),
        Err(e) => Err(e.to_string()),
    }
}

#[derive(Debug, Error)]
pub enum GenerateError {
    #[error("cannot find this program's own path to probe with: {0}")]
    OwnPath(io::Error),
    #[error(transparent)]
    ProbeTimeout(#[from] ProbeError),
    #[error("--model {}: is a directory, not a GGUF file", .0.display())]
    ModelIsDirectory(PathBuf),
    #[error("--model {}: {source}", .path.display())]
    ModelFile { path: PathBuf, source: io::Error },
    #[error("--model {}: {source}", .path.display())]
    Model { path: PathBuf, source: ModelError },
    #[error("the prompt cannot be tokenized: {0}")]
    Prompt(ModelError),
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error(
        "the prompt is {prompt} tokens, more than the model's context of {context}: shorten it \
         (nothing was run)"
    )]
    PromptTooLong { prompt: usize, context: usize },
    #[error(
        "--cross-check {kind} would check {kind} against itself ({how}): name another backend, \
         or leave --cross-check out"
    )]
    CheckAgainstItself {
        kind: BackendKind,
        how: &'static str,
    },
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("writing to stdout: {0}")]
    Output(io::Error),
    #[error(transparent)]
    Interrupted(Box<Interrupted>),
}

impl Failure for GenerateError {
    fn status(&self) -> u8 {
        match self {
            GenerateError::ProbeTimeout(_)
            | GenerateError::ModelIsDirectory(_)
            | GenerateError::PromptTooLong { .. }
            | GenerateError::Template(_)
            | GenerateError::CheckAgainstItself { .. } => 2,
            _ => 1,
        }
    }
}

/// What the user asked for, checked.
struct Plan {
    choice: Choice,
    checker: Option<BackendKind>,
    sampling: Sampling,
    /// Whether the seed was drawn here (and must be printed to repeat the run).
    seed_drawn: bool,
}

fn plan(a: &Args) -> Result<Plan, GenerateError> {
    let parse = |s: &str| Choice::parse(s).map_err(GenerateError::Run);
    let choice = parse(&a.backend)?;
    let checker = match a.cross_check.as_deref().map(parse).transpose()? {
        Some(Choice::Kind(k)) => Some(k),
        // The parser offers no `auto` for --cross-check.
        Some(Choice::Auto) | None => None,
    };
    if let (Choice::Kind(k), Some(c)) = (choice, checker) {
        if k == c {
            return Err(GenerateError::CheckAgainstItself {
                kind: k,
                how: "--backend names it too",
            });
        }
    }
    let (sampling, seed_drawn) = a.sampling.sampling();
    Ok(Plan {
        choice,
        checker,
        sampling,
        seed_drawn,
    })
}

pub fn open_model(path: &Path) -> Result<Model, GenerateError> {
    // Mapping a directory fails with ENODEV, whose message ("No such device") names neither.
    if path.is_dir() {
        return Err(GenerateError::ModelIsDirectory(path.to_path_buf()));
    }
    Model::open(path).map_err(|e| match e {
        // The file's own error names the path already.
        ModelError::Gguf(trine_gguf::GgufError::Io { source, .. }) => GenerateError::ModelFile {
            path: path.to_path_buf(),
            source,
        },
        source => GenerateError::Model {
            path: path.to_path_buf(),
            source,
        },
    })
}

/// Tokens that can follow a prompt of `prompt` tokens in a context of `context` positions:
/// every position after the prompt's, and one more, drawn from the last position's logits and
/// never fed back.
fn room(prompt: usize, context: usize) -> usize {
    context.saturating_sub(prompt) + 1
}

pub fn run(a: Args) -> Result<ExitCode, GenerateError> {
    let exe = std::env::current_exe().map_err(GenerateError::OwnPath)?;
    let timeout = timeout_from_env()?;
    let plan = plan(&a)?;
    let model = Arc::new(open_model(&a.model)?);
    let prompt = if a.chat {
        let template = chat_template(&model, &a.model, a.chat_template.as_deref())?;
        let mut messages: Vec<Message> =
            a.system.iter().map(|s| Message::new("system", s)).collect();
        messages.push(Message::new("user", &a.prompt));
        prompt_ids(&model.tokenizer, &template, &messages, true).map_err(|e| match e {
            ModelError::Tokenizer(t @ TokenizerError::ChatTemplate { .. }) => {
                GenerateError::Template(t.into())
            }
            e => GenerateError::Prompt(e),
        })?
    } else {
        model
            .tokenizer
            .encode(&a.prompt, true, !a.no_special)
            .map_err(|e| GenerateError::Prompt(e.into()))?
    };
    let context = model.config.context_length as usize;
    if prompt.len() > context {
        return Err(GenerateError::PromptTooLong {
            prompt: prompt.len(),
            context,
        });
    }
    let fits = room(prompt.len(), context);
    if a.n > fits {
        eprintln!(
            "note: the prompt takes {} of the model's {context} context positions: at most \
             {fits} tokens can follow, not {}",
            prompt.len(),
            a.n
        );
    }

    let placed = place(&exe, plan.choice, timeout)?;
    announce(&placed, plan.choice);
    if plan.checker == Some(placed.kind) {
        return Err(GenerateError::CheckAgainstItself {
            kind: placed.kind,
            how: "auto chose it to run",
        });
    }
    let checker = match plan.checker {
        Some(k) => Some(open_probed(&exe, k, timeout)?),
        None => None,
    };
    for (kind, b) in checker.iter().zip(plan.checker).map(|(b, k)| (k, b)) {
        for w in warnings(kind, b.info()) {
            eprintln!("warning: {w}");
        }
    }
    if plan.seed_drawn {
        eprintln!(
            "seed {0} (drawn for this run: --seed {0} repeats it)",
            plan.sampling.seed
        );
    }

    let opts = GenerateOptions {
        max_tokens: a.n,
        sampling: plan.sampling,
        stop_at_end: true,
        stop_on_divergence: a.stop_on_divergence,
    };
    let sizes = EngineOptions {
        cache: a.cache_type,
        ..EngineOptions::for_generation(&model.config, prompt.len(), a.n.min(fits))
    };
    let mut session = session_on(&model, placed.backend, checker, sizes)?;
    let json = a.json;
    let mut write_failed = None;
    let result = generate_streaming(&mut session, &prompt, opts, |piece| {
        if json {
            return ControlFlow::Continue(());
        }
        match out::write(piece) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                write_failed = Some(e);
                ControlFlow::Break(())
            }
        }
    });
    if let Some(e) = write_failed {
        return output_failed(e);
    }
    let (report, failure) = match result {
        Ok(r) => (r, None),
        Err(i) => ((*i.report).clone(), Some(i)),
    };
    let printed = if json {
        let mut v = serde_json::to_value(&report).unwrap_or_else(|e| json!(e.to_string()));
        if plan.sampling.temperature > 0.0 {
            v["seed"] = json!(plan.sampling.seed);
        }
        let text = serde_json::to_string_pretty(&v).unwrap_or_else(|e| e.to_string());
        out::write(&format!("{text}\n"))
    } else {
        out::write("\n")
    };
    if let Err(e) = printed {
        return output_failed(e);
    }
    if !json {
        let piece = |id: u32| {
            model.tokenizer.token_bytes(id).map_or_else(
                |_| format!("id {id}"),
                |b| format!("{:?}", String::from_utf8_lossy(&b)),
            )
        };
        eprint!("{}", summary(&report, &piece));
    }
    if let Some(i) = failure {
        return Err(GenerateError::Interrupted(i));
    }
    Ok(if report.diverged {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// Names the backend chosen and why, and why each other one was passed over, on stderr.
pub fn announce(placed: &Placed, choice: Choice) {
    eprintln!(
        "backend {} on {} ({})",
        placed.kind,
        placed.backend.info().name,
        placed.why
    );
    for line in &placed.others {
        eprintln!("  passed over {line}");
    }
    let info = placed.backend.info();
    if choice != Choice::Auto && Tier::of(placed.kind, info) == Tier::EmulatedDevice {
        eprintln!(
            "note: {} is the CPU behind a GPU driver (a software renderer): the cpu backend's \
             compiled kernels are faster on the same cores (--backend cpu, or auto)",
            info.name
        );
    }
    for w in warnings(placed.kind, info) {
        eprintln!("warning: {w}");
    }
}

/// A reader that went away ends the run quietly; any other failure to write is an error.
pub fn output_failed(e: io::Error) -> Result<ExitCode, GenerateError> {
    if out::closed(&e) {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(GenerateError::Output(e))
    }
}

/// What makes `kind` on `info` much slower than it needs to be, in words a user can act on.
fn warnings(kind: BackendKind, info: &DeviceInfo) -> Vec<String> {
    let mut w = vec![];
    let interpreted = kind == BackendKind::Cpu && info.driver == INTERPRETER_DRIVER;
    if interpreted {
        let why = info
            .notes
            .iter()
            .find_map(|n| n.strip_prefix(INTERPRETED))
            .map_or_else(String::new, |why| format!(":{why}"));
        w.push(format!(
            "the cpu backend interprets its kernels, hundreds of times slower than compiling \
             them{why}; install a C compiler (gcc or clang), or set TRINE_CC to one"
        ));
    }
    let compiles = match kind {
        BackendKind::Cpu => !interpreted,
        BackendKind::Hip | BackendKind::Cuda => true,
        BackendKind::Vulkan | BackendKind::Wgpu => false,
    };
    if compiles {
        if let Err(e) = cache::writable_dir() {
            w.push(format!(
                "{kind}: {e}: every run compiles its kernels again; {}",
                cache::Unusable::ADVICE
            ));
        }
    }
    w
}

fn summary(r: &Report, piece: &dyn Fn(u32) -> String) -> String {
    let mut s = format!(
        "backend {} ({}), {} KV cache\nprefill: {} tokens in {:.3} s, {:.1} tokens/s\ndecode: {} tokens in {:.3} s, {:.1} tokens/s\n",
        r.backend,
        r.devices.join(", "),
        r.kv_cache,
        r.prompt_tokens,
        r.prefill_seconds,
        r.prefill_tps,
        r.generated_tokens.len(),
        r.decode_seconds,
        r.decode_tps
    );
    if r.stopped == Stop::ContextFull {
        s += &format!(
            "stopped at the end of the context: its {} positions hold the prompt and every \
             generated token but the last\n",
            r.context
        );
    }
    if let Some(other) = &r.checked_against {
        s += &cross_check(r, other, piece);
    }
    for n in &r.notes {
        s += &format!("note: {n}\n");
    }
    s
}

/// The cross-check's verdict: the nodes' differences against their bounds, then whether the
/// two backends' greedy choices ever parted, which nodes within bounds still allow at a near
/// tie, and from where the text is no longer what a run on the checker would write.
fn cross_check(r: &Report, other: &str, piece: &dyn Fn(u32) -> String) -> String {
    let mut s = String::new();
    let over: Vec<_> = r
        .cross_check
        .iter()
        .filter_map(|c| c.first_over_bound.as_ref().map(|d| (c.step, d)))
        .collect();
    let worst = r
        .cross_check
        .iter()
        .filter_map(|c| c.worst.nmse)
        .fold(0.0f64, f64::max);
    if over.is_empty() {
        s += &format!(
            "cross-check against {other}: every node of {} steps within its bound (worst node \
             NMSE {worst:.2e})\n",
            r.cross_check.len()
        );
    } else {
        s += &format!(
            "cross-check against {other}: {} steps diverge\n",
            over.len()
        );
        for (step, d) in over {
            let nmse = d
                .nmse
                .map_or_else(|| "NaN/Inf pattern".into(), |e| format!("{e:.2e}"));
            let layer = d.layer.map_or_else(String::new, |l| format!(" layer {l}"));
            s += &format!(
                "  step {step}: {}{layer} NMSE {nmse} > {:.0e}\n",
                d.op, d.bound
            );
        }
    }
    let parted: Vec<_> = r
        .cross_check
        .iter()
        .filter_map(|c| c.choices.filter(|x| x.differ()).map(|x| (c.step, x)))
        .collect();
    let compared = r.cross_check.iter().filter(|c| c.choices.is_some()).count();
    let Some(&(step, first)) = parted.first() else {
        if compared > 0 {
            s += &format!(
                "  and both backends' greedy choice is the same at all {compared} steps\n"
            );
        }
        return s;
    };
    let main = &r.backend;
    let gap = first.checker_gap;
    let tie = if gap < NEAR_TIE {
        format!("a near tie: {other}'s top-2 logit gap there is {gap:.3}, under {NEAR_TIE}")
    } else {
        format!("not a near tie: {other}'s top-2 logit gap there is {gap:.3}")
    };
    s += &format!(
        "  but the backends parted at generated token {}: {main} chose {}, {other} would \
         choose {} ({tie}); from there on the text is not what a {other} run writes ({} of \
         {compared} steps chose differently)\n",
        step + 1,
        piece(first.main),
        piece(first.checker),
        parted.len()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use trine_llama::{Choices, NodeDiff, StepCheck};

    fn report(choices: &[(u32, u32, f32)]) -> Report {
        let check = |step: usize, &(main, checker, gap): &(u32, u32, f32)| StepCheck {
            step,
            tokens: 1,
            worst: NodeDiff {
                op: "matvec",
                layer: Some(3),
                nmse: Some(1e-12),
                bound: 2.9e-10,
                reason: None,
            },
            first_over_bound: None,
            choices: Some(Choices {
                main,
                checker,
                main_gap: gap,
                checker_gap: gap,
            }),
        };
        Report {
            backend: "vulkan".into(),
            devices: vec!["llvmpipe".into()],
            checked_against: Some("cpu".into()),
            prompt_tokens: 3,
            prompt_ids: vec![1, 2, 3],
            generated_tokens: choices.iter().map(|c| c.0).collect(),
            text: String::new(),
            prefill_seconds: 0.1,
            decode_seconds: 0.1,
            prefill_tps: 30.0,
            decode_tps: 30.0,
            context: 64,
            kv_cache: "f32".into(),
            stopped: Stop::Budget,
            error: None,
            cross_check: choices
                .iter()
                .enumerate()
                .map(|(i, c)| check(i, c))
                .collect(),
            diverged: false,
            notes: vec![],
        }
    }

    fn piece(id: u32) -> String {
        format!("{:?}", format!("t{id}"))
    }

    #[test]
    fn a_cross_check_says_where_the_greedy_choices_part_and_how_close_it_was() {
        let r = report(&[(5, 5, 2.0), (6, 6, 1.0), (7, 8, 0.031), (9, 9, 1.5)]);
        let s = summary(&r, &piece);
        assert!(s.contains("every node of 4 steps within its bound"), "{s}");
        assert!(
            s.contains(
                "parted at generated token 3: vulkan chose \"t7\", cpu would choose \"t8\" \
                 (a near tie: cpu's top-2 logit gap there is 0.031, under 0.5)"
            ),
            "{s}"
        );
        assert!(s.contains("not what a cpu run writes (1 of 4 steps"), "{s}");
        assert!(!s.contains("agree"), "{s}");

        let clear = summary(&report(&[(5, 6, 2.5)]), &piece);
        assert!(
            clear.contains("not a near tie: cpu's top-2 logit gap there is 2.500"),
            "{clear}"
        );

        let same = summary(&report(&[(5, 5, 2.0), (6, 6, 0.1)]), &piece);
        assert!(
            same.contains("greedy choice is the same at all 2 steps"),
            "{same}"
        );
    }

    #[test]
    fn a_run_that_fills_the_context_says_so() {
        let mut r = report(&[]);
        r.checked_against = None;
        r.stopped = Stop::ContextFull;
        let s = summary(&r, &piece);
        assert!(
            s.contains("stopped at the end of the context: its 64 positions"),
            "{s}"
        );
    }

    #[test]
    fn what_follows_a_prompt_is_what_the_context_leaves_and_one_more() {
        assert_eq!(room(10, 64), 55);
        assert_eq!(room(64, 64), 1);
    }
}

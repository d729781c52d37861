//! The `trine` command as a new user meets it: the binary itself, run on a tiny synthetic
//! model (random weights, SmolLM2's layout and byte-level tokenizer, a short context), so that
//! each run takes moments on the CPU backend.
//!
//! What is checked: a reader that goes away ends a run quietly and at once; `auto` prefers the
//! CPU backend to a GPU driver running on the CPU and says what it chose and why before the
//! first token; a prompt longer than the context is refused before any work and a run that
//! fills the context stops there with what it generated; slow paths are announced at the
//! start; arguments are checked with messages that name the value; a cross-check does not
//! check a backend against itself; `TRINE_PROBE_TIMEOUT` is read alike everywhere; `doctor`
//! says "no limit" where there is none.

use serde_json::Value;
use std::borrow::BorrowMut;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use trine_gguf::assets;
use trine_gguf::synth::{synth_llama, SynthShape};
use trine_gguf::Value as Meta;

/// The tiny model's context.
const CONTEXT: usize = 32;

/// A directory of this test's own under the target's scratch directory.
fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("cli")
        .join(test);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The tiny model with a context of [`CONTEXT`] positions, written for `test`.
fn tiny_model(test: &str) -> PathBuf {
    tiny_model_with_context(test, CONTEXT)
}

fn tiny_model_with_context(test: &str, context: usize) -> PathBuf {
    let mut w = synth_llama(SynthShape::TINY, 7).unwrap();
    w.add("llama.context_length", Meta::U32(context as u32))
        .unwrap();
    let path = scratch(test).join("tiny.gguf");
    w.write(&path).unwrap();
    path
}

fn trine() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_trine"));
    c.stdin(Stdio::null());
    c
}

/// `trine generate` on `model` with `args`, on the CPU backend unless `args` name another.
fn generate(model: &Path, args: &[&str]) -> Command {
    let mut c = trine();
    c.arg("generate").arg("--model").arg(model).args(args);
    if !args.contains(&"--backend") {
        c.args(["--backend", "cpu"]);
    }
    c
}

fn run(mut c: impl BorrowMut<Command>) -> Output {
    c.borrow_mut().output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs `c` with stderr into the same pipe as stdout, so that their order shows.
fn interleaved(c: &Command) -> (Option<i32>, String) {
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg("exec \"$0\" \"$@\" 2>&1")
        .arg(c.get_program())
        .args(c.get_args())
        .stdin(Stdio::null());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    let o = sh.output().unwrap();
    (o.status.code(), stdout(&o))
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout {}\nstderr {}", stdout(o), stderr(o)))
}

fn required(backend: &str) -> bool {
    std::env::var("TRINE_REQUIRE_BACKENDS").is_ok_and(|v| v.split(',').any(|b| b.trim() == backend))
}

// 1. A reader that goes away.

/// A reader that has already gone: the first write fails, the run ends there, quietly,
/// without generating the rest or printing its statistics.
#[test]
fn a_closed_pipe_ends_generate_quietly_at_the_first_token() {
    let model = tiny_model("closed_pipe");
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = generate(&model, &["--prompt", "1, 2, 3,", "-n", "20"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
        .wait_with_output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("decode:"), "it generated on: {err}");
}

/// `| head -c 1`: the reader takes some text, then goes while the run has far to go; the run
/// ends there, without its statistics.
#[test]
fn a_reader_that_leaves_mid_run_ends_generate_quietly() {
    let model = tiny_model_with_context("head", 4096);
    let mut child = generate(&model, &["--prompt", "1, 2, 3,", "-n", "4000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    out.read_exact(&mut first).unwrap();
    drop(out);
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("decode:"), "it generated on: {err}");
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_is_one_line_of_error_not_a_panic() {
    let model = tiny_model("dev_full");
    let full = || std::fs::File::create("/dev/full").unwrap();
    let json = generate(&model, &["--prompt", "1, 2", "-n", "2", "--json"]);
    let text = generate(&model, &["--prompt", "1, 2", "-n", "2"]);
    let mut doctor = trine();
    doctor.arg("doctor");
    for mut c in [json, text, doctor] {
        let o = c.stdout(full()).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{c:?}: {err}");
        assert!(
            err.contains("error: writing to stdout: No space left on device"),
            "{c:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{c:?}: {err}");
    }
}

#[test]
fn doctor_into_a_closed_pipe_ends_quietly() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = trine().arg("doctor").stdout(writer).output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

// 2. Placement.

/// Without a GPU, `auto` runs on the CPU backend, not on a GPU driver that runs on the CPU
/// (Mesa's lavapipe, where it is installed), and says so first, with every other backend's
/// reason.
#[test]
fn auto_prefers_the_cpu_backend_to_a_gpu_driver_on_the_cpu_and_says_why_first() {
    let model = tiny_model("auto");
    let doctor = run(trine().args(["doctor", "--json"]));
    let probes = json(&doctor);
    let works = |p: &&Value| p["status"] == "ok";
    let ok: Vec<&Value> = probes.as_array().unwrap().iter().filter(works).collect();
    let gpu = ok
        .iter()
        .any(|p| p["backend"] != "cpu" && p["info"]["device_type"] != "cpu");
    let emulated: Vec<&str> = ok
        .iter()
        .filter(|p| p["backend"] != "cpu" && p["info"]["device_type"] == "cpu")
        .map(|p| p["backend"].as_str().unwrap())
        .collect();

    let (code, all) = interleaved(&generate(
        &model,
        &["--prompt", "1, 2, 3,", "-n", "2", "--backend", "auto"],
    ));
    assert_eq!(code, Some(0), "{all}");
    let first = all.lines().next().unwrap_or_default();
    assert!(first.starts_with("backend "), "not said first: {all}");
    assert!(first.contains("(auto: "), "{all}");
    if gpu {
        println!("a GPU works here: {first}");
        return;
    }
    assert!(first.starts_with("backend cpu on "), "{all}");
    assert!(
        first.contains("the cpu backend's compiled kernels are faster than a GPU driver"),
        "{all}"
    );
    for kind in emulated {
        assert!(
            all.contains(&format!("  passed over {kind} (")),
            "{kind} is not accounted for: {all}"
        );
        assert!(
            all.contains("its device is the CPU behind a GPU driver"),
            "{all}"
        );
    }
}

// 3. The context.

#[test]
fn a_prompt_longer_than_the_context_is_refused_before_any_work() {
    let model = tiny_model("long_prompt");
    let prompt = "x".repeat(CONTEXT + 8);
    let t = Instant::now();
    let o = run(
        generate(&model, &["--prompt", &prompt, "--backend", "auto"])
            .env("TRINE_PROBE_TIMEOUT", "30"),
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "error: the prompt is {} tokens, more than the model's context of {CONTEXT}",
            CONTEXT + 8
        )),
        "{err}"
    );
    // Refused before placement probed anything.
    assert!(!err.contains("backend "), "{err}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

/// Asked for far more than fits: said at the start, the run stops at the context's end, and
/// the JSON holds everything generated.
#[test]
fn a_run_past_the_context_stops_at_its_end_with_what_it_generated() {
    let model = tiny_model("context_end");
    let prompt = "0123456789";
    let fits = CONTEXT - prompt.len() + 1;
    let o = run(generate(
        &model,
        &["--prompt", prompt, "-n", "100000", "--json"],
    ));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("at most {fits} tokens can follow, not 100000")),
        "{err}"
    );
    let r = json(&o);
    let generated = r["generated_tokens"].as_array().unwrap().len();
    match r["stopped"].as_str() {
        Some("context_full") => assert_eq!(generated, fits, "{r}"),
        // The random model may end its text first.
        Some("end_of_generation") => assert!(generated <= fits, "{r}"),
        other => panic!("stopped: {other:?}: {r}"),
    }
    assert_eq!(r["context"], CONTEXT, "{r}");

    let o = run(generate(&model, &["--prompt", prompt, "-n", "100000"]));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("decode: "), "{err}");
    if r["stopped"] == "context_full" {
        assert!(
            err.contains(&format!(
                "stopped at the end of the context: its {CONTEXT} positions"
            )),
            "{err}"
        );
    }
}

// 4. Slow paths, said at the start.

/// A C compiler that is not there: the CPU backend interprets, and says so before the run,
/// with what to do about it.
#[test]
fn a_missing_c_compiler_is_a_warning_before_the_run() {
    let model = tiny_model("no_cc");
    let mut c = generate(&model, &["--prompt", "1,", "-n", "1"]);
    c.env("TRINE_CC", "/nonexistent/cc");
    let (code, all) = interleaved(&c);
    assert_eq!(code, Some(0), "{all}");
    let warning = all
        .find("warning: the cpu backend interprets its kernels")
        .unwrap_or_else(|| panic!("no warning: {all}"));
    assert!(all.contains("install a C compiler"), "{all}");
    assert!(
        all[warning..].contains("prefill:"),
        "the warning came after the run: {all}"
    );
}

/// A cache directory that cannot be made: said at the start of a run, and by `doctor`
/// instead of naming it as the cache.
#[test]
fn an_unusable_cache_directory_is_a_warning_and_doctor_says_so() {
    let model = tiny_model("bad_cache");
    let file = scratch("bad_cache").join("a-file");
    std::fs::write(&file, b"").unwrap();
    let cache = file.join("trine");
    let o = run(generate(&model, &["--prompt", "1,", "-n", "1"]).env("TRINE_CACHE_DIR", &cache));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let said = format!(
        "warning: cpu: the cache directory {} cannot be written",
        cache.display()
    );
    let at = err
        .find(&said)
        .unwrap_or_else(|| panic!("no warning: {err}"));
    assert!(
        err[at..].contains("set TRINE_CACHE_DIR to a writable directory"),
        "{err}"
    );
    assert!(
        err[at..].contains("prefill:"),
        "the warning came after the run: {err}"
    );

    let o = run(trine().arg("doctor").env("TRINE_CACHE_DIR", &cache));
    let out = stdout(&o);
    assert!(
        out.contains("kernels compile again at every start: the cache directory"),
        "{out}"
    );
    assert!(!out.contains("compiled kernels are cached in"), "{out}");
}

// 5. Arguments.

#[test]
fn values_are_checked_with_messages_that_name_them() {
    let model = tiny_model("values");
    let refused = |args: &[&str], says: &str| {
        let o = run(generate(&model, args));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    };
    refused(
        &["--prompt", "x", "--temp", "-1"],
        "invalid value '-1' for '--temp <TEMP>': a temperature is 0 (greedy) or more",
    );
    refused(&["--prompt", "x", "-n", "0"], "generate at least 1 token");
    refused(&["--prompt", "x", "-n", "-3"], "generate at least 1 token");
    refused(&["--prompt", "x", "--top-p", "0"], "top-p is a probability");
    refused(
        &["--prompt", "x", "--min-p", "1.5"],
        "min-p is a fraction from 0 to 1",
    );
    refused(
        &["--prompt", "x", "--repeat-penalty", "0"],
        "the repeat penalty is finite and above 0",
    );
    refused(
        &["--prompt", "x", "--presence-penalty", "inf"],
        "a penalty is a finite number",
    );
    refused(
        &["--prompt", "x", "--repeat-last-n", "-1"],
        "the penalties' window is 0 tokens (off) or more",
    );
    let dir = scratch("values");
    let dir = dir.to_str().unwrap();
    let o = run(trine().args(["generate", "--prompt", "x", "--model", dir]));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("--model {dir}: is a directory, not a GGUF file")),
        "{err}"
    );
    assert_eq!(o.status.code(), Some(2), "{err}");

    let missing = format!("{dir}/missing.gguf");
    let o = run(trine().args(["generate", "--prompt", "x", "--model", &missing]));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.matches(&missing).count(), 1, "{err}");

    // A prompt may begin with a hyphen.
    let o = run(generate(&model, &["--prompt", "-hello", "-n", "1"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn help_describes_every_option_and_names_every_backend() {
    let o = run(trine().args(["generate", "--help"]));
    let help = stdout(&o);
    for (option, said) in [
        ("--prompt <PROMPT>", "The text to continue"),
        ("--top-k <TOP_K>", "With --temp above 0"),
        ("--top-p <TOP_P>", "With --temp above 0"),
        ("--seed <SEED>", "With --temp above 0"),
        ("--backend <BACKEND>", "wgpu"),
    ] {
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(option))
            .unwrap_or_else(|| panic!("no {option} in:\n{help}"));
        assert!(line.contains(said), "{option} is not described:\n{help}");
    }
}

/// Sampling without --seed draws a seed, says it, and that seed repeats the run.
#[test]
fn sampling_without_a_seed_draws_one_and_prints_it() {
    let model = tiny_model("seed");
    let args = ["--prompt", "1, 2,", "-n", "12", "--temp", "5", "--json"];
    let sample = |extra: &[&str]| {
        let o = run(generate(&model, &[&args[..], extra].concat()));
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let r = json(&o);
        (
            r["seed"].as_u64().unwrap(),
            r["generated_tokens"].clone(),
            stderr(&o),
        )
    };
    let (a, tokens_a, err) = sample(&[]);
    assert!(
        err.contains(&format!(
            "seed {a} (drawn for this run: --seed {a} repeats it)"
        )),
        "{err}"
    );
    let (b, _, _) = sample(&[]);
    assert_ne!(a, b, "two runs drew the same seed");
    let seed = a.to_string();
    let (again, tokens, err) = sample(&["--seed", &seed]);
    assert_eq!(again, a);
    assert_eq!(tokens, tokens_a);
    assert!(!err.contains("drawn"), "{err}");
}

// 6. The cross-check.

#[test]
fn a_cross_check_needs_another_backend_and_lists_the_names() {
    let model = tiny_model("cross_check_args");
    let o = run(generate(
        &model,
        &["--prompt", "x", "--backend", "cpu", "--cross-check", "cpu"],
    ));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--cross-check cpu would check cpu against itself"),
        "{err}"
    );

    let o = run(generate(
        &model,
        &["--prompt", "x", "--cross-check", "nosuch"],
    ));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("[possible values: cuda, hip, vulkan, wgpu, cpu]"),
        "{err}"
    );
}

/// Where Vulkan works: the summary says whether the two backends' greedy choices ever parted,
/// not only that the nodes agree.
#[test]
fn a_cross_check_reports_the_greedy_choices() {
    let model = tiny_model("cross_check");
    let o = run(generate(
        &model,
        &[
            "--prompt",
            "1, 2,",
            "-n",
            "4",
            "--backend",
            "vulkan",
            "--cross-check",
            "cpu",
        ],
    ));
    let err = stderr(&o);
    if o.status.code() == Some(1) && err.contains("backend vulkan is not usable here") {
        assert!(!required("vulkan"), "{err}");
        println!("skipped: {err}");
        return;
    }
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("greedy choice is the same at all 4 steps")
            || err.contains("but the backends parted at generated token"),
        "{err}"
    );
}

/// SmolLM2 on Vulkan, cross-checked against the CPU: where the report says the greedy choices
/// parted is where a plain CPU run's tokens differ from the checked run's, and the CPU's
/// choice there is the CPU run's token. Nodes within their bounds are no proof of the same
/// text.
#[test]
fn a_cross_check_parts_where_a_run_on_the_checker_writes_another_token() {
    let Some(model) = assets::for_test(assets::SMOLLM2) else {
        return;
    };
    let args = ["--prompt", "The capital of France is", "-n", "20", "--json"];
    let checked = run(generate(
        &model,
        &[&args[..], &["--backend", "vulkan", "--cross-check", "cpu"]].concat(),
    ));
    let err = stderr(&checked);
    if checked.status.code() == Some(1) && err.contains("backend vulkan is not usable here") {
        assert!(!required("vulkan"), "{err}");
        println!("skipped: {err}");
        return;
    }
    assert_eq!(checked.status.code(), Some(0), "{err}");
    let cpu = run(generate(
        &model,
        &[&args[..], &["--backend", "cpu"]].concat(),
    ));
    assert_eq!(cpu.status.code(), Some(0), "{}", stderr(&cpu));
    let tokens = |r: &Value| -> Vec<u64> {
        let ids = r["generated_tokens"].as_array().unwrap();
        ids.iter().map(|v| v.as_u64().unwrap()).collect()
    };
    let r = json(&checked);
    let (main, reference) = (tokens(&r), tokens(&json(&cpu)));
    let shared = main
        .iter()
        .zip(&reference)
        .take_while(|(a, b)| a == b)
        .count();
    let steps = r["cross_check"].as_array().unwrap();
    let parted = steps.iter().position(|c| {
        let choices = &c["choices"];
        assert!(choices.is_object(), "a step without choices: {c}");
        choices["main"] != choices["checker"]
    });
    match parted {
        Some(step) => {
            println!("parted at generated token {}: {}", step + 1, steps[step]);
            assert_eq!(step, shared, "main {main:?}, cpu {reference:?}");
            assert_eq!(steps[step]["choices"]["checker"], reference[step]);
        }
        None => assert_eq!(main, reference),
    }
}

// 7. TRINE_PROBE_TIMEOUT.

#[test]
fn the_probe_timeout_is_read_alike_by_every_command() {
    let model = tiny_model("timeout");
    let doctor = |value: &str| run(trine().arg("doctor").env("TRINE_PROBE_TIMEOUT", value));
    let generate = |value: &str| {
        run(generate(&model, &["--prompt", "x", "-n", "1"]).env("TRINE_PROBE_TIMEOUT", value))
    };
    for (value, says) in [
        ("soon", "is not a positive number of seconds"),
        ("-2", "is not a positive number of seconds"),
        ("0.001", "is under the 0.1 s floor"),
    ] {
        for o in [doctor(value), generate(value)] {
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{value}: {err}");
            assert!(
                err.contains(&format!("TRINE_PROBE_TIMEOUT=\"{value}\" {says}")),
                "{err}"
            );
        }
    }
    // A huge timeout is the longest one, not an error.
    for o in [doctor("1e300"), generate("1e300")] {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
}

// 9. doctor.

#[test]
fn doctor_says_no_limit_where_there_is_none() {
    let o = run(trine().arg("doctor"));
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    let cpu = &out[out.find("cpu: ok").expect("the cpu backend works")..];
    assert!(cpu.contains("workgroups, no limit per binding"), "{out}");
    assert!(!out.contains("1048576.0 GiB"), "{out}");
}

// 10. Chat.

/// A template of the tiny model's own (the synthetic file has none).
const PLAIN_TEMPLATE: &str = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n\
                              {% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

/// `trine chat` on `model` with `args`, on the CPU backend, `input` as its stdin.
fn chat(model: &Path, args: &[&str], input: &str) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_trine"));
    c.arg("chat")
        .arg("--model")
        .arg(model)
        .args(args)
        .args(["--backend", "cpu"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // A command that refuses its arguments exits without reading its input.
    if let Err(e) = std::io::Write::write_all(&mut stdin, input.as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    drop(stdin);
    child.wait_with_output().unwrap()
}

/// The turns' lines on stderr: (tokens prefilled, tokens the cache held already).
fn turns(err: &str) -> Vec<(usize, usize)> {
    err.lines()
        .filter_map(|l| l.strip_prefix("[turn "))
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let prefilled = words[1].parse().unwrap();
            let held = words[4].trim_start_matches('(').parse().unwrap();
            (prefilled, held)
        })
        .collect()
}

/// Two turns on the tiny model: the second prefills only what follows the first turn's
/// tokens in the cache (its own message and the template's text around it), and the
/// conversation's history is in the rendering (the second turn's prompt is longer).
#[test]
fn chat_keeps_the_history_and_prefills_only_the_new_tokens() {
    let model = tiny_model_with_context("chat-tiny", 256);
    let template = scratch("chat-tiny").join("plain.jinja");
    std::fs::write(&template, PLAIN_TEMPLATE).unwrap();
    let template = template.to_str().unwrap();
    let o = chat(
        &model,
        &[
            "--chat-template",
            template,
            "-n",
            "4",
            "--system",
            "Be brief.",
        ],
        "hello there\n\nwhat next\n",
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let t = turns(&err);
    assert_eq!(t.len(), 2, "the empty line is no turn: {err}");
    assert_eq!(t[0].1, 0, "{err}");
    assert!(t[1].1 >= t[0].0, "turn 2 reuses turn 1's prompt: {err}");
    assert!(
        t[1].0 < t[1].1,
        "turn 2 prefills less than it reuses: {err}"
    );
}

#[test]
fn chat_without_a_template_or_with_a_broken_one_is_refused_before_any_work() {
    let mut w = synth_llama(SynthShape::TINY, 7).unwrap();
    assert!(w.remove("tokenizer.chat_template").is_some());
    let model = scratch("chat-refused").join("untemplated.gguf");
    w.write(&model).unwrap();
    let o = run(generate(&model, &["--chat", "--prompt", "hi"]));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the file has no chat template (tokenizer.chat_template): give one with --chat-template FILE"),
        "{err}"
    );
    assert!(
        !err.contains("backend cpu on"),
        "refused before placement: {err}"
    );

    let broken = scratch("chat-refused").join("broken.jinja");
    std::fs::write(
        &broken,
        "{% for m in messages %}\n{{ m.content }\n{% endfor %}",
    )
    .unwrap();
    let broken = broken.to_str().unwrap();
    let o = chat(&model, &["--chat-template", broken], "hi\n");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("chat template {broken}: syntax error")),
        "{err}"
    );
    assert!(err.contains(&format!("(in {broken}:2)")), "{err}");

    let raises = scratch("chat-refused").join("raises.jinja");
    std::fs::write(&raises, "{{ raise_exception('only tools here') }}").unwrap();
    let raises = raises.to_str().unwrap();
    let o = run(generate(
        &model,
        &["--chat", "--prompt", "hi", "--chat-template", raises],
    ));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "chat template {raises}: invalid operation: only tools here (in {raises}:1)"
        )),
        "{err}"
    );

    let o = run(generate(
        &model,
        &["--prompt", "hi", "--no-special", "--chat"],
    ));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

fn ids(r: &Value, key: &str) -> Vec<u64> {
    r[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

/// jinja2's rendering of SmolLM2's template for `conversation`, with the generation prompt
/// (`tokenizer/tests/fixtures/chat/rendered.json`).
fn smollm2_rendered(conversation: &str) -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tokenizer/tests/fixtures/chat/rendered.json"
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let case = r["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["template"] == "smollm2"
                && c["conversation"] == conversation
                && c["add_generation_prompt"] == true
        })
        .unwrap();
    case["rendered"].as_str().unwrap().to_string()
}

/// `generate --chat` on SmolLM2 is a plain generate of jinja2's rendering of the same
/// conversation, special tokens parsed: the same prompt ids (`<|im_start|>` is id 1) and the
/// same generated ids; `--system` takes the template's default system message's place.
#[test]
fn generate_chat_is_a_plain_generate_of_the_rendered_conversation() {
    let Some(model) = assets::for_test(assets::SMOLLM2) else {
        return;
    };
    let cases = [
        (&["--prompt", "Hello!"][..], "one_user"),
        (
            &["--prompt", "What is 2+2?", "--system", "You are terse."][..],
            "system_user",
        ),
    ];
    for (args, conversation) in cases {
        let chatted = run(generate(
            &model,
            &[args, &["--chat", "-n", "12", "--json"]].concat(),
        ));
        assert_eq!(chatted.status.code(), Some(0), "{}", stderr(&chatted));
        let rendered = smollm2_rendered(conversation);
        let plain = run(generate(
            &model,
            &["--prompt", &rendered, "-n", "12", "--json"],
        ));
        assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
        let (c, p) = (json(&chatted), json(&plain));
        assert_eq!(
            ids(&c, "prompt_ids"),
            ids(&p, "prompt_ids"),
            "{conversation}"
        );
        assert_eq!(
            ids(&c, "prompt_ids")[0],
            1,
            "<|im_start|> is parsed as a special token"
        );
        assert_eq!(
            ids(&c, "generated_tokens"),
            ids(&p, "generated_tokens"),
            "{conversation}"
        );
    }
}

/// `trine chat` on SmolLM2 over a piped stdin, two turns: the second turn prefills only its
/// own tokens, and its reply is what a plain generate of the whole conversation, rendered by
/// hand from SmolLM2's template with the first reply in it, writes.
#[test]
fn chat_on_smollm2_answers_each_turn_as_a_fresh_run_of_the_conversation_would() {
    let Some(model) = assets::for_test(assets::SMOLLM2) else {
        return;
    };
    let (q1, q2) = ("What is the capital of France?", "And of Germany?");
    let o = chat(&model, &["-n", "16"], &format!("{q1}\n{q2}\n"));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let out = stdout(&o);
    let (r1, r2) = out.split_once('\n').unwrap();
    let r2 = r2.strip_suffix('\n').unwrap();
    let t = turns(&err);
    assert_eq!(t.len(), 2, "{err}");
    assert!(
        t[1].1 > t[0].0,
        "turn 2 reuses turn 1's prompt and reply: {err}"
    );
    let system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
    let rendered = format!(
        "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{q1}<|im_end|>\n\
         <|im_start|>assistant\n{r1}<|im_end|>\n<|im_start|>user\n{q2}<|im_end|>\n\
         <|im_start|>assistant\n"
    );
    let plain = run(generate(
        &model,
        &["--prompt", &rendered, "-n", "16", "--json"],
    ));
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    let p = json(&plain);
    assert_eq!(p["text"].as_str().unwrap(), r2, "{err}");
    assert_eq!(ids(&p, "prompt_ids").len(), t[1].0 + t[1].1, "{err}");
}

/// `synth-model --like qwen2-tiny|qwen3-tiny|gemma3-tiny|phi3-tiny|mistral-tiny|qwen3moe-tiny`
/// writes the family's file: its architecture and keys, the bytes the tests build in memory
/// from the same seed, and a model `generate` runs; an unknown layout is refused with the
/// names it takes.
#[test]
fn synth_model_writes_the_family_layouts() {
    for (like, shape, arch) in [
        ("qwen2-tiny", SynthShape::TINY_QWEN2, "qwen2"),
        ("qwen3-tiny", SynthShape::TINY_QWEN3, "qwen3"),
        ("gemma3-tiny", SynthShape::TINY_GEMMA3, "gemma3"),
        ("phi3-tiny", SynthShape::TINY_PHI3, "phi3"),
        ("mistral-tiny", SynthShape::TINY_MISTRAL, "llama"),
        ("qwen3moe-tiny", SynthShape::TINY_QWEN3_MOE, "qwen3moe"),
    ] {
        let path = scratch("synth_qwen").join(format!("{like}.gguf"));
        let o = run(trine()
            .args(["synth-model", "--like", like, "--seed", "5", "-o"])
            .arg(&path));
        assert!(o.status.success(), "{}", stderr(&o));
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes, synth_llama(shape, 5).unwrap().to_bytes(), "{like}");
        let g = trine_gguf::Gguf::from_bytes(bytes).unwrap();
        assert_eq!(g.get_str("general.architecture").unwrap(), arch);
        let o = run(generate(&path, &["--prompt", "Hi", "-n", "3", "--json"]));
        assert!(o.status.success(), "{like}: {}", stderr(&o));
        let report: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(
            report["generated_tokens"].as_array().unwrap().len(),
            3,
            "{like}"
        );
    }
    let o = run(trine().args(["synth-model", "--like", "qwen4", "-o", "x.gguf"]));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("qwen3-0.6b"), "{}", stderr(&o));
}

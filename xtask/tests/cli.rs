//! `cargo xtask` as a user meets it: the binary itself, on arguments that are refused before
//! any work, and on one tiny conformance case on the CPU backend, so that each run takes
//! moments.
//!
//! What is checked: a conformance run that would check nothing (an unknown backend, a filter
//! no case matches) fails and says why; progress written to a file or pipe carries no terminal
//! escapes; the bench refuses options its mode would ignore and a run that measures nothing,
//! and names every backend; `emit --list` describes and groups its kernels, and each listed
//! name can be emitted.

use std::process::{Command, Output};

fn xtask(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .output()
        .expect("running xtask")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Refused with a non-zero exit and a message containing every one of `words`.
fn assert_refused(args: &[&str], words: &[&str]) {
    let out = xtask(args);
    let err = stderr(&out);
    assert!(!out.status.success(), "{args:?} succeeded: {err}");
    for w in words {
        assert!(err.contains(w), "{args:?}: {w:?} not in {err:?}");
    }
}

const BACKENDS: [&str; 5] = ["cpu", "vulkan", "wgpu", "hip", "cuda"];

#[test]
fn conformance_refuses_an_unknown_backend_naming_the_valid_ones() {
    let mut words = vec!["\"nosuch\""];
    words.extend(BACKENDS);
    assert_refused(&["conformance", "--backends", "nosuch"], &words);
    // Before any probe: a known name first does not hide the typo.
    assert_refused(&["conformance", "--backends", "cpu,nosuch"], &words);
}

#[test]
fn conformance_fails_where_no_case_matches() {
    assert_refused(
        &["conformance", "--backends", "cpu", "--filter", "zzzz"],
        &["no case matches", "\"zzzz\""],
    );
}

/// One small case on the CPU backend with stderr and stdout captured: the progress comes as
/// plain lines, with no carriage return or escape sequence.
#[test]
fn conformance_progress_has_no_terminal_escapes_outside_a_terminal() {
    let out = xtask(&[
        "conformance",
        "--backends",
        "cpu",
        "--filter",
        "convert/f32->f16",
    ]);
    let (err, text) = (stderr(&out), String::from_utf8_lossy(&out.stdout));
    assert!(out.status.success(), "{err}");
    assert!(err.contains("\n[1/1] convert/f32->f16/n="), "{err:?}");
    for (name, s) in [("stderr", &err), ("stdout", &text.into_owned())] {
        assert!(!s.contains('\r') && !s.contains('\x1b'), "{name}: {s:?}");
    }
}

#[test]
fn bench_refuses_options_its_mode_ignores() {
    for flag in [
        &["--svg", "b.svg"][..],
        &["--layers", "2"],
        &["--models", "llama-7b"],
    ] {
        let mut args = vec!["bench", "--model", "absent.gguf"];
        args.extend(flag);
        assert_refused(&args, &[flag[0], "not to --model"]);
    }
    assert_refused(&["bench", "-n", "16"], &["-n/--n-gen", "only with --model"]);
    assert_refused(&["bench", "-p", "1"], &["-p 1", "at least 2"]);
}

#[test]
fn bench_refuses_to_measure_nothing() {
    assert_refused(
        &["bench", "--model", "absent.gguf", "-p", "0", "-n", "0"],
        &["measures nothing"],
    );
    assert_refused(&["bench", "--reps", "0"], &["--reps"]);
}

#[test]
fn bench_names_every_backend() {
    let mut words = vec!["\"nosuch\""];
    words.extend(BACKENDS);
    assert_refused(&["bench", "--backends", "cpu,nosuch"], &words);
    assert_refused(
        &["bench", "--model", "absent.gguf", "--backends", "nosuch"],
        &words,
    );
}

/// Every kernel line says what the kernel reads, writes and needs, under a family with a
/// description; one listed name is emitted here (the unit test of the listing checks them all).
#[test]
fn emit_list_describes_and_groups_its_kernels() {
    let out = xtask(&["emit", "--list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Foundation kernels"), "{text}");
    assert!(text.contains("Op library"), "{text}");
    assert!(text.contains("\nmatvec: "), "{text}");
    let kernels: Vec<&str> = text.lines().filter(|l| l.starts_with("  ")).collect();
    assert!(kernels.len() > 100, "{} kernels", kernels.len());
    for line in &kernels {
        assert!(line.contains("workgroup "), "undescribed: {line:?}");
    }
    let name = kernels[kernels.len() - 1]
        .split_whitespace()
        .next()
        .unwrap();
    let out = xtask(&["emit", name]);
    assert!(out.status.success(), "{name}: {}", stderr(&out));
}

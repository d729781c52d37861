//! The probe parent: starts the child, follows its steps, and kills its whole process group
//! when the timeout passes.

use super::child::PARENT_ENV;
use super::outcome::{Crash, ProbeOutcome};
use super::protocol::{Line, Step};
use super::SUBCOMMAND;
use crate::info::DeviceInfo;
use crate::registry::BackendKind;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Environment variable setting the probe timeout in seconds (fractions allowed).
pub const TIMEOUT_ENV: &str = "TRINE_PROBE_TIMEOUT";
/// Timeout when [`TIMEOUT_ENV`] is unset: long enough for a cold driver start and a first
/// kernel compile, short enough that a hung runtime costs little. Measured cold starts
/// (`trine doctor`, every probe at once, on a machine that had not run one and with the kernel
/// caches empty): 1.1 s on a freshly lent H100 (CUDA 13 with NVRTC, the NVIDIA Vulkan driver,
/// wgpu, the CPU's C compiler; 2026-11-25), 0.7 s on a 2-core VM (lavapipe, wgpu, gcc, HIP
/// without a device) while two builds ran beside it. 5 s leaves four times the slowest.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the parent checks whether the child has exited while no line arrives.
const POLL: Duration = Duration::from_millis(20);
/// Bytes of the child's stderr kept for a crash report.
const STDERR_TAIL: usize = 4096;

/// The shortest timeout [`TIMEOUT_ENV`] may set: below it no backend can start its runtime
/// and run the probe's kernel, so every probe would be reported hung.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(100);
/// The longest: a larger value is taken as this. A probe that has not answered in an hour
/// is hung, and the timeout is also how long placement waits for it.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ProbeError {
    #[error(
        "{TIMEOUT_ENV}={value:?} is not a positive number of seconds (such as 5 or 0.5; unset, \
         it is {} s)",
        DEFAULT_TIMEOUT.as_secs_f64()
    )]
    BadTimeout { value: String },
    #[error(
        "{TIMEOUT_ENV}={value:?} is under the {} s floor: no backend starts and runs a kernel \
         that fast, so every probe would be reported hung (unset, it is {} s)",
        MIN_TIMEOUT.as_secs_f64(),
        DEFAULT_TIMEOUT.as_secs_f64()
    )]
    TimeoutTooShort { value: String },
}

/// The timeout [`TIMEOUT_ENV`] sets, or [`DEFAULT_TIMEOUT`]; at most [`MAX_TIMEOUT`].
pub fn timeout_from_env() -> Result<Duration, ProbeError> {
    parse_timeout(std::env::var(TIMEOUT_ENV).ok().as_deref())
}

fn parse_timeout(value: Option<&str>) -> Result<Duration, ProbeError> {
    let Some(value) = value.filter(|v| !v.trim().is_empty()) else {
        return Ok(DEFAULT_TIMEOUT);
    };
    let seconds = value
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0)
        .ok_or_else(|| ProbeError::BadTimeout {
            value: value.to_string(),
        })?;
    if seconds < MIN_TIMEOUT.as_secs_f64() {
        return Err(ProbeError::TimeoutTooShort {
            value: value.to_string(),
        });
    }
    // Also infinity, which `parse` gives for "inf" and for numbers past f64's range.
    if seconds >= MAX_TIMEOUT.as_secs_f64() {
        return Ok(MAX_TIMEOUT);
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// What the child has reported so far.
struct Progress {
    /// The step started and not yet done, else the last one done.
    step: Step,
    info: Option<DeviceInfo>,
    failure: Option<(Step, String)>,
}

impl Progress {
    fn apply(&mut self, line: Line) {
        match line {
            Line::Start(s) | Line::Done(s) => self.step = s,
            Line::Info(i) => self.info = Some(*i),
            Line::Fail { step, reason } => self.failure = Some((step, reason)),
        }
    }

    fn outcome(self, status: ExitStatus, stderr: String, exe: &Path) -> ProbeOutcome {
        if let Some((step, reason)) = self.failure {
            return ProbeOutcome::Unavailable(if step == Step::Init {
                reason
            } else {
                format!("the {step} step failed: {reason}")
            });
        }
        if status.success() {
            return match self.info {
                Some(info) => ProbeOutcome::Ok(Box::new(info)),
                None => ProbeOutcome::Unavailable(format!(
                    "the probe child exited without reporting a device: is {} a trine binary \
                     with the `{SUBCOMMAND}` subcommand?",
                    exe.display()
                )),
            };
        }
        ProbeOutcome::Crashed(Crash {
            signal: signal_of(status),
            exit_code: status.code(),
            step: self.step,
            stderr,
            device: self.info.map(Box::new),
        })
    }
}

#[cfg(unix)]
fn signal_of(status: ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(&status)
}

#[cfg(not(unix))]
fn signal_of(_: ExitStatus) -> Option<i32> {
    None
}

/// Kills the child and everything it started, and reaps it.
fn kill(child: &mut Child) {
    #[cfg(unix)]
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: kill(2) touches no memory. The child leads its own process group
        // (`process_group(0)`), and has not been reaped, so its id still names that group and
        // no other process.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    // Where the group kill is unavailable (or raced), kill the child itself.
    let _ = child.kill();
    let _ = child.wait();
}

/// Starts `cmd`, again for a moment while the executable is busy: a file written just before
/// (a wrapper script) stays open for writing in any child another thread forked meanwhile, until
/// that child execs, and exec fails with ETXTBSY until then.
fn spawn(cmd: &mut Command) -> std::io::Result<std::process::Child> {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 20 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Probes `kind` by running `exe __probe <kind>` (the trine binary, or any binary that passes
/// that subcommand to [`super::child_main`]) and following its steps for at most `timeout`.
///
/// The child runs in its own process group, which is killed on timeout, so that nothing a
/// runtime library started outlives the probe.
pub fn probe(exe: &Path, kind: BackendKind, timeout: Duration) -> ProbeOutcome {
    let mut cmd = Command::new(exe);
    cmd.arg(SUBCOMMAND)
        .arg(kind.name())
        .env(PARENT_ENV, std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(unix)]
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = match spawn(&mut cmd) {
        Ok(c) => c,
        Err(e) => {
            return ProbeOutcome::Unavailable(format!(
                "the probe could not start {}: {e}",
                exe.display()
            ))
        }
    };
    let deadline = Instant::now() + timeout;

    // Readers on threads of their own, so that the parent's waiting is bounded by the deadline
    // whatever the child does with its pipes.
    let (lines_tx, lines) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(l) = Line::decode(&line) {
                    if lines_tx.send(l).is_err() {
                        break;
                    }
                }
            }
        });
    }
    let (err_tx, err_rx) = mpsc::channel();
    if let Some(mut err) = child.stderr.take() {
        std::thread::spawn(move || {
            let mut tail = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 2 * STDERR_TAIL {
                    tail.drain(..tail.len() - STDERR_TAIL);
                }
            }
            let start = tail.len().saturating_sub(STDERR_TAIL);
            let _ = err_tx.send(String::from_utf8_lossy(&tail[start..]).into_owned());
        });
    }

    let mut progress = Progress {
        step: Step::Spawn,
        info: None,
        failure: None,
    };
    let status = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(POLL.min(left)) {
            Ok(line) => {
                progress.apply(line);
                continue;
            }
            // The child closed stdout: it is exiting. Don't spin on the closed channel.
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(POLL.min(left)),
            Err(RecvTimeoutError::Timeout) => {}
        }
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => {}
            Ok(None) => {
                kill(&mut child);
                return ProbeOutcome::Hung {
                    step: progress.step,
                    device: progress.info.map(Box::new),
                };
            }
            Err(e) => {
                kill(&mut child);
                return ProbeOutcome::Unavailable(format!("waiting for the probe child: {e}"));
            }
        }
    };
    // Lines the child wrote just before exiting may still be on their way.
    while let Ok(line) = lines.recv_timeout(Duration::from_millis(200)) {
        progress.apply(line);
    }
    let stderr = err_rx
        .recv_timeout(Duration::from_millis(200))
        .unwrap_or_default();
    progress.outcome(status, stderr, exe)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_is_a_positive_number_of_seconds() {
        assert_eq!(parse_timeout(None), Ok(DEFAULT_TIMEOUT));
        assert_eq!(parse_timeout(Some(" ")), Ok(DEFAULT_TIMEOUT));
        assert_eq!(parse_timeout(Some("2")), Ok(Duration::from_secs(2)));
        assert_eq!(parse_timeout(Some("0.5")), Ok(Duration::from_millis(500)));
        assert_eq!(parse_timeout(Some("0.1")), Ok(MIN_TIMEOUT));
        for bad in ["0", "-1", "soon", "NaN", "-inf"] {
            assert_eq!(
                parse_timeout(Some(bad)),
                Err(ProbeError::BadTimeout { value: bad.into() }),
                "{bad}"
            );
        }
        for short in ["0.001", "1e-300", "0.09"] {
            assert_eq!(
                parse_timeout(Some(short)),
                Err(ProbeError::TimeoutTooShort {
                    value: short.into()
                }),
                "{short}"
            );
        }
    }

    #[test]
    fn a_huge_timeout_is_the_longest_one() {
        for huge in ["3600", "1e300", "1e400", "inf"] {
            assert_eq!(parse_timeout(Some(huge)), Ok(MAX_TIMEOUT), "{huge}");
        }
        assert_eq!(parse_timeout(Some("3599")), Ok(Duration::from_secs(3599)));
    }

    #[test]
    fn a_missing_binary_is_reported_not_panicked() {
        let out = probe(
            Path::new("/nonexistent/trine"),
            BackendKind::Cpu,
            Duration::from_secs(1),
        );
        match out {
            ProbeOutcome::Unavailable(why) => assert!(why.contains("/nonexistent/trine"), "{why}"),
            other => panic!("expected unavailable, got {other:?}"),
        }
    }

    /// A child that prints nothing and sleeps is killed at the timeout and reported hung
    /// before it reported any step.
    #[cfg(unix)]
    #[test]
    fn a_silent_child_is_killed_at_the_timeout() {
        let dir = std::env::temp_dir().join(format!("trine-probe-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("sleeper");
        std::fs::write(&script, "#!/bin/sh\nsleep 30\n").unwrap();
        let mut perms = std::fs::metadata(&script).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&script, perms).unwrap();
        let t = Instant::now();
        let out = probe(&script, BackendKind::Cpu, Duration::from_millis(300));
        assert_eq!(
            out,
            ProbeOutcome::Hung {
                step: Step::Spawn,
                device: None
            }
        );
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! Compiling in a child process, for compilers that may abort (HIP 5.2's hiprtc kills the
//! process with `munmap_chunk(): invalid pointer` for gfx11xx).
//!
//! The child is the running executable started again with [`CHILD_ARG`] as its first argument
//! and [`CHILD_ENV`] set; the binary hands that argument to [`compile_child_main`]. The request
//! goes in on stdin (kernel name, arch, source); the code object or the compiler's error comes
//! back on stdout in a frame that starts with a magic marker, so other output on stdout (a test
//! harness's "running 1 test") does not disturb it.
//!
//! Test binaries use the same entry: libtest takes `__hip_compile` as a test-name filter, so a
//! test named `__hip_compile` that calls [`compile_child_main`] when [`CHILD_ENV`] is set (and
//! returns otherwise) makes the test binary its own child; see `tests/tests/hip_compile.rs`.

use super::compile::{check_arch, compile_in_process};
use super::loader::runtime;
use crate::error::BackendError;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The first argument that makes a binary act as the compile child.
pub const CHILD_ARG: &str = "__hip_compile";
/// Set in the child's environment; a process that has it never starts another child.
pub const CHILD_ENV: &str = "TRINE_HIP_COMPILE_CHILD";
/// How long a child may compile before it is killed (hiprtc takes under a second per kernel).
pub const COMPILE_TIMEOUT: Duration = Duration::from_secs(120);

const MAGIC: &[u8; 16] = b"\0trine-hip-code\0";
const OK: u8 = b'0';
const FAILED: u8 = b'1';

/// The child's whole life: reads a request from stdin, compiles it in this process, writes the
/// result to stdout and exits (0 with a code object, 1 with the compiler's error). If the
/// compiler aborts, the process dies and the parent reports the signal.
pub fn compile_child_main() -> ! {
    let (status, payload) = match serve() {
        Ok(code) => (OK, code),
        Err(message) => (FAILED, message.into_bytes()),
    };
    let mut out = std::io::stdout().lock();
    let written = out
        .write_all(&frame(status, &payload))
        .and_then(|()| out.flush());
    let code = if written.is_ok() && status == OK {
        0
    } else {
        1
    };
    std::process::exit(code)
}

fn serve() -> Result<Vec<u8>, String> {
    let mut request = vec![];
    std::io::stdin()
        .read_to_end(&mut request)
        .map_err(|e| format!("reading the request: {e}"))?;
    let (kernel, arch, source) = decode_request(&request)?;
    let rt = runtime().map_err(|e| e.to_string())?;
    let rtc = rt.rtc.as_ref().map_err(String::clone)?;
    let isa = check_arch(kernel, arch).map_err(|e| e.to_string())?;
    compile_in_process(rtc, kernel, source, isa).map_err(|e| match e {
        BackendError::Compile { message, .. } => message,
        other => other.to_string(),
    })
}

fn encode_request(kernel: &str, arch: &str, source: &str) -> Vec<u8> {
    format!("{kernel}\n{arch}\n{source}").into_bytes()
}

fn decode_request(bytes: &[u8]) -> Result<(&str, &str, &str), String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("request is not UTF-8: {e}"))?;
    let mut parts = text.splitn(3, '\n');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(kernel), Some(arch), Some(source)) => Ok((kernel, arch, source)),
        _ => Err("request lacks the kernel name, arch or source line".into()),
    }
}

fn frame(status: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + 9 + payload.len());
    out.extend_from_slice(MAGIC);
    out.push(status);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The frame in `stdout`: `(ok, payload)`; `None` when there is no complete one.
fn find_frame(stdout: &[u8]) -> Option<(bool, &[u8])> {
    let at = stdout.windows(MAGIC.len()).position(|w| w == MAGIC)?;
    let rest = &stdout[at + MAGIC.len()..];
    let (&status, rest) = rest.split_first()?;
    let len = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
    let payload = rest.get(8..)?.get(..usize::try_from(len).ok()?)?;
    match status {
        OK => Some((true, payload)),
        FAILED => Some((false, payload)),
        _ => None,
    }
}

/// Compiles `source` (the kernel `kernel`'s HIP lowering) for `arch` in a child started from
/// `exe`, which must hand [`CHILD_ARG`] to [`compile_child_main`]. The child is killed after
/// [`COMPILE_TIMEOUT`]. A compiler that aborts or hangs is a [`BackendError::Compile`] naming
/// the signal or exit status and the end of the child's stderr; this process is unaffected.
pub fn compile_isolated(
    exe: &Path,
    kernel: &str,
    source: &str,
    arch: &str,
) -> Result<Vec<u8>, BackendError> {
    isolated(exe, kernel, source, arch, COMPILE_TIMEOUT)
}

fn isolated(
    exe: &Path,
    kernel: &str,
    source: &str,
    arch: &str,
    timeout: Duration,
) -> Result<Vec<u8>, BackendError> {
    let fail = |message: String| BackendError::Compile {
        kernel: kernel.to_string(),
        message,
    };
    let isa = check_arch(kernel, arch)?;
    if kernel.contains('\n') {
        // The request is line-based up to the source.
        return Err(fail("the kernel name contains a line break".into()));
    }
    if std::env::var_os(CHILD_ENV).is_some() {
        // A binary that did not dispatch CHILD_ARG would otherwise start children forever.
        return Err(fail(format!(
            "refusing to start a compile child from inside one: {} does not hand \
             {CHILD_ARG:?} to compile_child_main",
            exe.display()
        )));
    }
    // Its own process group, so a timeout kills whatever it started too (a process left
    // holding the pipes would keep the readers below waiting).
    let mut child = Command::new(exe)
        .process_group(0)
        .arg(CHILD_ARG)
        .env(CHILD_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(format!("cannot start {}: {e}", exe.display())))?;
    let request = encode_request(kernel, arch, source);
    let stdin = child.stdin.take();
    let writer = std::thread::spawn(move || {
        // A child that dies early closes the pipe; its exit status says why.
        if let Some(mut stdin) = stdin {
            let _ = stdin.write_all(&request);
        }
    });
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());

    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                kill_group(&mut child);
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                kill_group(&mut child);
                return Err(fail(format!("waiting for the compile child: {e}")));
            }
        }
    };
    let _ = writer.join();
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();

    match (find_frame(&stdout), status) {
        (Some((true, code)), _) => Ok(code.to_vec()),
        (Some((false, message)), _) => Err(fail(String::from_utf8_lossy(message).into_owned())),
        (None, None) => Err(fail(format!(
            "the compile child for {isa} did not finish within {} s and was killed{}",
            timeout.as_secs_f64(),
            tail(&stderr)
        ))),
        (None, Some(status)) => Err(fail(format!(
            "the compile child for {isa} {}{}",
            describe_exit(status),
            tail(&stderr)
        ))),
    }
}

/// Kills the child's process group (the child and everything it started) and reaps the
/// child.
fn kill_group(child: &mut Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: a negative pid signals the process group the child leads (made with
        // `process_group(0)` above), which holds only the child and its descendants.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads a pipe to its end on a thread, so neither pipe can fill and stall the child.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = vec![];
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

/// How a child without a result ended.
fn describe_exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.signal(), status.code()) {
        (Some(sig), _) => format!(
            "died of signal {sig} ({}): hiprtc crashed, likely because this ROCm's compiler \
             does not support the arch",
            signal_name(sig)
        ),
        (None, Some(code)) => format!(
            "exited with status {code} without a result (does the executable hand \
             {CHILD_ARG:?} to compile_child_main?)"
        ),
        (None, None) => format!("ended without a result ({status})"),
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

/// The last lines of the child's stderr, for the error message (`munmap_chunk(): invalid
/// pointer`), or nothing.
fn tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    let last = lines[lines.len().saturating_sub(4)..].join(" | ");
    let skip = last.chars().count().saturating_sub(600);
    let short: String = last.chars().skip(skip).collect();
    format!("; its stderr ends: {short}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        let r = encode_request("saxpy", "gfx1030", "line 1\nline 2\n");
        assert_eq!(
            decode_request(&r).unwrap(),
            ("saxpy", "gfx1030", "line 1\nline 2\n")
        );
        assert!(decode_request(b"saxpy\ngfx1030").is_err());
        assert!(decode_request(&[0xff, b'\n', b'\n']).is_err());
    }

    #[test]
    fn frames_are_found_after_other_output() {
        let mut out = b"running 1 test\n".to_vec();
        out.extend(frame(OK, b"\x7fELF code"));
        assert_eq!(find_frame(&out), Some((true, &b"\x7fELF code"[..])));
        let err = frame(FAILED, b"error: x");
        assert_eq!(find_frame(&err), Some((false, &b"error: x"[..])));
        // Cut short: no frame.
        assert_eq!(find_frame(&err[..err.len() - 1]), None);
        assert_eq!(find_frame(b"nothing"), None);
    }

    #[test]
    fn a_child_that_hangs_is_killed_at_the_timeout() {
        use std::os::unix::fs::PermissionsExt;
        let script = std::env::temp_dir().join(format!("trine-hang-{}.sh", std::process::id()));
        // The shell waits on a `sleep` that holds the pipes too: both must be killed.
        std::fs::write(&script, "#!/bin/sh\nsleep 30\necho done\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let start = Instant::now();
        let e = isolated(&script, "k", "src", "gfx1030", Duration::from_millis(300)).unwrap_err();
        let elapsed = start.elapsed();
        std::fs::remove_file(&script).unwrap();
        assert!(
            matches!(&e, BackendError::Compile { message, .. }
                if message.contains("did not finish within 0.3 s and was killed")),
            "{e}"
        );
        assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    }

    #[test]
    fn exits_are_described() {
        use std::os::unix::process::ExitStatusExt;
        let aborted = describe_exit(ExitStatus::from_raw(libc::SIGABRT));
        assert!(aborted.contains("signal 6 (SIGABRT)"), "{aborted}");
        let exited = describe_exit(ExitStatus::from_raw(2 << 8));
        assert!(exited.contains("status 2"), "{exited}");
        assert_eq!(
            tail(b"a\n\nmunmap_chunk(): invalid pointer\n"),
            "; its stderr ends: a | munmap_chunk(): invalid pointer"
        );
        assert_eq!(tail(b""), "");
    }
}

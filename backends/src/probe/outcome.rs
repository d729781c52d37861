//! What a probe found.

use super::protocol::Step;
use crate::info::DeviceInfo;
use std::fmt;

/// The result of probing one backend in a child process.
#[derive(Clone, Debug, PartialEq)]
pub enum ProbeOutcome {
    /// Every step passed; the device the child saw.
    Ok(Box<DeviceInfo>),
    /// The backend cannot run here, or a step failed with an error; the reason says which.
    Unavailable(String),
    /// The child did not finish within the timeout and was killed: the step it was in, and
    /// the device it had described by then (from [`Step::Query`] on).
    Hung {
        step: Step,
        device: Option<Box<DeviceInfo>>,
    },
    /// The child died.
    Crashed(Crash),
}

/// How a probe child died.
#[derive(Clone, Debug, PartialEq)]
pub struct Crash {
    /// The signal that killed it (6 for SIGABRT), if one did.
    pub signal: Option<i32>,
    /// Its exit status, if it exited with one (and no step reported the error).
    pub exit_code: Option<i32>,
    /// The step it was in.
    pub step: Step,
    /// The end of what it wrote to stderr, e.g. `munmap_chunk(): invalid pointer`.
    pub stderr: String,
    /// The device it had described before dying (from [`Step::Query`] on).
    pub device: Option<Box<DeviceInfo>>,
}

impl ProbeOutcome {
    pub fn is_ok(&self) -> bool {
        matches!(self, ProbeOutcome::Ok(_))
    }

    /// The device the child saw: all of it when ok, what it reported before hanging or
    /// crashing otherwise.
    pub fn device(&self) -> Option<&DeviceInfo> {
        match self {
            ProbeOutcome::Ok(info) => Some(info),
            ProbeOutcome::Unavailable(_) => None,
            ProbeOutcome::Hung { device, .. } => device.as_deref(),
            ProbeOutcome::Crashed(c) => c.device.as_deref(),
        }
    }

    /// The step the child hung or crashed in.
    pub fn failed_step(&self) -> Option<Step> {
        match self {
            ProbeOutcome::Hung { step, .. } => Some(*step),
            ProbeOutcome::Crashed(c) => Some(c.step),
            _ => None,
        }
    }

    /// "ok", "unavailable", "hung" or "crashed".
    pub fn status(&self) -> &'static str {
        match self {
            ProbeOutcome::Ok(_) => "ok",
            ProbeOutcome::Unavailable(_) => "unavailable",
            ProbeOutcome::Hung { .. } => "hung",
            ProbeOutcome::Crashed(_) => "crashed",
        }
    }
}

/// The name of a signal that commonly ends a runtime library's process.
pub fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGTRAP => "SIGTRAP",
        _ => return None,
    })
}

impl fmt::Display for Crash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.signal, self.exit_code) {
            (Some(s), _) => match signal_name(s) {
                Some(name) => write!(f, "{name} (signal {s})")?,
                None => write!(f, "signal {s}")?,
            },
            (None, Some(c)) => write!(f, "exit status {c}")?,
            (None, None) => f.write_str("unknown status")?,
        }
        write!(f, " in {}", self.step)?;
        if let Some(last) = self.stderr.lines().rev().find(|l| !l.trim().is_empty()) {
            write!(f, ": {}", last.trim())?;
        }
        Ok(())
    }
}

impl fmt::Display for ProbeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeOutcome::Ok(info) => write!(f, "ok: {}", info.name),
            ProbeOutcome::Unavailable(why) => write!(f, "unavailable: {why}"),
            ProbeOutcome::Hung { step, .. } => write!(f, "hung in {step}"),
            ProbeOutcome::Crashed(c) => write!(f, "crashed: {c}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_names_its_signal_step_and_last_words() {
        let c = Crash {
            signal: Some(libc::SIGABRT),
            exit_code: None,
            step: Step::Compile,
            stderr: "loading\nmunmap_chunk(): invalid pointer\n\n".into(),
            device: None,
        };
        assert_eq!(
            ProbeOutcome::Crashed(c).to_string(),
            format!(
                "crashed: SIGABRT (signal {}) in compile: munmap_chunk(): invalid pointer",
                libc::SIGABRT
            )
        );
        let c = Crash {
            signal: None,
            exit_code: Some(101),
            step: Step::Init,
            stderr: String::new(),
            device: None,
        };
        assert_eq!(c.to_string(), "exit status 101 in init");
        let hung = ProbeOutcome::Hung {
            step: Step::Launch,
            device: None,
        };
        assert_eq!(hung.to_string(), "hung in launch");
        assert_eq!(hung.failed_step(), Some(Step::Launch));
    }
}

//! The `trine` subcommands that run models, and what every subcommand shares: how a failure
//! ends the process, and writing to a stdout whose reader may go away.

pub mod chat;
pub mod generate;
pub mod sampling;
pub mod synth;
pub mod template;

use std::fmt::Display;
use std::process::ExitCode;

/// A subcommand's error: its message, and the exit status it ends the process with.
pub trait Failure: Display {
    /// 2 for arguments or an environment refused before any work (as clap's own errors),
    /// 1 for a failure while working.
    fn status(&self) -> u8;
}

impl Failure for String {
    fn status(&self) -> u8 {
        1
    }
}

/// The exit status of a subcommand's result, with its error on stderr.
pub fn finish<E: Failure>(r: Result<ExitCode, E>) -> ExitCode {
    r.unwrap_or_else(|e| {
        eprintln!("error: {e}");
        ExitCode::from(e.status())
    })
}

/// Writing to stdout without `print!`'s panic when it fails.
pub mod out {
    use std::io::{self, Write};

    /// Writes `s` and flushes it, so that a reader sees each piece as it comes.
    pub fn write(s: &str) -> io::Result<()> {
        let mut out = io::stdout().lock();
        out.write_all(s.as_bytes())?;
        out.flush()
    }

    /// Whether a write failed because the reader went away (`| head`): the command's output
    /// is no longer wanted, which ends it quietly rather than as an error.
    pub fn closed(e: &io::Error) -> bool {
        e.kind() == io::ErrorKind::BrokenPipe
    }
}

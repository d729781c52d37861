//! Probing a backend in a child process with a timeout.
//!
//! Real GPU stacks hang (ROCm at "async uploads"), abort (hiprtc on an arch its compiler does
//! not know) or crash in their drivers; none of that may take the host process with it. So the
//! host re-executes its own binary with the hidden subcommand `__probe <backend>`
//! ([`child_main`]), which opens the backend and runs a tiny job step by step — init, device
//! query, upload, compile, launch, synchronize, download, compare — announcing each step on
//! stdout before starting it. The parent ([`probe`]) follows the steps; after the timeout
//! (`TRINE_PROBE_TIMEOUT` seconds, default 5, from 0.1 to 3600) it kills the child's process
//! group. The [`ProbeOutcome`] is `Ok(device)`, `Unavailable(reason)`, `Hung { step, .. }` or
//! `Crashed(signal or exit status, step)`.
//!
//! - [`protocol`]: the lines the child writes.
//! - [`steps`]: the job, generic over [`crate::Backend`].
//! - [`child`]: the child's entry point.
//! - [`parent`]: spawning, following, killing.
//! - [`outcome`]: the result.

mod child;
mod outcome;
mod parent;
mod protocol;
mod steps;

pub use child::{child_main, EXIT_FAILED};
pub use outcome::{signal_name, Crash, ProbeOutcome};
pub use parent::{
    probe, timeout_from_env, ProbeError, DEFAULT_TIMEOUT, MAX_TIMEOUT, MIN_TIMEOUT, TIMEOUT_ENV,
};
pub use protocol::Step;

/// The hidden subcommand a binary must pass to [`child_main`] for [`probe`] to work with it.
pub const SUBCOMMAND: &str = "__probe";

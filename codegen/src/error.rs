//! Errors of the lowerings.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum CodegenError {
    #[error("invalid kernel: {0}")]
    Invalid(#[from] trine_ir::ValidationError),
    /// naga rejected the module we built: a bug in the lowering, reported with naga's words.
    #[error("naga rejected the lowered module of {kernel:?}: {message}")]
    NagaValidation { kernel: String, message: String },
    /// The target has no way to express something the kernel uses.
    #[error("{target} cannot lower {kernel:?}: it has no {what}")]
    Unsupported {
        target: &'static str,
        kernel: String,
        what: &'static str,
    },
    #[error("writing {target} for {kernel:?} failed: {message}")]
    Write {
        target: &'static str,
        kernel: String,
        message: String,
    },
}

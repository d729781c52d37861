//! Typed shape errors shared by the op library: an op checks its shapes before building a
//! kernel or a case, and reports what is wrong instead of panicking.

use trine_gguf::quant::BlockError;

/// A shape an op cannot work with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// Two sizes that must agree do not (e.g. the inner dimensions of a matmul).
    #[error("{op}: {what} must be {expected}, found {found}")]
    Mismatch {
        op: &'static str,
        what: &'static str,
        expected: usize,
        found: usize,
    },
    /// A buffer is shorter than the shape needs.
    #[error("{op}: {what} holds {found}, needs at least {needed}")]
    TooSmall {
        op: &'static str,
        what: &'static str,
        needed: usize,
        found: usize,
    },
    /// A size must be a multiple of something (e.g. a quantized row of whole 32-element blocks).
    #[error("{op}: {what} = {value} is not a multiple of {multiple}")]
    NotMultiple {
        op: &'static str,
        what: &'static str,
        value: usize,
        multiple: usize,
    },
    /// A size that must be positive is zero.
    #[error("{op}: {what} must not be zero")]
    Zero {
        op: &'static str,
        what: &'static str,
    },
    /// A size, or a product of sizes, exceeds what the kernel can index or dispatch.
    #[error("{op}: {what} = {value} exceeds the limit {limit}")]
    TooLarge {
        op: &'static str,
        what: &'static str,
        value: usize,
        limit: usize,
    },
    /// A size must be a power of two (e.g. a workgroup reduced by halving).
    #[error("{op}: {what} = {value} is not a power of two")]
    NotPowerOfTwo {
        op: &'static str,
        what: &'static str,
        value: usize,
    },
    /// A combination the op has no kernel for (e.g. an element type it cannot read).
    #[error("{op}: {what} is not supported")]
    Unsupported { op: &'static str, what: String },
    /// An index (e.g. a token id) is outside the range it selects from.
    #[error("{op}: {what} = {value} is out of range 0..{bound}")]
    OutOfRange {
        op: &'static str,
        what: &'static str,
        value: usize,
        bound: usize,
    },
}

/// A weight size that is not whole blocks, or bytes too few, is a shape the op cannot use.
impl From<BlockError> for ShapeError {
    fn from(e: BlockError) -> ShapeError {
        match e {
            BlockError::NotMultiple {
                op,
                what,
                value,
                multiple,
            } => ShapeError::NotMultiple {
                op,
                what,
                value,
                multiple,
            },
            BlockError::TooLarge {
                op,
                what,
                value,
                limit,
            } => ShapeError::TooLarge {
                op,
                what,
                value,
                limit,
            },
            BlockError::TooSmall {
                op,
                what,
                needed,
                found,
            } => ShapeError::TooSmall {
                op,
                what,
                needed,
                found,
            },
            BlockError::NoGroups { ty } => ShapeError::Unsupported {
                op: "regroup",
                what: format!("{ty} weights (it takes q4_0, q4_1, q8_0)"),
            },
        }
    }
}

//! trine-ir: the kernel IR every lowering starts from.
//!
//! - [`kernel`]: the IR (declarations, expressions, statements), each variant documented with
//!   its meaning in HIP and SPIR-V terms.
//! - [`KernelBuilder`]: Rust that reads like the kernel it builds.
//! - [`validate`]: typed errors for every rule the lowerings rely on.
//! - [`print`]: the text form, and [`kernel_hash`] over it for caches.
//! - [`interp`]: the reference interpreter, which defines the semantics.
//! - [`exp`]: e^x as the interpreter and the C lowering both compute it.

pub mod builder;
pub mod exp;
pub mod interp;
pub mod kernel;
pub mod print;
pub mod types;
pub mod validate;

pub use builder::{GroupAcc, KernelBuilder, Tile, Val, Var};
pub use kernel::*;
pub use print::{kernel_hash, print};
pub use types::{Access, Literal, ParamValue, Scalar};
pub use validate::{validate, Info, Limits, ValidationError, MAX_PARAMS};

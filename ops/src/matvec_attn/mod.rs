//! The two products on either side of attention, with what sits between them and attention
//! fused in, so that a decode layer is five dispatches: QKV, split attention, output projection,
//! gate/up, down.
//!
//! - [`Epilogue::RopeStore`] on the fused QKV projection: the row sums are q, then k, then v of
//!   each token (`(heads + 2·kv_heads) · head_dim` rows). Rope pairs adjacent elements (rope's
//!   [`RopeMode::Normal`], Llama's layout in GGUF), and a workgroup's rows come in pairs, so the
//!   invocation that holds rows `2i` and `2i + 1` rotates them by the step's position, exactly
//!   as [`super::rope_store`] rotates a pair (the same f32 angle from the same `freq` table),
//!   and stores q in `q` and k and v in the caches at row `pos + t`. What [`super::rope_store`]
//!   does with the `qkv` buffer between the two dispatches, without the buffer.
//! - [`Prologue::Combine`] on the attention-output projection: x is split attention's output,
//!   computed where the product loads it from the partials `part`
//!   ([`super::attention_split`]'s layout) instead of by [`super::attention_split::combine_kernel`]:
//!   first every workgroup folds each head's split maxima and sums into the weights
//!   `e^(m_s − M)` and `1/L` in shared memory (one barrier), then each x value is
//!   `(Σ_s acc_s·e^(m_s − M)) · (1/L)`, the combine's arithmetic in its order.
//!
//! Both read the position from the `step` buffer (element 0), as the unfused kernels do, so a
//! recorded step stays valid. Bound: the product's, [`super::matvec::NMSE`], measured over
//! these cases too, or [`super::matvec::NMSE_F16_CACHE`] where rope stores into f16 caches;
//! rope and the combine add a few roundings per element, and a fused kernel gives the unfused
//! kernels' bits on the interpreter (the tests in `tests.rs`).
//!
//! [`Epilogue::RopeStore`]: crate::matvec_fused::Epilogue::RopeStore
//! [`RopeMode::Normal`]: crate::rope::RopeMode::Normal
//! [`Prologue::Combine`]: crate::matvec_fused::Prologue::Combine

mod cases;
mod kernel;
mod reference;
mod shape;
#[cfg(test)]
mod tests;

pub use cases::{cases, combine_case, rope_case};
pub(crate) use cases::{rope_caches, with_rope_io};
pub(crate) use kernel::{Combined, Input, RopeOut};
pub use reference::{reference_combine, reference_rope};
pub use shape::{CombineShape, QkvRope, RopeShape};

const OP: &str = "matvec";

//! Split-K attention ("flash decoding"): [`super::attention`]'s causal grouped-query attention
//! in two dispatches, for a step recorded once and replayed every token.
//!
//! Decode has one query token, so the one-workgroup-per-(head, token) kernel of
//! [`super::attention`] runs `heads` workgroups, each walking the whole cache: a few of a GPU's
//! cores, for a time that grows with the position. Here the visible keys are cut into `splits`
//! chunks, one workgroup each ([`split_kernel`]), and a second dispatch ([`combine_kernel`])
//! merges the chunks' partial softmaxes. A replayed step cannot take its position as a
//! parameter, so both read it from the `step` buffer (element 0 = `pos`, the tokens already in
//! the cache before this step; query token `t` sits at position `pos + t`).
//!
//! Layouts (row-major): `q` and `out` [tokens × heads × head_dim], the caches `k`, `v`
//! [context × kv_heads × head_dim], `part` [tokens × heads × splits × (head_dim + 2)]. Query
//! head `h` reads KV head `h / (heads / kv_heads)` and token `t` sees cache positions
//! `0..=pos + t`, as in [`super::attention`].
//!
//! Split `s` takes keys `[s·C, min((s+1)·C, pos + t + 1))` with `C = ceil((pos + tokens) /
//! splits)`: the chunk follows the position, so every split has work once the cache holds
//! `splits` keys, and the split count stays fixed for a recording. Inside a split the kernel is
//! [`super::attention`]'s online softmax (blocks of one key per invocation), stopped before
//! normalising: a split writes its output accumulators `acc = Σ e^(s_j − m)·v_j`, its maximum
//! score `m` and its sum `l = Σ e^(s_j − m)`. A split with no visible key (more splits than
//! keys, or the late splits of an early prefill token) writes `acc = 0, m = −inf, l = 0`. The
//! combine computes `M = max m_s`, `L = Σ l_s·e^(m_s − M)`, `out = Σ acc_s·e^(m_s − M) / L`.
//! Split 0 always holds key 0, so `M` is finite and an empty split's weight `e^(−inf)` is 0:
//! no NaN. One split is the unsplit attention with the division moved to the combine.
//!
//! Bound: [`super::attention`]'s, [`attention::NMSE`], measured over these kernels too.
//!
//! [`attention::NMSE`]: crate::attention::NMSE

mod cases;
pub mod grouped;
mod kernel;
mod reference;
mod shape;
#[cfg(test)]
mod tests;

pub use cases::{cases, combine_case, grouped_case, split_case, windowed_case};
pub use grouped::{grouped_kernel, supports as grouped_supports};
pub(crate) use kernel::Combining;
pub use kernel::{combine_kernel, split_kernel, split_kernel_heads, split_kernel_windowed};
pub(crate) use kernel::{split_keys, window_start, PartsIo};
pub use reference::{reference_combine, reference_split, reference_split_windowed};
pub use shape::SplitAttention;

const OP: &str = "attention_split";

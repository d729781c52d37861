//! The formats whose blocks hold sub-blocks with scales of their own, or codes whose bits
//! lie in several arrays ([`Packed`]). A product reads them through the format's decoder of
//! one run of consecutive elements within a sub-block: its scales, then its codes.

use super::Scales;
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Val};

/// The scales of sub-block `sub` of the block at byte `base` of a `U8` buffer (read through
/// its `F16` view where one is bound).
pub type SubScales =
    for<'b> fn(&'b KernelBuilder, (BufferId, Option<BufferId>), Val<'b>, Val<'b>) -> Scales<'b>;

/// The codes, as `F32` and with every offset but the sub-block's [`Scales::m`] applied, of
/// elements `first..first + n` of the block at byte `base`: `n` a power of two no larger than
/// a sub-block, `first` a multiple of `n`.
pub type RunCodes =
    for<'b> fn(&'b KernelBuilder, BufferId, Val<'b>, Val<'b>, u32) -> Vec<Val<'b>>;

/// A format read through its decoder.
#[derive(Clone, Copy)]
pub struct Packed {
    pub ty: WeightType,
    /// Elements a block holds.
    pub elems: u32,
    /// Bytes a block takes.
    pub bytes: u32,
    /// Elements that share one set of scales.
    pub sub: u32,
    /// Whether its scales carry a minimum ([`Scales::m`]): a product then adds m·Σx.
    pub min: bool,
    pub scales: SubScales,
    pub codes: RunCodes,
}

/// Formats are told apart by their type: two descriptions of one type are one format.
impl PartialEq for Packed {
    fn eq(&self, other: &Packed) -> bool {
        self.ty == other.ty
    }
}

impl Eq for Packed {}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packed")
            .field("ty", &self.ty)
            .field("elems", &self.elems)
            .field("bytes", &self.bytes)
            .field("sub", &self.sub)
            .field("min", &self.min)
            .finish()
    }
}

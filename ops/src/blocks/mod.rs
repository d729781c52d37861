//! One description of each quantized weight type's blocks ([`BlockFormat`]), which every
//! kernel that reads quantized weights takes: the decode products' walks (`matvec`), the
//! 8-bit-activation product and its interleaved layout (`matvec_q8`, `matvec_q8_rows`), the
//! tiled products' staging (`matmul_stage`) and embedding rows. A kernel asks the description
//! how many elements and bytes a block holds and how its scales and codes decode; it never
//! names a type. Each format is one file; the layouts themselves, and the plain-Rust decoding
//! every kernel is checked against, are [`trine_gguf::quant`]'s.
//!
//! A format is [`Flat`] (one step per block, codes a walk reads in bulk: Q8_0, Q4_0, Q4_1),
//! which every product reads with its fast walks, or [`Packed`] (sub-blocks with scales of
//! their own, bits spread over several arrays: the K-quants, Q5_0, Q5_1, IQ4, and Q4_0, Q4_1
//! and Q8_0 in a GPU's groups of eight blocks, `grouped.rs`), which the products read through
//! its decoder of one run of a sub-block.
//!
//! Also here: the f16 conversions the scales need (`f16.rs`) and the CPU's pairing of blocks
//! of nibbles (`pairs.rs`).

mod f16;
mod flat;
mod grouped;
mod iq4_nl;
mod iq4_xs;
mod packed;
mod pairs;
mod q2_k;
mod q3_k;
mod q4_0;
mod q4_1;
mod q4_k;
mod q5_0;
mod q5_1;
mod q5_k;
mod q6_k;
mod q8_0;
mod read;
pub(crate) use read::quad_words;

pub(crate) use f16::round_to_f16;
pub use f16::{f16_bits_to_f32, f16_finite_bits_to_f32, load_f16, load_u16};
pub use flat::{Codes, Flat, Offset};
pub use packed::{Bytes, HeaderScales, IntUnits, Packed, UnitCodes, UnitQuads, UNIT};
pub use pairs::{pair_blocks, pair_scale_bytes, pairs_apply};

use crate::shape::ShapeError;
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Scalar, Val};

/// How a quantized weight type's blocks hold their weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockFormat {
    Flat(Flat),
    Packed(Packed),
}

/// The scales of one block or sub-block.
#[derive(Clone, Copy)]
pub struct Scales<'b> {
    /// The step d.
    pub d: Val<'b>,
    /// What a weight adds besides d·code (a minimum), where the format has it.
    pub m: Option<Val<'b>>,
}

impl<'b> Scales<'b> {
    /// The weight a code stands for (a centred code already centred): `d·code`, plus `m`.
    pub fn value(self, code: Val<'b>) -> Val<'b> {
        match self.m {
            Some(m) => self.d.fma(code, m),
            None => self.d * code,
        }
    }
}

impl BlockFormat {
    /// The formats the kernels decode.
    pub const ALL: [BlockFormat; 15] = [
        BlockFormat::Flat(q8_0::FORMAT),
        BlockFormat::Flat(q4_0::FORMAT),
        BlockFormat::Flat(q4_1::FORMAT),
        BlockFormat::Packed(q5_0::FORMAT),
        BlockFormat::Packed(q5_1::FORMAT),
        BlockFormat::Packed(iq4_nl::FORMAT),
        BlockFormat::Packed(q2_k::FORMAT),
        BlockFormat::Packed(q3_k::FORMAT),
        BlockFormat::Packed(q4_k::FORMAT),
        BlockFormat::Packed(q5_k::FORMAT),
        BlockFormat::Packed(q6_k::FORMAT),
        BlockFormat::Packed(iq4_xs::FORMAT),
        BlockFormat::Packed(grouped::Q4_0X8),
        BlockFormat::Packed(grouped::Q4_1X8),
        BlockFormat::Packed(grouped::Q8_0X8),
    ];

    /// The format of `ty`'s blocks; `None` for plain floats.
    pub fn of(ty: WeightType) -> Option<BlockFormat> {
        BlockFormat::ALL.into_iter().find(|f| f.ty() == ty)
    }

    /// [`BlockFormat::of`], or `op`'s typed refusal naming `ty` and the types it takes.
    pub fn require(op: &'static str, ty: WeightType) -> Result<BlockFormat, ShapeError> {
        BlockFormat::of(ty).ok_or_else(|| {
            let names: Vec<&str> = BlockFormat::ALL.iter().map(|f| f.ty().name()).collect();
            ShapeError::Unsupported {
                op,
                what: format!("{ty} weights (it takes {})", names.join(", ")),
            }
        })
    }

    /// The flat format of `ty`, where it has one.
    pub fn flat_of(ty: WeightType) -> Option<Flat> {
        match BlockFormat::of(ty) {
            Some(BlockFormat::Flat(f)) => Some(f),
            _ => None,
        }
    }

    pub fn ty(self) -> WeightType {
        match self {
            BlockFormat::Flat(f) => f.ty,
            BlockFormat::Packed(p) => p.ty,
        }
    }

    /// Elements a block holds.
    pub fn elems(self) -> u32 {
        match self {
            BlockFormat::Flat(f) => f.elems,
            BlockFormat::Packed(p) => p.elems,
        }
    }

    /// Bytes a block takes.
    pub fn bytes(self) -> u32 {
        match self {
            BlockFormat::Flat(f) => f.bytes,
            BlockFormat::Packed(p) => p.bytes,
        }
    }

    /// Element `j` of the block at byte `base` of a `U8` buffer, dequantised to `F32`: equal
    /// to [`trine_gguf::quant::dequantize`]'s value rounded once to f32.
    pub fn element<'b>(
        self,
        k: &'b KernelBuilder,
        buf: BufferId,
        base: Val<'b>,
        j: Val<'b>,
    ) -> Val<'b> {
        match self {
            BlockFormat::Flat(f) => f.element(k, buf, base, j),
            BlockFormat::Packed(p) => {
                let src = Bytes::U8(buf);
                let s = (p.scales)(k, (src, None), base, j / k.u32(p.sub));
                s.value((p.codes)(k, src, base, j, 1)[0])
            }
        }
    }
}

/// A signed byte as loaded (`U32`, 0..=255), as `F32`: Q8_0's codes, Q6_K's scales, IQ4's
/// table entries.
pub fn signed_byte<'b>(k: &'b KernelBuilder, byte: Val<'b>) -> Val<'b> {
    // Flipping the sign bit and subtracting its weight maps 0..=255 to the two's complement
    // value.
    let byte = byte.cast(Scalar::I32);
    ((byte ^ k.i32(0x80)) - k.i32(0x80)).cast(Scalar::F32)
}

/// The weight types the kernels take: plain floats and every format, the grouped ones last.
pub fn weight_types() -> impl Iterator<Item = WeightType> {
    WeightType::ALL
        .into_iter()
        .chain(WeightType::GROUPED)
        .filter(|&t| !t.is_quantized() || BlockFormat::of(t).is_some())
}

/// `cols` rounded up to whole blocks of `ty`: a case's width for every type.
pub fn whole_blocks(ty: WeightType, cols: u32) -> u32 {
    cols.next_multiple_of(ty.block_elems() as u32)
}

/// The element type a kernel binds weights of `ty` as: quantized blocks are bytes.
pub fn buffer_elem(ty: WeightType) -> Scalar {
    match ty {
        WeightType::F32 => Scalar::F32,
        WeightType::F16 => Scalar::F16,
        _ => Scalar::U8,
    }
}

/// `bytes` padded with zeros to a whole number of 32-bit words: Vulkan binds byte buffers as
/// arrays of words, so a buffer whose length is not a multiple of 4 cannot be bound whole.
pub fn pad_to_words(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.resize(bytes.len().next_multiple_of(4), 0);
    bytes
}

#[cfg(test)]
mod tests;

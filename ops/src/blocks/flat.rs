//! The formats with one step per block ([`Flat`]): Q8_0, Q4_0 and Q4_1, whose codes the
//! fast walks of every product read in bulk (bytes or words of codes, pairs of blocks,
//! interleaved rows, staged halves).

use super::{load_f16, signed_byte, Scales};
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Scalar, Val};

/// A format whose block has one step d, the f16 at byte 0, and codes that a walk reads in
/// bulk: the arrangement the fast walks read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flat {
    pub ty: WeightType,
    /// Elements a block holds.
    pub elems: u32,
    /// Bytes a block takes.
    pub bytes: u32,
    /// The byte of a block at which its codes start, after its scales.
    pub codes_at: u32,
    pub codes: Codes,
    pub offset: Offset,
}

/// How a block's bytes hold its codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codes {
    /// One signed byte per element, in order.
    Bytes,
    /// Two unsigned 4-bit codes per byte: byte `i` holds element `i` in its low nibble and
    /// element `i + span` in its high one (`span` a power of two).
    Nibbles { span: u32 },
}

/// What a weight is besides the step times its code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offset {
    /// `d·code`.
    None,
    /// `d·(code − centre)`.
    Centre(u32),
    /// `d·code + m`, m the f16 at byte `at` of the block.
    Min { at: u32 },
}

impl Flat {
    /// Bytes of a block's codes.
    pub fn code_bytes(self) -> u32 {
        self.bytes - self.codes_at
    }

    /// 32-bit words of a block's codes.
    pub fn code_words(self) -> u32 {
        self.code_bytes() / 4
    }

    /// Whether a byte holds two codes.
    pub fn nibbles(self) -> bool {
        matches!(self.codes, Codes::Nibbles { .. })
    }

    /// The element distance between a byte's two codes ([`Codes::Nibbles`]); 0 for one code
    /// a byte.
    pub fn span(self) -> u32 {
        match self.codes {
            Codes::Bytes => 0,
            Codes::Nibbles { span } => span,
        }
    }

    /// Whether weights add a minimum ([`Offset::Min`]): a product then adds m·Σx per block.
    pub fn has_min(self) -> bool {
        matches!(self.offset, Offset::Min { .. })
    }

    /// The centre codes are taken from ([`Offset::Centre`]), as `F32`; `None` otherwise.
    pub fn centre(self) -> Option<f32> {
        match self.offset {
            Offset::Centre(c) => Some(c as f32),
            _ => None,
        }
    }

    /// Bytes of a row of `cols` elements.
    pub fn row_bytes<'b>(self, k: &'b KernelBuilder, cols: Val<'b>) -> Val<'b> {
        (cols / k.u32(self.elems)) * k.u32(self.bytes)
    }

    /// Loads the scales of the block at byte `base` of a `U8` buffer, through its `F16` view
    /// where there is one ([`load_f16`]).
    pub fn scales<'b>(
        self,
        k: &'b KernelBuilder,
        (buf, view): (BufferId, Option<BufferId>),
        base: Val<'b>,
    ) -> Scales<'b> {
        let d = load_f16(k, buf, view, base);
        let m = match self.offset {
            Offset::Min { at } => Some(load_f16(k, buf, view, base + k.u32(at))),
            _ => None,
        };
        Scales { d, m }
    }

    /// [`Flat::scales`] of a block whose scales start `first` bytes after byte `at`
    /// (as a pair's second block's do, [`super::pair_blocks`]), each at one constant offset
    /// from `at`.
    pub fn scales_after<'b>(
        self,
        k: &'b KernelBuilder,
        (buf, view): (BufferId, Option<BufferId>),
        at: Val<'b>,
        first: u32,
    ) -> Scales<'b> {
        let d = load_f16(k, buf, view, at + k.u32(first));
        let m = match self.offset {
            Offset::Min { at: m } => Some(load_f16(k, buf, view, at + k.u32(first + m))),
            _ => None,
        };
        Scales { d, m }
    }

    /// The two codes of a byte as loaded (`U32`) of [`Codes::Nibbles`]: low nibble, high
    /// nibble, as `F32`, centred where the format centres them.
    pub fn nibble_codes<'b>(self, k: &'b KernelBuilder, byte: Val<'b>) -> (Val<'b>, Val<'b>) {
        let lo = (byte & k.u32(15)).cast(Scalar::F32);
        let hi = (byte >> k.u32(4)).cast(Scalar::F32);
        match self.centre() {
            Some(c) => (lo - k.f32(c), hi - k.f32(c)),
            None => (lo, hi),
        }
    }

    /// Code byte `i` of the block at byte `base`: its code as `F32` ([`Codes::Bytes`]).
    pub fn byte_code<'b>(
        self,
        k: &'b KernelBuilder,
        buf: BufferId,
        base: Val<'b>,
        i: Val<'b>,
    ) -> Val<'b> {
        signed_byte(k, k.load(buf, base + k.u32(self.codes_at) + i))
    }

    /// The two codes of code byte `i` of the block at byte `base` ([`Codes::Nibbles`]):
    /// elements `i` and `i + span`.
    pub fn byte_nibbles<'b>(
        self,
        k: &'b KernelBuilder,
        buf: BufferId,
        base: Val<'b>,
        i: Val<'b>,
    ) -> (Val<'b>, Val<'b>) {
        self.nibble_codes(k, k.load(buf, base + k.u32(self.codes_at) + i))
    }

    /// The code of element `j` of the block at byte `base` of a `U8` buffer, as `F32`,
    /// centred where the format centres them.
    pub fn code<'b>(
        self,
        k: &'b KernelBuilder,
        buf: BufferId,
        base: Val<'b>,
        j: Val<'b>,
    ) -> Val<'b> {
        match self.codes {
            Codes::Bytes => self.byte_code(k, buf, base, j),
            Codes::Nibbles { span } => {
                let (lo, hi) = self.byte_nibbles(k, buf, base, j & k.u32(span - 1));
                k.select(j.lt(k.u32(span)), lo, hi)
            }
        }
    }

    /// Element `j` of the block at byte `base` of a `U8` buffer, dequantised to `F32`: equal
    /// to [`trine_gguf::quant::dequantize`]'s value rounded once to f32 (d·q is exact).
    pub fn element<'b>(
        self,
        k: &'b KernelBuilder,
        buf: BufferId,
        base: Val<'b>,
        j: Val<'b>,
    ) -> Val<'b> {
        let s = self.scales(k, (buf, None), base);
        s.value(self.code(k, buf, base, j))
    }
}

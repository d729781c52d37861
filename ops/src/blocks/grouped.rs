//! Q4_0, Q4_1 and Q8_0 in groups of eight blocks ([`trine_gguf::quant::regroup`]), the layout
//! a GPU holds its products' weights in: a packed format of 256 elements in sub-blocks of 32,
//! one per block of the group, each block's scales at the group's front and its codes after
//! them. A group is a multiple of 16 bytes (144, 160, 272) and so is every block's first byte
//! of codes: a unit of byte codes ([`IntUnits`]) is one 16-byte quad of nibbles, or two quads
//! of Q8_0's signed bytes, which [`trine_ir::BinaryOp::Dot4I8`] multiplies as signed bytes as
//! they are.

use super::packed::{centred, nibble_words, Bytes, IntUnits, Packed, UnitCodes};
use super::read::{bytes, half, quad_words, split_nibbles};
use super::{signed_byte, Scales};
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Val};

/// Q4_0 grouped: eight f16 steps d, then eight blocks' 16 bytes of nibbles; element j of block
/// b is d_b·(n(j) − 8), n(j) as in Q4_0's block.
pub(super) const Q4_0X8: Packed = Packed {
    ty: WeightType::Q4_0x8,
    elems: 256,
    bytes: 144,
    sub: 32,
    min: false,
    nibbles: false,
    scales: steps::<2>,
    codes: nibble_codes::<{ codes_at(2) }, 8>,
    units: Some(IntUnits {
        words: nibble_units::<{ codes_at(2) }>,
        centre: 8,
        one_sub: true,
        header: None,
        pairs_share: false,
        quads: None,
    }),
};

/// Q4_1 grouped: eight pairs of f16 d and m, then eight blocks' 16 bytes of nibbles; element
/// j of block b is d_b·n(j) + m_b.
pub(super) const Q4_1X8: Packed = Packed {
    ty: WeightType::Q4_1x8,
    elems: 256,
    bytes: 160,
    sub: 32,
    min: true,
    nibbles: true,
    scales: steps_and_mins,
    codes: nibble_codes::<{ codes_at(4) }, 0>,
    units: Some(IntUnits {
        words: nibble_units::<{ codes_at(4) }>,
        centre: 0,
        one_sub: true,
        header: None,
        pairs_share: false,
        quads: None,
    }),
};

/// Q8_0 grouped: eight f16 steps d, then eight blocks' 32 signed bytes; element j of block b
/// is d_b·q_b[j].
pub(super) const Q8_0X8: Packed = Packed {
    ty: WeightType::Q8_0x8,
    elems: 256,
    bytes: 272,
    sub: 32,
    min: false,
    nibbles: false,
    scales: steps::<2>,
    codes: byte_codes,
    units: Some(IntUnits {
        words: byte_units,
        centre: 0,
        one_sub: true,
        header: None,
        pairs_share: false,
        quads: None,
    }),
};

/// Where a group of eight blocks' codes start: after their scales of `S` bytes each.
const fn codes_at(scale_bytes: u32) -> u32 {
    8 * scale_bytes
}

/// Block `sub`'s step, the f16 at `S·sub` (Q4_0's and Q8_0's `S` 2).
fn steps<'b, const S: u32>(
    k: &'b KernelBuilder,
    (src, view): (Bytes, Option<BufferId>),
    base: Val<'b>,
    sub: Val<'b>,
) -> Scales<'b> {
    Scales {
        d: half(k, (src, view), base + sub * k.u32(S)),
        m: None,
    }
}

/// Block `sub`'s step and minimum, the f16s at `4·sub` and `4·sub + 2`.
fn steps_and_mins<'b>(
    k: &'b KernelBuilder,
    (src, view): (Bytes, Option<BufferId>),
    base: Val<'b>,
    sub: Val<'b>,
) -> Scales<'b> {
    let at = base + sub * k.u32(4);
    Scales {
        d: half(k, (src, view), at),
        m: Some(half(k, (src, view), at + k.u32(2))),
    }
}

/// The codes of elements `first..first + n` of a group of nibble blocks whose codes start at
/// byte `AT`, less `CENTRE`.
fn nibble_codes<'b, const AT: u32, const CENTRE: i32>(
    k: &'b KernelBuilder,
    src: Bytes,
    base: Val<'b>,
    first: Val<'b>,
    n: u32,
) -> Vec<Val<'b>> {
    let at = base + k.u32(AT) + (first / k.u32(32)) * k.u32(16);
    split_nibbles(k, src, at, (first % k.u32(32), n), true)
        .into_iter()
        .map(|q| centred(k, q, CENTRE))
        .collect()
}

/// Unit u of a group of nibble blocks whose codes start at byte `AT`: block u's 16 bytes,
/// elements 0..16 in their low nibbles and 16..32 in their high ones.
fn nibble_units<'b, const AT: u32>(
    k: &'b KernelBuilder,
    w: BufferId,
    base: Val<'b>,
    unit: Val<'b>,
) -> UnitCodes<'b> {
    let words = quad_words(k, w, base + k.u32(AT) + unit * k.u32(16));
    let first = unit * k.u32(32);
    UnitCodes {
        runs: [
            (first, nibble_words(k, &words, false)),
            (first + k.u32(16), nibble_words(k, &words, true)),
        ],
    }
}

const Q8_CODES_AT: u32 = codes_at(2);

fn byte_codes<'b>(
    k: &'b KernelBuilder,
    src: Bytes,
    base: Val<'b>,
    first: Val<'b>,
    n: u32,
) -> Vec<Val<'b>> {
    bytes(k, src, base + k.u32(Q8_CODES_AT) + first, n, true)
        .into_iter()
        .map(|q| signed_byte(k, q))
        .collect()
}

/// Unit u: block u's 32 signed bytes, two quads.
fn byte_units<'b>(
    k: &'b KernelBuilder,
    w: BufferId,
    base: Val<'b>,
    unit: Val<'b>,
) -> UnitCodes<'b> {
    let at = base + k.u32(Q8_CODES_AT) + unit * k.u32(32);
    let first = unit * k.u32(32);
    UnitCodes {
        runs: [
            (first, quad_words(k, w, at)),
            (first + k.u32(16), quad_words(k, w, at + k.u32(16))),
        ],
    }
}

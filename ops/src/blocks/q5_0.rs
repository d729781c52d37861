//! Q5_0: an f16 step d, a little-endian u32 of high bits, then 16 bytes of nibbles; element
//! j's code is nibble j/16 of byte j%16 with bit j of the u32 as its 16, and its value
//! d·(code − 16).

use super::packed::{centred, step_at_0, Bytes, Packed};
use super::read::{on_words, split_nibbles, u32_at};
use trine_gguf::quant::WeightType;
use trine_ir::{KernelBuilder, Val};

pub(super) const FORMAT: Packed = Packed {
    ty: WeightType::Q5_0,
    elems: 32,
    bytes: 22,
    sub: 32,
    min: false,
    nibbles: false,
    scales: step_at_0,
    codes,
    units: None,
};

fn codes<'b>(
    k: &'b KernelBuilder,
    src: Bytes,
    base: Val<'b>,
    first: Val<'b>,
    n: u32,
) -> Vec<Val<'b>> {
    let at = (base + k.u32(2), base + k.u32(6));
    five_bit(k, src, at, (first, n), (on_words(FORMAT.bytes), 16))
}

/// The 5-bit codes, less `centre`, as `F32`, of elements `first..first + n` of a block whose
/// high bits are the u32 at byte `high` and whose nibbles start at byte `low` (Q5_0's and
/// Q5_1's arrangement), on words where `aligned`.
pub(super) fn five_bit<'b>(
    k: &'b KernelBuilder,
    src: Bytes,
    (high, low): (Val<'b>, Val<'b>),
    (first, n): (Val<'b>, u32),
    (aligned, centre): (bool, i32),
) -> Vec<Val<'b>> {
    let bits = u32_at(k, src, high);
    split_nibbles(k, src, low, (first, n), aligned)
        .into_iter()
        .enumerate()
        .map(|(i, q)| {
            let j = first + k.u32(i as u32);
            centred(k, q | (((bits >> j) & k.u32(1)) << k.u32(4)), centre)
        })
        .collect()
}

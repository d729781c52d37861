//! Q4_K: super-blocks of 256 elements in eight sub-blocks of 32. An f16 step d and an f16
//! minimum step dmin, twelve bytes of 6-bit scales and minimums ([`k_scales`]), then 128
//! bytes of nibbles: chunk c of 64 elements is bytes 32c..32c+32, sub-block 2c in their low
//! nibbles and 2c + 1 in their high ones. Element value d·sc·q − dmin·mn.

use super::packed::{
    centred, k_header_scales, k_scales, nibble_words, Bytes, IntUnits, Packed, UnitCodes, UnitQuads,
};
use super::read::{nibbles, on_words};
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Val};

pub(super) const FORMAT: Packed = Packed {
    ty: WeightType::Q4_K,
    elems: 256,
    bytes: 144,
    sub: 32,
    min: true,
    nibbles: true,
    scales: k_scales,
    codes,
    units: Some(IntUnits {
        words: units,
        centre: 0,
        one_sub: false,
        header: Some(k_header_scales),
        pairs_share: true,
        quads: Some(QUADS),
    }),
};

const CODES_AT: u32 = 16;

fn codes<'b>(
    k: &'b KernelBuilder,
    src: Bytes,
    base: Val<'b>,
    first: Val<'b>,
    n: u32,
) -> Vec<Val<'b>> {
    let chunk = first / k.u32(64);
    let at = base + k.u32(CODES_AT) + chunk * k.u32(32) + first % k.u32(32);
    let high = (first / k.u32(32)) & k.u32(1);
    nibbles(k, src, at, (high, n), on_words(FORMAT.bytes))
        .into_iter()
        .map(|q| centred(k, q, 0))
        .collect()
}

/// Unit u: 16 bytes of chunk u/2's codes (its half u%2), elements 16·(u%2).. of sub-block
/// 2·(u/2) in their low nibbles and of the next sub-block in their high ones.
fn units<'b>(k: &'b KernelBuilder, w: BufferId, base: Val<'b>, unit: Val<'b>) -> UnitCodes<'b> {
    QUADS.load(k, w, base, unit)
}

/// Blocks of 144 bytes keep every unit on 16 bytes: one quad.
const QUADS: UnitQuads = UnitQuads {
    count: 1,
    at: unit_quads,
    decode: unit_decode,
};

fn unit_quads<'b>(k: &'b KernelBuilder, base: Val<'b>, unit: Val<'b>) -> Vec<Val<'b>> {
    let (chunk, half) = (unit >> k.u32(1), unit & k.u32(1));
    vec![base + k.u32(CODES_AT) + chunk * k.u32(32) + half * k.u32(16)]
}

fn unit_decode<'b>(k: &'b KernelBuilder, quads: &[[Val<'b>; 4]], unit: Val<'b>) -> UnitCodes<'b> {
    let (chunk, half) = (unit >> k.u32(1), unit & k.u32(1));
    let first = chunk * k.u32(64) + half * k.u32(16);
    UnitCodes {
        runs: [
            (first, nibble_words(k, &quads[0], false)),
            (first + k.u32(32), nibble_words(k, &quads[0], true)),
        ],
    }
}

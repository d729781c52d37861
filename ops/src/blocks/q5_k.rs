//! Q5_K: Q4_K's layout with a fifth bit per code. An f16 d and dmin, twelve bytes of 6-bit
//! scales and minimums ([`k_scales`]), 32 bytes of high bits, then 128 bytes of nibbles as
//! Q4_K's: element l of sub-block s (chunk c = s/2) takes bit s of high-bit byte l as its
//! code's 16. Element value d·sc·q − dmin·mn.

use super::packed::{
    centred, k_header_scales, k_scales, nibbles_with_high_bits, Bytes, IntUnits, Packed, UnitCodes,
    UnitQuads,
};
use super::read::{bytes, nibbles, on_words};
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Val};

pub(super) const FORMAT: Packed = Packed {
    ty: WeightType::Q5_K,
    elems: 256,
    bytes: 176,
    sub: 32,
    min: true,
    nibbles: false,
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

const HIGH_AT: u32 = 16;
const CODES_AT: u32 = 48;

fn codes<'b>(
    k: &'b KernelBuilder,
    src: Bytes,
    base: Val<'b>,
    first: Val<'b>,
    n: u32,
) -> Vec<Val<'b>> {
    let sub = first / k.u32(32);
    let l = first % k.u32(32);
    let at = base + k.u32(CODES_AT) + (sub / k.u32(2)) * k.u32(32) + l;
    let aligned = on_words(FORMAT.bytes);
    let low = nibbles(k, src, at, (sub & k.u32(1), n), aligned);
    // The run's high-bit bytes read as one run (a word at a time from words), not a load each.
    let high = bytes(k, src, base + k.u32(HIGH_AT) + l, n, aligned);
    low.into_iter()
        .zip(high)
        .map(|(q, h)| centred(k, q | (((h >> sub) & k.u32(1)) << k.u32(4)), 0))
        .collect()
}

/// Unit u: Q4_K's nibbles of unit u, each code's fifth bit from the high-bit bytes of its
/// elements (16·(u%2)..), bit 2·(u/2) for the low nibbles' sub-block and the next for the
/// high ones'.
fn units<'b>(k: &'b KernelBuilder, w: BufferId, base: Val<'b>, unit: Val<'b>) -> UnitCodes<'b> {
    QUADS.load(k, w, base, unit)
}

/// Blocks of 176 bytes keep every unit's codes and high bits on 16 bytes: two quads.
const QUADS: UnitQuads = UnitQuads {
    count: 2,
    at: unit_quads,
    decode: unit_decode,
};

fn unit_quads<'b>(k: &'b KernelBuilder, base: Val<'b>, unit: Val<'b>) -> Vec<Val<'b>> {
    let (chunk, half) = (unit >> k.u32(1), unit & k.u32(1));
    vec![
        base + k.u32(CODES_AT) + chunk * k.u32(32) + half * k.u32(16),
        base + k.u32(HIGH_AT) + half * k.u32(16),
    ]
}

fn unit_decode<'b>(k: &'b KernelBuilder, quads: &[[Val<'b>; 4]], unit: Val<'b>) -> UnitCodes<'b> {
    let (chunk, half) = (unit >> k.u32(1), unit & k.u32(1));
    let first = chunk * k.u32(64) + half * k.u32(16);
    let sub = chunk * k.u32(2);
    nibbles_with_high_bits(
        k,
        (&quads[0], &quads[1]),
        0x0101_0101,
        [(first, sub), (first + k.u32(32), sub + k.u32(1))],
    )
}

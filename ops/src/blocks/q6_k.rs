//! Q6_K: super-blocks of 256 elements in sixteen sub-blocks of 16. 128 bytes of low nibbles,
//! 64 bytes of high bit pairs, sixteen signed 8-bit scales, then an f16 step d. In each half h
//! of 128 elements, quarter q's element l (0..32) takes nibble q/2 of low byte 64h + 32(q%2) + l
//! and bits 2q..2q+2 of high byte 32h + l. Element value d·sc·(q − 32).

use super::packed::{centred, nibbles_with_high_bits, Bytes, IntUnits, Packed, UnitCodes};
use super::read::{byte, bytes, half, nibbles, on_words, run_words};
use super::{signed_byte, Scales};
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Val};

pub(super) const FORMAT: Packed = Packed {
    ty: WeightType::Q6_K,
    elems: 256,
    bytes: 210,
    sub: 16,
    min: false,
    nibbles: false,
    scales,
    codes,
    units: Some(IntUnits {
        words: units,
        centre: 32,
        one_sub: false,
        header: None,
        pairs_share: false,
        quads: None,
    }),
};

const HIGH_AT: u32 = 128;
const SCALES_AT: u32 = 192;
const D_AT: u32 = 208;

fn scales<'b>(
    k: &'b KernelBuilder,
    (src, view): (Bytes, Option<BufferId>),
    base: Val<'b>,
    sub: Val<'b>,
) -> Scales<'b> {
    let d = half(k, (src, view), base + k.u32(D_AT));
    let sc = signed_byte(k, byte(k, src, base + k.u32(SCALES_AT) + sub));
    Scales { d: d * sc, m: None }
}

fn codes<'b>(
    k: &'b KernelBuilder,
    src: Bytes,
    base: Val<'b>,
    first: Val<'b>,
    n: u32,
) -> Vec<Val<'b>> {
    let half = first / k.u32(128);
    let quarter = (first / k.u32(32)) & k.u32(3);
    let l = first % k.u32(32);
    let low_at = base + half * k.u32(64) + (quarter & k.u32(1)) * k.u32(32) + l;
    let high_at = base + k.u32(HIGH_AT) + half * k.u32(32) + l;
    let shift = quarter * k.u32(2);
    let aligned = on_words(FORMAT.bytes);
    // The run's high-bit bytes read as one run (a word at a time from words), not a load each.
    let high = bytes(k, src, high_at, n, aligned);
    nibbles(k, src, low_at, (quarter >> k.u32(1), n), aligned)
        .into_iter()
        .zip(high)
        .map(|(q, h)| centred(k, q | (((h >> shift) & k.u32(3)) << k.u32(4)), 32))
        .collect()
}

/// Unit u of half h = u/4: 16 low-nibble bytes (quarter pair p = (u/2)%2, elements
/// 16·(u%2).. of a quarter), quarter p in their low nibbles and quarter p + 2 in their high
/// ones, each code's top two bits from the high-bit bytes of the same elements (bits 2p and
/// 2p + 4). A block is 210 bytes, so every other block's words start mid-word.
fn units<'b>(k: &'b KernelBuilder, w: BufferId, base: Val<'b>, unit: Val<'b>) -> UnitCodes<'b> {
    let h = unit >> k.u32(2);
    let pair = (unit >> k.u32(1)) & k.u32(1);
    let l = (unit & k.u32(1)) * k.u32(16);
    let aligned = on_words(FORMAT.bytes);
    let low = run_words(
        k,
        w,
        base + h * k.u32(64) + pair * k.u32(32) + l,
        16,
        aligned,
    );
    let high = run_words(k, w, base + k.u32(HIGH_AT) + h * k.u32(32) + l, 16, aligned);
    let first = h * k.u32(128) + pair * k.u32(32) + l;
    let shift = pair * k.u32(2);
    nibbles_with_high_bits(
        k,
        (&low, &high),
        0x0303_0303,
        [(first, shift), (first + k.u32(64), shift + k.u32(4))],
    )
}

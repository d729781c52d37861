//! Q5_K: Q4_K's layout with a fifth bit per code. An f16 d and dmin, twelve bytes of 6-bit
//! scales and minimums ([`k_scales`]), 32 bytes of high bits, then 128 bytes of nibbles as
//! Q4_K's: element l of sub-block s (chunk c = s/2) takes bit s of high-bit byte l as its
//! code's 16. Element value d·sc·q − dmin·mn.

use super::packed::{centred, k_scales, Bytes, Packed};
use super::read::{byte, nibbles, on_words};
use trine_gguf::quant::WeightType;
use trine_ir::{KernelBuilder, Val};

pub(super) const FORMAT: Packed = Packed {
    ty: WeightType::Q5_K,
    elems: 256,
    bytes: 176,
    sub: 32,
    min: true,
    nibbles: false,
    scales: k_scales,
    codes,
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
    let low = nibbles(k, src, at, (sub & k.u32(1), n), on_words(FORMAT.bytes));
    low.into_iter()
        .enumerate()
        .map(|(i, q)| {
            let h = byte(k, src, base + k.u32(HIGH_AT) + l + k.u32(i as u32));
            centred(k, q | (((h >> sub) & k.u32(1)) << k.u32(4)), 0)
        })
        .collect()
}

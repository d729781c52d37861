//! IQ4_XS: super-blocks of 256 elements in eight sub-blocks of 32. An f16 step d, a
//! little-endian u16 of scales' top bit pairs, four bytes of scales' low nibbles, then 128
//! bytes of nibbles: sub-block s is bytes 16s..16s+16, arranged as an IQ4_NL block's. Scale s
//! is nibble s%2 of byte s/2 with bits 2s..2s+2 of the u16 above it, less 32. Element value
//! d·sc·table[code] ([`iq4_value`]).

use super::packed::{iq4_value, Bytes, Packed};
use super::read::{byte, half, on_words, split_nibbles, u16_at};
use super::Scales;
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Scalar, Val};

pub(super) const FORMAT: Packed = Packed {
    ty: WeightType::IQ4_XS,
    elems: 256,
    bytes: 136,
    sub: 32,
    min: false,
    nibbles: false,
    scales,
    codes,
    units: None,
};

const CODES_AT: u32 = 8;

fn scales<'b>(
    k: &'b KernelBuilder,
    (src, view): (Bytes, Option<BufferId>),
    base: Val<'b>,
    sub: Val<'b>,
) -> Scales<'b> {
    let d = half(k, (src, view), base);
    let low = (byte(k, src, base + k.u32(4) + (sub >> k.u32(1))) >> ((sub & k.u32(1)) * k.u32(4)))
        & k.u32(15);
    let top = (u16_at(k, src, base + k.u32(2)) >> (sub * k.u32(2))) & k.u32(3);
    let ls = (low | (top << k.u32(4))).cast(Scalar::I32) - k.i32(32);
    Scales {
        d: d * ls.cast(Scalar::F32),
        m: None,
    }
}

fn codes<'b>(
    k: &'b KernelBuilder,
    src: Bytes,
    base: Val<'b>,
    first: Val<'b>,
    n: u32,
) -> Vec<Val<'b>> {
    let at = base + k.u32(CODES_AT) + (first / k.u32(32)) * k.u32(16);
    split_nibbles(k, src, at, (first % k.u32(32), n), on_words(FORMAT.bytes))
        .into_iter()
        .map(|q| iq4_value(k, q))
        .collect()
}

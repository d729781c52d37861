//! Q2_K: super-blocks of 256 elements in sixteen sub-blocks of 16. Sixteen bytes of 4-bit
//! scale (low nibble) and minimum (high nibble), 64 bytes of 2-bit codes, then an f16 step d
//! and an f16 minimum step dmin. In each half h of 128 elements, element 32j + r takes bits
//! 2j..2j+2 of code byte 32h + r. Element value d·sc·q − dmin·mn.

use super::packed::{centred, Bytes, Packed};
use super::read::{byte, half};
use super::Scales;
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Scalar, Val};

pub(super) const FORMAT: Packed = Packed {
    ty: WeightType::Q2_K,
    elems: 256,
    bytes: 84,
    sub: 16,
    min: true,
    nibbles: true,
    scales,
    codes,
    units: None,
};

const CODES_AT: u32 = 16;
const D_AT: u32 = 80;

fn scales<'b>(
    k: &'b KernelBuilder,
    (src, view): (Bytes, Option<BufferId>),
    base: Val<'b>,
    sub: Val<'b>,
) -> Scales<'b> {
    let d = half(k, (src, view), base + k.u32(D_AT));
    let dmin = half(k, (src, view), base + k.u32(D_AT + 2));
    let s = byte(k, src, base + sub);
    let sc = (s & k.u32(15)).cast(Scalar::F32);
    let mn = (s >> k.u32(4)).cast(Scalar::F32);
    Scales {
        d: d * sc,
        m: Some(-(dmin * mn)),
    }
}

fn codes<'b>(
    k: &'b KernelBuilder,
    src: Bytes,
    base: Val<'b>,
    first: Val<'b>,
    n: u32,
) -> Vec<Val<'b>> {
    let (at, shift) = crumbs(k, base + k.u32(CODES_AT), first);
    (0..n)
        .map(|i| {
            let q = (byte(k, src, at + k.u32(i)) >> shift) & k.u32(3);
            centred(k, q, 0)
        })
        .collect()
}

/// Where element `first`'s 2-bit code lies in 64 bytes of codes from `at`, as Q2_K and Q3_K
/// arrange them: its byte and the shift of its bits.
pub(super) fn crumbs<'b>(k: &'b KernelBuilder, at: Val<'b>, first: Val<'b>) -> (Val<'b>, Val<'b>) {
    let half = first / k.u32(128);
    let pair = (first / k.u32(32)) & k.u32(3);
    (at + half * k.u32(32) + first % k.u32(32), pair * k.u32(2))
}

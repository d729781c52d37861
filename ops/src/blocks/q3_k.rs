//! Q3_K: super-blocks of 256 elements in sixteen sub-blocks of 16. 32 bytes of high bits, 64
//! bytes of 2-bit codes arranged as Q2_K's ([`crumbs`]), twelve bytes of 6-bit signed scales,
//! then an f16 step d. Element 128h + 32j + r takes bit 4h + j of high byte r: set, its code
//! is the two bits; clear, the two bits less 4. Scale i's low four bits are nibble i/8 of
//! byte i%8, its top two bits 2(i/4)..2(i/4)+2 of byte 8 + i%4; its value less 32. Element
//! value d·sc·code.

use super::packed::{Bytes, Packed};
use super::q2_k::crumbs;
use super::read::{byte, half};
use super::Scales;
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Scalar, Val};

pub(super) const FORMAT: Packed = Packed {
    ty: WeightType::Q3_K,
    elems: 256,
    bytes: 110,
    sub: 16,
    min: false,
    nibbles: false,
    scales,
    codes,
    units: None,
};

const CODES_AT: u32 = 32;
const SCALES_AT: u32 = 96;
const D_AT: u32 = 108;

fn scales<'b>(
    k: &'b KernelBuilder,
    (src, view): (Bytes, Option<BufferId>),
    base: Val<'b>,
    sub: Val<'b>,
) -> Scales<'b> {
    let d = half(k, (src, view), base + k.u32(D_AT));
    let at = base + k.u32(SCALES_AT);
    let low = (byte(k, src, at + (sub & k.u32(7))) >> ((sub >> k.u32(3)) * k.u32(4))) & k.u32(15);
    let top = (byte(k, src, at + k.u32(8) + (sub & k.u32(3))) >> ((sub >> k.u32(2)) * k.u32(2)))
        & k.u32(3);
    let sc = (low | (top << k.u32(4))).cast(Scalar::I32) - k.i32(32);
    Scales {
        d: d * sc.cast(Scalar::F32),
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
    let (at, shift) = crumbs(k, base + k.u32(CODES_AT), first);
    let bit = (first / k.u32(128)) * k.u32(4) + ((first / k.u32(32)) & k.u32(3));
    let r = first % k.u32(32);
    (0..n)
        .map(|i| {
            let q = (byte(k, src, at + k.u32(i)) >> shift) & k.u32(3);
            let h = (byte(k, src, base + r + k.u32(i)) >> bit) & k.u32(1);
            // Clear, the code is 4 below its two bits.
            let code = (q | (h << k.u32(2))).cast(Scalar::I32) - k.i32(4);
            code.cast(Scalar::F32)
        })
        .collect()
}

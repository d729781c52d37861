//! Q5_1: an f16 step d and an f16 minimum m, a little-endian u32 of high bits, then 16 bytes
//! of nibbles, arranged as Q5_0's; element value d·code + m.

use super::packed::{Bytes, Packed};
use super::q5_0::five_bit;
use super::read::{half, on_words};
use super::Scales;
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Val};

pub(super) const FORMAT: Packed = Packed {
    ty: WeightType::Q5_1,
    elems: 32,
    bytes: 24,
    sub: 32,
    min: true,
    nibbles: false,
    scales,
    codes,
    units: None,
};

fn scales<'b>(
    k: &'b KernelBuilder,
    (src, view): (Bytes, Option<BufferId>),
    base: Val<'b>,
    _sub: Val<'b>,
) -> Scales<'b> {
    Scales {
        d: half(k, (src, view), base),
        m: Some(half(k, (src, view), base + k.u32(2))),
    }
}

fn codes<'b>(
    k: &'b KernelBuilder,
    src: Bytes,
    base: Val<'b>,
    first: Val<'b>,
    n: u32,
) -> Vec<Val<'b>> {
    let at = (base + k.u32(4), base + k.u32(8));
    five_bit(k, src, at, (first, n), (on_words(FORMAT.bytes), 0))
}

//! IQ4_NL: an f16 step d, then 16 bytes of nibbles arranged as Q4_0's; a code indexes a
//! fixed table of 16 values ([`iq4_value`]). Element value d·table[code].

use super::packed::{iq4_value, split_nibbles, Packed};
use super::{load_f16, Scales};
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Val};

pub(super) const FORMAT: Packed = Packed {
    ty: WeightType::IQ4_NL,
    elems: 32,
    bytes: 18,
    sub: 32,
    min: false,
    scales,
    codes,
};

fn scales<'b>(
    k: &'b KernelBuilder,
    (buf, view): (BufferId, Option<BufferId>),
    base: Val<'b>,
    _sub: Val<'b>,
) -> Scales<'b> {
    Scales {
        d: load_f16(k, buf, view, base),
        m: None,
    }
}

fn codes<'b>(
    k: &'b KernelBuilder,
    buf: BufferId,
    base: Val<'b>,
    first: Val<'b>,
    n: u32,
) -> Vec<Val<'b>> {
    split_nibbles(k, buf, base + k.u32(2), first, n)
        .into_iter()
        .map(|q| iq4_value(k, q))
        .collect()
}

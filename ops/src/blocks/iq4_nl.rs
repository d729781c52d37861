//! IQ4_NL: an f16 step d, then 16 bytes of nibbles arranged as Q4_0's; a code indexes a
//! fixed table of 16 values ([`iq4_value`]). Element value d·table[code].

use super::packed::{iq4_value, step_at_0, Bytes, Packed};
use super::read::{on_words, split_nibbles};
use trine_gguf::quant::WeightType;
use trine_ir::{KernelBuilder, Val};

pub(super) const FORMAT: Packed = Packed {
    ty: WeightType::IQ4_NL,
    elems: 32,
    bytes: 18,
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
    split_nibbles(k, src, base + k.u32(2), (first, n), on_words(FORMAT.bytes))
        .into_iter()
        .map(|q| iq4_value(k, q))
        .collect()
}

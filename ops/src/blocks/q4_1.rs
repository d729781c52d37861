//! Q4_1: an f16 step d and an f16 minimum m, then 16 bytes of nibbles; element j is
//! d·n(j) + m, n(j) as Q4_0's.

use super::{Codes, Flat, Offset};
use trine_gguf::quant::WeightType;

pub(super) const FORMAT: Flat = Flat {
    ty: WeightType::Q4_1,
    elems: 32,
    bytes: 20,
    codes_at: 4,
    codes: Codes::Nibbles { span: 16 },
    offset: Offset::Min { at: 2 },
};

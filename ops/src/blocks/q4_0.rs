//! Q4_0: an f16 step d, then 16 bytes of nibbles; element j is d·(n(j) − 8), n(j) the low
//! nibble of byte j below 16 and the high nibble of byte j − 16 from 16 on.

use super::{Codes, Flat, Offset};
use trine_gguf::quant::WeightType;

pub(super) const FORMAT: Flat = Flat {
    ty: WeightType::Q4_0,
    elems: 32,
    bytes: 18,
    codes_at: 2,
    codes: Codes::Nibbles { span: 16 },
    offset: Offset::Centre(8),
};

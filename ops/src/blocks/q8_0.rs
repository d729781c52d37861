//! Q8_0: an f16 step d, then 32 signed bytes; element j is d·q[j].

use super::{Codes, Flat, Offset};
use trine_gguf::quant::WeightType;

pub(super) const FORMAT: Flat = Flat {
    ty: WeightType::Q8_0,
    elems: 32,
    bytes: 34,
    codes_at: 2,
    codes: Codes::Bytes,
    offset: Offset::None,
};

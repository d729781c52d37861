//! IR literals as naga expressions.
//!
//! naga literals cannot be NaN or infinite, so such floats are written as the bitcast of their
//! bits (through f32 for f16, which keeps infinities and quietens NaNs).

use super::func::Lowerer;
use naga::{Block, Expression, Handle, Literal, ScalarKind};

impl Lowerer<'_> {
    pub(super) fn ir_literal(
        &mut self,
        l: trine_ir::Literal,
        block: &mut Block,
    ) -> Handle<Expression> {
        match l {
            trine_ir::Literal::F32(bits) => self.float(f32::from_bits(bits), block),
            trine_ir::Literal::F16(bits) => {
                let v = f16_to_f32(bits);
                // naga keeps f16 literals as `half::f16`, a crate this one does not depend on;
                // its `FromStr` (an f32 parse, then an exact narrowing) reaches the type
                // through inference. Every finite f16 is an f32 whose shortest text parses back.
                match format!("{v:?}").parse() {
                    Ok(h) if v.is_finite() => self.literal(Literal::F16(h), block),
                    _ => {
                        let wide = self.float(v, block);
                        self.emit(Expression::As {
                            expr: wide,
                            kind: ScalarKind::Float,
                            convert: Some(2),
                        })
                    }
                }
            }
            trine_ir::Literal::I32(v) => self.literal(Literal::I32(v), block),
            trine_ir::Literal::U32(v) => self.literal(Literal::U32(v), block),
            trine_ir::Literal::Bool(v) => self.literal(Literal::Bool(v), block),
        }
    }

    fn float(&mut self, v: f32, block: &mut Block) -> Handle<Expression> {
        if v.is_finite() {
            return self.literal(Literal::F32(v), block);
        }
        let bits = self.literal(Literal::U32(v.to_bits()), block);
        self.emit(Expression::As {
            expr: bits,
            kind: ScalarKind::Float,
            convert: None,
        })
    }
}

/// The value of IEEE binary16 `bits`, exactly.
fn f16_to_f32(bits: u16) -> f32 {
    let magnitude = u32::from(bits & 0x7fff);
    let sign = u32::from(bits & 0x8000) << 16;
    let exponent = magnitude >> 10;
    let mantissa = magnitude & 0x3ff;
    let wide = match exponent {
        // Subnormal: mantissa · 2^-24, exact in f32.
        0 => (mantissa as f32 * f32::from_bits((127 - 24) << 23)).to_bits(),
        0x1f => 0x7f80_0000 | (mantissa << 13),
        _ => ((exponent + 127 - 15) << 23) | (mantissa << 13),
    };
    f32::from_bits(sign | wide)
}

#[cfg(test)]
mod tests {
    use super::f16_to_f32;

    #[test]
    fn widens_f16_bits_exactly() {
        let cases: [(u16, f32); 9] = [
            (0x0000, 0.0),
            (0x3c00, 1.0),
            (0x3e00, 1.5),
            (0xc000, -2.0),
            (0x7bff, 65504.0),
            (0x0001, 2f32.powi(-24)),
            (0x03ff, 1023.0 * 2f32.powi(-24)),
            (0x0400, 2f32.powi(-14)),
            (0x7c00, f32::INFINITY),
        ];
        for (bits, want) in cases {
            assert_eq!(f16_to_f32(bits).to_bits(), want.to_bits(), "{bits:#06x}");
        }
        assert_eq!(f16_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
        assert!(f16_to_f32(0x7e00).is_nan());
    }
}

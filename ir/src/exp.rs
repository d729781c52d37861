//! e^x for the interpreter and the C lowering, as one sequence of double-precision operations
//! that both evaluate to the same bits ([`UnaryOp::Exp`](crate::UnaryOp::Exp)).
//!
//! Through the C library's `exp` the CPU's kernels made a call per value, which GCC cannot
//! vectorise: at a long context a third of a CPU decode step went to `exp` in attention's
//! softmax. This is written with additions, multiplications and bit operations only, which a
//! compiler vectorises, and the interpreter runs the same operations in the same order, so the
//! two still agree bit for bit (no fused multiply-add: the C lowering compiles with
//! `-ffp-contract=off`).
//!
//! x is clamped to [-104, 89] (e^-104 rounds to 0 in f32, e^89 overflows to infinity; NaN
//! passes through), split as `x = n·ln 2 + r` with `|r| ≤ ln 2 / 2`, and e^r comes from its
//! Taylor polynomial of degree 12 (truncation below 2e-16 relative), scaled by 2^n through the
//! exponent bits; the double is then rounded to f32 once. Its error before that rounding is a
//! few units in the last place of a double, so the f32 result is the correctly rounded e^x
//! except where e^x lies within about 1e-15 of a halfway point between two floats.

/// log2(e), rounded to double.
pub const LOG2E: f64 = std::f64::consts::LOG2_E;
/// 1.5·2^52: added to a double below 2^51 in magnitude, it leaves the nearest integer (ties
/// to even) in the low bits of the sum's mantissa.
pub const SHIFT: f64 = 6_755_399_441_055_744.0;
/// ln 2's high part, its low 21 mantissa bits zero, so that `n · LN2_HI` is exact for the
/// |n| ≤ 151 the clamp leaves.
pub const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
/// ln 2 − [`LN2_HI`], rounded to double.
pub const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
/// The clamp's bounds.
pub const LOW: f64 = -104.0;
pub const HIGH: f64 = 89.0;
/// Degree of the Taylor polynomial of e^r.
pub const DEGREE: usize = 12;

/// 1/k! for k = 0..=[`DEGREE`], each the double nearest the quotient of the one before by k.
pub const COEFFICIENTS: [f64; DEGREE + 1] = coefficients();

const fn coefficients() -> [f64; DEGREE + 1] {
    let mut c = [1.0; DEGREE + 1];
    let mut k = 1;
    while k <= DEGREE {
        c[k] = c[k - 1] / k as f64;
        k += 1;
    }
    c
}

/// e^x, the sequence the C lowering's `trine_expf` spells out in the same order.
pub fn exp_f32(x: f32) -> f32 {
    let c = COEFFICIENTS;
    // NaN stays NaN, as the C lowering's comparisons leave it.
    let d = f64::from(x).clamp(LOW, HIGH);
    let t = d * LOG2E + SHIFT;
    let n = t - SHIFT;
    let r = (d - n * LN2_HI) - n * LN2_LO;
    let mut p = c[DEGREE];
    for k in (0..DEGREE).rev() {
        p = p * r + c[k];
    }
    // t's mantissa holds n + 2^51 + 2^52 exactly; n + 1023 is a normal double's exponent.
    let n_bits = t.to_bits().wrapping_sub(SHIFT.to_bits());
    let scale = f64::from_bits(n_bits.wrapping_add(1023) << 52);
    (p * scale) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the C library's double `exp` rounded to f32 (what the interpreter computed
    /// before), over every f32 from -110 to 90 a step of 2^-11 apart: equal but for rare
    /// halfway cases, never more than one f32 step apart; and the limits.
    #[test]
    fn agrees_with_libm_within_one_float_step() {
        let (mut differ, mut total) = (0u32, 0u32);
        let mut x = -110.0f32;
        while x <= 90.0 {
            let want = f64::from(x).exp() as f32;
            let got = exp_f32(x);
            total += 1;
            if want.to_bits() != got.to_bits() {
                differ += 1;
                let steps = (i64::from(want.to_bits()) - i64::from(got.to_bits())).abs();
                assert!(steps <= 1, "exp({x}): {got} against {want}");
            }
            x += 1.0 / 2048.0;
        }
        assert!(differ * 100_000 < total, "{differ} of {total} differ");
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(0.0), 1.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(-150.0), 0.0);
        assert_eq!(exp_f32(88.8), f32::INFINITY);
        assert_eq!(exp_f32(-103.0), f64::from(-103.0f32).exp() as f32);
    }
}

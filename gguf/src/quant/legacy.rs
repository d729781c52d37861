//! The legacy 32-element blocks, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1: one f16 scale (and for
//! Q4_1, Q5_1 an f16 min) per block. The quantizers are ggml's reference ones
//! (`quantize_row_*_ref` in `ggml-quants.c`), so test data looks like a GGUF file's.

use super::{f16_at, inverse, nibble, pack_nibbles, signed_absmax, Run, QK};
use half::f16;

/// `quantize_row_q8_0_ref`: d = amax/127, q = round(x/d).
pub(super) fn quantize_q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = inverse(d);
    out.extend(f16::from_f32(d).to_le_bytes());
    // C's roundf rounds halves away from zero, as f32::round does.
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

/// `quantize_row_q4_0_ref`: d = −(signed absolute max)/8, so the extreme value maps to code 0
/// and the other side reaches at most 15.
pub(super) fn quantize_q4_0(x: &[f32], out: &mut Vec<u8>) {
    let d = signed_absmax(x) / -8.0;
    let id = inverse(d);
    out.extend(f16::from_f32(d).to_le_bytes());
    // `(int8_t)(v + 8.5f)` truncates toward zero, as `as i8` does.
    let codes: [u8; QK] = std::array::from_fn(|j| ((x[j] * id + 8.5) as i8).min(15) as u8);
    out.extend(pack_nibbles(&codes));
}

/// `quantize_row_q4_1_ref`: d = (max − min)/15, m = min.
pub(super) fn quantize_q4_1(x: &[f32], out: &mut Vec<u8>) {
    let (min, d) = min_and_step(x, 15.0);
    let id = inverse(d);
    out.extend(f16::from_f32(d).to_le_bytes());
    out.extend(f16::from_f32(min).to_le_bytes());
    let codes: [u8; QK] = std::array::from_fn(|j| (((x[j] - min) * id + 0.5) as i8).min(15) as u8);
    out.extend(pack_nibbles(&codes));
}

/// `quantize_row_q5_0_ref`: Q4_0's rule with 32 codes, d = −(signed absolute max)/16.
pub(super) fn quantize_q5_0(x: &[f32], out: &mut Vec<u8>) {
    let d = signed_absmax(x) / -16.0;
    let id = inverse(d);
    out.extend(f16::from_f32(d).to_le_bytes());
    let codes: [u8; QK] = std::array::from_fn(|j| ((x[j] * id + 16.5) as i8).min(31) as u8);
    out.extend(fifth_bits(&codes).to_le_bytes());
    out.extend(pack_nibbles(&codes));
}

/// `quantize_row_q5_1_ref`: Q4_1's rule with 32 codes, d = (max − min)/31.
pub(super) fn quantize_q5_1(x: &[f32], out: &mut Vec<u8>) {
    let (min, d) = min_and_step(x, 31.0);
    let id = inverse(d);
    out.extend(f16::from_f32(d).to_le_bytes());
    out.extend(f16::from_f32(min).to_le_bytes());
    // ggml casts to uint8_t unclamped; the clamp only guards a NaN-free rounding past 31.
    let codes: [u8; QK] = std::array::from_fn(|j| (((x[j] - min) * id + 0.5) as u8).min(31));
    out.extend(fifth_bits(&codes).to_le_bytes());
    out.extend(pack_nibbles(&codes));
}

/// The min of `x` and the step that spreads `levels` steps from it to the max, computed as
/// ggml's reference quantizers do (comparisons that let a NaN through unchanged).
fn min_and_step(x: &[f32], levels: f32) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        min = if v < min { v } else { min };
        max = if v > max { v } else { max };
    }
    (min, (max - min) / levels)
}

/// Q5's qh: bit j is the fifth bit of code j.
fn fifth_bits(codes: &[u8; QK]) -> u32 {
    codes
        .iter()
        .enumerate()
        .fold(0, |qh, (j, &c)| qh | (u32::from(c >> 4) << j))
}

/// The fifth bit of Q5 element j, read from qh at byte `at`.
fn fifth_bit(b: &[u8], at: usize, j: usize) -> u8 {
    let qh = u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    (((qh >> j) & 1) as u8) << 4
}

pub(super) fn dequantize_q8_0(b: &[u8], out: &mut Vec<f64>) {
    let d = f16_at(b, 0);
    out.extend(b[2..].iter().map(|&q| d * f64::from(q as i8)));
}

pub(super) fn dequantize_q4_0(b: &[u8], out: &mut Vec<f64>) {
    let d = f16_at(b, 0);
    out.extend((0..QK).map(|j| d * (f64::from(nibble(&b[2..], j)) - 8.0)));
}

pub(super) fn dequantize_q4_1(b: &[u8], out: &mut Vec<f64>) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    out.extend((0..QK).map(|j| d * f64::from(nibble(&b[4..], j)) + m));
}

pub(super) fn dequantize_q5_0(b: &[u8], out: &mut Vec<f64>) {
    let d = f16_at(b, 0);
    let code = |j| nibble(&b[6..], j) | fifth_bit(b, 2, j);
    out.extend((0..QK).map(|j| d * (f64::from(code(j)) - 16.0)));
}

pub(super) fn runs_q5_0(b: &[u8]) -> Vec<Run> {
    let code = |j| nibble(&b[6..], j) | fifth_bit(b, 2, j);
    vec![Run {
        scale: f16_at(b, 0) as f32,
        min: 0.0,
        codes: (0..QK).map(|j| code(j) as i8 - 16).collect(),
    }]
}

pub(super) fn runs_q5_1(b: &[u8]) -> Vec<Run> {
    let code = |j| nibble(&b[8..], j) | fifth_bit(b, 4, j);
    vec![Run {
        scale: f16_at(b, 0) as f32,
        min: f16_at(b, 2) as f32,
        codes: (0..QK).map(|j| code(j) as i8).collect(),
    }]
}

pub(super) fn dequantize_q5_1(b: &[u8], out: &mut Vec<f64>) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let code = |j| nibble(&b[8..], j) | fifth_bit(b, 4, j);
    out.extend((0..QK).map(|j| d * f64::from(code(j)) + m));
}

#[cfg(test)]
mod tests {
    use super::super::tests::uniform;
    use super::super::{dequantize, quantize, WeightType};
    use half::f16;

    #[test]
    fn quantizers_reproduce_ggml_blocks() {
        // A block whose values are exact multiples of its step quantizes losslessly.
        let x: Vec<f32> = (0..32).map(|i| (i as f32 - 16.0) * 0.5).collect();
        let q8 = quantize(WeightType::Q8_0, &x).unwrap();
        assert_eq!(q8.len(), 34);
        // amax = 8, d = 8/127.
        assert_eq!(&q8[..2], &f16::from_f32(8.0 / 127.0).to_le_bytes());
        assert_eq!(q8[2] as i8, -127);
        assert_eq!(q8[2 + 16] as i8, 0);
        let q4 = quantize(WeightType::Q4_0, &x).unwrap();
        // The value of largest magnitude is −8, so d = −8/−8 = 1: x = −8 gets code 0 and
        // x = 7.5 gets trunc(16) clamped to 15.
        assert_eq!(&q4[..2], &f16::from_f32(1.0).to_le_bytes());
        assert_eq!(q4[2] & 15, 0);
        assert_eq!(q4[2 + 15] >> 4, 15);
        // Q5_0: d = −8/−16 = 0.5, so x = (i − 16)/2 gets code i exactly, i ≥ 16 setting qh.
        let q5 = quantize(WeightType::Q5_0, &x).unwrap();
        assert_eq!(&q5[..2], &f16::from_f32(0.5).to_le_bytes());
        assert_eq!(q5[2..6], 0xffff_0000u32.to_le_bytes());
        assert_eq!(dequantize(WeightType::Q5_0, &q5, 32).unwrap(), x_f64(&x));
        let q41 = quantize(WeightType::Q4_1, &x).unwrap();
        let back = dequantize(WeightType::Q4_1, &q41, 32).unwrap();
        // d = 15.5/15 rounds to f16; every value is within half a step of the input.
        let d = f16::from_f32(15.5 / 15.0).to_f64();
        for (a, b) in x.iter().zip(&back) {
            assert!((*a as f64 - b).abs() <= d / 2.0 + 1e-3, "{a} vs {b}");
        }
        assert_eq!(back[0], -8.0);
        // Q5_1: d = 15.5/31 = 0.5 and m = −8 are exact, so every value comes back.
        let q51 = quantize(WeightType::Q5_1, &x).unwrap();
        assert_eq!(dequantize(WeightType::Q5_1, &q51, 32).unwrap(), x_f64(&x));
    }

    fn x_f64(x: &[f32]) -> Vec<f64> {
        x.iter().map(|&v| f64::from(v)).collect()
    }

    #[test]
    fn dequantize_decodes_nibble_order_and_signs() {
        // Q4_0 with d = 2: byte j holds element j (low) and j + 16 (high).
        let mut block = f16::from_f32(2.0).to_le_bytes().to_vec();
        block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let v = dequantize(WeightType::Q4_0, &block, 32).unwrap();
        assert_eq!(v[0], -16.0);
        assert_eq!(v[15], 14.0);
        assert_eq!(v[16], 14.0);
        assert_eq!(v[31], -16.0);
        // Q8_0: bytes are two's complement.
        let mut block = f16::from_f32(0.5).to_le_bytes().to_vec();
        block.extend((0..32u8).map(|j| j.wrapping_mul(9)));
        let v = dequantize(WeightType::Q8_0, &block, 32).unwrap();
        assert_eq!(v[15], 0.5 * f64::from((15u8 * 9) as i8));
        assert_eq!(v[31], 0.5 * f64::from((31u8.wrapping_mul(9)) as i8));
        // Q5_1 with d = 1, m = 0.25: qh's bit j is element j's fifth bit, little-endian.
        let mut block = f16::from_f32(1.0).to_le_bytes().to_vec();
        block.extend(f16::from_f32(0.25).to_le_bytes());
        block.extend(0x8000_0001u32.to_le_bytes());
        block.extend([0x21; 16]);
        let v = dequantize(WeightType::Q5_1, &block, 32).unwrap();
        assert_eq!((v[0], v[1], v[16], v[31]), (17.25, 1.25, 2.25, 18.25));
    }

    #[test]
    fn quantization_error_is_within_half_a_step() {
        let x = uniform(3, 32 * 64, -3.0, 3.0);
        let types = [
            WeightType::Q8_0,
            WeightType::Q4_0,
            WeightType::Q4_1,
            WeightType::Q5_0,
            WeightType::Q5_1,
        ];
        for ty in types {
            let q = quantize(ty, &x).unwrap();
            let back = dequantize(ty, &q, x.len()).unwrap();
            for (blk, (xs, bs)) in x.chunks(32).zip(back.chunks(32)).enumerate() {
                let amax = xs.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                let (lo, hi) = xs
                    .iter()
                    .fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
                // Rounding costs half a step, except Q4_0's and Q5_0's clamp of the top code,
                // which costs a whole one at the end opposite the extreme value; the f16
                // scales add a few units of 2^-11 of amax.
                let tol = match ty {
                    WeightType::Q8_0 => amax / 127.0 / 2.0,
                    WeightType::Q4_0 => amax / 8.0,
                    WeightType::Q5_0 => amax / 16.0,
                    WeightType::Q4_1 => f64::from(hi - lo) / 15.0 / 2.0,
                    _ => f64::from(hi - lo) / 31.0 / 2.0,
                } + amax * 2f64.powi(-8);
                for (a, b) in xs.iter().zip(bs) {
                    assert!((*a as f64 - b).abs() <= tol, "{ty} block {blk}: {a} vs {b}");
                }
            }
        }
    }
}

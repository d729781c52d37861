//! IQ4_NL and IQ4_XS: 4-bit codes that index a fixed non-linear grid, [`KVALUES`], scaled by
//! one f16 d per 32-element block (IQ4_NL) or by 6-bit signed sub-block scales of an f16 d per
//! 256-element super-block (IQ4_XS). The module comment of [`super`] gives the layouts.
//!
//! The quantizers are simple, not ggml's search over scales: a block's (sub-block's) scale maps
//! its value of largest magnitude to the grid's −127, the one end with no positive twin (the
//! other end is 113), IQ4_XS's sub-block scales are quantized against a d that the largest
//! reaches (see `symmetric_scales`), and each element takes the grid value nearest to it.

use super::{
    f16_at, inverse, nibble, pack_nibbles, signed_absmax, symmetric_scales, Run, QK, QK_K,
};
use half::f16;

/// ggml's `kvalues_iq4nl`: the grid both types' codes index.
const KVALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The index of the grid value nearest `v` (a NaN gives 0): the number of midpoints between
/// neighbouring grid values that lie below it.
fn nearest_index(v: f32) -> u8 {
    KVALUES
        .windows(2)
        .filter(|w| v > f32::from(i16::from(w[0]) + i16::from(w[1])) / 2.0)
        .count() as u8
}

fn grid(code: u8) -> f64 {
    f64::from(KVALUES[usize::from(code)])
}

pub(super) fn quantize_iq4_nl(x: &[f32], out: &mut Vec<u8>) {
    let d = f16::from_f32(signed_absmax(x) / f32::from(KVALUES[0]));
    let id = inverse(d.to_f32());
    let codes: [u8; QK] = std::array::from_fn(|j| nearest_index(x[j] * id));
    out.extend(d.to_le_bytes());
    out.extend(pack_nibbles(&codes));
}

pub(super) fn quantize_iq4_xs(x: &[f32], out: &mut Vec<u8>) {
    let (d, scales) = symmetric_scales::<8>(x, f32::from(KVALUES[0]), 31);
    // Stored plus 32 in 6 bits: the low 4 in scales_l's nibbles, the high 2 in scales_h.
    let stored = scales.map(|s| (i16::from(s) + 32) as u8);
    let scales_h = (0..8).fold(0u16, |acc, i| acc | (u16::from(stored[i] >> 4) << (2 * i)));
    out.extend(d.to_le_bytes());
    out.extend(scales_h.to_le_bytes());
    out.extend((0..4).map(|k| (stored[2 * k] & 15) | ((stored[2 * k + 1] & 15) << 4)));
    for (sub, &s) in x.chunks_exact(QK_K / 8).zip(&scales) {
        let ids = inverse(d.to_f32() * f32::from(s));
        let codes: [u8; 32] = std::array::from_fn(|j| nearest_index(sub[j] * ids));
        out.extend(pack_nibbles(&codes));
    }
}

pub(super) fn dequantize_iq4_nl(b: &[u8], out: &mut Vec<f64>) {
    let d = f16_at(b, 0);
    out.extend((0..QK).map(|j| d * grid(nibble(&b[2..], j))));
}

pub(super) fn runs_iq4_nl(b: &[u8]) -> Vec<Run> {
    vec![Run {
        scale: f16_at(b, 0) as f32,
        min: 0.0,
        codes: (0..QK)
            .map(|j| KVALUES[usize::from(nibble(&b[2..], j))])
            .collect(),
    }]
}

pub(super) fn runs_iq4_xs(b: &[u8]) -> Vec<Run> {
    let d = f16_at(b, 0);
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    let (scales_l, qs) = (&b[4..8], &b[8..136]);
    (0..QK_K / 32)
        .map(|i| {
            let low = (scales_l[i / 2] >> (4 * (i % 2))) & 15;
            let high = ((scales_h >> (2 * i)) & 3) as u8;
            Run {
                scale: (d * f64::from(i32::from(low | (high << 4)) - 32)) as f32,
                min: 0.0,
                codes: (0..32)
                    .map(|j| KVALUES[usize::from(nibble(&qs[16 * i..], j))])
                    .collect(),
            }
        })
        .collect()
}

pub(super) fn dequantize_iq4_xs(b: &[u8], out: &mut Vec<f64>) {
    let d = f16_at(b, 0);
    let scales_h = u16::from_le_bytes([b[2], b[3]]);
    let (scales_l, qs) = (&b[4..8], &b[8..136]);
    for i in 0..QK_K / 32 {
        let low = (scales_l[i / 2] >> (4 * (i % 2))) & 15;
        let high = ((scales_h >> (2 * i)) & 3) as u8;
        let dl = d * f64::from(i32::from(low | (high << 4)) - 32);
        out.extend((0..32).map(|j| dl * grid(nibble(&qs[16 * i..], j))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize, quantize, WeightType};

    #[test]
    fn nearest_index_splits_at_midpoints() {
        for (i, &k) in KVALUES.iter().enumerate() {
            assert_eq!(nearest_index(f32::from(k)), i as u8);
        }
        // −104 and −83 meet at −93.5; the midpoint itself goes down.
        assert_eq!(nearest_index(-93.5), 1);
        assert_eq!(nearest_index(-93.4), 2);
        assert_eq!((nearest_index(-1e9), nearest_index(1e9)), (0, 15));
        assert_eq!(nearest_index(f32::NAN), 0);
    }

    /// Blocks whose values are grid values times scales the quantizer finds exactly (a power
    /// of two d, sub-block scales d·k with the largest |k| 31, each sub-block's first element
    /// at −127) come back exactly.
    #[test]
    fn values_on_the_grid_come_back_exactly() {
        let d = 2f32.powi(-7);
        let code = |e: usize| {
            if e.is_multiple_of(32) {
                0
            } else {
                (e * 7 % 16) as u8
            }
        };
        let nl: Vec<f32> = (0..QK)
            .map(|e| d * f32::from(KVALUES[usize::from(code(e))]))
            .collect();
        let xs: Vec<f32> = (0..QK_K)
            .map(|e| {
                let i = (e / 32) as i32;
                let k = (31 - 5 * i) * if i % 2 == 1 { -1 } else { 1 };
                d * (k * i32::from(KVALUES[usize::from(code(e))])) as f32
            })
            .collect();
        for (ty, x) in [(WeightType::IQ4_NL, nl), (WeightType::IQ4_XS, xs)] {
            let back = dequantize(ty, &quantize(ty, &x).unwrap(), x.len()).unwrap();
            for (e, (&a, &b)) in x.iter().zip(&back).enumerate() {
                assert_eq!(f64::from(a), b, "{ty} element {e}");
            }
        }
    }
}

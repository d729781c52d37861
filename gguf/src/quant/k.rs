//! The K-quants: 256-element super-blocks cut in sub-blocks of 16 or 32, each with a scale
//! (and for Q2_K, Q4_K and Q5_K a min) of 4 to 8 bits that multiplies the super-block's f16 d
//! (and dmin); and Q8_K, with an f32 d and no sub-blocks, ggml's form of activations for
//! products with them. The module comment of [`super`] gives the layouts.
//!
//! The quantizers are simple and fast, not ggml's search for the scales of least error
//! (`make_qkx2_quants`, `make_qx_quants`):
//!
//! - With a min (Q2_K, Q4_K, Q5_K): each sub-block spans its values, from its min capped at 0
//!   (m is unsigned and subtracted, so it can only lower the range) to its max: scale =
//!   (max − min)/top code, m = −min. d and dmin make the largest scale and the largest m the
//!   top of their bit width; each scale and m is rounded to its bits against the f16 d and
//!   dmin as stored, and each element to the nearest code under its sub-block's scale and min
//!   as stored, so the rounding of d, dmin and the sub-block scales costs no more than it must.
//! - Symmetric (Q3_K, Q6_K): each sub-block's scale maps its value of largest magnitude to the
//!   most negative code (−4, −32), as ggml's Q4_0 does for its block, so the codes' one extra
//!   negative level is used where it matters; the scales are signed and quantized against a d
//!   that the largest reaches (see `symmetric_scales`).
//! - Q8_K: d = amax/127 (an f32), codes rounded to nearest; bsums as ggml defines them.

use super::{f16_at, inverse, nearest, symmetric_scales, Run, QK_K};
use half::f16;

pub(super) fn quantize_q2_k(x: &[f32], out: &mut Vec<u8>) {
    let (a, codes) = with_min::<16>(x, 3, 15);
    out.extend((0..16).map(|i| a.scale[i] | (a.min[i] << 4)));
    out.extend(pack_crumbs(&codes));
    out.extend(a.d.to_le_bytes());
    out.extend(a.dmin.to_le_bytes());
}

pub(super) fn quantize_q3_k(x: &[f32], out: &mut Vec<u8>) {
    let (d, scales) = symmetric_scales::<16>(x, -4.0, 31);
    let codes = symmetric_codes(x, d, &scales, -4);
    // hmask: code bit 2 of element 128h + 32j + l is bit 4h + j of byte l.
    out.extend((0..32).map(|l| {
        (0..8).fold(0u8, |acc, bit| {
            acc | ((codes[128 * (bit / 4) + 32 * (bit % 4) + l] >> 2) << bit)
        })
    }));
    out.extend(pack_crumbs(&codes));
    out.extend(pack_q3_scales(&scales));
    out.extend(d.to_le_bytes());
}

pub(super) fn quantize_q4_k(x: &[f32], out: &mut Vec<u8>) {
    let (a, codes) = with_min::<8>(x, 15, 63);
    out.extend(a.d.to_le_bytes());
    out.extend(a.dmin.to_le_bytes());
    out.extend(pack_k_scales(&a.scale, &a.min));
    out.extend(pack_k_nibbles(&codes));
}

pub(super) fn quantize_q5_k(x: &[f32], out: &mut Vec<u8>) {
    let (a, codes) = with_min::<8>(x, 31, 63);
    out.extend(a.d.to_le_bytes());
    out.extend(a.dmin.to_le_bytes());
    out.extend(pack_k_scales(&a.scale, &a.min));
    // qh: code bit 4 of element 32i + l is bit i of byte l.
    out.extend((0..32).map(|l| (0..8).fold(0u8, |acc, i| acc | ((codes[32 * i + l] >> 4) << i))));
    out.extend(pack_k_nibbles(&codes));
}

pub(super) fn quantize_q6_k(x: &[f32], out: &mut Vec<u8>) {
    let (d, scales) = symmetric_scales::<16>(x, -32.0, 127);
    let codes = symmetric_codes(x, d, &scales, -32);
    // ql: byte 64h + 32r + l holds element 128h + 32r + l (low nibble) and the one 64 later.
    out.extend((0..128).map(|b| {
        let e = 128 * (b / 64) + b % 64;
        (codes[e] & 15) | ((codes[e + 64] & 15) << 4)
    }));
    // qh: bits 2k..2k+2 of byte 32h + l are code bits 4..6 of element 128h + 32k + l.
    out.extend((0..64).map(|b| {
        let e = 128 * (b / 32) + b % 32;
        (0..4).fold(0u8, |acc, k| acc | ((codes[e + 32 * k] >> 4) << (2 * k)))
    }));
    out.extend(scales.iter().map(|&s| s as u8));
    out.extend(d.to_le_bytes());
}

pub(super) fn quantize_q8_k(x: &[f32], out: &mut Vec<u8>) {
    let d = x.iter().fold(0f32, |a, v| a.max(v.abs())) / 127.0;
    let id = inverse(d);
    let q: [i8; QK_K] = std::array::from_fn(|e| nearest(x[e] * id, -127, 127) as i8);
    out.extend(d.to_le_bytes());
    out.extend(q.iter().map(|&v| v as u8));
    for sixteen in q.chunks_exact(16) {
        // At most 16 · 127 in magnitude.
        let sum: i16 = sixteen.iter().map(|&v| i16::from(v)).sum();
        out.extend(sum.to_le_bytes());
    }
}

/// The scales and mins of a super-block's `S` sub-blocks, as stored.
struct WithMin<const S: usize> {
    d: f16,
    dmin: f16,
    scale: [u8; S],
    min: [u8; S],
}

/// Scales and mins of `scale_max` at most, and codes of `top` at most, for the sub-blocks of
/// `x` (see the module comment).
fn with_min<const S: usize>(x: &[f32], top: i32, scale_max: i32) -> (WithMin<S>, [u8; QK_K]) {
    let len = QK_K / S;
    let mut scale = [0f32; S];
    let mut min = [0f32; S];
    for (i, sub) in x.chunks_exact(len).enumerate() {
        let (lo, hi) = min_max(sub);
        let lo = lo.min(0.0);
        scale[i] = (hi - lo) / top as f32;
        min[i] = -lo;
    }
    let largest = |v: &[f32; S]| v.iter().fold(0f32, |a, &b| a.max(b));
    let d = f16::from_f32(largest(&scale) / scale_max as f32);
    let dmin = f16::from_f32(largest(&min) / scale_max as f32);
    let (df, dminf) = (d.to_f32(), dmin.to_f32());
    let (id, idmin) = (inverse(df), inverse(dminf));
    let a = WithMin {
        d,
        dmin,
        scale: scale.map(|s| nearest(s * id, 0, scale_max) as u8),
        min: min.map(|m| nearest(m * idmin, 0, scale_max) as u8),
    };
    let mut codes = [0u8; QK_K];
    for (i, (sub, q)) in x
        .chunks_exact(len)
        .zip(codes.chunks_exact_mut(len))
        .enumerate()
    {
        let ids = inverse(df * f32::from(a.scale[i]));
        let m = dminf * f32::from(a.min[i]);
        // Truncating v + ½ rounds to nearest where v ≥ 0; the cast saturates below 0 (and
        // takes a NaN) to 0, so only the top needs a clamp. Unlike `nearest`, this vectorises.
        for (q, &v) in q.iter_mut().zip(sub) {
            *q = (((v + m) * ids + 0.5) as u8).min(top as u8);
        }
    }
    (a, codes)
}

/// The min and max of `x` (whose length is a multiple of 8), in 8 independent lanes: one
/// chain of comparisons through 32 values would be a quarter of the quantizer's time.
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut lo, mut hi) = ([f32::MAX; 8], [f32::MIN; 8]);
    for eight in x.chunks_exact(8) {
        for k in 0..8 {
            lo[k] = lo[k].min(eight[k]);
            hi[k] = hi[k].max(eight[k]);
        }
    }
    let lo = lo.iter().fold(f32::MAX, |a, &b| a.min(b));
    (lo, hi.iter().fold(f32::MIN, |a, &b| a.max(b)))
}

/// Each element's code (`lo..=−lo − 1`) under its sub-block's scale as stored, plus −lo, which
/// is how Q3_K and Q6_K store codes.
fn symmetric_codes<const S: usize>(x: &[f32], d: f16, scales: &[i8; S], lo: i32) -> [u8; QK_K] {
    let len = QK_K / S;
    let d = d.to_f32();
    let mut codes = [0u8; QK_K];
    for ((sub, q), &s) in x
        .chunks_exact(len)
        .zip(codes.chunks_exact_mut(len))
        .zip(scales)
    {
        let ids = inverse(d * f32::from(s));
        for (q, &v) in q.iter_mut().zip(sub) {
            *q = (nearest(v * ids, lo, -lo - 1) - lo) as u8;
        }
    }
    codes
}

/// The low 2 bits of each code as Q2_K's and Q3_K's qs hold them: element 128h + 32j + l in
/// bits 2j..2j+2 of byte 32h + l.
fn pack_crumbs(codes: &[u8; QK_K]) -> impl Iterator<Item = u8> + '_ {
    (0..64).map(|b| {
        let e = 128 * (b / 32) + b % 32;
        (0..4).fold(0u8, |acc, j| acc | ((codes[e + 32 * j] & 3) << (2 * j)))
    })
}

/// c2(e) of Q2_K's and Q3_K's qs.
fn crumb(qs: &[u8], e: usize) -> u8 {
    (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3
}

/// The low 4 bits of each code as Q4_K's and Q5_K's qs hold them: element 64c + 32k + l in
/// nibble k of byte 32c + l.
fn pack_k_nibbles(codes: &[u8; QK_K]) -> impl Iterator<Item = u8> + '_ {
    (0..128).map(|b| {
        let e = 64 * (b / 32) + b % 32;
        (codes[e] & 15) | ((codes[e + 32] & 15) << 4)
    })
}

/// c4(e) of Q4_K's and Q5_K's qs.
fn k_nibble(qs: &[u8], e: usize) -> u8 {
    (qs[32 * (e / 64) + e % 32] >> (4 * ((e % 64) / 32))) & 15
}

/// Q3_K's 16 signed 6-bit scales, stored plus 32, in 12 bytes.
fn pack_q3_scales(scales: &[i8; 16]) -> [u8; 12] {
    let mut out = [0u8; 12];
    for (i, &s) in scales.iter().enumerate() {
        let u = (i16::from(s) + 32) as u8;
        out[i % 8] |= (u & 15) << (4 * (i / 8));
        out[8 + i % 4] |= (u >> 4) << (2 * (i / 4));
    }
    out
}

/// Scale `i` of Q3_K's 12 bytes of scales.
fn q3_scale(scales: &[u8], i: usize) -> i32 {
    let low = (scales[i % 8] >> (4 * (i / 8))) & 15;
    let high = (scales[8 + i % 4] >> (2 * (i / 4))) & 3;
    i32::from(low | (high << 4)) - 32
}

/// Q4_K's and Q5_K's 8 6-bit scales and mins in 12 bytes.
fn pack_k_scales(scale: &[u8; 8], min: &[u8; 8]) -> [u8; 12] {
    let mut out = [0u8; 12];
    for i in 0..4 {
        out[i] = scale[i] | ((scale[i + 4] >> 4) << 6);
        out[i + 4] = min[i] | ((min[i + 4] >> 4) << 6);
        out[i + 8] = (scale[i + 4] & 15) | ((min[i + 4] & 15) << 4);
    }
    out
}

/// Scale and min of sub-block `i` of Q4_K's and Q5_K's 12 bytes of scales.
fn k_scale_min(scales: &[u8], i: usize) -> (f64, f64) {
    let (s, m) = if i < 4 {
        (scales[i] & 63, scales[i + 4] & 63)
    } else {
        (
            (scales[i + 4] & 15) | ((scales[i - 4] >> 6) << 4),
            (scales[i + 4] >> 4) | ((scales[i] >> 6) << 4),
        )
    };
    (f64::from(s), f64::from(m))
}

pub(super) fn dequantize_q2_k(b: &[u8], out: &mut Vec<f64>) {
    let (scales, qs) = (&b[..16], &b[16..80]);
    let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
    out.extend((0..QK_K).map(|e| {
        let s = scales[e / 16];
        d * f64::from(s & 15) * f64::from(crumb(qs, e)) - dmin * f64::from(s >> 4)
    }));
}

pub(super) fn dequantize_q3_k(b: &[u8], out: &mut Vec<f64>) {
    let (hmask, qs, scales) = (&b[..32], &b[32..96], &b[96..108]);
    let d = f16_at(b, 108);
    out.extend((0..QK_K).map(|e| {
        let high = (hmask[e % 32] >> (4 * (e / 128) + (e % 128) / 32)) & 1;
        let code = i32::from(crumb(qs, e) | (high << 2)) - 4;
        d * f64::from(q3_scale(scales, e / 16)) * f64::from(code)
    }));
}

pub(super) fn dequantize_q4_k(b: &[u8], out: &mut Vec<f64>) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (scales, qs) = (&b[4..16], &b[16..144]);
    out.extend((0..QK_K).map(|e| {
        let (s, m) = k_scale_min(scales, e / 32);
        d * s * f64::from(k_nibble(qs, e)) - dmin * m
    }));
}

pub(super) fn dequantize_q5_k(b: &[u8], out: &mut Vec<f64>) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let (scales, qh, qs) = (&b[4..16], &b[16..48], &b[48..176]);
    out.extend((0..QK_K).map(|e| {
        let (s, m) = k_scale_min(scales, e / 32);
        let code = k_nibble(qs, e) | (((qh[e % 32] >> (e / 32)) & 1) << 4);
        d * s * f64::from(code) - dmin * m
    }));
}

pub(super) fn dequantize_q6_k(b: &[u8], out: &mut Vec<f64>) {
    let (ql, qh, scales) = (&b[..128], &b[128..192], &b[192..208]);
    let d = f16_at(b, 208);
    out.extend((0..QK_K).map(|e| {
        let (h, k, l) = (e / 128, (e % 128) / 32, e % 32);
        let low = (ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 15;
        let high = (qh[32 * h + l] >> (2 * k)) & 3;
        let code = i32::from(low | (high << 4)) - 32;
        d * f64::from(scales[e / 16] as i8) * f64::from(code)
    }));
}

pub(super) fn runs_q2_k(b: &[u8]) -> Vec<Run> {
    let (scales, qs) = (&b[..16], &b[16..80]);
    let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
    (0..16)
        .map(|r| Run {
            scale: (d * f64::from(scales[r] & 15)) as f32,
            min: (-(dmin * f64::from(scales[r] >> 4))) as f32,
            codes: (16 * r..16 * r + 16).map(|e| crumb(qs, e) as i8).collect(),
        })
        .collect()
}

pub(super) fn runs_q3_k(b: &[u8]) -> Vec<Run> {
    let (hmask, qs, scales) = (&b[..32], &b[32..96], &b[96..108]);
    let d = f16_at(b, 108);
    (0..16)
        .map(|r| Run {
            scale: (d * f64::from(q3_scale(scales, r))) as f32,
            min: 0.0,
            codes: (16 * r..16 * r + 16)
                .map(|e| {
                    let high = (hmask[e % 32] >> (4 * (e / 128) + (e % 128) / 32)) & 1;
                    (crumb(qs, e) | (high << 2)) as i8 - 4
                })
                .collect(),
        })
        .collect()
}

/// Q4_K's and Q5_K's runs: each 32-element sub-block's `d·sc` and `−dmin·m`, its codes from
/// `code(e)`.
fn k_runs(b: &[u8], code: impl Fn(usize) -> u8) -> Vec<Run> {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    (0..8)
        .map(|r| {
            let (s, m) = k_scale_min(&b[4..16], r);
            Run {
                scale: (d * s) as f32,
                min: (-(dmin * m)) as f32,
                codes: (32 * r..32 * r + 32).map(|e| code(e) as i8).collect(),
            }
        })
        .collect()
}

pub(super) fn runs_q4_k(b: &[u8]) -> Vec<Run> {
    k_runs(b, |e| k_nibble(&b[16..144], e))
}

pub(super) fn runs_q5_k(b: &[u8]) -> Vec<Run> {
    let (qh, qs) = (&b[16..48], &b[48..176]);
    k_runs(b, |e| {
        k_nibble(qs, e) | (((qh[e % 32] >> (e / 32)) & 1) << 4)
    })
}

pub(super) fn runs_q6_k(b: &[u8]) -> Vec<Run> {
    let (ql, qh, scales) = (&b[..128], &b[128..192], &b[192..208]);
    let d = f16_at(b, 208);
    (0..16)
        .map(|r| Run {
            scale: (d * f64::from(scales[r] as i8)) as f32,
            min: 0.0,
            codes: (16 * r..16 * r + 16)
                .map(|e| {
                    let (h, k, l) = (e / 128, (e % 128) / 32, e % 32);
                    let low = (ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 15;
                    let high = (qh[32 * h + l] >> (2 * k)) & 3;
                    (low | (high << 4)) as i8 - 32
                })
                .collect(),
        })
        .collect()
}

pub(super) fn dequantize_q8_k(b: &[u8], out: &mut Vec<f64>) {
    let d = f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    out.extend(b[4..4 + QK_K].iter().map(|&q| d * f64::from(q as i8)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{dequantize, quantize, WeightType};

    #[test]
    fn scale_packings_invert_their_readers() {
        let scales: [i8; 16] = std::array::from_fn(|i| (i as i8 * 5 % 64) - 32);
        let packed = pack_q3_scales(&scales);
        for (i, &s) in scales.iter().enumerate() {
            assert_eq!(q3_scale(&packed, i), i32::from(s), "scale {i}");
        }
        let (s, m): ([u8; 8], [u8; 8]) = (
            std::array::from_fn(|i| ((i * 23 + 7) % 64) as u8),
            std::array::from_fn(|i| ((i * 41 + 60) % 64) as u8),
        );
        let packed = pack_k_scales(&s, &m);
        for i in 0..8 {
            assert_eq!(
                k_scale_min(&packed, i),
                (f64::from(s[i]), f64::from(m[i])),
                "sub-block {i}"
            );
        }
    }

    #[test]
    fn code_packings_invert_their_readers() {
        let codes: [u8; QK_K] = std::array::from_fn(|e| (e * 37 % 251) as u8);
        let crumbs: Vec<u8> = pack_crumbs(&codes).collect();
        let nibbles: Vec<u8> = pack_k_nibbles(&codes).collect();
        for (e, &c) in codes.iter().enumerate() {
            assert_eq!(crumb(&crumbs, e), c & 3, "element {e}");
            assert_eq!(k_nibble(&nibbles, e), c & 15, "element {e}");
        }
    }

    /// A super-block on a grid the quantizer can hit exactly: sub-block i has scale d·k_i
    /// (k_i reaching `scale_max` in sub-block 0) and min dmin·m_i (reaching it in sub-block 1),
    /// and its first two elements hold codes 0 and `top`, so every scale, min and code the
    /// quantizer derives is exact.
    fn on_grid_with_min(sub: usize, top: u32, scale_max: u32) -> Vec<f32> {
        let (d, dmin) = (2f32.powi(-6), 2f32.powi(-5));
        (0..QK_K)
            .map(|e| {
                let (i, j) = ((e / sub) as u32, (e % sub) as u32);
                let k = scale_max - 5 * i % scale_max;
                let m = if i == 1 {
                    scale_max
                } else {
                    3 * i % (scale_max + 1)
                };
                let c = match j {
                    0 => 0,
                    1 => top,
                    _ => 7 * j % (top + 1),
                };
                d * (k * c) as f32 - dmin * m as f32
            })
            .collect()
    }

    /// As [`on_grid_with_min`] for the symmetric types: scales ±d·k_i, the first element of
    /// each sub-block at the bottom code `lo`, the others anywhere in `lo..=−lo − 1`.
    fn on_grid_symmetric(sub: usize, lo: i32, scale_max: i32) -> Vec<f32> {
        let d = 2f32.powi(-6);
        (0..QK_K)
            .map(|e| {
                let (i, j) = ((e / sub) as i32, (e % sub) as i32);
                let k = (scale_max - 5 * i % scale_max) * if i % 2 == 1 { -1 } else { 1 };
                let c = if j == 0 { lo } else { lo + 7 * j % (-2 * lo) };
                d * (k * c) as f32
            })
            .collect()
    }

    #[test]
    fn values_on_the_grid_come_back_exactly() {
        let cases = [
            (WeightType::Q2_K, on_grid_with_min(16, 3, 15)),
            (WeightType::Q4_K, on_grid_with_min(32, 15, 63)),
            (WeightType::Q5_K, on_grid_with_min(32, 31, 63)),
            (WeightType::Q3_K, on_grid_symmetric(16, -4, 31)),
            (WeightType::Q6_K, on_grid_symmetric(16, -32, 127)),
            (WeightType::Q8_K, on_grid_symmetric(QK_K, -127, 1)),
        ];
        for (ty, x) in cases {
            let back = dequantize(ty, &quantize(ty, &x).unwrap(), QK_K).unwrap();
            for (e, (&a, &b)) in x.iter().zip(&back).enumerate() {
                assert_eq!(f64::from(a), b, "{ty} element {e}");
            }
        }
    }

    #[test]
    fn q8_k_bsums_are_sums_of_sixteen_codes() {
        let x: Vec<f32> = (0..QK_K)
            .map(|e| ((e * 13 % 29) as f32 - 14.0) / 3.0)
            .collect();
        let b = quantize(WeightType::Q8_K, &x).unwrap();
        let q = &b[4..4 + QK_K];
        for i in 0..16 {
            let sum: i16 = q[16 * i..16 * i + 16]
                .iter()
                .map(|&v| i16::from(v as i8))
                .sum();
            let at = 4 + QK_K + 2 * i;
            assert_eq!(i16::from_le_bytes([b[at], b[at + 1]]), sum, "bsums[{i}]");
        }
    }
}

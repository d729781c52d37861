//! The f64 references of both dispatches: the partials of each split, and their combine.

use super::{SplitAttention, OP};
use crate::shape::ShapeError;
use crate::support::expect_len;

/// The plain-Rust reference of [`split_kernel`] in f64: `part` for a cache of `kv_len`
/// positions at position `pos`, on the values the buffers hold (the caches already rounded to
/// their storage type).
///
/// [`split_kernel`]: super::split_kernel
pub fn reference_split(
    shape: &SplitAttention,
    kv_len: u32,
    pos: u32,
    q: &[f32],
    k: &[f32],
    v: &[f32],
) -> Result<Vec<f64>, ShapeError> {
    reference_split_windowed(shape, kv_len, pos, None, q, k, v)
}

/// [`reference_split`] where each query token sees only the keys of the last `window`
/// positions, as [`split_kernel_windowed`] computes.
///
/// [`split_kernel_windowed`]: super::split_kernel_windowed
pub fn reference_split_windowed(
    shape: &SplitAttention,
    kv_len: u32,
    pos: u32,
    window: Option<u32>,
    q: &[f32],
    k: &[f32],
    v: &[f32],
) -> Result<Vec<f64>, ShapeError> {
    let n = shape.check()?;
    let whole = shape.attention(kv_len, pos);
    let q_len = whole.check()?;
    let (t_n, h_n, kv_n, d, splits) = (
        shape.tokens as usize,
        shape.heads as usize,
        shape.kv_heads as usize,
        shape.head_dim as usize,
        shape.splits as usize,
    );
    expect_len(OP, "q", q_len as usize, q.len())?;
    let cache = kv_len as usize * kv_n * d;
    expect_len(OP, "k", cache, k.len())?;
    expect_len(OP, "v", cache, v.len())?;
    let scale = 1.0 / (d as f64).sqrt();
    let chunk = (pos as usize + t_n).div_ceil(splits);
    let mut part = vec![0f64; n as usize];
    for (row, out) in part.chunks_mut(splits * (d + 2)).enumerate() {
        let (t, h) = (row / h_n, row % h_n);
        let visible = pos as usize + t + 1;
        let first = window.map_or(0, |w| visible.saturating_sub(w as usize));
        let kvh = h / (h_n / kv_n);
        let qr = &q[row * d..][..d];
        let at = |j: usize| (j * kv_n + kvh) * d;
        for (s, out) in out.chunks_mut(d + 2).enumerate() {
            let keys = (s * chunk).clamp(first, visible)..((s + 1) * chunk).min(visible);
            let scores: Vec<f64> = keys
                .clone()
                .map(|j| {
                    let kr = &k[at(j)..][..d];
                    scale
                        * qr.iter()
                            .zip(kr)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum::<f64>()
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let (acc, ml) = out.split_at_mut(d);
            for (j, score) in keys.zip(&scores) {
                let p = (score - m).exp();
                ml[1] += p;
                for (a, &vi) in acc.iter_mut().zip(&v[at(j)..][..d]) {
                    *a += p * vi as f64;
                }
            }
            ml[0] = m;
        }
    }
    Ok(part)
}

/// The plain-Rust reference of [`combine_kernel`] in f64, on the `part` values the buffer
/// holds.
///
/// [`combine_kernel`]: super::combine_kernel
pub fn reference_combine(shape: &SplitAttention, part: &[f32]) -> Result<Vec<f64>, ShapeError> {
    let n = shape.check()?;
    expect_len(OP, "part", n as usize, part.len())?;
    let (d, splits) = (shape.head_dim as usize, shape.splits as usize);
    let mut out = vec![0f64; n as usize / splits / (d + 2) * d];
    for (row, o) in part.chunks(splits * (d + 2)).zip(out.chunks_mut(d)) {
        let ml = |s: &[f32]| (s[d] as f64, s[d + 1] as f64);
        let big_m = row
            .chunks(d + 2)
            .map(|s| ml(s).0)
            .fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row
            .chunks(d + 2)
            .map(|s| ml(s).1 * (ml(s).0 - big_m).exp())
            .sum();
        for s in row.chunks(d + 2) {
            let w = (ml(s).0 - big_m).exp() / sum;
            for (oi, &a) in o.iter_mut().zip(&s[..d]) {
                *oi += w * a as f64;
            }
        }
    }
    Ok(out)
}

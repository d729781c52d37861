//! The f64 reference of the tiled product, from x and W rounded to f16 as the kernel stages
//! them.

use super::check;
use crate::shape::ShapeError;
use half::f16;
use trine_gguf::quant::{dequantize, WeightType};

/// `y` in f64 from x and W's dequantised values, each rounded to f16 as the kernel stages
/// them, plus `add`.
pub fn reference(
    ty: WeightType,
    w: &[u8],
    x: &[f32],
    add: Option<&[f32]>,
    (rows, cols, tokens): (u32, u32, u32),
) -> Result<Vec<f64>, ShapeError> {
    let (wd, xd) = staged(ty, w, x, (rows, cols, tokens))?;
    let (r, c, t) = (rows as usize, cols as usize, tokens as usize);
    let mut y = vec![0f64; t * r];
    // Tokens spread over the host's threads: the bench's products reach 4096 × 4096 × 512.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = t.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (chunk, ys) in y.chunks_mut(per * r).enumerate() {
            let (xd, wd) = (&xd, &wd);
            s.spawn(move || {
                for (i, out) in ys.iter_mut().enumerate() {
                    let (tok, row) = (chunk * per + i / r, i % r);
                    let xs = &xd[tok * c..][..c];
                    let sum: f64 = xs.iter().zip(&wd[row * c..][..c]).map(|(a, b)| a * b).sum();
                    *out = sum + add.map_or(0.0, |a| a[tok * r + row] as f64);
                }
            });
        }
    });
    Ok(y)
}

/// The slices of a [`super::TilesSpec::split`] product in `splits` slices, in f64 as
/// [`reference`] sums them: `[splits × tokens × rows]`, slice z over the columns of its share
/// ([`super::TilesSpec::k_chunk`]).
pub fn reference_split(
    ty: WeightType,
    w: &[u8],
    x: &[f32],
    (rows, cols, tokens): (u32, u32, u32),
    splits: u32,
) -> Result<Vec<f64>, ShapeError> {
    let (wd, xd) = staged(ty, w, x, (rows, cols, tokens))?;
    let (r, c, t) = (rows as usize, cols as usize, tokens as usize);
    let chunk = super::TilesSpec::k_chunk(cols, splits) as usize;
    let mut y = Vec::with_capacity(splits as usize * t * r);
    for z in 0..splits as usize {
        let cs = (z * chunk).min(c)..((z + 1) * chunk).min(c);
        for tok in 0..t {
            for row in 0..r {
                let xs = &xd[tok * c..][cs.clone()];
                let ws = &wd[row * c..][cs.clone()];
                y.push(xs.iter().zip(ws).map(|(a, b)| a * b).sum());
            }
        }
    }
    Ok(y)
}

/// W's dequantised values and x's, each rounded to f16 as the kernel stages them.
fn staged(
    ty: WeightType,
    w: &[u8],
    x: &[f32],
    (rows, cols, tokens): (u32, u32, u32),
) -> Result<(Vec<f64>, Vec<f64>), ShapeError> {
    check(rows, cols, tokens)?;
    let wd = dequantize(ty, w, rows as usize * cols as usize)?
        .into_iter()
        .map(|v| f16::from_f64(v).to_f64())
        .collect();
    let xd = x.iter().map(|&v| f16::from_f32(v).to_f64()).collect();
    Ok((wd, xd))
}

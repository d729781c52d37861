//! x quantized to 8 bits for the products with 8-bit activations
//! ([`super::matvec_q8_rows`], [`super::matvec_q8_blocks`]), and what those products share: x is quantized as llama.cpp's
//! CPU backend quantizes it for the weights' type ([`XBlocks`]: signed bytes `q` and a scale
//! `d`, `x ≈ d·q`), and a block of weights' codes, read as whole 32-bit words, is multiplied
//! with x's four at a time ([`BinaryOp::Dot4I8`](trine_ir::BinaryOp::Dot4I8)): the integer sum
//! of a block is exact, and one float multiply-add per block applies both scales, as llama.cpp
//! multiplies quantized weights on hardware with packed dot products.
//!
//! [`crate::quantize`]'s kernel makes the activations' blocks on the device, [`quantize_x`] on
//! the host: words of codes `xq`, and per 32 elements the scale `xd` and `xs = d·Σq` (the
//! term a format's centre or minimum multiplies), whatever the length of the block the scale
//! was taken over.
//!
//! Bound: the products are held to
//! [`reference()`], the product of the dequantized weights and the dequantized activations,
//! from which they differ only by f32 rounding (the integer dots are exact); against
//! unquantized x the error is x's quantization, the trade llama.cpp makes too (about 4e-6
//! NMSE for uniform random x in blocks of 32), not a kernel's.

use crate::blocks::{BlockFormat, Flat};
use crate::shape::ShapeError;

use half::f16;
use trine_gguf::quant::{dequantize, WeightType, QK, QK_K};
use trine_ir::{KernelBuilder, Scalar, Val};

pub(crate) const OP: &str = "matvec_q8";

/// Elements per scale of x as the products read it ([`Q8Activations::scales`]): Q8_0's block.
pub const X_BLOCK: u32 = QK as u32;

/// How x is quantized for a weight type's product: as llama.cpp's CPU backend does it for
/// that type's dot product (ggml's `vec_dot_type`, in its x86 form), so that both round x
/// alike. Rounding x differently parted greedy tokens beyond a near tie on real models (a
/// Q2_K and an IQ4_XS file, whose dots llama.cpp takes on blocks of 256).
#[allow(non_camel_case_types)] // ggml's names
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum XBlocks {
    /// Blocks of 32: scale `d = max|x|/127` stored as f16, codes `x·(127/max|x|)` rounded
    /// to nearest, ties to even. For Q8_0, Q4_0, Q5_0 and IQ4_NL weights.
    Q8_0,
    /// Q8_0's blocks, with the block's `d·Σq` (unrounded `d`) stored as f16 too: the term
    /// Q4_1's and Q5_1's minimum multiplies. For Q4_1 and Q5_1 weights.
    Q8_1,
    /// Blocks of 256: codes as Q8_0's, the f32 scale `1/(127/max|x|)`. For the K-quants and
    /// IQ4_XS.
    Q8_K,
}

impl XBlocks {
    /// The blocks llama.cpp quantizes x into for `ty` weights.
    pub fn for_weights(ty: WeightType) -> XBlocks {
        match ty {
            WeightType::Q4_1 | WeightType::Q5_1 => XBlocks::Q8_1,
            WeightType::Q2_K
            | WeightType::Q3_K
            | WeightType::Q4_K
            | WeightType::Q5_K
            | WeightType::Q6_K
            | WeightType::IQ4_XS => XBlocks::Q8_K,
            _ => XBlocks::Q8_0,
        }
    }

    /// Elements of a block: those one scale is taken over.
    pub fn elems(self) -> u32 {
        match self {
            XBlocks::Q8_0 | XBlocks::Q8_1 => X_BLOCK,
            XBlocks::Q8_K => QK_K as u32,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            XBlocks::Q8_0 => "q8_0",
            XBlocks::Q8_1 => "q8_1",
            XBlocks::Q8_K => "q8_k",
        }
    }
}

/// x quantized: code words (8 per 32 elements), and per 32 elements the scale and `d·Σq`.
#[derive(Clone, Debug, PartialEq)]
pub struct Q8Activations {
    pub words: Vec<u32>,
    pub scales: Vec<f32>,
    pub sums: Vec<f32>,
}

/// `v` rounded to the nearest integer, ties to even, as ggml's `nearest_int` does it: the
/// sum with 1.5·2²³ keeps the integer in its low mantissa bits (for |v| < 2²²).
fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0).to_bits();
    (bits & 0x007f_ffff) as i32 - 0x0040_0000
}

/// A block's largest magnitude, 127 over it (0 for a block of zeros) and its 8-bit codes, as
/// the quantizer rounds them.
fn block_codes(block: &[f32]) -> (f32, f32, Vec<i32>) {
    let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let id = if amax > 0.0 { 127.0 / amax } else { 0.0 };
    (
        amax,
        id,
        block.iter().map(|&v| nearest_int(v * id)).collect(),
    )
}

/// Appends `codes` (8-bit values) to `words`, four to a word, the first in the low byte.
fn pack_codes(codes: &[i32], words: &mut Vec<u32>) {
    for four in codes.chunks(4) {
        let w = four
            .iter()
            .enumerate()
            .fold(0u32, |w, (k, &c)| w | ((c as u32 & 255) << (8 * k)));
        words.push(w);
    }
}

/// The host's quantization of `x` (a multiple of `blocks.elems()` long), the operations of
/// [`crate::quantize::kernel`].
pub fn quantize_x(x: &[f32], blocks: XBlocks) -> Q8Activations {
    let mut out = Q8Activations {
        words: vec![],
        scales: vec![],
        sums: vec![],
    };
    for block in x.chunks(blocks.elems() as usize) {
        let (amax, id, q) = block_codes(block);
        let round = |v: f32| f16::from_f32(v).to_f32();
        let d = amax / 127.0;
        let scale = match blocks {
            XBlocks::Q8_0 | XBlocks::Q8_1 => round(d),
            XBlocks::Q8_K if amax > 0.0 => 1.0 / id,
            XBlocks::Q8_K => 0.0,
        };
        for part in q.chunks(X_BLOCK as usize) {
            pack_codes(part, &mut out.words);
            let sum = part.iter().sum::<i32>() as f32;
            out.scales.push(scale);
            out.sums.push(match blocks {
                XBlocks::Q8_1 => round(d * sum),
                XBlocks::Q8_0 | XBlocks::Q8_K => scale * sum,
            });
        }
    }
    out
}

/// x (`[rows × cols]`) scaled by a norm's weight `g` (`[cols]`) and quantized in Q8_0 blocks
/// with f32 scales, its rows' 1/rms left to the product after it, as a quantizer with
/// [`crate::quantize::XLoad::NormLater`] writes it: the blocks, and each block's sum of the
/// squares of x (not of x·g), from which the product works out 1/rms.
pub fn quantize_x_later(x: &[f32], g: &[f32]) -> (Q8Activations, Vec<f32>) {
    let cols = g.len();
    let v: Vec<f32> = x
        .iter()
        .enumerate()
        .map(|(i, &e)| e * g[i % cols])
        .collect();
    let mut out = Q8Activations {
        words: vec![],
        scales: vec![],
        sums: vec![],
    };
    for block in v.chunks(X_BLOCK as usize) {
        let (amax, _, q) = block_codes(block);
        pack_codes(&q, &mut out.words);
        let scale = amax / 127.0;
        out.scales.push(scale);
        out.sums.push(scale * q.iter().sum::<i32>() as f32);
    }
    let squares = x
        .chunks(X_BLOCK as usize)
        .map(|b| b.iter().map(|&e| f64::from(e) * f64::from(e)).sum::<f64>() as f32)
        .collect();
    (out, squares)
}

/// The format of `ty`'s blocks, which this product takes where it is flat and its blocks are
/// as long as x's (the integer dot of a block pairs the weights' codes with one block of x).
pub(crate) fn weight_format(ty: WeightType) -> Result<Flat, ShapeError> {
    let takes = |f: &Flat| f.elems == X_BLOCK;
    match BlockFormat::flat_of(ty) {
        Some(f) if takes(&f) => Ok(f),
        _ => {
            let names: Vec<&str> = BlockFormat::ALL
                .iter()
                .filter_map(|f| match f {
                    BlockFormat::Flat(f) if takes(f) => Some(f.ty.name()),
                    _ => None,
                })
                .collect();
            Err(ShapeError::Unsupported {
                op: OP,
                what: format!("{ty} weights (it takes {})", names.join(", ")),
            })
        }
    }
}

/// A block's dot product of its code words with x's words, exact in integers, as F32. A
/// byte of nibbles holds elements j (low nibble) and j + span (high), so its word j pairs
/// with x's words j and j + span/4.
pub(crate) fn block_dot<'b>(
    k: &'b KernelBuilder,
    f: Flat,
    codes: &[Val<'b>],
    x: &[Val<'b>],
) -> Val<'b> {
    let dot = if f.nibbles() {
        let nibbles = k.u32(0x0f0f_0f0f);
        let high = (f.span() / 4) as usize;
        codes
            .iter()
            .enumerate()
            .map(|(j, &c)| {
                (c & nibbles).dot4_i8(x[j]) + ((c >> k.u32(4)) & nibbles).dot4_i8(x[high + j])
            })
            .reduce(|a, b| a + b)
    } else {
        codes
            .iter()
            .zip(x)
            .map(|(&c, &v)| c.dot4_i8(v))
            .reduce(|a, b| a + b)
    };
    dot.map_or_else(|| k.f32(0.0), |v| v.cast(Scalar::F32))
}

/// The sum of the byte codes in x's `words`, exact (I32): a packed dot with ones.
pub(crate) fn code_sum<'b>(k: &'b KernelBuilder, words: &[Val<'b>]) -> Val<'b> {
    let ones = k.u32(0x0101_0101);
    words
        .iter()
        .map(|&w| w.dot4_i8(ones))
        .reduce(|a, b| a + b)
        .unwrap_or_else(|| k.i32(0))
}

/// Whether a block's contribution needs x's `dx·Σq`: the format's centre or minimum
/// multiplies the sum of x.
pub(crate) fn needs_x_sum(f: Flat) -> bool {
    f.has_min() || f.centre().is_some()
}

/// A block's contribution from its integer `dot`: the weights' scale `d` (and minimum `m`
/// where the format has one), x's scale `dx` (and `sx = dx·Σq` where [`needs_x_sum`]).
pub(crate) fn block_sum<'b>(
    k: &'b KernelBuilder,
    f: Flat,
    (d, m): (Val<'b>, Option<Val<'b>>),
    (dx, sx): (Val<'b>, Option<Val<'b>>),
    dot: Val<'b>,
) -> Val<'b> {
    match (m, sx, f.centre()) {
        (Some(m), Some(sx), _) => (d * dx).fma(dot, m * sx),
        (None, Some(sx), Some(c)) => d * (dx * dot - k.f32(c) * sx),
        _ => d * dx * dot,
    }
}

/// The product of the dequantized weights and the dequantized activations, in f64. Where x
/// is in Q8_1 blocks, a block's minimum multiplies the f16-rounded `d·Σq` the product reads,
/// as llama.cpp's does, not the exact sum of the dequantized block.
pub fn reference(
    ty: WeightType,
    w: &[u8],
    rows: usize,
    cols: usize,
    x: &Q8Activations,
) -> Result<Vec<f64>, ShapeError> {
    let wf = dequantize(ty, w, rows * cols)?;
    let codes: Vec<f64> = x
        .words
        .iter()
        .flat_map(|word| word.to_le_bytes().map(|b| f64::from(b as i8)))
        .collect();
    let xf: Vec<f64> = codes
        .iter()
        .enumerate()
        .map(|(i, &q)| f64::from(x.scales[i / QK]) * q)
        .collect();
    // Per x block of 32, what the weights' minimum multiplies beyond the dequantized sum.
    let sum_gap: Vec<f64> = match XBlocks::for_weights(ty) {
        XBlocks::Q8_1 => codes
            .chunks(QK)
            .zip(x.scales.iter().zip(&x.sums))
            .map(|(q, (&d, &s))| f64::from(s) - f64::from(d) * q.iter().sum::<f64>())
            .collect(),
        XBlocks::Q8_0 | XBlocks::Q8_K => vec![0.0; cols / QK],
    };
    // Q4_1's and Q5_1's blocks (the Q8_1 formats, 32 elements) lead with f16 d, then f16 m.
    let block_bytes = ty.block_bytes();
    let min = |row: usize, b: usize| {
        let at = (row * cols / QK + b) * block_bytes + 2;
        f64::from(f16::from_le_bytes([w[at], w[at + 1]]))
    };
    Ok(wf
        .chunks(cols)
        .enumerate()
        .map(|(r, row)| {
            let dot: f64 = row.iter().zip(&xf).map(|(&a, &b)| a * b).sum();
            let gap: f64 = sum_gap
                .iter()
                .enumerate()
                .filter(|(_, &g)| g != 0.0)
                .map(|(b, &g)| min(r, b) * g)
                .sum();
            dot + gap
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host quantizer is ggml's: Q8_0's f16 scale and ties to even, Q8_1's f16 `d·Σq`,
    /// Q8_K's one scale over 256 elements.
    #[test]
    fn x_is_quantized_as_ggml_quantizes_it() {
        let mut x = vec![0f32; 256];
        // max |x| = 127 makes the first block's id 1, so its codes are x rounded.
        x[..4].copy_from_slice(&[127.0, 2.5, -0.5, -3.5]);
        x[40] = 1.0;
        x[41] = 0.3;
        let q = quantize_x(&x, XBlocks::Q8_0);
        assert_eq!(q.words[0].to_le_bytes(), [127, 2, 0, (-4i8) as u8]);
        assert_eq!((q.scales[0], q.sums[0]), (1.0, 125.0));
        // The second block's largest value alone sets its scale, rounded to f16.
        let d = 1.0f32 / 127.0;
        assert_eq!(q.words[10].to_le_bytes()[..2], [127, 38]);
        assert_eq!(q.scales[1], f16::from_f32(d).to_f32());
        assert_ne!(q.scales[1], d);
        let q1 = quantize_x(&x, XBlocks::Q8_1);
        assert_eq!(q1.words, q.words);
        assert_eq!(q1.sums[1], f16::from_f32(d * 165.0).to_f32());
        assert_ne!(q1.sums[1], d * 165.0);
        // One block of 256: 127 sets every scale, and 1.0 is code 1.
        let k = quantize_x(&x, XBlocks::Q8_K);
        assert_eq!(k.words[10].to_le_bytes()[..2], [1, 0]);
        assert_eq!(k.scales, vec![1.0; 8]);
    }
}

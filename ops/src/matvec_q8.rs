//! x quantized to 8 bits per block of 32 for the products with 8-bit activations
//! ([`super::matvec_q8_rows`]), and what those products share: a block is quantized like a
//! Q8_0 block (signed bytes `q` and a scale `d`, `x ≈ d·q`), and a block of weights' codes,
//! read as whole 32-bit words, is multiplied with x's four at a time
//! ([`BinaryOp::Dot4I8`](trine_ir::BinaryOp::Dot4I8)): the integer sum of a block is exact, and
//! one float multiply-add per block applies both scales, as llama.cpp multiplies quantized
//! weights on hardware with packed dot products.
//!
//! [`quantize_kernel`] makes the activations' blocks: words of codes `xq`, scales `xd` and,
//! for the Q4 types, `xs = d·Σq` (Q4_0's offset of 8 and Q4_1's minimum multiply the block's
//! sum of x).
//!
//! Bound: the quantizer's codes exactly, its scales to within an ulp or so (`quantize_case`).
//! The products are held to [`reference()`], the product of the dequantized weights and the
//! dequantized activations, from which they differ only by f32 rounding (the integer dots
//! are exact); against unquantized x the error is x's quantization, which is the caller's
//! trade (about 4e-6 NMSE for uniform random x), not a kernel's.

use crate::blocks::{BlockFormat, Flat};
use crate::case::*;
use crate::shape::ShapeError;
use crate::support::{Combine, Reducer, Reduction};
use trine_gguf::quant::{dequantize, WeightType, QK};
use trine_ir::{Access, Kernel, KernelBuilder, Scalar, Val};

pub(crate) const OP: &str = "matvec_q8";

/// Elements of a block of x: Q8_0's.
pub const X_BLOCK: u32 = QK as u32;

/// Invocations of the quantizing kernel's workgroups: one block, one invocation per element.
const QUANT_WG: u32 = X_BLOCK;

/// x quantized per block: code words (8 per block), scales, and `d·Σq` per block.
#[derive(Clone, Debug, PartialEq)]
pub struct Q8Activations {
    pub words: Vec<u32>,
    pub scales: Vec<f32>,
    pub sums: Vec<f32>,
}

/// The host's quantization of `x` (a multiple of 32 long), the operations of
/// [`quantize_kernel`] in the same order: `d = max|x| / 127`, `q = sign(x)·⌊|x|/d + ½⌋`.
pub fn quantize_x(x: &[f32]) -> Q8Activations {
    let mut out = Q8Activations {
        words: vec![],
        scales: vec![],
        sums: vec![],
    };
    for block in x.chunks(X_BLOCK as usize) {
        let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let q: Vec<i32> = block
            .iter()
            .map(|&v| {
                let m = if d > 0.0 {
                    (v.abs() / d + 0.5).floor()
                } else {
                    0.0
                };
                if v < 0.0 {
                    -(m as i32)
                } else {
                    m as i32
                }
            })
            .collect();
        for four in q.chunks(4) {
            let w = four
                .iter()
                .enumerate()
                .fold(0u32, |w, (k, &c)| w | ((c as u32 & 255) << (8 * k)));
            out.words.push(w);
        }
        out.scales.push(d);
        out.sums.push(d * q.iter().sum::<i32>() as f32);
    }
    out
}

/// The grid of [`quantize_kernel`] for `blocks` blocks: a workgroup each.
pub fn quantize_grid(blocks: u32) -> [u32; 3] {
    [blocks, 1, 1]
}

/// Quantizes x (f32 `[cols]`) into `xq` (U32 `[cols/4]`), `xd` and `xs` (f32 `[cols/32]`):
/// a workgroup per block, an invocation per element. The block's maximum |x| and sum of codes
/// are workgroup reductions (shared-memory trees), exact whatever their order (the codes' sum
/// is an integer below 2^24 in magnitude, so its f32 sum is exact too), and the first 8
/// invocations pack the codes into words. Consecutive invocations read consecutive x values,
/// which the C lowering loads as vectors; one invocation per block read each block with a
/// gather per element, which GCC then ran in scalar code (measured slower on SmolLM2's
/// quantize nodes on a CPU: docs/bench/cpu.md).
pub fn quantize_kernel() -> Kernel {
    let k = KernelBuilder::new("quantize_q8", [QUANT_WG, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let xq = k.buffer("xq", Scalar::U32, Access::Write);
    let xd = k.buffer("xd", Scalar::F32, Access::Write);
    let xs = k.buffer("xs", Scalar::F32, Access::Write);
    let lid = k.local_index();
    let b = k.workgroup_id(0);
    let v = k.load(x, b * k.u32(QUANT_WG) + lid);
    let reducer = Reducer::new(&k, Reduction::Shared);
    // Starting from 0 as the host's fold does: a block of NaN only gives d = 0.
    let amax = reducer
        .reduce(&k, lid, v.abs(), Combine::Max)
        .max(k.f32(0.0));
    let d = amax / k.f32(127.0);
    // ⌊|x|/d + ½⌋ by the cast's truncation, the same for this non-negative value: GCC does
    // not vectorise `floorf` (it may raise the inexact exception).
    let m = k.select(d.gt(k.f32(0.0)), v.abs() / d + k.f32(0.5), k.f32(0.0));
    let m = m.cast(Scalar::I32);
    let q = k.select(v.lt(k.f32(0.0)), -m, m);
    let codes = k.shared("codes", Scalar::I32, QUANT_WG);
    k.store_shared(codes, lid, q);
    let sum = reducer.reduce(&k, lid, q.cast(Scalar::F32), Combine::Sum);
    k.if_(lid.lt(k.u32(QUANT_WG / 4)), || {
        let word = (0..4u32).fold(k.u32(0), |w, byte| {
            let c = k
                .load_shared(codes, lid * k.u32(4) + k.u32(byte))
                .bitcast(Scalar::U32);
            w | ((c & k.u32(255)) << k.u32(8 * byte))
        });
        k.store(xq, b * k.u32(QUANT_WG / 4) + lid, word);
    });
    k.if_(lid.eq(k.u32(0)), || {
        k.store(xd, b, d);
        k.store(xs, b, d * sum);
    });
    k.finish()
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

/// The product of the dequantized weights and the dequantized activations, in f64.
pub fn reference(
    ty: WeightType,
    w: &[u8],
    rows: usize,
    cols: usize,
    x: &Q8Activations,
) -> Result<Vec<f64>, ShapeError> {
    let wf = dequantize(ty, w, rows * cols)?;
    let xf: Vec<f64> = x
        .words
        .iter()
        .enumerate()
        .flat_map(|(i, word)| {
            let d = f64::from(x.scales[i / 8]);
            word.to_le_bytes().map(|b| d * f64::from(b as i8))
        })
        .collect();
    Ok(wf
        .chunks(cols)
        .map(|row| row.iter().zip(&xf).map(|(&a, &b)| a * b).sum())
        .collect())
}

/// The quantizing kernel against [`quantize_x`]: the codes exactly, the scales to within an
/// ulp or so, since Vulkan lets a division be 2.5 ulp off (NVIDIA's driver moved one scale of
/// 128 by an ulp, NMSE 3e-17, and no code).
fn quantize_case(cols: u32) -> Case {
    let mut rng = Rng::new(u64::from(cols));
    let mut x = rng.f32s(cols as usize, -3.0, 3.0);
    // A block of zeros (scale 0) and one with a single large value.
    x[32..64].fill(0.0);
    x[64] = 100.0;
    let q = quantize_x(&x);
    let blocks = cols / X_BLOCK;
    Case::new(
        format!("quantize_q8/{cols}"),
        quantize_kernel(),
        quantize_grid(blocks),
    )
    .input("x", Scalar::F32, f32_bytes(&x))
    .output_exact(
        "xq",
        Scalar::U32,
        vec![0; q.words.len() * 4],
        q.words.iter().map(|&v| f64::from(v)).collect(),
    )
    .output(
        "xd",
        Scalar::F32,
        vec![0; q.scales.len() * 4],
        q.scales.iter().map(|&v| f64::from(v)).collect(),
    )
    .output(
        "xs",
        Scalar::F32,
        vec![0; q.sums.len() * 4],
        q.sums.iter().map(|&v| f64::from(v)).collect(),
    )
    .bound(1e-12)
}

/// The quantizer, at 4096 columns and at 96.
pub fn cases() -> Vec<Case> {
    vec![quantize_case(4096), quantize_case(96)]
}

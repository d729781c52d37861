//! Matrix-vector product with 8-bit activations: `y = W·x` where x has been quantized like a
//! Q8_0 block (per 32 elements, signed bytes `q` and a scale `d`, `x ≈ d·q`), and the weights'
//! codes are read as whole 32-bit words and multiplied with x's four at a time
//! ([`BinaryOp::Dot4I8`](trine_ir::BinaryOp::Dot4I8)): the integer sum of a block is exact, and
//! one float multiply-add per block applies both scales. This is how llama.cpp's GPU backends
//! multiply quantized weights on hardware with packed dot products.
//!
//! [`quantize_kernel`] makes the activations' blocks: words of codes `xq`, scales `xd` and,
//! for the Q4 types, `xs = d·Σq` (Q4_0's offset of 8 and Q4_1's minimum multiply the block's
//! sum of x). [`kernel`] is the product: a workgroup of [`WG`] invocations takes
//! `rows_per_workgroup` rows, invocation `l` blocks `l`, `l + WG`, … of each, and a block's
//! codes come as the aligned words that hold them: Q4_1's (20-byte blocks, codes at byte 4)
//! are aligned; Q8_0's (34 bytes, codes at 2) and Q4_0's (18, at 2) are every other block, and
//! otherwise each word is put together from two neighbours. The weights' buffer is read as
//! `U32` words only (`w`, padded to a whole word): a block's f16 scales are halves of the first
//! word it touches, which the codes' loads fetch anyway, so a block of Q4_0 is five loads
//! where it was six (four words, or five, and an f16 view for the scale).
//!
//! Bound: against the product of the dequantized weights and the dequantized activations the
//! kernel differs only by f32 rounding (the integer dots are exact), NMSE far below
//! [`NMSE_DEFAULT`]. Against unquantized x the error is x's quantization, which is the
//! caller's trade (about 4e-6 NMSE for uniform random x), not the kernel's.

use crate::case::*;
use crate::dequant::f16_bits_to_f32;
use crate::matvec::reduce_subgroup;
use crate::shape::ShapeError;
use crate::support::{nonzero, Combine, Reducer, Reduction};
use trine_gguf::quant::{dequantize, quantize, WeightType, QK};
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar, Val};

pub(crate) const OP: &str = "matvec_q8";

/// Invocations of the product's workgroups. On an H100 (2026-11-26, 4096 × 14336, two rounds
/// alternating in one call, the scales taken from the code words) 64 made Vulkan's Q4_0 18.4
/// µs against 19.2 with 128, and CUDA's 19.9–20.7 against 22.4–23.2; Q4_1 and Q8_0 within a
/// few percent either way.
pub const WG: u32 = 64;

/// Invocations of the quantizing kernel's workgroups: one block, one invocation per element.
const QUANT_WG: u32 = QK as u32;

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
    for block in x.chunks(QK) {
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
/// gather per element, which GCC then ran in scalar code (SmolLM2's quantize nodes took
/// 17–19 µs each on 2 EPYC cores, 2026-11-26).
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

/// Bytes of a block and the byte of its codes within it.
pub(crate) fn layout(ty: WeightType) -> Result<(u32, u32), ShapeError> {
    match ty {
        WeightType::Q8_0 => Ok((34, 2)),
        WeightType::Q4_0 => Ok((18, 2)),
        WeightType::Q4_1 => Ok((20, 4)),
        _ => Err(ShapeError::Unsupported {
            op: OP,
            what: format!("{ty} weights (it takes Q8_0, Q4_0 and Q4_1)"),
        }),
    }
}

/// A block's dot product of its code words with x's 8 words, exact in integers, as F32.
/// Byte j of a Q4 block holds elements j (low nibble) and j + 16 (high), so its word j pairs
/// with x's words j and j + 4.
pub(crate) fn block_dot<'b>(
    k: &'b KernelBuilder,
    ty: WeightType,
    codes: &[Val<'b>],
    x: &[Val<'b>],
) -> Val<'b> {
    let dot = if ty == WeightType::Q8_0 {
        codes
            .iter()
            .zip(x)
            .map(|(&c, &v)| c.dot4_i8(v))
            .reduce(|a, b| a + b)
    } else {
        let nibbles = k.u32(0x0f0f_0f0f);
        codes
            .iter()
            .enumerate()
            .map(|(j, &c)| {
                (c & nibbles).dot4_i8(x[j]) + ((c >> k.u32(4)) & nibbles).dot4_i8(x[4 + j])
            })
            .reduce(|a, b| a + b)
    };
    dot.map_or_else(|| k.f32(0.0), |v| v.cast(Scalar::F32))
}

/// A block's contribution from its integer `dot`: the weights' scale `d` (and Q4_1's minimum
/// `m`), x's scale `dx` (and `sx = dx·Σq` for the Q4 types, whose offset of 8 or minimum
/// multiplies the sum of x).
pub(crate) fn block_sum<'b>(
    k: &'b KernelBuilder,
    (d, m): (Val<'b>, Option<Val<'b>>),
    (dx, sx): (Val<'b>, Option<Val<'b>>),
    dot: Val<'b>,
) -> Val<'b> {
    match (m, sx) {
        (Some(m), Some(sx)) => (d * dx).fma(dot, m * sx),
        (None, Some(sx)) => d * (dx * dot - k.f32(8.0) * sx),
        _ => d * dx * dot,
    }
}

/// The product for `ty` weights, `rows_per_workgroup` rows per workgroup of [`WG`]
/// invocations. Buffers `w` (U32), `xq`, `xd`, `xs`, `y`;
/// parameters `rows`, `cols`.
pub fn kernel(ty: WeightType, rows_per_workgroup: u32) -> Result<Kernel, ShapeError> {
    let (block_bytes, codes_at) = layout(ty)?;
    nonzero(OP, "rows per workgroup", rows_per_workgroup)?;
    let nrows = rows_per_workgroup;
    let k = KernelBuilder::new(&format!("matvec_q8_{ty}_r{nrows}"), [WG, 1, 1]);
    k.require_subgroups();
    let w = k.buffer("w", Scalar::U32, Access::Read);
    let xq = k.buffer("xq", Scalar::U32, Access::Read);
    let xd = k.buffer("xd", Scalar::F32, Access::Read);
    let xs = k.buffer("xs", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let rows = k.param("rows", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let lid = k.local_index();
    let row0 = k.workgroup_id(0) * k.u32(nrows);
    let last = rows - k.u32(1);
    let blocks = cols / k.u32(QK as u32);
    let code_words = if ty == WeightType::Q8_0 { 8 } else { 4 };
    let rows_at: Vec<Val> = (0..nrows)
        .map(|r| (row0 + k.u32(r)).min(last) * blocks)
        .collect();
    let accs: Vec<_> = (0..nrows).map(|_| k.var("acc", Scalar::F32)).collect();
    k.for_range(lid, blocks, WG, |b| {
        let x: Vec<Val> = (0..8)
            .map(|j| k.load(xq, b * k.u32(8) + k.u32(j)))
            .collect();
        let dx = k.load(xd, b);
        let sx = (ty != WeightType::Q8_0).then(|| k.load(xs, b));
        for (&first, acc) in rows_at.iter().zip(&accs) {
            let byte = (first + b) * k.u32(block_bytes);
            // The words from the one holding the block's first byte: the scales come out of
            // word 0 instead of loads of their own.
            let word0 = byte / k.u32(4);
            let words: Vec<Val> = (0..=code_words)
                .map(|j| k.load(w, word0 + k.u32(j)))
                .collect();
            let low = words[0] & k.u32(0xffff);
            let (d, codes) = if block_bytes % 4 == 0 {
                // Q4_1: d and m fill word 0, the codes the words after it.
                (low, words[(codes_at / 4) as usize..].to_vec())
            } else {
                // Codes at byte 2: a block that starts in the high half of a word has its
                // scale there and whole words of codes after it; one that starts a word has
                // its scale in the low half and each word of codes is the high half of one
                // word and the low half of the next.
                let high = (byte & k.u32(2)).ne(k.u32(0));
                let codes = words
                    .windows(2)
                    .map(|p| k.select(high, p[1], (p[0] >> k.u32(16)) | (p[1] << k.u32(16))))
                    .collect();
                (k.select(high, words[0] >> k.u32(16), low), codes)
            };
            let d = f16_bits_to_f32(&k, d);
            let dot = block_dot(&k, ty, &codes, &x);
            let m = (ty == WeightType::Q4_1).then(|| f16_bits_to_f32(&k, words[0] >> k.u32(16)));
            acc.set(acc.get() + block_sum(&k, (d, m), (dx, sx), dot));
        }
    });
    let sums: Vec<Val> = accs.iter().map(|a| a.get()).collect();
    // Invocation r stores row r's sum.
    let totals = reduce_subgroup(&k, &sums, WG, (nrows, |r| vec![r]));
    let row = row0 + lid;
    k.if_(lid.lt(k.u32(nrows)) & row.lt(rows), || {
        k.store(y, row, totals[0])
    });
    Ok(k.finish())
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

/// A conformance (and bench) case: random weights of `ty`, random x quantized on the host.
pub fn case(
    ty: WeightType,
    rows: u32,
    cols: u32,
    rows_per_workgroup: u32,
) -> Result<Case, ShapeError> {
    let (r, c) = (rows as usize, cols as usize);
    nonzero(OP, "rows", rows)?;
    if cols == 0 || c % QK != 0 {
        return Err(ShapeError::NotMultiple {
            op: OP,
            what: "cols",
            value: c,
            multiple: QK,
        });
    }
    let kernel = kernel(ty, rows_per_workgroup)?;
    let mut rng = Rng::new(u64::from(rows) * 31 + u64::from(cols));
    let w = quantize(ty, &rng.f32s(r * c, -1.0, 1.0))?;
    let x = quantize_x(&rng.f32s(c, -1.0, 1.0));
    let want = reference(ty, &w, r, c, &x)?;
    let bytes = crate::dequant::pad_to_words(w);
    Ok(Case::new(
        format!("{OP}/{ty}/{rows}x{cols}/r{rows_per_workgroup}"),
        kernel,
        [rows.div_ceil(rows_per_workgroup), 1, 1],
    )
    .input("w", Scalar::U32, bytes)
    .input("xq", Scalar::U32, u32_bytes(&x.words))
    .input("xd", Scalar::F32, f32_bytes(&x.scales))
    .input("xs", Scalar::F32, f32_bytes(&x.sums))
    .output("y", Scalar::F32, vec![0; r * 4], want)
    .params(vec![ParamValue::U32(rows), ParamValue::U32(cols)]))
}

/// The quantizing kernel against [`quantize_x`]: the codes exactly, the scales to within an
/// ulp or so, since Vulkan lets a division be 2.5 ulp off (NVIDIA's driver moved one scale of
/// 128 by an ulp on an H100, NMSE 3e-17, and no code).
fn quantize_case(cols: u32) -> Case {
    let mut rng = Rng::new(u64::from(cols));
    let mut x = rng.f32s(cols as usize, -3.0, 3.0);
    // A block of zeros (scale 0) and one with a single large value.
    x[32..64].fill(0.0);
    x[64] = 100.0;
    let q = quantize_x(&x);
    let blocks = cols / QK as u32;
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

/// Every weight type at a small odd shape (blocks at both offsets, a partial last
/// workgroup) and at SmolLM2's 576 columns, and the quantizer.
pub fn cases() -> Vec<Case> {
    let mut out = vec![quantize_case(4096), quantize_case(96)];
    for ty in [WeightType::Q8_0, WeightType::Q4_0, WeightType::Q4_1] {
        for (rows, cols, per) in [(13, 96, 4), (576, 576, 2), (7, 4096, 8)] {
            out.push(case(ty, rows, cols, per).expect("valid shapes"));
        }
    }
    out
}

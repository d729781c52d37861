//! The walks over a row's weights that accumulate the dot products of quantized rows: by
//! segments, by whole blocks ([`super::MatvecSpec::blocked`]), by pairs of blocks
//! ([`super::MatvecSpec::pairs`]), and the codes read as words.

use super::kernel::Token;
use crate::dequant;
use crate::matvec_attn::Input;
use crate::matvec_fused::Norm;
use trine_gguf::quant::{WeightType, QK};
use trine_ir::{KernelBuilder, Scalar, Val, Var};

/// Accumulates the quantized rows' dot products: each step takes one segment of a block, loads
/// its x values once, and for every row multiplies the codes by x and scales the segment's sum
/// by d (adding m·Σx for Q4_1), so that the scales cost one multiply per segment. With the
/// norm, x is multiplied by g as it is loaded. With `words`, `w` is a `U32` view.
pub(super) fn dot_quantized<'b>(
    k: &'b KernelBuilder,
    ty: WeightType,
    (w, w16, words): (trine_ir::BufferId, Option<trine_ir::BufferId>, bool),
    (input, norm): (&Input<'b>, Option<&Norm<'b>>),
    cols: Val<'b>,
    rows_accs: &[(Val<'b>, Var<'b>)],
    (wg, segment): (u32, u32),
) {
    let block_bytes = k.u32(ty.block_bytes() as u32);
    let row_bytes = (cols / k.u32(QK as u32)) * block_bytes;
    let bases: Vec<Val> = rows_accs.iter().map(|&(r, _)| r * row_bytes).collect();
    let segments = cols / k.u32(segment);
    let lid = k.local_index();
    k.for_range(lid, segments, wg, |s| {
        let per_block = k.u32(QK as u32 / segment);
        let block = s / per_block;
        let part = s % per_block;
        let xb = block * k.u32(QK as u32);
        // Element offsets (within the block) of this segment, paired with their x values.
        let offsets: Vec<Val> = match ty {
            WeightType::Q8_0 => (0..segment)
                .map(|i| part * k.u32(segment) + k.u32(i))
                .collect(),
            _ => (0..segment / 2)
                .map(|i| part * k.u32(segment / 2) + k.u32(i))
                .collect(),
        };
        // Every row's scales and codes are loaded before x: the weights come from memory, x
        // from a cache, and a GPU compiler keeps independent loads in the order they are
        // written, so the slower loads go first and both wait out one latency, not two in turn
        // (NVRTC, given x's loads first, issued the weights' loads only after x's first use).
        let weights: Vec<(dequant::Scales, Vec<Val>)> = bases
            .iter()
            .map(|base| {
                let blk = *base + block * block_bytes;
                let scales = dequant::load_scales(k, ty, (w, w16), blk);
                let codes: Vec<Val> = match ty {
                    _ if words => word_codes(k, (ty, w), blk, part, segment),
                    WeightType::Q8_0 => offsets
                        .iter()
                        .map(|&o| dequant::q8_code(k, w, blk, o))
                        .collect(),
                    _ => {
                        let pairs: Vec<_> = offsets
                            .iter()
                            .map(|&o| dequant::q4_codes(k, ty, w, blk, o))
                            .collect();
                        pairs
                            .iter()
                            .map(|p| p.0)
                            .chain(pairs.iter().map(|p| p.1))
                            .collect()
                    }
                };
                (scales, codes)
            })
            .collect();
        let xs: Vec<Val> = match ty {
            WeightType::Q8_0 => offsets.iter().map(|&o| input.load(k, xb + o)).collect(),
            _ => offsets
                .iter()
                .map(|&o| input.load(k, xb + o))
                .chain(
                    offsets
                        .iter()
                        .map(|&o| input.load(k, xb + o + k.u32(QK as u32 / 2))),
                )
                .collect(),
        };
        let xs: Vec<Val> = match norm {
            None => xs,
            Some(n) => {
                let first = block * k.u32(QK as u32);
                let at: Vec<Val> = match ty {
                    WeightType::Q8_0 => offsets.clone(),
                    _ => {
                        let half = k.u32(QK as u32 / 2);
                        let high = offsets.iter().map(|&o| o + half);
                        offsets.iter().copied().chain(high).collect()
                    }
                };
                xs.iter()
                    .zip(at)
                    .map(|(&v, c)| n.scale(k, v, first + c))
                    .collect()
            }
        };
        let xsum = (ty == WeightType::Q4_1).then(|| xs[1..].iter().fold(xs[0], |a, &v| a + v));
        for ((_, acc), (scales, codes)) in rows_accs.iter().zip(weights) {
            accumulate(*acc, scales, (&codes, &xs), xsum);
        }
    });
}

/// Adds a block's share to a row's sum: the codes' dot product with their x values, scaled by
/// d, and m·Σx for Q4_1 (`xsum`), so that the scales cost one multiply per block or segment.
fn accumulate<'b>(
    acc: Var<'b>,
    scales: dequant::Scales<'b>,
    (codes, xs): (&[Val<'b>], &[Val<'b>]),
    xsum: Option<Val<'b>>,
) {
    let dot = codes
        .iter()
        .zip(xs)
        .skip(1)
        .fold(codes[0] * xs[0], |a, (&q, &v)| q.fma(v, a));
    let mut sum = scales.d.fma(dot, acc.get());
    if let (Some(m), Some(xsum)) = (scales.m, xsum) {
        sum = m.fma(xsum, sum);
    }
    acc.set(sum);
}

/// [`MatvecSpec::blocked`]'s walk: a loop over the row's blocks with uniform bounds, in which
/// invocation `lid` takes elements `lid + j·wg` of each block, loading their x values once for
/// all rows; each row's codes come byte by byte (a Q4 byte holds elements `i` and `i + 16`),
/// its scales from the f16 view where there is one.
pub(super) fn dot_blocked<'b>(
    k: &'b KernelBuilder,
    ty: WeightType,
    (w, w16): (trine_ir::BufferId, Option<trine_ir::BufferId>),
    (input, norm): (&Input<'b>, Option<&Norm<'b>>),
    cols: Val<'b>,
    rows_accs: &[(Val<'b>, Var<'b>)],
    wg: u32,
) {
    let qk = QK as u32;
    let block_bytes = k.u32(ty.block_bytes() as u32);
    let row_bytes = (cols / k.u32(qk)) * block_bytes;
    let bases: Vec<Val> = rows_accs.iter().map(|&(r, _)| r * row_bytes).collect();
    let lid = k.local_index();
    // Element offsets within a block: for Q4, the low nibbles' first, then the same bytes'
    // high nibbles (16 further on), so that codes and x values pair up in order.
    let offsets: Vec<Val> = match ty {
        WeightType::Q8_0 => (0..qk / wg).map(|j| lid + k.u32(j * wg)).collect(),
        _ => {
            let low: Vec<Val> = (0..qk / 2 / wg).map(|j| lid + k.u32(j * wg)).collect();
            let high: Vec<Val> = low.iter().map(|&o| o + k.u32(qk / 2)).collect();
            low.into_iter().chain(high).collect()
        }
    };
    k.for_range(k.u32(0), cols / k.u32(qk), 1, |block| {
        let xb = block * k.u32(qk);
        let xs: Vec<Val> = offsets
            .iter()
            .map(|&o| {
                let v = input.load_aligned(k, (xb, o), qk);
                norm.map_or(v, |n| n.scale(k, v, xb + o))
            })
            .collect();
        let xsum = (ty == WeightType::Q4_1).then(|| xs[1..].iter().fold(xs[0], |a, &v| a + v));
        for (base, (_, acc)) in bases.iter().zip(rows_accs) {
            let blk = *base + block * block_bytes;
            let scales = dequant::load_scales(k, ty, (w, w16), blk);
            let codes: Vec<Val> = match ty {
                WeightType::Q8_0 => offsets
                    .iter()
                    .map(|&o| dequant::q8_code(k, w, blk, o))
                    .collect(),
                _ => {
                    // Codes convert through I32: x86 vectors convert signed integers to floats
                    // natively (AVX2 has no unsigned conversion), and a code is at most 15.
                    let first = blk + k.u32(dequant::codes_offset(ty));
                    let bytes: Vec<Val> = offsets[..offsets.len() / 2]
                        .iter()
                        .map(|&o| k.load(w, first + o))
                        .collect();
                    let code = |v: Val<'b>| {
                        let q = v.cast(Scalar::I32).cast(Scalar::F32);
                        if ty == WeightType::Q4_0 {
                            q - k.f32(8.0)
                        } else {
                            q
                        }
                    };
                    let low = bytes.iter().map(|&b| code(b & k.u32(15)));
                    low.chain(bytes.iter().map(|&b| code(b >> k.u32(4))))
                        .collect()
                }
            };
            accumulate(*acc, scales, (&codes, &xs), xsum);
        }
    });
}

/// [`MatvecSpec::pairs`]' walk over a row's pairs of blocks, 32 invocations, invocation `lid`
/// taking element `lid` of both blocks of each pair; then an odd last block, in its own
/// layout, on the first 16 invocations (elements `lid` and `lid + 16`).
pub(super) fn dot_pairs<'b>(
    k: &'b KernelBuilder,
    ty: WeightType,
    (w, w16): (trine_ir::BufferId, Option<trine_ir::BufferId>),
    tokens: &[Token<'b>],
    cols: Val<'b>,
    rows: &[Val<'b>],
) {
    let qk = QK as u32;
    let bb = ty.block_bytes() as u32;
    let blocks = cols / k.u32(qk);
    let row_bytes = blocks * k.u32(bb);
    let bases: Vec<Val> = rows.iter().map(|&r| r * row_bytes).collect();
    let lid = k.local_index();
    // Each token's x value at column `c0 + o`.
    let x_at = |c0: Val<'b>, o: Val<'b>| -> Vec<Val<'b>> {
        tokens
            .iter()
            .map(|t| {
                let v = t.input.load_aligned(k, (c0, o), qk);
                t.norm.as_ref().map_or(v, |n| n.scale(k, v, c0 + o))
            })
            .collect()
    };
    // The f16 scale `i` (0..4) of the pair or block at byte `at`.
    let scale = |at: Val<'b>, i: u32| dequant::load_f16(k, w, w16, at + k.u32(2 * i));
    // Each weight is dequantised with one fma, d·q + m, m = -8·d for Q4_0 (exactly d·(q - 8)),
    // then multiplied into the sum with another: two vector operations per 8 weights, where
    // scaling a dot product by d and adding m·Σx takes three.
    let code = |byte: Val<'b>| byte.cast(Scalar::I32).cast(Scalar::F32);
    let q4_1 = ty == WeightType::Q4_1;
    // The scales of block `block` (0 or 1) of the pair, or of the lone block, at byte `at`.
    let scales = |at: Val<'b>, block: u32| {
        let d = scale(at, if q4_1 { 2 * block } else { block });
        let m = if q4_1 {
            scale(at, 2 * block + 1)
        } else {
            d * k.f32(-8.0)
        };
        (d, m)
    };
    k.for_range(k.u32(0), blocks / k.u32(2), 1, |p| {
        let c0 = p * k.u32(2 * qk);
        let x0 = x_at(c0, lid);
        let x1 = x_at(c0 + k.u32(qk), lid);
        for (r, base) in bases.iter().enumerate() {
            let at = *base + p * k.u32(2 * bb);
            let (d0, m0) = scales(at, 0);
            let (d1, m1) = scales(at, 1);
            let byte = k.load(w, at + k.u32(dequant::pair_scale_bytes(ty)) + lid);
            let w0 = d0.fma(code(byte & k.u32(15)), m0);
            let w1 = d1.fma(code(byte >> k.u32(4)), m1);
            for (t, token) in tokens.iter().enumerate() {
                let acc = token.accs[r];
                acc.set(w1.fma(x1[t], w0.fma(x0[t], acc.get())));
            }
        }
    });
    let last = blocks - k.u32(1);
    k.if_((blocks % k.u32(2)).eq(k.u32(1)), || {
        k.if_(lid.lt(k.u32(qk / 2)), || {
            let c0 = last * k.u32(qk);
            let x0 = x_at(c0, lid);
            let x1 = x_at(c0, lid + k.u32(qk / 2));
            for (r, base) in bases.iter().enumerate() {
                let at = *base + last * k.u32(bb);
                let (d, m) = scales(at, 0);
                let byte = k.load(w, at + k.u32(dequant::codes_offset(ty)) + lid);
                let w0 = d.fma(code(byte & k.u32(15)), m);
                let w1 = d.fma(code(byte >> k.u32(4)), m);
                for (t, token) in tokens.iter().enumerate() {
                    let acc = token.accs[r];
                    acc.set(w1.fma(x1[t], w0.fma(x0[t], acc.get())));
                }
            }
        });
    });
}

/// The codes of segment `part` of the Q4_1 or Q8_0 block at byte `blk`, from a `U32` view,
/// as [`dequant::q4_codes`] and [`dequant::q8_code`] give them byte by byte. Bytes are
/// little-endian in their word, as the GGUF file and every target store them.
///
/// Q4_1: `segment / 8` aligned words; the low nibbles of their bytes in order, then the high
/// ones. Q8_0: the codes start at an even byte, at a word (`shift` 0) or in its middle (`shift`
/// 16), where each word of codes is the high half of one word and the low half of the next.
/// The word after the segment's last is loaded only where the codes reach into it; an aligned
/// segment loads its last word again instead, which keeps the last block of the buffer from
/// reading past its end.
fn word_codes<'b>(
    k: &'b KernelBuilder,
    (ty, w): (WeightType, trine_ir::BufferId),
    blk: Val<'b>,
    part: Val<'b>,
    segment: u32,
) -> Vec<Val<'b>> {
    let offset = dequant::codes_offset(ty);
    if ty != WeightType::Q8_0 {
        let first = blk / k.u32(4) + k.u32(offset / 4);
        let words: Vec<Val> = (0..segment / 8)
            .map(|j| k.load(w, first + part * k.u32(segment / 8) + k.u32(j)))
            .collect();
        let nibbles = |shift: u32| {
            words.iter().flat_map(move |&word| {
                (0..4).map(move |b| ((word >> k.u32(8 * b + shift)) & k.u32(15)).cast(Scalar::F32))
            })
        };
        return nibbles(0).chain(nibbles(4)).collect();
    }
    let n = segment / 4;
    let at = blk + k.u32(offset) + part * k.u32(segment);
    let first = at / k.u32(4);
    let shift = (at & k.u32(2)) * k.u32(8);
    let mut loaded: Vec<Val> = (0..n).map(|j| k.load(w, first + k.u32(j))).collect();
    loaded.push(k.load(w, first + k.u32(n - 1) + (shift >> k.u32(4))));
    let words: Vec<Val> = loaded
        .windows(2)
        .map(|p| (p[0] >> shift) | ((p[1] << k.u32(16)) << (k.u32(16) - shift)))
        .collect();
    words
        .into_iter()
        .flat_map(|word| {
            // Each byte moved to the top and shifted back arithmetically: its signed value.
            (0..4).map(move |b| {
                ((word << k.u32(24 - 8 * b)).bitcast(Scalar::I32) >> k.u32(24)).cast(Scalar::F32)
            })
        })
        .collect()
}

//! The walks over a row's weights that accumulate the dot products of quantized rows: by
//! segments, by whole blocks ([`super::MatvecSpec::blocked`]), by pairs of blocks
//! ([`super::MatvecSpec::pairs`]), and the codes read as words.

use super::kernel::Token;
use crate::blocks::{pair_scale_bytes, Flat, Scales};
use crate::matvec_attn::Input;
use crate::matvec_fused::Norm;
use trine_ir::{KernelBuilder, Scalar, Val, Var};

/// Accumulates the quantized rows' dot products: each step takes one segment of a block, loads
/// its x values once, and for every row multiplies the codes by x and scales the segment's sum
/// by d (adding m·Σx where the format has a minimum), so that the scales cost one multiply
/// per segment. With the norm, x is multiplied by g as it is loaded. With `words`, `w` is a
/// `U32` view.
pub(super) fn dot_quantized<'b>(
    k: &'b KernelBuilder,
    f: Flat,
    (w, w16, words): (trine_ir::BufferId, Option<trine_ir::BufferId>, bool),
    (input, norm): (&Input<'b>, Option<&Norm<'b>>),
    cols: Val<'b>,
    rows_accs: &[(Val<'b>, Var<'b>)],
    (wg, segment): (u32, u32),
) {
    let block_bytes = k.u32(f.bytes);
    let row_bytes = (cols / k.u32(f.elems)) * block_bytes;
    let bases: Vec<Val> = rows_accs.iter().map(|&(r, _)| r * row_bytes).collect();
    let segments = cols / k.u32(segment);
    let lid = k.local_index();
    // A segment's codes: one byte each, or bytes whose two codes lie `span` elements apart,
    // the high nibbles' elements after the low ones'.
    let (bytes, span) = if f.nibbles() {
        (segment / 2, f.span())
    } else {
        (segment, 0)
    };
    k.for_range(lid, segments, wg, |s| {
        let per_block = k.u32(f.elems / segment);
        let block = s / per_block;
        let part = s % per_block;
        let xb = block * k.u32(f.elems);
        // Element offsets (within the block) of this segment's code bytes.
        let offsets: Vec<Val> = (0..bytes).map(|i| part * k.u32(bytes) + k.u32(i)).collect();
        // Every row's scales and codes are loaded before x: the weights come from memory, x
        // from a cache, and a GPU compiler keeps independent loads in the order they are
        // written, so the slower loads go first and both wait out one latency, not two in turn
        // (NVRTC, given x's loads first, issued the weights' loads only after x's first use).
        let weights: Vec<(Scales, Vec<Val>)> = bases
            .iter()
            .map(|base| {
                let blk = *base + block * block_bytes;
                let scales = f.scales(k, (w, w16), blk);
                let codes: Vec<Val> = if words {
                    word_codes(k, (f, w), blk, part, segment)
                } else if f.nibbles() {
                    let pairs: Vec<_> = offsets
                        .iter()
                        .map(|&o| f.byte_nibbles(k, w, blk, o))
                        .collect();
                    pairs
                        .iter()
                        .map(|p| p.0)
                        .chain(pairs.iter().map(|p| p.1))
                        .collect()
                } else {
                    offsets.iter().map(|&o| f.byte_code(k, w, blk, o)).collect()
                };
                (scales, codes)
            })
            .collect();
        let xs: Vec<Val> = if f.nibbles() {
            offsets
                .iter()
                .map(|&o| input.load(k, xb + o))
                .chain(offsets.iter().map(|&o| input.load(k, xb + o + k.u32(span))))
                .collect()
        } else {
            offsets.iter().map(|&o| input.load(k, xb + o)).collect()
        };
        let xs: Vec<Val> = match norm {
            None => xs,
            Some(n) => {
                let first = block * k.u32(f.elems);
                let at: Vec<Val> = if f.nibbles() {
                    let half = k.u32(span);
                    let high = offsets.iter().map(|&o| o + half);
                    offsets.iter().copied().chain(high).collect()
                } else {
                    offsets.clone()
                };
                xs.iter()
                    .zip(at)
                    .map(|(&v, c)| n.scale(k, v, first + c))
                    .collect()
            }
        };
        let xsum = f
            .has_min()
            .then(|| xs[1..].iter().fold(xs[0], |a, &v| a + v));
        for ((_, acc), (scales, codes)) in rows_accs.iter().zip(weights) {
            accumulate(*acc, scales, (&codes, &xs), xsum);
        }
    });
}

/// Adds a block's share to a row's sum: the codes' dot product with their x values, scaled by
/// d, and m·Σx where the format has a minimum (`xsum`), so that the scales cost one multiply
/// per block or segment.
pub(super) fn accumulate<'b>(
    acc: Var<'b>,
    scales: Scales<'b>,
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
/// all rows; each row's codes come byte by byte (a byte of nibbles holds elements `i` and
/// `i + span`), its scales from the f16 view where there is one.
pub(super) fn dot_blocked<'b>(
    k: &'b KernelBuilder,
    f: Flat,
    (w, w16): (trine_ir::BufferId, Option<trine_ir::BufferId>),
    (input, norm): (&Input<'b>, Option<&Norm<'b>>),
    cols: Val<'b>,
    rows_accs: &[(Val<'b>, Var<'b>)],
    wg: u32,
) {
    let qk = f.elems;
    let block_bytes = k.u32(f.bytes);
    let row_bytes = (cols / k.u32(qk)) * block_bytes;
    let bases: Vec<Val> = rows_accs.iter().map(|&(r, _)| r * row_bytes).collect();
    let lid = k.local_index();
    // Element offsets within a block: for nibbles, the low nibbles' first, then the same
    // bytes' high nibbles (`span` further on), so that codes and x values pair up in order.
    let offsets: Vec<Val> = if f.nibbles() {
        let low: Vec<Val> = (0..qk / 2 / wg).map(|j| lid + k.u32(j * wg)).collect();
        let high: Vec<Val> = low.iter().map(|&o| o + k.u32(f.span())).collect();
        low.into_iter().chain(high).collect()
    } else {
        (0..qk / wg).map(|j| lid + k.u32(j * wg)).collect()
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
        let xsum = f
            .has_min()
            .then(|| xs[1..].iter().fold(xs[0], |a, &v| a + v));
        for (base, (_, acc)) in bases.iter().zip(rows_accs) {
            let blk = *base + block * block_bytes;
            let scales = f.scales(k, (w, w16), blk);
            let codes: Vec<Val> = if f.nibbles() {
                // Codes convert through I32: x86 vectors convert signed integers to floats
                // natively (AVX2 has no unsigned conversion), and a code is at most 15.
                let first = blk + k.u32(f.codes_at);
                let bytes: Vec<Val> = offsets[..offsets.len() / 2]
                    .iter()
                    .map(|&o| k.load(w, first + o))
                    .collect();
                let code = |v: Val<'b>| {
                    let q = v.cast(Scalar::I32).cast(Scalar::F32);
                    f.centre().map_or(q, |c| q - k.f32(c))
                };
                let low = bytes.iter().map(|&b| code(b & k.u32(15)));
                low.chain(bytes.iter().map(|&b| code(b >> k.u32(4))))
                    .collect()
            } else {
                offsets.iter().map(|&o| f.byte_code(k, w, blk, o)).collect()
            };
            accumulate(*acc, scales, (&codes, &xs), xsum);
        }
    });
}

/// [`MatvecSpec::pairs`]' walk over a row's pairs of blocks, 32 invocations, invocation `lid`
/// taking element `lid` of both blocks of each pair; then an odd last block, in its own
/// layout, on the first `span` invocations (elements `lid` and `lid + span`).
pub(super) fn dot_pairs<'b>(
    k: &'b KernelBuilder,
    f: Flat,
    (w, w16): (trine_ir::BufferId, Option<trine_ir::BufferId>),
    tokens: &[Token<'b>],
    cols: Val<'b>,
    rows: &[Val<'b>],
) {
    let (qk, bb) = (f.elems, f.bytes);
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
    // Each weight is dequantised with one fma, d·q + m, m = −centre·d for a centred format
    // (exactly d·(q − centre)), then multiplied into the sum with another: two vector
    // operations per 8 weights, where scaling a dot product by d and adding m·Σx takes three.
    let code = |byte: Val<'b>| byte.cast(Scalar::I32).cast(Scalar::F32);
    // The scales of block `block` (0 or 1) of the pair, or of the lone block, at byte `at`:
    // a pair's scales are its blocks' one after the other.
    let scales = |at: Val<'b>, block: u32| {
        let s = f.scales_after(k, (w, w16), at, block * f.codes_at);
        let m =
            s.m.unwrap_or_else(|| s.d * k.f32(-f.centre().unwrap_or(0.0)));
        (s.d, m)
    };
    k.for_range(k.u32(0), blocks / k.u32(2), 1, |p| {
        let c0 = p * k.u32(2 * qk);
        let x0 = x_at(c0, lid);
        let x1 = x_at(c0 + k.u32(qk), lid);
        for (r, base) in bases.iter().enumerate() {
            let at = *base + p * k.u32(2 * bb);
            let (d0, m0) = scales(at, 0);
            let (d1, m1) = scales(at, 1);
            let byte = k.load(w, at + k.u32(pair_scale_bytes(f)) + lid);
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
        k.if_(lid.lt(k.u32(f.span())), || {
            let c0 = last * k.u32(qk);
            let x0 = x_at(c0, lid);
            let x1 = x_at(c0, lid + k.u32(f.span()));
            for (r, base) in bases.iter().enumerate() {
                let at = *base + last * k.u32(bb);
                let (d, m) = scales(at, 0);
                let byte = k.load(w, at + k.u32(f.codes_at) + lid);
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

/// Whether [`word_codes`] reads `f`'s codes: two a byte where blocks and their codes start
/// on words, one a byte where they start on even bytes.
pub(super) fn words_apply(f: Flat) -> bool {
    let align = if f.nibbles() { 4 } else { 2 };
    f.bytes.is_multiple_of(align) && f.codes_at.is_multiple_of(align)
}

/// The codes of segment `part` of the block at byte `blk`, from a `U32` view, as
/// [`Flat::byte_nibbles`] and [`Flat::byte_code`] give them byte by byte. Bytes
/// are little-endian in their word, as the GGUF file and every target store them.
///
/// Nibbles (of a format whose blocks and codes start on words): `segment / 8` aligned words;
/// the low nibbles of their bytes in order, then the high ones. One code a byte: the codes
/// start at an even byte, at a word (`shift` 0) or in its middle (`shift` 16), where each word
/// of codes is the high half of one word and the low half of the next.
/// The word after the segment's last is loaded only where the codes reach into it; an aligned
/// segment loads its last word again instead, which keeps the last block of the buffer from
/// reading past its end.
fn word_codes<'b>(
    k: &'b KernelBuilder,
    (f, w): (Flat, trine_ir::BufferId),
    blk: Val<'b>,
    part: Val<'b>,
    segment: u32,
) -> Vec<Val<'b>> {
    let offset = f.codes_at;
    if f.nibbles() {
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

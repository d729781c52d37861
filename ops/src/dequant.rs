//! Decoding GGUF's quantized blocks inside a kernel: the IR helpers that read a block's
//! scales and codes from a `U8` buffer and dequantise them, checked against the plain-Rust
//! reference in [`trine_gguf::quant`] (which also documents the block layouts).

use trine_gguf::quant::{WeightType, QK};
use trine_ir::{BufferId, KernelBuilder, Scalar, Val};

/// The element type a kernel binds weights of `ty` as: quantized blocks are bytes.
pub fn buffer_elem(ty: WeightType) -> Scalar {
    match ty {
        WeightType::F32 => Scalar::F32,
        WeightType::F16 => Scalar::F16,
        _ => Scalar::U8,
    }
}

/// `bytes` padded with zeros to a whole number of 32-bit words: Vulkan binds byte buffers as
/// arrays of words, so a buffer whose length is not a multiple of 4 cannot be bound whole.
pub fn pad_to_words(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.resize(bytes.len().next_multiple_of(4), 0);
    bytes
}

/// An f16 bit pattern (the low 16 bits of a `U32`) converted to `F32` exactly, with integer
/// operations: the IR has no f16-from-bits operation on integers, and scales in quant blocks
/// are f16 at byte offsets that an f16 buffer view could not address. Infinities keep their
/// sign, NaNs stay NaN with their payload (not quietened).
pub fn f16_bits_to_f32<'b>(k: &'b KernelBuilder, h: Val<'b>) -> Val<'b> {
    let sign = (h & k.u32(0x8000)) << k.u32(16);
    let e = (h >> k.u32(10)) & k.u32(0x1f);
    let m = h & k.u32(0x3ff);
    // Normal numbers rebias the exponent (15 → 127); the all-ones exponent (Inf, NaN) stays
    // all ones.
    let exp = k.select(e.eq(k.u32(31)), k.u32(255), e + k.u32(127 - 15));
    let normal = sign | (exp << k.u32(23)) | (m << k.u32(13));
    // Subnormals and zero are m·2^-24. Computed in float, the result is zero or a normal f32,
    // so a device that flushes subnormals loses nothing; the sign goes in as a bit so that
    // −0 survives.
    let magnitude = (m.cast(Scalar::F32) * k.f32(2f32.powi(-24))).bitcast(Scalar::U32);
    let small = magnitude | sign;
    k.select(e.eq(k.u32(0)), small, normal).bitcast(Scalar::F32)
}

/// [`f16_bits_to_f32`] without selects, for the loops the C lowering vectorises around a call
/// (GCC does not if-convert a select in a loop that calls a function, such as the packed dot
/// product's 16-lane version, and then vectorises nothing): the half's exponent and mantissa
/// put where an f32 keeps them, then multiplied by 2^112 (the two exponent biases apart). Exact
/// for every finite half: a normal one is a normal f32 scaled exactly, a subnormal one is an
/// f32 subnormal `m·2^-136` whose product `m·2^-24` is exact (a device that flushes subnormal
/// operands gives 0 there, a block of weights all below 2^-10). Six operations, where the
/// exponent's own arithmetic took twelve. Infinities and NaNs come out finite (2^16 or more),
/// which no block of a valid model holds.
pub fn f16_finite_bits_to_f32<'b>(k: &'b KernelBuilder, h: Val<'b>) -> Val<'b> {
    let sign = (h & k.u32(0x8000)) << k.u32(16);
    let shifted = ((h & k.u32(0x7fff)) << k.u32(13)).bitcast(Scalar::F32);
    let magnitude = (shifted * k.f32(2f32.powi(112))).bitcast(Scalar::U32);
    (magnitude | sign).bitcast(Scalar::F32)
}

/// The little-endian u16 at byte `at` of a `U8` buffer, as `U32`.
pub fn load_u16<'b>(k: &'b KernelBuilder, buf: BufferId, at: Val<'b>) -> Val<'b> {
    u16_of(k, k.load(buf, at), k.load(buf, at + k.u32(1)))
}

/// The little-endian 16-bit value of two bytes as loaded (`U32`).
pub(crate) fn u16_of<'b>(k: &'b KernelBuilder, lo: Val<'b>, hi: Val<'b>) -> Val<'b> {
    lo | (hi << k.u32(8))
}

/// The scales of one quantized block.
#[derive(Clone, Copy)]
pub struct Scales<'b> {
    /// The step d.
    pub d: Val<'b>,
    /// The offset m (Q4_1 only).
    pub m: Option<Val<'b>>,
}

impl<'b> Scales<'b> {
    /// The weight a block's code stands for: `d·code`, plus `m` for Q4_1.
    pub fn value(self, code: Val<'b>) -> Val<'b> {
        match self.m {
            Some(m) => self.d.fma(code, m),
            None => self.d * code,
        }
    }
}

/// The f16 at byte `at` (even) of `buf`'s bytes, as `F32`: through `view`, an `F16` view of
/// the same memory, where the kernel has one (a native load and conversion), else assembled
/// from two bytes with integer operations.
pub fn load_f16<'b>(
    k: &'b KernelBuilder,
    buf: BufferId,
    view: Option<BufferId>,
    at: Val<'b>,
) -> Val<'b> {
    match view {
        Some(h) => k.load(h, at / k.u32(2)).cast(Scalar::F32),
        None => f16_bits_to_f32(k, load_u16(k, buf, at)),
    }
}

/// Loads the scales of the block that starts at byte `base` of a `U8` buffer, through its
/// `F16` view where there is one ([`load_f16`]). `ty` must be quantized (plain floats have no
/// blocks; they get d = 1).
pub fn load_scales<'b>(
    k: &'b KernelBuilder,
    ty: WeightType,
    (buf, view): (BufferId, Option<BufferId>),
    base: Val<'b>,
) -> Scales<'b> {
    if !ty.is_quantized() {
        return Scales {
            d: k.f32(1.0),
            m: None,
        };
    }
    let d = load_f16(k, buf, view, base);
    let m = (ty == WeightType::Q4_1).then(|| load_f16(k, buf, view, base + k.u32(2)));
    Scales { d, m }
}

/// Byte offset of the codes within a block.
pub(crate) fn codes_offset(ty: WeightType) -> u32 {
    match ty {
        WeightType::Q4_1 => 4,
        _ => 2,
    }
}

/// Code of byte `i` (0..32) of a Q8_0 block at byte `base`: the signed byte, as `F32`.
pub fn q8_code<'b>(k: &'b KernelBuilder, buf: BufferId, base: Val<'b>, i: Val<'b>) -> Val<'b> {
    q8_value(k, k.load(buf, base + k.u32(2) + i))
}

/// A Q8_0 code from its byte as loaded (`U32`, 0..=255): the signed byte, as `F32`.
pub(crate) fn q8_value<'b>(k: &'b KernelBuilder, byte: Val<'b>) -> Val<'b> {
    // Sign-extend the byte: flipping the sign bit and subtracting its weight maps 0..=255 to
    // the two's-complement value.
    let byte = byte.cast(Scalar::I32);
    ((byte ^ k.i32(0x80)) - k.i32(0x80)).cast(Scalar::F32)
}

/// The two codes in byte `i` (0..16) of a Q4_0 or Q4_1 block at byte `base`: those of
/// elements i (low nibble) and i + 16 (high nibble), as `F32`, Q4_0's already centred (−8).
pub fn q4_codes<'b>(
    k: &'b KernelBuilder,
    ty: WeightType,
    buf: BufferId,
    base: Val<'b>,
    i: Val<'b>,
) -> (Val<'b>, Val<'b>) {
    q4_nibbles(k, ty, k.load(buf, base + k.u32(codes_offset(ty)) + i))
}

/// The two Q4 codes of a byte as loaded (`U32`): low nibble, high nibble, as `F32`, Q4_0's
/// centred (−8).
pub(crate) fn q4_nibbles<'b>(
    k: &'b KernelBuilder,
    ty: WeightType,
    byte: Val<'b>,
) -> (Val<'b>, Val<'b>) {
    let lo = (byte & k.u32(15)).cast(Scalar::F32);
    let hi = (byte >> k.u32(4)).cast(Scalar::F32);
    if ty == WeightType::Q4_0 {
        (lo - k.f32(8.0), hi - k.f32(8.0))
    } else {
        (lo, hi)
    }
}

/// Element `j` (0..32) of the quantized block at byte `base` of a `U8` buffer, dequantised
/// to `F32`. Equal to [`trine_gguf::quant::dequantize`]'s value rounded once to f32 (the product d·q is exact).
pub fn dequant_element<'b>(
    k: &'b KernelBuilder,
    ty: WeightType,
    buf: BufferId,
    base: Val<'b>,
    j: Val<'b>,
) -> Val<'b> {
    let s = load_scales(k, ty, (buf, None), base);
    // A Q4 element below 16 is its byte's low nibble, from 16 on byte `j − 16`'s high one.
    let code = match ty {
        WeightType::Q8_0 => q8_code(k, buf, base, j),
        _ => {
            let (lo, hi) = q4_codes(k, ty, buf, base, j & k.u32(15));
            k.select(j.lt(k.u32(16)), lo, hi)
        }
    };
    s.value(code)
}

/// Whether [`pair_blocks`] applies to weights of type `ty`: Q4_0 and Q4_1.
pub fn pairs_apply(ty: WeightType) -> bool {
    matches!(ty, WeightType::Q4_0 | WeightType::Q4_1)
}

/// Bytes of a pair's scales in [`pair_blocks`]' layout: d₀, d₁ (Q4_0) or d₀, m₀, d₁, m₁ (Q4_1).
pub fn pair_scale_bytes(ty: WeightType) -> u32 {
    2 * codes_offset(ty)
}

/// Rearranges rows of Q4_0 or Q4_1 blocks (`cols` elements each) so that each pair of blocks
/// `2p`, `2p + 1` of a row is its two blocks' scales (d₀ m₀ d₁ m₁ for Q4_1, d₀ d₁ for Q4_0)
/// followed by 32 bytes whose byte `j` holds code `j` of block `2p` in its low nibble and
/// code `j` of block `2p + 1` in its high one. An odd last block of a row stays as it is.
/// Sizes do not change. CPUs read the codes of 64 weights as 32 consecutive bytes whose
/// nibbles pair with 32 consecutive x values each, which 32 invocations load as vectors
/// ([`super::matvec::MatvecSpec::pairs`]); a block's own layout pairs element `i` with
/// `i + 16`, 16 bytes at a time. Bytes past the last whole row (padding) are copied as they
/// are. Other types are returned unchanged.
pub fn pair_blocks(ty: WeightType, w: &[u8], cols: usize) -> Vec<u8> {
    let mut out = w.to_vec();
    if !pairs_apply(ty) || cols == 0 {
        return out;
    }
    let bb = ty.block_bytes();
    let (nb, off) = (cols / QK, codes_offset(ty) as usize);
    let row_bytes = nb * bb;
    let code = |block: &[u8], j: usize| {
        let byte = block[off + j % (QK / 2)];
        if j < QK / 2 {
            byte & 15
        } else {
            byte >> 4
        }
    };
    for (src, dst) in w
        .chunks_exact(row_bytes)
        .zip(out.chunks_exact_mut(row_bytes))
    {
        for (a, pair) in src.chunks_exact(2 * bb).zip(dst.chunks_exact_mut(2 * bb)) {
            let (b0, b1) = a.split_at(bb);
            pair[..off].copy_from_slice(&b0[..off]);
            pair[off..2 * off].copy_from_slice(&b1[..off]);
            for j in 0..QK {
                pair[2 * off + j] = code(b0, j) | (code(b1, j) << 4);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::Rng;
    use half::f16;
    use trine_gguf::quant::{dequantize, quantize};
    use trine_ir::interp::interpret;
    use trine_ir::Access;

    /// The f32 bits `convert` gives each of the 65536 f16 patterns, read as little-endian
    /// byte pairs from a `U8` buffer by the interpreter.
    fn every_pattern(convert: for<'b> fn(&'b KernelBuilder, Val<'b>) -> Val<'b>) -> Vec<u32> {
        let k = KernelBuilder::new("f16_bits", [256, 1, 1]);
        let src = k.buffer("src", Scalar::U8, Access::Read);
        let dst = k.buffer("dst", Scalar::U32, Access::Write);
        let i = k.global_id(0);
        let v = convert(&k, load_u16(&k, src, i * k.u32(2)));
        k.store(dst, i, v.bitcast(Scalar::U32));
        let kernel = k.finish();
        let src: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
        let mut bufs = vec![src, vec![0u8; 65536 * 4]];
        interpret(&kernel, [256, 1, 1], &mut bufs, &[], 16).unwrap();
        bytemuck::cast_slice(&bufs[1]).to_vec()
    }

    /// `f16_bits_to_f32` on all 65536 patterns equals `half`'s conversion.
    #[test]
    fn f16_conversion_is_exact_for_every_pattern() {
        let got = every_pattern(f16_bits_to_f32);
        for (h, &bits) in (0..=u16::MAX).zip(&got) {
            let want = f16::from_bits(h).to_f32();
            let got = f32::from_bits(bits);
            if want.is_nan() {
                assert!(got.is_nan(), "{h:#06x}: got {got}");
                assert_eq!(got.is_sign_negative(), want.is_sign_negative(), "{h:#06x}");
            } else {
                assert_eq!(bits, want.to_bits(), "{h:#06x}: got {got}, want {want}");
            }
        }
    }

    /// `f16_finite_bits_to_f32` on every finite pattern equals `half`'s conversion, bit for
    /// bit (−0 included).
    #[test]
    fn select_free_f16_conversion_is_exact_for_finite_patterns() {
        let got = every_pattern(f16_finite_bits_to_f32);
        let finite = (0..=u16::MAX)
            .zip(&got)
            .filter(|(h, _)| f16::from_bits(*h).is_finite());
        for (h, &bits) in finite {
            let want = f16::from_bits(h).to_f32();
            assert_eq!(
                bits,
                want.to_bits(),
                "{h:#06x}: got {}",
                f32::from_bits(bits)
            );
        }
    }

    /// `dequant_element` on every element of random blocks of every format equals
    /// `dequantize`, rounded to f32 once.
    #[test]
    fn kernel_dequantisation_matches_plain_rust() {
        let mut r = Rng::new(9);
        let blocks = 24;
        let mut x = r.f32s(32 * blocks, -2.0, 2.0);
        // Tiny blocks give subnormal f16 scales, a zero block gives d = 0.
        x[32..64].iter_mut().for_each(|v| *v *= 1e-6);
        x[64..96].iter_mut().for_each(|v| *v = 0.0);
        for ty in [WeightType::Q8_0, WeightType::Q4_0, WeightType::Q4_1] {
            let k = KernelBuilder::new("dequant", [32, 1, 1]);
            let w = k.buffer("w", Scalar::U8, Access::Read);
            let out = k.buffer("out", Scalar::F32, Access::Write);
            let (b, j) = (k.workgroup_id(0), k.local_id(0));
            let base = b * k.u32(ty.block_bytes() as u32);
            k.store(out, k.global_id(0), dequant_element(&k, ty, w, base, j));
            let kernel = k.finish();
            let q = quantize(ty, &x).unwrap();
            let want = dequantize(ty, &q, x.len()).unwrap();
            let mut bufs = vec![pad_to_words(q), vec![0u8; x.len() * 4]];
            interpret(&kernel, [blocks as u32, 1, 1], &mut bufs, &[], 16).unwrap();
            let got: &[f32] = bytemuck::cast_slice(&bufs[1]);
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g, w as f32, "{ty} element {i}");
            }
        }
    }

    /// Byte `j` of a pair holds code `j` of each block (low nibble first block, high nibble
    /// second), the scales come first, an odd last block and the bytes past the rows stay as
    /// they are, and other types are not touched.
    #[test]
    fn pairs_hold_both_blocks_codes_side_by_side() {
        let values: Vec<f32> = (0..2 * 96).map(|i| ((i * 37) % 29) as f32 - 14.0).collect();
        let mut w = quantize(WeightType::Q4_1, &values).unwrap();
        w.extend([1, 2, 3]);
        let p = pair_blocks(WeightType::Q4_1, &w, 96);
        assert_eq!(p.len(), w.len());
        let code = |block: &[u8], j: usize| {
            let b = block[4 + j % 16];
            if j < 16 {
                b & 15
            } else {
                b >> 4
            }
        };
        for row in 0..2 {
            let (src, dst) = (&w[row * 60..], &p[row * 60..]);
            assert_eq!(dst[..4], src[..4]);
            assert_eq!(dst[4..8], src[20..24]);
            for j in 0..32 {
                assert_eq!(dst[8 + j] & 15, code(&src[..20], j), "row {row}, code {j}");
                assert_eq!(
                    dst[8 + j] >> 4,
                    code(&src[20..40], j),
                    "row {row}, code {j}"
                );
            }
            assert_eq!(dst[40..60], src[40..60], "the odd last block");
        }
        assert_eq!(p[120..], [1, 2, 3]);
        let q8 = quantize(WeightType::Q8_0, &values).unwrap();
        assert_eq!(pair_blocks(WeightType::Q8_0, &q8, 96), q8);
    }
}

//! Weight formats: f32, f16 and GGUF's Q8_0, Q4_0 and Q4_1 blocks, checked against ggml's
//! `ggml-common.h` and `ggml-quants.c`. Every quantized block holds 32 elements:
//!
//! | format | bytes | layout                              | element j                         |
//! | ------ | ----- | ----------------------------------- | --------------------------------- |
//! | Q8_0   | 34    | f16 d, 32 × i8 q                    | d·q[j]                            |
//! | Q4_0   | 18    | f16 d, 16 bytes of nibbles          | d·(n(j) − 8)                      |
//! | Q4_1   | 20    | f16 d, f16 m, 16 bytes of nibbles   | d·n(j) + m                        |
//!
//! where n(j) is the low nibble of byte j for j < 16 and the high nibble of byte j − 16
//! otherwise. f16 values are little-endian.
//!
//! Here: the plain-Rust quantizers (ggml's reference ones, to build test data the way GGUF
//! files are made) and dequantizers (exact, in f64), and the IR helpers that kernels use to
//! dequantise inside a kernel from a `U8` buffer.

use super::shape::ShapeError;
use half::f16;
use trine_ir::{BufferId, KernelBuilder, Scalar, Val};

/// Elements per quantized block (ggml's QK8_0, QK4_0, QK4_1).
pub const QK: usize = 32;

/// How a weight matrix is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightType {
    F32,
    F16,
    Q8_0,
    Q4_0,
    Q4_1,
}

impl WeightType {
    pub const ALL: [WeightType; 5] = [
        WeightType::F32,
        WeightType::F16,
        WeightType::Q8_0,
        WeightType::Q4_0,
        WeightType::Q4_1,
    ];

    /// The name used in case and kernel names (GGUF's spelling, lower case).
    pub fn name(self) -> &'static str {
        match self {
            WeightType::F32 => "f32",
            WeightType::F16 => "f16",
            WeightType::Q8_0 => "q8_0",
            WeightType::Q4_0 => "q4_0",
            WeightType::Q4_1 => "q4_1",
        }
    }

    pub fn is_quantized(self) -> bool {
        matches!(self, WeightType::Q8_0 | WeightType::Q4_0 | WeightType::Q4_1)
    }

    /// Elements per block: 1 for plain floats.
    pub fn block_elems(self) -> usize {
        if self.is_quantized() {
            QK
        } else {
            1
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            WeightType::F32 => 4,
            WeightType::F16 => 2,
            WeightType::Q8_0 => 2 + QK,
            WeightType::Q4_0 => 2 + QK / 2,
            WeightType::Q4_1 => 4 + QK / 2,
        }
    }

    /// The element type a kernel binds these weights as: quantized blocks are bytes.
    pub fn buffer_elem(self) -> Scalar {
        match self {
            WeightType::F32 => Scalar::F32,
            WeightType::F16 => Scalar::F16,
            _ => Scalar::U8,
        }
    }

    /// Bytes of `n` elements, which must be whole blocks.
    pub fn bytes(
        self,
        op: &'static str,
        what: &'static str,
        n: usize,
    ) -> Result<usize, ShapeError> {
        let per = self.block_elems();
        if !n.is_multiple_of(per) {
            return Err(ShapeError::NotMultiple {
                op,
                what,
                value: n,
                multiple: per,
            });
        }
        (n / per)
            .checked_mul(self.block_bytes())
            .ok_or_else(|| ShapeError::TooLarge {
                op,
                what,
                value: n,
                limit: (usize::MAX / self.block_bytes()).saturating_mul(per),
            })
    }
}

impl std::fmt::Display for WeightType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Encodes `x` in format `ty`. Quantized formats use ggml's reference quantizers
/// (`quantize_row_*_ref`), so test data looks like a GGUF file's: `x.len()` must be whole
/// blocks. Values are expected to be finite (a NaN gives an arbitrary block, never a panic).
pub fn quantize(ty: WeightType, x: &[f32]) -> Result<Vec<u8>, ShapeError> {
    let mut out = Vec::with_capacity(ty.bytes("quantize", "element count", x.len())?);
    match ty {
        WeightType::F32 => x.iter().for_each(|v| out.extend(v.to_le_bytes())),
        WeightType::F16 => x
            .iter()
            .for_each(|&v| out.extend(f16::from_f32(v).to_le_bytes())),
        WeightType::Q8_0 => x.chunks_exact(QK).for_each(|b| quantize_q8_0(b, &mut out)),
        WeightType::Q4_0 => x.chunks_exact(QK).for_each(|b| quantize_q4_0(b, &mut out)),
        WeightType::Q4_1 => x.chunks_exact(QK).for_each(|b| quantize_q4_1(b, &mut out)),
    }
    Ok(out)
}

/// ggml's `quantize_row_q8_0_ref` for one block: d = amax/127, q = round(x/d).
fn quantize_q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_le_bytes());
    // C's roundf rounds halves away from zero, as f32::round does.
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

/// ggml's `quantize_row_q4_0_ref` for one block: d = −(signed absolute max)/8, so the extreme
/// value maps to code 0 and the other side reaches at most 15.
fn quantize_q4_0(x: &[f32], out: &mut Vec<u8>) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_le_bytes());
    // `(int8_t)(v + 8.5f)` truncates toward zero, as `as i8` does.
    let code = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    out.extend((0..QK / 2).map(|j| code(x[j]) | (code(x[j + QK / 2]) << 4)));
}

/// ggml's `quantize_row_q4_1_ref` for one block: d = (max − min)/15, m = min.
fn quantize_q4_1(x: &[f32], out: &mut Vec<u8>) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        min = if v < min { v } else { min };
        max = if v > max { v } else { max };
    }
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(f16::from_f32(d).to_le_bytes());
    out.extend(f16::from_f32(min).to_le_bytes());
    let code = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
    out.extend((0..QK / 2).map(|j| code(x[j]) | (code(x[j + QK / 2]) << 4)));
}

/// The values of the first `n` elements of `bytes` in format `ty`, exactly: every product
/// d·q and sum d·q + m of f16 values is representable in f64.
pub fn dequantize(ty: WeightType, bytes: &[u8], n: usize) -> Result<Vec<f64>, ShapeError> {
    let needed = ty.bytes("dequantize", "element count", n)?;
    if bytes.len() < needed {
        return Err(ShapeError::TooSmall {
            op: "dequantize",
            what: "bytes",
            needed,
            found: bytes.len(),
        });
    }
    let bytes = &bytes[..needed];
    let half_at = |b: &[u8], at: usize| f16::from_le_bytes([b[at], b[at + 1]]).to_f64();
    let nibble = |qs: &[u8], j: usize| f64::from((qs[j % 16] >> (4 * (j / 16))) & 15);
    let mut out = Vec::with_capacity(n);
    for b in bytes.chunks_exact(ty.block_bytes()) {
        match ty {
            WeightType::F32 => out.push(f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            WeightType::F16 => out.push(half_at(b, 0)),
            WeightType::Q8_0 => {
                let d = half_at(b, 0);
                out.extend(b[2..].iter().map(|&q| d * f64::from(q as i8)));
            }
            WeightType::Q4_0 => {
                let d = half_at(b, 0);
                out.extend((0..QK).map(|j| d * (nibble(&b[2..], j) - 8.0)));
            }
            WeightType::Q4_1 => {
                let (d, m) = (half_at(b, 0), half_at(b, 2));
                out.extend((0..QK).map(|j| d * nibble(&b[4..], j) + m));
            }
        }
    }
    Ok(out)
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

/// The little-endian u16 at byte `at` of a `U8` buffer, as `U32`.
pub fn load_u16<'b>(k: &'b KernelBuilder, buf: BufferId, at: Val<'b>) -> Val<'b> {
    k.load(buf, at) | (k.load(buf, at + k.u32(1)) << k.u32(8))
}

/// The scales of one quantized block.
#[derive(Clone, Copy)]
pub struct Scales<'b> {
    /// The step d.
    pub d: Val<'b>,
    /// The offset m (Q4_1 only).
    pub m: Option<Val<'b>>,
}

/// Loads the scales of the block that starts at byte `base` of a `U8` buffer. `ty` must be
/// quantized (plain floats have no blocks; they get d = 1).
pub fn load_scales<'b>(
    k: &'b KernelBuilder,
    ty: WeightType,
    buf: BufferId,
    base: Val<'b>,
) -> Scales<'b> {
    if !ty.is_quantized() {
        return Scales {
            d: k.f32(1.0),
            m: None,
        };
    }
    let d = f16_bits_to_f32(k, load_u16(k, buf, base));
    let m = (ty == WeightType::Q4_1).then(|| f16_bits_to_f32(k, load_u16(k, buf, base + k.u32(2))));
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
    let byte = k.load(buf, base + k.u32(2) + i).cast(Scalar::I32);
    // Sign-extend the byte: flipping the sign bit and subtracting its weight maps 0..=255 to
    // the two's-complement value.
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
    let byte = k.load(buf, base + k.u32(codes_offset(ty)) + i);
    let lo = (byte & k.u32(15)).cast(Scalar::F32);
    let hi = (byte >> k.u32(4)).cast(Scalar::F32);
    if ty == WeightType::Q4_0 {
        (lo - k.f32(8.0), hi - k.f32(8.0))
    } else {
        (lo, hi)
    }
}

/// Element `j` (0..32) of the quantized block at byte `base` of a `U8` buffer, dequantised
/// to `F32`. Equal to [`dequantize`]'s value rounded once to f32 (the product d·q is exact).
pub fn dequant_element<'b>(
    k: &'b KernelBuilder,
    ty: WeightType,
    buf: BufferId,
    base: Val<'b>,
    j: Val<'b>,
) -> Val<'b> {
    let s = load_scales(k, ty, buf, base);
    let code = match ty {
        WeightType::Q8_0 => q8_code(k, buf, base, j),
        _ => {
            let (lo, hi) = q4_codes(k, ty, buf, base, j & k.u32(15));
            k.select(j.lt(k.u32(16)), lo, hi)
        }
    };
    match s.m {
        Some(m) => s.d.fma(code, m),
        None => s.d * code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::case::Rng;
    use trine_ir::interp::interpret;
    use trine_ir::Access;

    #[test]
    fn block_sizes_match_ggml() {
        let sizes: Vec<_> = WeightType::ALL.iter().map(|t| t.block_bytes()).collect();
        assert_eq!(sizes, [4, 2, 34, 18, 20]);
        assert_eq!(WeightType::Q4_1.bytes("t", "n", 64), Ok(40));
        assert_eq!(
            WeightType::Q8_0.bytes("t", "n", 33),
            Err(ShapeError::NotMultiple {
                op: "t",
                what: "n",
                value: 33,
                multiple: 32
            })
        );
    }

    #[test]
    fn quantizers_reproduce_ggml_blocks() {
        // A block whose values are exact multiples of its step quantizes losslessly.
        let x: Vec<f32> = (0..32).map(|i| (i as f32 - 16.0) * 0.5).collect();
        let q8 = quantize(WeightType::Q8_0, &x).unwrap();
        assert_eq!(q8.len(), 34);
        // amax = 8, d = 8/127.
        assert_eq!(&q8[..2], &f16::from_f32(8.0 / 127.0).to_le_bytes());
        assert_eq!(q8[2] as i8, -127);
        assert_eq!(q8[2 + 16] as i8, 0);
        let q4 = quantize(WeightType::Q4_0, &x).unwrap();
        // The value of largest magnitude is −8, so d = −8/−8 = 1: x = −8 gets code 0 and
        // x = 7.5 gets trunc(16) clamped to 15.
        assert_eq!(&q4[..2], &f16::from_f32(1.0).to_le_bytes());
        assert_eq!(q4[2] & 15, 0);
        assert_eq!(q4[2 + 15] >> 4, 15);
        let q41 = quantize(WeightType::Q4_1, &x).unwrap();
        let back = dequantize(WeightType::Q4_1, &q41, 32).unwrap();
        // d = 15.5/15 rounds to f16; every value is within half a step of the input.
        let d = f16::from_f32(15.5 / 15.0).to_f64();
        for (a, b) in x.iter().zip(&back) {
            assert!((*a as f64 - b).abs() <= d / 2.0 + 1e-3, "{a} vs {b}");
        }
        assert_eq!(back[0], -8.0);
    }

    #[test]
    fn dequantize_decodes_nibble_order_and_signs() {
        // Q4_0 with d = 2: byte j holds element j (low) and j + 16 (high).
        let mut block = f16::from_f32(2.0).to_le_bytes().to_vec();
        block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let v = dequantize(WeightType::Q4_0, &block, 32).unwrap();
        assert_eq!(v[0], -16.0);
        assert_eq!(v[15], 14.0);
        assert_eq!(v[16], 14.0);
        assert_eq!(v[31], -16.0);
        // Q8_0: bytes are two's complement.
        let mut block = f16::from_f32(0.5).to_le_bytes().to_vec();
        block.extend((0..32u8).map(|j| j.wrapping_mul(9)));
        let v = dequantize(WeightType::Q8_0, &block, 32).unwrap();
        assert_eq!(v[15], 0.5 * f64::from((15u8 * 9) as i8));
        assert_eq!(v[31], 0.5 * f64::from((31u8.wrapping_mul(9)) as i8));
        assert!(matches!(
            dequantize(WeightType::Q4_1, &[0; 19], 32),
            Err(ShapeError::TooSmall { needed: 20, .. })
        ));
    }

    #[test]
    fn quantization_error_is_within_half_a_step() {
        let mut r = Rng::new(3);
        let x = r.f32s(32 * 64, -3.0, 3.0);
        for ty in [WeightType::Q8_0, WeightType::Q4_0, WeightType::Q4_1] {
            let q = quantize(ty, &x).unwrap();
            let back = dequantize(ty, &q, x.len()).unwrap();
            for (blk, (xs, bs)) in x.chunks(32).zip(back.chunks(32)).enumerate() {
                let amax = xs.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                let (lo, hi) = xs
                    .iter()
                    .fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
                // Rounding costs half a step, except Q4_0's clamp of code 16 to 15, which
                // costs a whole one at the end opposite the extreme value; the f16 scales add
                // a few units of 2^-11 of amax.
                let tol = match ty {
                    WeightType::Q8_0 => amax / 127.0 / 2.0,
                    WeightType::Q4_0 => amax / 8.0,
                    _ => f64::from(hi - lo) / 15.0 / 2.0,
                } + amax * 2f64.powi(-8);
                for (a, b) in xs.iter().zip(bs) {
                    assert!((*a as f64 - b).abs() <= tol, "{ty} block {blk}: {a} vs {b}");
                }
            }
        }
    }

    /// Runs `f16_bits_to_f32` on all 65536 patterns, read as little-endian byte pairs from a
    /// `U8` buffer, and compares with `half`.
    #[test]
    fn f16_conversion_is_exact_for_every_pattern() {
        let k = KernelBuilder::new("f16_bits", [256, 1, 1]);
        let src = k.buffer("src", Scalar::U8, Access::Read);
        let dst = k.buffer("dst", Scalar::U32, Access::Write);
        let i = k.global_id(0);
        let v = f16_bits_to_f32(&k, load_u16(&k, src, i * k.u32(2)));
        k.store(dst, i, v.bitcast(Scalar::U32));
        let kernel = k.finish();
        let src: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
        let mut bufs = vec![src, vec![0u8; 65536 * 4]];
        interpret(&kernel, [256, 1, 1], &mut bufs, &[], 16).unwrap();
        let got: &[u32] = bytemuck::cast_slice(&bufs[1]);
        for (h, &bits) in (0..=u16::MAX).zip(got) {
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
}

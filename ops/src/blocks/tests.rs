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

/// Each format's size agrees with the GGUF reader's, and one that is not quantized has none.
#[test]
fn formats_agree_with_the_gguf_reader() {
    for f in BlockFormat::ALL {
        assert_eq!(f.elems() as usize, f.ty().block_elems(), "{}", f.ty());
        assert_eq!(f.bytes() as usize, f.ty().block_bytes(), "{}", f.ty());
        if let BlockFormat::Flat(f) = f {
            assert_eq!(f.elems, f.code_bytes() * if f.nibbles() { 2 } else { 1 });
        }
    }
    for ty in [WeightType::F32, WeightType::F16] {
        assert_eq!(BlockFormat::of(ty), None);
        let e = BlockFormat::require("op", ty).unwrap_err().to_string();
        assert!(e.contains(ty.name()) && e.contains("q8_0"), "{e}");
    }
}

/// [`BlockFormat::element`] on every element of random blocks of every format equals
/// `dequantize`, rounded to f32 once.
#[test]
fn kernel_dequantisation_matches_plain_rust() {
    for f in BlockFormat::ALL {
        let (elems, ty) = (f.elems(), f.ty());
        let blocks = 24;
        let mut r = Rng::new(9);
        let mut x = r.f32s(elems as usize * blocks, -2.0, 2.0);
        // A tiny block gives subnormal f16 scales, a zero block d = 0.
        let e = elems as usize;
        x[e..2 * e].iter_mut().for_each(|v| *v *= 1e-6);
        x[2 * e..3 * e].iter_mut().for_each(|v| *v = 0.0);
        let k = KernelBuilder::new("dequant", [elems.min(64), 1, 1]);
        let w = k.buffer("w", Scalar::U8, Access::Read);
        let out = k.buffer("out", Scalar::F32, Access::Write);
        let i = k.global_id(0);
        let base = (i / k.u32(elems)) * k.u32(f.bytes());
        k.store(out, i, f.element(&k, w, base, i % k.u32(elems)));
        let kernel = k.finish();
        let q = quantize(ty, &x).unwrap();
        let want = dequantize(ty, &q, x.len()).unwrap();
        let mut bufs = vec![pad_to_words(q), vec![0u8; x.len() * 4]];
        let groups = (x.len() as u32).div_ceil(elems.min(64));
        interpret(&kernel, [groups, 1, 1], &mut bufs, &[], 16).unwrap();
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

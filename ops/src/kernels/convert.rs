//! f32 ↔ f16 conversion, one element per invocation; f16 bits held in words converted
//! ([`trine_ir::UnaryOp::HalfFromBits`]), every one of the 65,536; and f32 values rounded to
//! f16 bits two a word ([`trine_ir::BinaryOp::PackHalves`]).

use crate::case::*;
use half::f16;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const WG: u32 = 128;

pub fn kernel(from: Scalar, to: Scalar) -> Kernel {
    let k = KernelBuilder::new(&format!("convert_{from}_{to}"), [WG, 1, 1]);
    let src = k.buffer("src", from, Access::Read);
    let dst = k.buffer("dst", to, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || k.store(dst, i, k.load(src, i).cast(to)));
    k.finish()
}

pub fn cases() -> Vec<Case> {
    let n = 3000u32;
    let mut r = Rng::new(7);
    // Spans f16's range; the edge values add signed zero, a subnormal, the largest f16, inf, NaN.
    let mut x = r.f32s(n as usize, -60000.0, 60000.0);
    x.extend([0.0, -0.0, 1e-6, -3e-8, 65504.0, f32::INFINITY, f32::NAN]);
    let n = x.len() as u32;
    let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let to_half = Case::new(
        format!("convert/f32->f16/n={n}"),
        kernel(Scalar::F32, Scalar::F16),
        [n.div_ceil(WG), 1, 1],
    )
    .input("src", Scalar::F32, f32_bytes(&x))
    .output(
        "dst",
        Scalar::F16,
        vec![0; n as usize * 2],
        h.iter().map(|v| v.to_f64()).collect(),
    )
    .params(vec![ParamValue::U32(n)]);
    let to_single = Case::new(
        format!("convert/f16->f32/n={n}"),
        kernel(Scalar::F16, Scalar::F32),
        [n.div_ceil(WG), 1, 1],
    )
    .input("src", Scalar::F16, f16_bytes(&h))
    .output(
        "dst",
        Scalar::F32,
        vec![0; n as usize * 4],
        h.iter().map(|v| v.to_f64()).collect(),
    )
    .params(vec![ParamValue::U32(n)]);
    vec![to_half, to_single, from_bits(), to_bits(), through_pairs()]
}

/// Each word's low half, then its high half shifted down, as f16 bits converted to f32.
pub fn bits_kernel() -> Kernel {
    let k = KernelBuilder::new("convert_f16_bits", [WG, 1, 1]);
    let src = k.buffer("src", Scalar::U32, Access::Read);
    let dst = k.buffer("dst", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let w = k.load(src, i);
        k.store(dst, i * k.u32(2), w.half_from_bits());
        k.store(
            dst,
            i * k.u32(2) + k.u32(1),
            (w >> k.u32(16)).half_from_bits(),
        );
    });
    k.finish()
}

/// Every f16 bit pattern, two a word (so that the low one's conversion sees high bits set).
fn from_bits() -> Case {
    let words: Vec<u32> = (0..=u16::MAX)
        .step_by(2)
        .map(|p| u32::from(p) | (u32::from(p + 1) << 16))
        .collect();
    let want: Vec<f64> = (0..=u16::MAX).map(|p| f16::from_bits(p).to_f64()).collect();
    let n = words.len() as u32;
    Case::new(
        format!("convert/f16 bits->f32/n={n}"),
        bits_kernel(),
        [n.div_ceil(WG), 1, 1],
    )
    .input("src", Scalar::U32, u32_bytes(&words))
    .output("dst", Scalar::F32, vec![0; 2 * n as usize * 4], want)
    .params(vec![ParamValue::U32(n)])
}

/// Each word stored into shared memory as a pair of halves, then read back as f16 values by
/// the invocation at the mirror place of the workgroup (its words' halves another
/// invocation's).
pub fn pairs_kernel() -> Kernel {
    let k = KernelBuilder::new("convert_f16_pairs_shared", [WG, 1, 1]);
    let src = k.buffer("src", Scalar::U32, Access::Read);
    let dst = k.buffer("dst", Scalar::F16, Access::Write);
    let n = k.param("n", Scalar::U32);
    let stage = k.shared("stage", Scalar::F16, 2 * WG);
    let lid = k.local_index();
    let i = k.global_id(0);
    // Past the words, the last word again: every pair of the stage is written.
    k.store_shared_pair(stage, lid * k.u32(2), k.load(src, i.min(n - k.u32(1))));
    k.barrier();
    let mirror = k.u32(WG - 1) - lid;
    let word = k.workgroup_id(0) * k.u32(WG) + mirror;
    k.if_(word.lt(n), || {
        for h in 0..2 {
            let value = k.load_shared(stage, mirror * k.u32(2) + k.u32(h));
            k.store(dst, word * k.u32(2) + k.u32(h), value);
        }
    });
    k.finish()
}

/// Every f16 bit pattern but NaNs (whose payloads a device may not keep), two a word, through
/// [`pairs_kernel`], judged exactly: subnormals, signed zeros and infinities among them.
fn through_pairs() -> Case {
    let patterns: Vec<u16> = (0..=u16::MAX)
        .filter(|&p| !f16::from_bits(p).is_nan())
        .collect();
    let words: Vec<u32> = patterns
        .chunks(2)
        .map(|p| u32::from(p[0]) | (u32::from(p[1]) << 16))
        .collect();
    let want: Vec<f64> = patterns
        .iter()
        .map(|&p| f16::from_bits(p).to_f64())
        .collect();
    let n = words.len() as u32;
    Case::new(
        format!("convert/f16 pairs->shared->f16/n={n}"),
        pairs_kernel(),
        [n.div_ceil(WG), 1, 1],
    )
    .input("src", Scalar::U32, u32_bytes(&words))
    .output("dst", Scalar::F16, vec![0; 2 * n as usize * 2], want)
    .params(vec![ParamValue::U32(n)])
    .bound(NMSE_EXACT)
}

/// Pairs of f32 rounded to f16 bits, packed a word: the first in the low half.
pub fn pack_kernel() -> Kernel {
    let k = KernelBuilder::new("convert_f32_half_bits", [WG, 1, 1]);
    let src = k.buffer("src", Scalar::F32, Access::Read);
    let dst = k.buffer("dst", Scalar::U32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let low = k.load(src, i * k.u32(2));
        let high = k.load(src, i * k.u32(2) + k.u32(1));
        k.store(dst, i, low.pack_halves(high));
    });
    k.finish()
}

/// f32 values across f16's range and past it, judged as bits: ties between two halves
/// (which round to the even one), subnormal halves, values that round to zero or overflow to
/// infinity, signed zeros and infinities. NaN's bits are the device's own, so none is here.
fn to_bits() -> Case {
    let mut r = Rng::new(11);
    let mut x = r.f32s(4000, -70000.0, 70000.0);
    x.extend(r.f32s(2000, -1e-4, 1e-4));
    // Halfway between neighbouring halves: 1 + 2^-11 (ties to 1), 1 + 3·2^-11 (to 1 + 2^-9),
    // a subnormal tie, and the largest half's tie with 2^16 (to infinity).
    x.extend([
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        2f32.powi(-25),
        65520.0,
    ]);
    x.extend([
        0.0,
        -0.0,
        1e-9,
        -65504.0,
        65519.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1.0,
    ]);
    if x.len() % 2 == 1 {
        x.push(0.5);
    }
    let words: Vec<u32> = x
        .chunks(2)
        .map(|p| {
            u32::from(f16::from_f32(p[0]).to_bits())
                | u32::from(f16::from_f32(p[1]).to_bits()) << 16
        })
        .collect();
    let n = words.len() as u32;
    Case::new(
        format!("convert/f32 pairs->f16 bits/n={n}"),
        pack_kernel(),
        [n.div_ceil(WG), 1, 1],
    )
    .input("src", Scalar::F32, f32_bytes(&x))
    .output(
        "dst",
        Scalar::U32,
        vec![0; n as usize * 4],
        words.iter().map(|&w| f64::from(w)).collect(),
    )
    .params(vec![ParamValue::U32(n)])
    .bound(NMSE_EXACT)
}

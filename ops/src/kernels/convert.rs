//! f32 ↔ f16 conversion, one element per invocation; and f16 bits held in words converted
//! ([`trine_ir::UnaryOp::HalfFromBits`]), every one of the 65,536.

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
    vec![to_half, to_single, from_bits()]
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

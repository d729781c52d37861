//! f32 ↔ f16 conversion, one element per invocation.

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
    vec![to_half, to_single]
}

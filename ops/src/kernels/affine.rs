//! Scalar uniform parameters of every kind: `y[i] = clamp(x[i] * scale + f32(shift), lo, hi)`
//! for `i < n`, with an i32 shift and a u32 count.

use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const WG: u32 = 32;

pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("affine_clamp", [WG, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let scale = k.param("scale", Scalar::F32);
    let shift = k.param("shift", Scalar::I32);
    let lo = k.param("lo", Scalar::F32);
    let hi = k.param("hi", Scalar::F32);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let v = k.load(x, i).fma(scale, shift.cast(Scalar::F32));
        k.store(y, i, v.max(lo).min(hi));
    });
    k.finish()
}

pub fn cases() -> Vec<Case> {
    let n = 333u32;
    let mut r = Rng::new(21);
    let x = r.f32s(n as usize, -3.0, 3.0);
    let (scale, shift, lo, hi) = (2.5f32, -2i32, -4.0f32, 3.0f32);
    let want = x
        .iter()
        .map(|&v| (v as f64 * scale as f64 + shift as f64).clamp(lo as f64, hi as f64))
        .collect();
    vec![Case::new(
        format!("affine_clamp/f32/n={n}"),
        kernel(),
        [n.div_ceil(WG), 1, 1],
    )
    .input("x", Scalar::F32, f32_bytes(&x))
    .output("y", Scalar::F32, vec![0; n as usize * 4], want)
    .params(vec![
        ParamValue::F32(scale),
        ParamValue::I32(shift),
        ParamValue::F32(lo),
        ParamValue::F32(hi),
        ParamValue::U32(n),
    ])]
}

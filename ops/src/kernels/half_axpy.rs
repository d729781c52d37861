//! f16 arithmetic in f16 buffers: `y = a * x + y` with every operation rounded to f16.

use crate::case::*;
use half::f16;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const WG: u32 = 64;

pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("axpy_f16", [WG, 1, 1]);
    let x = k.buffer("x", Scalar::F16, Access::Read);
    let y = k.buffer("y", Scalar::F16, Access::ReadWrite);
    let a = k.param("a", Scalar::F32);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let ah = a.cast(Scalar::F16);
        k.store(y, i, ah * k.load(x, i) + k.load(y, i));
    });
    k.finish()
}

pub fn cases() -> Vec<Case> {
    let n = 1002u32;
    let mut r = Rng::new(5);
    let x: Vec<f16> = r
        .f32s(n as usize, -2.0, 2.0)
        .into_iter()
        .map(f16::from_f32)
        .collect();
    let y: Vec<f16> = r
        .f32s(n as usize, -2.0, 2.0)
        .into_iter()
        .map(f16::from_f32)
        .collect();
    let a = 0.625f32;
    let want = x
        .iter()
        .zip(&y)
        .map(|(&x, &y)| a as f64 * x.to_f64() + y.to_f64())
        .collect();
    // Each of the two f16 roundings costs up to 2^-11 relative: NMSE stays below 1e-6.
    vec![
        Case::new(format!("axpy/f16/n={n}"), kernel(), [n.div_ceil(WG), 1, 1])
            .input("x", Scalar::F16, f16_bytes(&x))
            .output("y", Scalar::F16, f16_bytes(&y), want)
            .params(vec![ParamValue::F32(a), ParamValue::U32(n)])
            .bound(NMSE_SOFTMAX),
    ]
}

//! The float math functions: each invocation writes one result per function, so a wrong
//! lowering of any one shows up in its own column.

use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const WG: u32 = 64;
const OUTS: usize = 12;

pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("unary_math", [WG, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let v = k.load(x, i);
        let a = v.abs();
        let results = [
            v.exp(),
            (a + k.f32(0.5)).log(),
            a.sqrt(),
            (a + k.f32(0.25)).rsqrt(),
            v.sin(),
            v.cos(),
            v.tanh(),
            v.floor(),
            a.pow(k.f32(1.5)),
            -v,
            v % k.f32(0.75),
            k.select(v.gt(k.f32(0.0)), v / k.f32(3.0), v * v),
        ];
        let base = i * k.u32(OUTS as u32);
        for (j, r) in results.into_iter().enumerate() {
            k.store(out, base + k.u32(j as u32), r);
        }
    });
    k.finish()
}

fn reference(v: f32) -> [f64; OUTS] {
    let d = v as f64;
    let a = d.abs();
    [
        d.exp(),
        (a + 0.5).ln(),
        a.sqrt(),
        1.0 / (a + 0.25).sqrt(),
        d.sin(),
        d.cos(),
        d.tanh(),
        d.floor(),
        a.powf(1.5),
        -d,
        d % 0.75,
        if v > 0.0 { d / 3.0 } else { d * d },
    ]
}

pub fn cases() -> Vec<Case> {
    let n = 500u32;
    let mut r = Rng::new(17);
    let x = r.f32s(n as usize, -4.0, 4.0);
    let want = x.iter().flat_map(|&v| reference(v)).collect();
    vec![Case::new(
        format!("unary_math/f32/n={n}"),
        kernel(),
        [n.div_ceil(WG), 1, 1],
    )
    .input("x", Scalar::F32, f32_bytes(&x))
    .output("out", Scalar::F32, vec![0; n as usize * OUTS * 4], want)
    .params(vec![ParamValue::U32(n)])
    .bound(NMSE_SOFTMAX)]
}

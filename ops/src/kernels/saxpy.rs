//! saxpy: `y = a * x + y` over `n` elements, one invocation each. Large `n` exercises grid
//! folding past 65535 workgroups. x, which no earlier dispatch of a chain would write, is
//! prefetched first ([`trine_ir::Stmt::Prefetch`]), so the snapshots show every lowering of
//! the hint and where CUDA's wait for the grid ahead goes.

use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const WG: u32 = 64;

pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("saxpy", [WG, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::ReadWrite);
    let a = k.param("a", Scalar::F32);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || k.prefetch(x, i));
    k.if_(i.lt(n), || {
        k.store(y, i, a.fma(k.load(x, i), k.load(y, i)));
    });
    k.finish()
}

pub fn cases() -> Vec<Case> {
    [1u32, 1000, 64 * 70_000 + 3]
        .iter()
        .map(|&n| {
            let mut r = Rng::new(n as u64);
            let x = r.f32s(n as usize, -1.0, 1.0);
            let y = r.f32s(n as usize, -1.0, 1.0);
            let a = 1.75f32;
            let want = x
                .iter()
                .zip(&y)
                .map(|(&x, &y)| a as f64 * x as f64 + y as f64)
                .collect();
            Case::new(format!("saxpy/f32/n={n}"), kernel(), [n.div_ceil(WG), 1, 1])
                .input("x", Scalar::F32, f32_bytes(&x))
                .output("y", Scalar::F32, f32_bytes(&y), want)
                .params(vec![ParamValue::F32(a), ParamValue::U32(n)])
        })
        .collect()
}

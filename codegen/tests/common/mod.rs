//! Kernels both lowering test suites build.

use trine_ir::{Access, Kernel, KernelBuilder, Scalar};

pub fn saxpy() -> Kernel {
    let k = KernelBuilder::new("saxpy", [64, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::ReadWrite);
    let a = k.param("a", Scalar::F32);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || k.store(y, i, a.fma(k.load(x, i), k.load(y, i))));
    k.finish()
}

/// Storage-only element types, widened at the load.
pub fn quant_loads() -> Kernel {
    let k = KernelBuilder::new("quant_loads", [64, 1, 1]);
    let q = k.buffer("q", Scalar::U8, Access::Read);
    let s = k.buffer("s", Scalar::I8, Access::Read);
    let w = k.buffer("w", Scalar::BF16, Access::Read);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    let i = k.global_id(0);
    let nib = (k.load(q, i) >> k.u32(4)) & k.u32(15);
    let sum = nib.cast(Scalar::I32) + k.load(s, i);
    k.store(out, i, sum.cast(Scalar::F32) * k.load(w, i));
    k.finish()
}

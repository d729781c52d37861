//! Element-wise add over a 2-D grid whose sizes are not multiples of the 2-D workgroup: the
//! edge workgroups must mask both axes.

use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const WX: u32 = 16;
const WY: u32 = 8;

pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("add_2d", [WX, WY, 1]);
    let a = k.buffer("a", Scalar::F32, Access::Read);
    let b = k.buffer("b", Scalar::F32, Access::Read);
    let c = k.buffer("c", Scalar::F32, Access::Write);
    let rows = k.param("rows", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let (x, y) = (k.global_id(0), k.global_id(1));
    k.if_(x.lt(cols) & y.lt(rows), || {
        let i = y * cols + x;
        k.store(c, i, k.load(a, i) + k.load(b, i));
    });
    k.finish()
}

pub fn cases() -> Vec<Case> {
    [(1u32, 1u32), (13, 101), (67, 33)]
        .iter()
        .map(|&(rows, cols)| {
            let n = (rows * cols) as usize;
            let mut r = Rng::new(n as u64 + 99);
            let a = r.f32s(n, -5.0, 5.0);
            let b = r.f32s(n, -5.0, 5.0);
            let want = a
                .iter()
                .zip(&b)
                .map(|(&x, &y)| x as f64 + y as f64)
                .collect();
            Case::new(
                format!("add_2d/f32/{rows}x{cols}"),
                kernel(),
                [cols.div_ceil(WX), rows.div_ceil(WY), 1],
            )
            .input("a", Scalar::F32, f32_bytes(&a))
            .input("b", Scalar::F32, f32_bytes(&b))
            .output("c", Scalar::F32, vec![0; n * 4], want)
            .params(vec![ParamValue::U32(rows), ParamValue::U32(cols)])
        })
        .collect()
}

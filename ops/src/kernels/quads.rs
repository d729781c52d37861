//! Words read a quad at a time ([`trine_ir::Expr::LoadLane`]): what a product streaming
//! weights reads them with, every lane and a subset of them.

use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const WG: u32 = 64;

/// Per quad `i` of `w`: `all[i] = w0 + 3·w1 + 5·w2 + 7·w3` and `ends[i] = w3 − w0`
/// (wrapping), from lanes loaded once each.
pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("quad_lanes", [WG, 1, 1]);
    let w = k.buffer("w", Scalar::U32, Access::Read);
    let all = k.buffer("all", Scalar::U32, Access::Write);
    let ends = k.buffer("ends", Scalar::U32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let [a, b, c, d] = k.load_quad(w, i);
        k.store(all, i, a + b * k.u32(3) + c * k.u32(5) + d * k.u32(7));
        let [first, _, _, last] = k.load_quad(w, i);
        k.store(ends, i, last - first);
    });
    k.finish()
}

pub fn cases() -> Vec<Case> {
    let n = 1000u32;
    let mut r = Rng::new(23);
    let w: Vec<u32> = (0..4 * n).map(|_| r.u32()).collect();
    let quads: Vec<&[u32]> = w.chunks(4).collect();
    let all = quads
        .iter()
        .map(|q| {
            let s = q[0]
                .wrapping_add(q[1].wrapping_mul(3))
                .wrapping_add(q[2].wrapping_mul(5))
                .wrapping_add(q[3].wrapping_mul(7));
            f64::from(s)
        })
        .collect();
    let ends = quads
        .iter()
        .map(|q| f64::from(q[3].wrapping_sub(q[0])))
        .collect();
    vec![
        Case::new(format!("quads/u32/n={n}"), kernel(), [n.div_ceil(WG), 1, 1])
            .input("w", Scalar::U32, bytemuck::cast_slice(&w).to_vec())
            .output("all", Scalar::U32, vec![0; n as usize * 4], all)
            .output("ends", Scalar::U32, vec![0; n as usize * 4], ends)
            .params(vec![ParamValue::U32(n)]),
    ]
}

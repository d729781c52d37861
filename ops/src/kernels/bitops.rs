//! Integer and bit operations: and, or, xor, shifts (logical and arithmetic, amounts ≥ 32
//! wrap), popcount, not, wrapping arithmetic, integer division and remainder.

use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const WG: u32 = 64;
/// Outputs per element, in this order.
const OUTS: usize = 8;

pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("bitops", [WG, 1, 1]);
    let a = k.buffer("a", Scalar::U32, Access::Read);
    let b = k.buffer("b", Scalar::U32, Access::Read);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let x = k.load(a, i);
        let y = k.load(b, i);
        let sx = x.bitcast(Scalar::I32);
        let base = i * k.u32(OUTS as u32);
        let results = [
            (x & y) ^ (x | !y),
            x << y,
            x >> y,
            (sx >> y).bitcast(Scalar::U32),
            x.count_ones() + y.count_ones(),
            x * y + x - y,
            x / (y | k.u32(1)),
            (sx % (y | k.u32(1)).bitcast(Scalar::I32)).bitcast(Scalar::U32),
        ];
        for (j, r) in results.into_iter().enumerate() {
            k.store(out, base + k.u32(j as u32), r);
        }
    });
    k.finish()
}

fn reference(x: u32, y: u32) -> [u32; OUTS] {
    let sx = x as i32;
    [
        (x & y) ^ (x | !y),
        x.wrapping_shl(y % 32),
        x >> (y % 32),
        (sx >> (y % 32)) as u32,
        x.count_ones() + y.count_ones(),
        x.wrapping_mul(y).wrapping_add(x).wrapping_sub(y),
        x / (y | 1),
        sx.wrapping_rem((y | 1) as i32) as u32,
    ]
}

pub fn cases() -> Vec<Case> {
    let n = 777u32;
    let mut r = Rng::new(3);
    let mut a: Vec<u32> = (0..n).map(|_| r.u32()).collect();
    let mut b: Vec<u32> = (0..n).map(|_| r.u32() % 70).collect();
    a[..4].copy_from_slice(&[0, u32::MAX, 0x8000_0000, 1]);
    b[..4].copy_from_slice(&[31, 32, 33, 0]);
    let want: Vec<f64> = a
        .iter()
        .zip(&b)
        .flat_map(|(&x, &y)| reference(x, y))
        .map(|v| v as f64)
        .collect();
    vec![Case::new(
        format!("bitops/u32/n={n}"),
        kernel(),
        [n.div_ceil(WG), 1, 1],
    )
    .input("a", Scalar::U32, u32_bytes(&a))
    .input("b", Scalar::U32, u32_bytes(&b))
    .output("out", Scalar::U32, vec![0; n as usize * OUTS * 4], want)
    .params(vec![ParamValue::U32(n)])
    .bound(NMSE_EXACT)]
}

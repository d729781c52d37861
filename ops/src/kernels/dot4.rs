//! Packed 8-bit dot products ([`trine_ir::BinaryOp::Dot4I8`], `Dot4U8`), the building block of
//! quantized products on whole words of codes: signed and unsigned, accumulated over a row of
//! words as a quantized GEMV does, with the extremes of both signs; and one product per
//! invocation with no control flow, which the C lowering vectorises across invocations (on
//! AVX512-VNNI through the products' 16-lane versions, which the guarded loop never reaches).

use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const WG: u32 = 64;
/// Words each invocation accumulates over.
const WORDS: u32 = 8;

/// `si[i] = Σ_j dot4i8(a[i·8+j], b[i·8+j])` and `su[i]` likewise unsigned, for `i < n`.
pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("dot4", [WG, 1, 1]);
    let a = k.buffer("a", Scalar::U32, Access::Read);
    let b = k.buffer("b", Scalar::U32, Access::Read);
    let si = k.buffer("si", Scalar::I32, Access::Write);
    let su = k.buffer("su", Scalar::U32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let acc_i = k.var("acc_i", Scalar::I32);
        let acc_u = k.var("acc_u", Scalar::U32);
        k.for_range(k.u32(0), k.u32(WORDS), 1, |j| {
            let at = i * k.u32(WORDS) + j;
            let (x, y) = (k.load(a, at), k.load(b, at));
            acc_i.set(acc_i.get() + x.dot4_i8(y));
            acc_u.set(acc_u.get() + x.dot4_u8(y));
        });
        k.store(si, i, acc_i.get());
        k.store(su, i, acc_u.get());
    });
    k.finish()
}

/// `si[i] = dot4i8(a[i], b[i])`, `su[i] = dot4u8(a[i], b[i])`, `sm[i] = dot4i8(a[i] &
/// 0x7f7f7f7f, b[i])`, `s4[i] = Σ_{j<4} dot4i8(rotl(a[i], 8j) & 0x7f7f7f7f, b[i])` and
/// `t4[i]` the same sum unmasked, over whole workgroups: `sm` and `s4` have one side's bytes
/// below 128, which the C lowering multiplies as unsigned by signed bytes (`vpdpbusd` alone,
/// on AVX512-VNNI), and a sum of four packed products it takes as one call accumulating them
/// (`trine_dot16u8i8`, `trine_dot16i8`).
pub fn lanes_kernel() -> Kernel {
    let k = KernelBuilder::new("dot4_lanes", [WG, 1, 1]);
    let a = k.buffer("a", Scalar::U32, Access::Read);
    let b = k.buffer("b", Scalar::U32, Access::Read);
    let si = k.buffer("si", Scalar::I32, Access::Write);
    let su = k.buffer("su", Scalar::U32, Access::Write);
    let sm = k.buffer("sm", Scalar::I32, Access::Write);
    let s4 = k.buffer("s4", Scalar::I32, Access::Write);
    let t4 = k.buffer("t4", Scalar::I32, Access::Write);
    let i = k.global_id(0);
    let (x, y) = (k.load(a, i), k.load(b, i));
    let small = k.u32(0x7f7f_7f7f);
    k.store(si, i, x.dot4_i8(y));
    k.store(su, i, x.dot4_u8(y));
    k.store(sm, i, (x & small).dot4_i8(y));
    let rotated = |j: u32| match j {
        0 => x,
        _ => (x << k.u32(8 * j)) | (x >> k.u32(32 - 8 * j)),
    };
    let sum = |mask: Option<u32>| {
        (0..4)
            .map(|j| {
                mask.map_or(rotated(j), |m| rotated(j) & k.u32(m))
                    .dot4_i8(y)
            })
            .reduce(|p, q| p + q)
            .expect("four products")
    };
    k.store(s4, i, sum(Some(0x7f7f_7f7f)));
    k.store(t4, i, sum(None));
    k.finish()
}

fn reference(a: &[u32], b: &[u32]) -> (i64, u64) {
    let mut s = 0i64;
    let mut u = 0u64;
    for (x, y) in a.iter().zip(b) {
        for (p, q) in x.to_le_bytes().into_iter().zip(y.to_le_bytes()) {
            s += i64::from(p as i8) * i64::from(q as i8);
            u += u64::from(p) * u64::from(q);
        }
    }
    (s, u)
}

pub fn cases() -> Vec<Case> {
    let n = 300u32;
    let words = (n * WORDS) as usize;
    let mut r = Rng::new(8);
    let mut a: Vec<u32> = (0..words).map(|_| r.u32()).collect();
    let mut b: Vec<u32> = (0..words).map(|_| r.u32()).collect();
    // Every byte at -128 or 255 (the largest products of each kind), 127 against -128, zero.
    a[..4].copy_from_slice(&[0x8080_8080, u32::MAX, 0x7f7f_7f7f, 0]);
    b[..4].copy_from_slice(&[0x8080_8080, u32::MAX, 0x8080_8080, u32::MAX]);
    let lanes = (4 * WG) as usize;
    let each: Vec<(i64, u64)> = a[..lanes]
        .iter()
        .zip(&b[..lanes])
        .map(|(x, y)| reference(&[*x], &[*y]))
        .collect();
    // Each lane's four rotations of a, masked, against b: `s4` and `t4`.
    let four = |mask: u32| -> Vec<f64> {
        a[..lanes]
            .iter()
            .zip(&b[..lanes])
            .map(|(x, y)| {
                let xs: Vec<u32> = (0..4).map(|j| x.rotate_left(8 * j) & mask).collect();
                reference(&xs, &[*y; 4]).0 as f64
            })
            .collect()
    };
    let lanes_case = Case::new(format!("dot4/lanes/n={lanes}"), lanes_kernel(), [4, 1, 1])
        .input("a", Scalar::U32, u32_bytes(&a[..lanes]))
        .input("b", Scalar::U32, u32_bytes(&b[..lanes]))
        .output(
            "si",
            Scalar::I32,
            vec![0; lanes * 4],
            each.iter().map(|r| r.0 as f64).collect(),
        )
        .output(
            "su",
            Scalar::U32,
            vec![0; lanes * 4],
            each.iter().map(|r| r.1 as f64).collect(),
        )
        .output(
            "sm",
            Scalar::I32,
            vec![0; lanes * 4],
            a[..lanes]
                .iter()
                .zip(&b[..lanes])
                .map(|(x, y)| reference(&[x & 0x7f7f_7f7f], &[*y]).0 as f64)
                .collect(),
        )
        .output("s4", Scalar::I32, vec![0; lanes * 4], four(0x7f7f_7f7f))
        .output("t4", Scalar::I32, vec![0; lanes * 4], four(u32::MAX))
        .bound(NMSE_EXACT);
    let rows: Vec<(i64, u64)> = a
        .chunks(WORDS as usize)
        .zip(b.chunks(WORDS as usize))
        .map(|(x, y)| reference(x, y))
        .collect();
    vec![
        Case::new(
            format!("dot4/u32x4/n={n}"),
            kernel(),
            [n.div_ceil(WG), 1, 1],
        )
        .input("a", Scalar::U32, u32_bytes(&a))
        .input("b", Scalar::U32, u32_bytes(&b))
        .output(
            "si",
            Scalar::I32,
            vec![0; n as usize * 4],
            rows.iter().map(|r| r.0 as f64).collect(),
        )
        .output(
            "su",
            Scalar::U32,
            vec![0; n as usize * 4],
            rows.iter().map(|r| r.1 as f64).collect(),
        )
        .params(vec![ParamValue::U32(n)])
        .bound(NMSE_EXACT),
        lanes_case,
    ]
}

//! Inclusive prefix sum of u32 values by one workgroup: Hillis–Steele scans of WG-element
//! chunks in double-buffered shared memory, each chunk offset by the total so far.

use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const WG: u32 = 256;

pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("prefix_sum", [WG, 1, 1]);
    let x = k.buffer("x", Scalar::U32, Access::Read);
    let y = k.buffer("y", Scalar::U32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let buf = [
        k.shared("ping", Scalar::U32, WG),
        k.shared("pong", Scalar::U32, WG),
    ];
    let lid = k.local_index();
    let carry = k.var("carry", Scalar::U32);
    k.for_range(k.u32(0), n, WG, |chunk| {
        let i = chunk + lid;
        let v = k.var("v", Scalar::U32);
        v.set(k.u32(0));
        k.if_(i.lt(n), || v.set(k.load(x, i)));
        let scanned = crate::support::workgroup_scan(&k, buf, (lid, WG), v.get());
        let total = carry.get() + k.load_shared(scanned, lid);
        k.if_(i.lt(n), || k.store(y, i, total));
        carry.set(carry.get() + k.load_shared(scanned, k.u32(WG - 1)));
        k.barrier();
    });
    k.finish()
}

pub fn cases() -> Vec<Case> {
    [1u32, 256, 1000]
        .iter()
        .map(|&n| {
            let mut r = Rng::new(n as u64 * 13);
            let x: Vec<u32> = (0..n).map(|_| r.u32() % 1000).collect();
            let want = x
                .iter()
                .scan(0u64, |s, &v| {
                    *s += v as u64;
                    Some(*s as f64)
                })
                .collect();
            Case::new(format!("prefix_sum/u32/n={n}"), kernel(), [1, 1, 1])
                .input("x", Scalar::U32, u32_bytes(&x))
                .output("y", Scalar::U32, vec![0; n as usize * 4], want)
                .params(vec![ParamValue::U32(n)])
                .bound(NMSE_EXACT)
        })
        .collect()
}

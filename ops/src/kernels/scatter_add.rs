//! Scatter-add ([`trine_ir::Stmt::AtomicAdd`]): `sums[key[i] % bins] += value[i]` and
//! `counts[key[i] % bins] += 1` for `i < n`, one invocation each, so that many invocations of
//! many workgroups add to one element at once: a histogram's shape, and the way a product
//! whose workgroups each own a slice of the input adds its share into a shared output. The
//! f32 sums land in an order no kernel controls, so they are judged within a bound; the
//! counts exactly.

use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const WG: u32 = 64;

pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("scatter_add", [WG, 1, 1]);
    let key = k.buffer("key", Scalar::U32, Access::Read);
    let value = k.buffer("value", Scalar::F32, Access::Read);
    let sums = k.buffer("sums", Scalar::F32, Access::ReadWrite);
    let counts = k.buffer("counts", Scalar::U32, Access::ReadWrite);
    let n = k.param("n", Scalar::U32);
    let bins = k.param("bins", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let bin = k.load(key, i) % bins;
        k.atomic_add(sums, bin, k.load(value, i));
        k.atomic_add(counts, bin, k.u32(1));
    });
    k.finish()
}

pub fn cases() -> Vec<Case> {
    // One bin (every invocation on one element), a few, and more bins than workgroups.
    [(1u32, 1000u32), (7, 5000), (300, 20_000)]
        .iter()
        .map(|&(bins, n)| {
            let mut r = Rng::new(bins as u64 * 31 + n as u64);
            let key: Vec<u32> = (0..n).map(|_| r.u32()).collect();
            let value = r.f32s(n as usize, -1.0, 1.0);
            let start_sums = r.f32s(bins as usize, -4.0, 4.0);
            let start_counts: Vec<u32> = (0..bins).map(|b| b * 3).collect();
            let mut want_sums: Vec<f64> = start_sums.iter().map(|&s| s as f64).collect();
            let mut want_counts: Vec<f64> = start_counts.iter().map(|&c| c as f64).collect();
            for (&k, &v) in key.iter().zip(&value) {
                want_sums[(k % bins) as usize] += v as f64;
                want_counts[(k % bins) as usize] += 1.0;
            }
            let grid = [n.div_ceil(WG), 1, 1];
            Case::new(format!("scatter_add/f32/bins={bins}/n={n}"), kernel(), grid)
                .input("key", Scalar::U32, u32_bytes(&key))
                .input("value", Scalar::F32, f32_bytes(&value))
                .output("sums", Scalar::F32, f32_bytes(&start_sums), want_sums)
                .output_exact("counts", Scalar::U32, u32_bytes(&start_counts), want_counts)
                .params(vec![ParamValue::U32(n), ParamValue::U32(bins)])
        })
        .collect()
}

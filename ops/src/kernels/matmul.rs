//! Tiled matmul `C[M×N] = A[M×K] · B[K×N]` (row-major f32): each workgroup computes a
//! TILE×TILE block of C, staging TILE×TILE tiles of A and B through shared memory. Sizes need
//! not be multiples of the tile.

use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const TILE: u32 = 16;

pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("matmul_tiled", [TILE, TILE, 1]);
    let a = k.buffer("a", Scalar::F32, Access::Read);
    let b = k.buffer("b", Scalar::F32, Access::Read);
    let c = k.buffer("c", Scalar::F32, Access::Write);
    let m = k.param("m", Scalar::U32);
    let n = k.param("n", Scalar::U32);
    let kk = k.param("k", Scalar::U32);
    let ta = k.shared("ta", Scalar::F32, TILE * TILE);
    let tb = k.shared("tb", Scalar::F32, TILE * TILE);
    let (tx, ty) = (k.local_id(0), k.local_id(1));
    let col = k.global_id(0);
    let row = k.global_id(1);
    let tile = k.u32(TILE);
    let zero = k.f32(0.0);
    let slot = ty * tile + tx;
    let acc = k.var("acc", Scalar::F32);
    let tiles = (kk + k.u32(TILE - 1)) / tile;
    k.for_range(k.u32(0), tiles, 1, |t| {
        let ka = t * tile + tx;
        let a_in = row.lt(m) & ka.lt(kk);
        let av = k.var("av", Scalar::F32);
        av.set(zero);
        k.if_(a_in, || av.set(k.load(a, row * kk + ka)));
        k.store_shared(ta, slot, av.get());
        let kb = t * tile + ty;
        let b_in = kb.lt(kk) & col.lt(n);
        let bv = k.var("bv", Scalar::F32);
        bv.set(zero);
        k.if_(b_in, || bv.set(k.load(b, kb * n + col)));
        k.store_shared(tb, slot, bv.get());
        k.barrier();
        k.for_range(k.u32(0), tile, 1, |i| {
            let prod = k
                .load_shared(ta, ty * tile + i)
                .fma(k.load_shared(tb, i * tile + tx), acc.get());
            acc.set(prod);
        });
        k.barrier();
    });
    k.if_(row.lt(m) & col.lt(n), || {
        k.store(c, row * n + col, acc.get())
    });
    k.finish()
}

pub fn cases() -> Vec<Case> {
    [(1u32, 1u32, 1u32), (33, 17, 45), (64, 128, 96)]
        .iter()
        .map(|&(m, n, kk)| {
            let mut r = Rng::new((m * 31 + n * 7 + kk) as u64);
            let a = r.f32s((m * kk) as usize, -1.0, 1.0);
            let b = r.f32s((kk * n) as usize, -1.0, 1.0);
            let mut want = vec![0f64; (m * n) as usize];
            for i in 0..m as usize {
                for j in 0..n as usize {
                    want[i * n as usize + j] = (0..kk as usize)
                        .map(|p| a[i * kk as usize + p] as f64 * b[p * n as usize + j] as f64)
                        .sum();
                }
            }
            Case::new(
                format!("matmul_tiled/f32/{m}x{n}x{kk}"),
                kernel(),
                [n.div_ceil(TILE), m.div_ceil(TILE), 1],
            )
            .input("a", Scalar::F32, f32_bytes(&a))
            .input("b", Scalar::F32, f32_bytes(&b))
            .output("c", Scalar::F32, vec![0; (m * n * 4) as usize], want)
            .params(vec![
                ParamValue::U32(m),
                ParamValue::U32(n),
                ParamValue::U32(kk),
            ])
            .bound(NMSE_MATMUL)
        })
        .collect()
}

//! Warpgroup products ([`trine_ir::GroupOp`]): `c = a·bᵀ` for `a` [rows × K] and `b` [24 × K]
//! (f16), each workgroup 128 rows of `a`, each of its two warpgroups 64 of them. Every step
//! the invocations stage 64 columns of K of both in the swizzled layout the products read,
//! then each warpgroup starts its product; it waits for it before the next step's staging
//! overwrites the operands, and before storing its accumulator. 24 columns exercise a width
//! that is no power of two. Devices without warpgroup products run a scalar variant that
//! sums each output in order of K.

use crate::case::*;
use half::f16;
use trine_ir::{
    Access, Kernel, KernelBuilder, Scalar, TileMemory, GROUP_INVOCATIONS, GROUP_K, GROUP_ROWS,
};

/// Rows of a workgroup: its two warpgroups'.
const BLOCK: u32 = 2 * GROUP_ROWS;
/// Columns of the product (rows of `b`).
const N: u32 = 24;
/// Invocations of a workgroup.
const WG: u32 = 2 * GROUP_INVOCATIONS;

/// The kernel; `group` chooses warpgroup products or the scalar variant. Param: K, a
/// multiple of [`GROUP_K`].
pub fn kernel(group: bool) -> Kernel {
    let name = if group {
        "group_product"
    } else {
        "group_product_scalar"
    };
    let k = KernelBuilder::new(name, [WG, 1, 1]);
    let a = k.buffer("a", Scalar::F16, Access::Read);
    let b = k.buffer("b", Scalar::F16, Access::Read);
    let c = k.buffer("c", Scalar::F32, Access::Write);
    let cols = k.param("cols", Scalar::U32);
    let lid = k.local_index();
    let r0 = k.workgroup_id(0) * k.u32(BLOCK);
    if !group {
        k.for_range(lid, k.u32(BLOCK * N), WG, |e| {
            let (r, n) = (r0 + e / k.u32(N), e % k.u32(N));
            let sum = k.var("sum", Scalar::F32);
            sum.set(k.f32(0.0));
            k.for_range(k.u32(0), cols, 1, |j| {
                let x = k.load(a, r * cols + j).cast(Scalar::F32);
                let y = k.load(b, n * cols + j).cast(Scalar::F32);
                sum.set(sum.get() + x * y);
            });
            k.store(c, r * k.u32(N) + n, sum.get());
        });
        return k.finish();
    }
    k.require_subgroup_width(32);
    let a_sh = k.shared("a_block", Scalar::F16, BLOCK * GROUP_K);
    // b's 24 rows are three groups of 8, whole swizzle atoms.
    let b_sh = k.shared("b_block", Scalar::F16, N * GROUP_K);
    let acc = k.group_acc("acc", N);
    let group = lid / k.u32(GROUP_INVOCATIONS);
    acc.zero();
    k.for_range(k.u32(0), cols, GROUP_K, |k0| {
        // The step before's product reads both blocks.
        k.group_wait(0);
        k.barrier();
        let stage = |sh, rows: u32, src, first: trine_ir::Val<'_>| {
            k.for_range(lid, k.u32(rows * GROUP_K), WG, |i| {
                let (r, j) = (i / k.u32(GROUP_K), i % k.u32(GROUP_K));
                let line = (j / k.u32(8)) ^ (r % k.u32(8));
                let at = r * k.u32(GROUP_K) + line * k.u32(8) + j % k.u32(8);
                k.store_shared(sh, at, k.load(src, (first + r) * cols + k0 + j));
            });
        };
        stage(a_sh, BLOCK, a, r0);
        stage(b_sh, N, b, k.u32(0));
        k.barrier();
        let a_at = group * k.u32(GROUP_ROWS * GROUP_K);
        acc.mma((a_sh, a_at), (b_sh, k.u32(0)));
    });
    k.group_wait(0);
    let first = r0 + group * k.u32(GROUP_ROWS);
    acc.store(TileMemory::Buffer(c), first * k.u32(N), k.u32(N));
    k.finish()
}

pub fn cases() -> Vec<Case> {
    let (workgroups, cols) = (2u32, 3 * GROUP_K);
    let rows = workgroups * BLOCK;
    let mut r = Rng::new(43);
    let mut half = |n: u32| -> Vec<f16> {
        r.f32s(n as usize, -1.0, 1.0)
            .into_iter()
            .map(f16::from_f32)
            .collect()
    };
    let (a, b) = (half(rows * cols), half(N * cols));
    let c = cols as usize;
    let want = (0..(rows * N) as usize)
        .map(|i| {
            let (row, n) = (i / N as usize, i % N as usize);
            (0..c)
                .map(|j| a[row * c + j].to_f64() * b[n * c + j].to_f64())
                .sum()
        })
        .collect();
    vec![
        Case::new("group_product/f16", kernel(true), [workgroups, 1, 1])
            .input("a", Scalar::F16, f16_bytes(&a))
            .input("b", Scalar::F16, f16_bytes(&b))
            .output("c", Scalar::F32, vec![0; (rows * N * 4) as usize], want)
            .params(vec![trine_ir::ParamValue::U32(cols)])
            .bound(super::super::matmul_tiles::NMSE)
            .fallback(kernel(false)),
    ]
}

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

/// Matrix tiles: an A tile staged in shared memory, a column-major B straight from a buffer,
/// the accumulator stored row-major, in a loop over K.
pub fn tiled_product() -> Kernel {
    use trine_ir::{TileLayout, TileMemory, TileRole};
    let k = KernelBuilder::new("tiled_product", [64, 1, 1]);
    k.require_subgroups();
    let a = k.buffer("a", Scalar::F16, Access::Read);
    let bt = k.buffer("bt", Scalar::F16, Access::Read);
    let c = k.buffer("c", Scalar::F32, Access::Write);
    let kk = k.param("k", Scalar::U32);
    let a_sh = k.shared("a_sh", Scalar::F16, 32 * 64);
    let lid = k.local_index();
    k.for_range(lid, k.u32(32 * 64), 64, |i| {
        k.store_shared(a_sh, i, k.load(a, i))
    });
    k.barrier();
    let ta = k.tile("ta", TileRole::A);
    let tb = k.tile("tb", TileRole::B);
    let acc = k.tile("acc", TileRole::Acc);
    let rows = k.subgroup_id() * k.u32(16);
    acc.zero();
    k.for_range(k.u32(0), kk, 16, |at| {
        ta.load(
            TileMemory::Shared(a_sh),
            rows * k.u32(64) + at,
            k.u32(64),
            TileLayout::RowMajor,
        );
        tb.load(TileMemory::Buffer(bt), at, kk, TileLayout::ColMajor);
        acc.mma(ta, tb);
    });
    acc.store(
        TileMemory::Buffer(c),
        rows * k.u32(16),
        k.u32(16),
        TileLayout::RowMajor,
    );
    k.finish()
}

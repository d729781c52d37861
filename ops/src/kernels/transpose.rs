//! Matrix transpose through a shared-memory tile, so that both the read and the write are
//! contiguous across a workgroup's rows. The tile has one padding column against bank
//! conflicts. A second kernel transposes twice in one tile's memory: through f16 halves, then
//! through the f32 tile that overlays them ([`trine_ir::SharedDecl::over`]).

use crate::case::*;
use half::f16;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const TILE: u32 = 16;

pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("transpose", [TILE, TILE, 1]);
    let src = k.buffer("src", Scalar::F32, Access::Read);
    let dst = k.buffer("dst", Scalar::F32, Access::Write);
    let rows = k.param("rows", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let tile = k.shared("tile", Scalar::F32, TILE * (TILE + 1));
    let (tx, ty) = (k.local_id(0), k.local_id(1));
    let stride = k.u32(TILE + 1);
    let t = k.u32(TILE);
    let x = k.workgroup_id(0) * t + tx;
    let y = k.workgroup_id(1) * t + ty;
    let v = k.var("v", Scalar::F32);
    k.if_(y.lt(rows) & x.lt(cols), || v.set(k.load(src, y * cols + x)));
    k.store_shared(tile, ty * stride + tx, v.get());
    k.barrier();
    let ox = k.workgroup_id(1) * t + tx;
    let oy = k.workgroup_id(0) * t + ty;
    k.if_(oy.lt(cols) & ox.lt(rows), || {
        k.store(dst, oy * rows + ox, k.load_shared(tile, tx * stride + ty));
    });
    k.finish()
}

/// `dst` = xᵀ + f16(x)ᵀ: x transposed through an f16 tile, then, in the same memory, through
/// the f32 tile overlaying it, barriers between the phases.
pub fn overlay_kernel() -> Kernel {
    let k = KernelBuilder::new("transpose_overlay", [TILE, TILE, 1]);
    let src = k.buffer("src", Scalar::F32, Access::Read);
    let dst = k.buffer("dst", Scalar::F32, Access::Write);
    let rows = k.param("rows", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let halves = k.shared("halves", Scalar::F16, 2 * TILE * (TILE + 1));
    let tile = k.shared_over("tile", Scalar::F32, TILE * (TILE + 1), halves);
    let (tx, ty) = (k.local_id(0), k.local_id(1));
    let stride = k.u32(TILE + 1);
    let t = k.u32(TILE);
    let x = k.workgroup_id(0) * t + tx;
    let y = k.workgroup_id(1) * t + ty;
    let v = k.var("v", Scalar::F32);
    k.if_(y.lt(rows) & x.lt(cols), || v.set(k.load(src, y * cols + x)));
    // Each half at the place of its own f32 element's second half, so that each invocation's
    // write of the f32 tile overwrites halves another one read.
    k.store_shared(
        halves,
        (ty * stride + tx) * k.u32(2) + k.u32(1),
        v.get().cast(Scalar::F16),
    );
    k.barrier();
    let h = k.load_shared(halves, (tx * stride + ty) * k.u32(2) + k.u32(1));
    k.barrier();
    k.store_shared(tile, ty * stride + tx, v.get());
    k.barrier();
    let ox = k.workgroup_id(1) * t + tx;
    let oy = k.workgroup_id(0) * t + ty;
    k.if_(oy.lt(cols) & ox.lt(rows), || {
        let sum = k.load_shared(tile, tx * stride + ty) + h.cast(Scalar::F32);
        k.store(dst, oy * rows + ox, sum);
    });
    k.finish()
}

pub fn cases() -> Vec<Case> {
    let plain = [(1u32, 1u32), (37, 53), (256, 128)]
        .map(|shape| case("f32", kernel(), shape, |v| v as f64));
    let over = case("f32 over f16", overlay_kernel(), (37, 53), |v| {
        (v + f16::from_f32(v).to_f32()) as f64
    });
    plain.into_iter().chain([over]).collect()
}

/// A case of `kernel` on a random `rows × cols` matrix, whose transposed element `v` the
/// kernel writes as `value(v)`.
fn case(what: &str, kernel: Kernel, (rows, cols): (u32, u32), value: fn(f32) -> f64) -> Case {
    let mut r = Rng::new((rows * 1000 + cols) as u64);
    let x = r.f32s((rows * cols) as usize, -10.0, 10.0);
    let want = (0..cols as usize)
        .flat_map(|c| (0..rows as usize).map(move |rw| (rw, c)))
        .map(|(rw, c)| value(x[rw * cols as usize + c]))
        .collect();
    Case::new(
        format!("transpose/{what}/{rows}x{cols}"),
        kernel,
        [cols.div_ceil(TILE), rows.div_ceil(TILE), 1],
    )
    .input("src", Scalar::F32, f32_bytes(&x))
    .output(
        "dst",
        Scalar::F32,
        vec![0; (rows * cols * 4) as usize],
        want,
    )
    .params(vec![ParamValue::U32(rows), ParamValue::U32(cols)])
    .bound(NMSE_EXACT)
}

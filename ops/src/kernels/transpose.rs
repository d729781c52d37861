//! Matrix transpose through a shared-memory tile, so that both the read and the write are
//! contiguous across a workgroup's rows. The tile has one padding column against bank
//! conflicts.

use crate::case::*;
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

pub fn cases() -> Vec<Case> {
    [(1u32, 1u32), (37, 53), (256, 128)]
        .iter()
        .map(|&(rows, cols)| {
            let mut r = Rng::new((rows * 1000 + cols) as u64);
            let x = r.f32s((rows * cols) as usize, -10.0, 10.0);
            let want = (0..cols as usize)
                .flat_map(|c| (0..rows as usize).map(move |rw| (rw, c)))
                .map(|(rw, c)| x[rw * cols as usize + c] as f64)
                .collect();
            Case::new(
                format!("transpose/f32/{rows}x{cols}"),
                kernel(),
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
        })
        .collect()
}

//! Row softmax: one workgroup per row, max and sum reduced in shared memory, rows longer than
//! the workgroup handled by strided loops.

use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar, SharedId, Val};

const WG: u32 = 128;

/// Reduces `sh[0..WG]` into `sh[0]` with `combine`, barriers between steps.
fn tree<'b>(
    k: &'b KernelBuilder,
    sh: SharedId,
    lid: Val<'b>,
    combine: impl Fn(Val<'b>, Val<'b>) -> Val<'b>,
) {
    let mut stride = WG / 2;
    while stride > 0 {
        let s = k.u32(stride);
        k.if_(lid.lt(s), || {
            let v = combine(k.load_shared(sh, lid), k.load_shared(sh, lid + s));
            k.store_shared(sh, lid, v);
        });
        k.barrier();
        stride /= 2;
    }
}

pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("softmax_rows", [WG, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::ReadWrite);
    let cols = k.param("cols", Scalar::U32);
    let sh = k.shared("red", Scalar::F32, WG);
    let lid = k.local_index();
    let base = k.workgroup_id(0) * cols;

    let m = k.var("m", Scalar::F32);
    m.set(k.f32(f32::NEG_INFINITY));
    k.for_range(lid, cols, WG, |c| m.set(m.get().max(k.load(x, base + c))));
    k.store_shared(sh, lid, m.get());
    k.barrier();
    tree(&k, sh, lid, |a, b| a.max(b));
    let row_max = k.load_shared(sh, k.u32(0));
    k.barrier();

    let s = k.var("s", Scalar::F32);
    k.for_range(lid, cols, WG, |c| {
        let e = (k.load(x, base + c) - row_max).exp();
        k.store(y, base + c, e);
        s.set(s.get() + e);
    });
    k.store_shared(sh, lid, s.get());
    k.barrier();
    tree(&k, sh, lid, |a, b| a + b);
    let inv = k.f32(1.0) / k.load_shared(sh, k.u32(0));
    k.for_range(lid, cols, WG, |c| {
        k.store(y, base + c, k.load(y, base + c) * inv)
    });
    k.finish()
}

pub fn cases() -> Vec<Case> {
    [(1u32, 5u32), (7, 1000), (3, 4096)]
        .iter()
        .map(|&(rows, cols)| {
            let mut r = Rng::new((rows * cols) as u64);
            let x = r.f32s((rows * cols) as usize, -8.0, 8.0);
            let want = x
                .chunks(cols as usize)
                .flat_map(|row| {
                    let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
                    let e: Vec<f64> = row.iter().map(|&v| (v as f64 - m).exp()).collect();
                    let s: f64 = e.iter().sum();
                    e.into_iter().map(move |v| v / s)
                })
                .collect();
            Case::new(
                format!("softmax_rows/f32/{rows}x{cols}"),
                kernel(),
                [rows, 1, 1],
            )
            .input("x", Scalar::F32, f32_bytes(&x))
            .output("y", Scalar::F32, vec![0; (rows * cols * 4) as usize], want)
            .params(vec![ParamValue::U32(cols)])
            .bound(NMSE_SOFTMAX)
        })
        .collect()
}

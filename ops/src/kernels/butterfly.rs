//! Butterfly all-reduce (max) across groups of 4 invocations: with subgroup shuffles
//! (capability-gated), and through shared memory as the fallback. Groups of 4 fit in every
//! subgroup width trine meets (8, 32, 64).

use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const WG: u32 = 64;
const GROUP: u32 = 4;

pub fn shuffle_kernel() -> Kernel {
    let k = KernelBuilder::new("butterfly_shuffle", [WG, 1, 1]);
    k.require_subgroups();
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    let v = k.var("v", Scalar::F32);
    v.set(k.f32(f32::NEG_INFINITY));
    k.if_(i.lt(n), || v.set(k.load(x, i)));
    let mut m = 1;
    while m < GROUP {
        v.set(v.get().max(v.get().shuffle_xor(k.u32(m))));
        m *= 2;
    }
    k.if_(i.lt(n), || k.store(y, i, v.get()));
    k.finish()
}

pub fn shared_kernel() -> Kernel {
    let k = KernelBuilder::new("butterfly_shared", [WG, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let sh = k.shared("lanes", Scalar::F32, WG);
    let i = k.global_id(0);
    let lid = k.local_index();
    let v = k.var("v", Scalar::F32);
    v.set(k.f32(f32::NEG_INFINITY));
    k.if_(i.lt(n), || v.set(k.load(x, i)));
    let mut m = 1;
    while m < GROUP {
        k.store_shared(sh, lid, v.get());
        k.barrier();
        v.set(v.get().max(k.load_shared(sh, lid ^ k.u32(m))));
        k.barrier();
        m *= 2;
    }
    k.if_(i.lt(n), || k.store(y, i, v.get()));
    k.finish()
}

pub fn cases() -> Vec<Case> {
    let n = 250u32;
    let mut r = Rng::new(8);
    let x = r.f32s(n as usize, -100.0, 100.0);
    let want = (0..n as usize)
        .map(|i| {
            let g = i / GROUP as usize * GROUP as usize;
            x[g..(g + GROUP as usize).min(n as usize)]
                .iter()
                .fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64))
        })
        .collect();
    vec![Case::new(
        format!("butterfly/f32/n={n}"),
        shuffle_kernel(),
        [n.div_ceil(WG), 1, 1],
    )
    .input("x", Scalar::F32, f32_bytes(&x))
    .output("y", Scalar::F32, vec![0; n as usize * 4], want)
    .params(vec![ParamValue::U32(n)])
    .bound(NMSE_EXACT)
    .fallback(shared_kernel())]
}

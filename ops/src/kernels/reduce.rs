//! Sum of each workgroup's slice of a vector: the shared-memory tree with barriers, and the
//! subgroup variant (capability-gated) that falls back to it.

use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

const WG: u32 = 256;

/// Loads one element per invocation (0 past `n`), leaving its value for the reduction.
fn load_or_zero<'b>(
    k: &'b KernelBuilder,
    x: trine_ir::BufferId,
    n: trine_ir::Val<'b>,
) -> trine_ir::Val<'b> {
    let i = k.global_id(0);
    let v = k.var("v", Scalar::F32);
    k.if_(i.lt(n), || v.set(k.load(x, i)));
    v.get()
}

/// Tree reduction in shared memory: log2(WG) halving steps, a barrier after each.
pub fn shared_kernel() -> Kernel {
    let k = KernelBuilder::new("reduce_shared", [WG, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let out = k.buffer("partial", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let sh = k.shared("sums", Scalar::F32, WG);
    let lid = k.local_index();
    k.store_shared(sh, lid, load_or_zero(&k, x, n));
    k.barrier();
    let mut stride = WG / 2;
    while stride > 0 {
        let s = k.u32(stride);
        k.if_(lid.lt(s), || {
            let sum = k.load_shared(sh, lid) + k.load_shared(sh, lid + s);
            k.store_shared(sh, lid, sum);
        });
        k.barrier();
        stride /= 2;
    }
    k.if_(lid.eq(k.u32(0)), || {
        k.store(out, k.workgroup_id(0), k.load_shared(sh, lid))
    });
    k.finish()
}

/// Subgroup sums, then one partial per subgroup in shared memory, summed by invocation 0.
/// Correct for any subgroup width that divides the workgroup.
pub fn subgroup_kernel() -> Kernel {
    let k = KernelBuilder::new("reduce_subgroup", [WG, 1, 1]);
    k.require_subgroups();
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let out = k.buffer("partial", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let sh = k.shared("sums", Scalar::F32, WG);
    let lid = k.local_index();
    let s = load_or_zero(&k, x, n).subgroup_sum();
    k.if_(k.subgroup_invocation_id().eq(k.u32(0)), || {
        k.store_shared(sh, k.subgroup_id(), s)
    });
    k.barrier();
    k.if_(lid.eq(k.u32(0)), || {
        let acc = k.var("acc", Scalar::F32);
        let groups = k.u32(WG) / k.subgroup_size();
        k.for_range(k.u32(0), groups, 1, |g| {
            acc.set(acc.get() + k.load_shared(sh, g))
        });
        k.store(out, k.workgroup_id(0), acc.get());
    });
    k.finish()
}

fn case(name: &str, kernel: Kernel, n: u32) -> Case {
    let mut r = Rng::new(n as u64 + 5);
    let x = r.f32s(n as usize, -1.0, 1.0);
    let groups = n.div_ceil(WG);
    let want = x
        .chunks(WG as usize)
        .map(|c| c.iter().map(|&v| v as f64).sum())
        .collect();
    Case::new(format!("{name}/f32/n={n}"), kernel, [groups, 1, 1])
        .input("x", Scalar::F32, f32_bytes(&x))
        .output("partial", Scalar::F32, vec![0; groups as usize * 4], want)
        .params(vec![ParamValue::U32(n)])
}

pub fn cases() -> Vec<Case> {
    let mut v = vec![];
    for n in [256u32, 100_000] {
        v.push(case("reduce_shared", shared_kernel(), n));
        v.push(case("reduce_subgroup", subgroup_kernel(), n).fallback(shared_kernel()));
    }
    v
}

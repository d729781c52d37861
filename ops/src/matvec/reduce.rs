//! Combines each row's partial sums across the workgroup: through subgroup sums or a
//! shared-memory tree.

use trine_ir::{KernelBuilder, Scalar, Val, Var};

/// Row sums through subgroup sums: each subgroup's lane 0 leaves one partial per row in
/// shared memory; each invocation below `outputs` adds the partials of the rows `reads` names
/// for it, and gets their sums.
pub(crate) fn reduce_subgroup<'b>(
    k: &'b KernelBuilder,
    sums: &[Val<'b>],
    wg: u32,
    (outputs, reads): (u32, impl FnOnce(Val<'b>) -> Vec<Val<'b>>),
) -> Vec<Val<'b>> {
    let sh = k.shared("partials", Scalar::F32, sums.len() as u32 * wg);
    let lid = k.local_index();
    let totals: Vec<Val> = sums.iter().map(|s| s.subgroup_sum()).collect();
    let sg = k.subgroup_id();
    k.if_(k.subgroup_invocation_id().eq(k.u32(0)), || {
        for (r, t) in totals.iter().enumerate() {
            k.store_shared(sh, k.u32(r as u32 * wg) + sg, *t);
        }
    });
    k.barrier();
    read_totals(k, lid, (outputs, reads), |row, total| {
        // A subgroup wider than the workgroup is one partial subgroup, hence the rounding up.
        let width = k.subgroup_size();
        let groups = (k.u32(wg) + width - k.u32(1)) / width;
        let base = row * k.u32(wg);
        k.for_range(k.u32(0), groups, 1, |g| {
            total.set(total.get() + k.load_shared(sh, base + g))
        });
    })
}

/// Row sums through a shared-memory tree: log2(wg) halving steps over all rows at once, which
/// leave row r's sum at `r·wg`; invocations below `outputs` get the sums of the rows `reads`
/// names for them.
pub(super) fn reduce_shared<'b>(
    k: &'b KernelBuilder,
    sums: &[Val<'b>],
    wg: u32,
    (outputs, reads): (u32, impl FnOnce(Val<'b>) -> Vec<Val<'b>>),
) -> Vec<Val<'b>> {
    let sh = k.shared("partials", Scalar::F32, sums.len() as u32 * wg);
    let lid = k.local_index();
    for (r, s) in sums.iter().enumerate() {
        k.store_shared(sh, k.u32(r as u32 * wg) + lid, *s);
    }
    k.barrier();
    let mut stride = wg / 2;
    while stride > 0 {
        k.if_(lid.lt(k.u32(stride)), || {
            for r in 0..sums.len() as u32 {
                let at = k.u32(r * wg) + lid;
                let v = k.load_shared(sh, at) + k.load_shared(sh, at + k.u32(stride));
                k.store_shared(sh, at, v);
            }
        });
        k.barrier();
        stride /= 2;
    }
    read_totals(k, lid, (outputs, reads), |row, total| {
        total.set(k.load_shared(sh, row * k.u32(wg)))
    })
}

/// After a reduction's last barrier, where any invocation can read any row's sum: the sums
/// of the rows `reads` names for invocation `lid`, if it is below `outputs`, each set into a
/// fresh (zero) variable by `read`.
fn read_totals<'b>(
    k: &'b KernelBuilder,
    lid: Val<'b>,
    (outputs, reads): (u32, impl FnOnce(Val<'b>) -> Vec<Val<'b>>),
    read: impl Fn(Val<'b>, Var<'b>),
) -> Vec<Val<'b>> {
    let mut totals = vec![];
    k.if_(lid.lt(k.u32(outputs)), || {
        for row in reads(lid) {
            let total = k.var("total", Scalar::F32);
            read(row, total);
            totals.push(total);
        }
    });
    totals.into_iter().map(|t| t.get()).collect()
}

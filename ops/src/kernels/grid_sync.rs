//! Three dependent dispatches fused into one kernel with grid barriers ([`trine_ir::fuse`]):
//! each workgroup's sum of `x`, the sum of those partial sums, then `x` divided by the total.
//! Every phase reads what other workgroups wrote in the phase before, so a barrier that lets
//! one workgroup through early, or a stale read after it, changes the output.

use super::reduce;
use crate::case::*;
use trine_ir::fuse::{fuse, FuseStep};
use trine_ir::{Access, BufferDecl, Kernel, KernelBuilder, ParamValue, Scalar};

const WG: u32 = 256;

/// `y[i] = x[i] / total[0]` for `i < n`.
fn scale_kernel() -> Kernel {
    let k = KernelBuilder::new("scale_by_total", [WG, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let total = k.buffer("total", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        k.store(y, i, k.load(x, i) / k.load(total, k.u32(0)));
    });
    k.finish()
}

/// The three steps over `n` elements as one kernel for `workgroups` resident workgroups.
/// Buffers: x, partial sums, total, y, then the barriers' sync words.
pub fn kernel(n: u32, workgroups: u32) -> Kernel {
    let reduce = reduce::shared_kernel();
    let scale = scale_kernel();
    let parts = n.div_ceil(WG);
    let decl = |name: &str, access| BufferDecl {
        name: name.into(),
        elem: Scalar::F32,
        access,
    };
    let buffers = [
        decl("x", Access::Read),
        decl("partial", Access::ReadWrite),
        decl("total", Access::ReadWrite),
        decl("y", Access::Write),
    ];
    let (p_n, p_parts) = ([ParamValue::U32(n)], [ParamValue::U32(parts)]);
    let steps = [
        FuseStep {
            kernel: &reduce,
            grid: [parts, 1, 1],
            params: &p_n,
            slots: &[0, 1],
        },
        FuseStep {
            kernel: &reduce,
            grid: [1, 1, 1],
            params: &p_parts,
            slots: &[1, 2],
        },
        FuseStep {
            kernel: &scale,
            grid: [parts, 1, 1],
            params: &p_n,
            slots: &[0, 2, 3],
        },
    ];
    fuse(
        &format!("sum_scale_g{workgroups}"),
        &buffers,
        &steps,
        workgroups,
    )
    .expect("the steps share a workgroup size and their buffers fit")
}

pub fn cases() -> Vec<Case> {
    let n = WG * 37 + 5;
    let parts = n.div_ceil(WG) as usize;
    [1u32, 4, 24]
        .iter()
        .map(|&workgroups| {
            let mut r = Rng::new(u64::from(n + workgroups));
            let x = r.f32s(n as usize, 0.5, 1.5);
            let sums: Vec<f64> = x
                .chunks(WG as usize)
                .map(|c| c.iter().map(|&v| f64::from(v)).sum())
                .collect();
            let total: f64 = sums.iter().sum();
            let y: Vec<f64> = x.iter().map(|&v| f64::from(v) / total).collect();
            Case::new(
                format!("grid_sync/sum_scale/n={n}/workgroups={workgroups}"),
                kernel(n, workgroups),
                [workgroups, 1, 1],
            )
            .input("x", Scalar::F32, f32_bytes(&x))
            .output("partial", Scalar::F32, vec![0; parts * 4], sums)
            .output("total", Scalar::F32, vec![0; 4], vec![total])
            .output("y", Scalar::F32, vec![0; n as usize * 4], y)
            .output("grid_sync", Scalar::U32, vec![0; 8], vec![0.0, 2.0])
        })
        .collect()
}

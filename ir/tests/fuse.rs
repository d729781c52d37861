//! Fusing dispatches: the fused kernel computes what the dispatches compute one after another,
//! and steps that cannot share a kernel are typed errors.

use trine_ir::fuse::{fuse, FuseError, FuseStep};
use trine_ir::interp::interpret;
use trine_ir::{Access, BufferDecl, Kernel, KernelBuilder, ParamValue, Scalar};

/// `out[i] = in[i] * k + i` over `n`, one invocation each.
fn scale(size: u32) -> Kernel {
    let k = KernelBuilder::new("scale", [size, 1, 1]);
    let input = k.buffer("in", Scalar::U32, Access::Read);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let factor = k.param("k", Scalar::U32);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || k.store(out, i, k.load(input, i) * factor + i));
    k.finish()
}

/// `out[i] = in[n - 1 - i]`: every element comes from another workgroup.
fn reverse(size: u32) -> Kernel {
    let k = KernelBuilder::new("reverse", [size, 1, 1]);
    let input = k.buffer("in", Scalar::U32, Access::Read);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || k.store(out, i, k.load(input, n - k.u32(1) - i)));
    k.finish()
}

fn words(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn a_fused_chain_equals_its_dispatches() {
    let n = 70u32;
    let (a, b) = (scale(8), reverse(8));
    let x: Vec<u32> = (0..n).map(|i| i * 7 + 3).collect();
    let grid = [n.div_ceil(8), 1, 1];
    let (pa, pb) = (
        [ParamValue::U32(3), ParamValue::U32(n)],
        [ParamValue::U32(n)],
    );
    // One after another: x → t → y.
    let mut first = vec![words(&x), vec![0; 4 * n as usize]];
    interpret(&a, grid, &mut first, &pa, 8).unwrap();
    let mut second = vec![first[1].clone(), vec![0; 4 * n as usize]];
    interpret(&b, grid, &mut second, &pb, 8).unwrap();

    let decl = |name: &str, access| BufferDecl {
        name: name.into(),
        elem: Scalar::U32,
        access,
    };
    let buffers = [
        decl("x", Access::Read),
        decl("t", Access::ReadWrite),
        decl("y", Access::Write),
    ];
    for workgroups in [1, 3, 9, 20] {
        let steps = [
            FuseStep {
                kernel: &a,
                grid,
                params: &pa,
                slots: &[0, 1],
            },
            FuseStep {
                kernel: &b,
                grid,
                params: &pb,
                slots: &[1, 2],
            },
        ];
        let fused = fuse("chain", &buffers, &steps, workgroups).unwrap();
        let mut bufs = vec![
            words(&x),
            vec![0; 4 * n as usize],
            vec![0; 4 * n as usize],
            vec![0; 8],
        ];
        interpret(&fused, [workgroups, 1, 1], &mut bufs, &[], 8).unwrap();
        assert_eq!(bufs[2], second[1], "{workgroups} workgroups");
        assert_eq!(bufs[1], first[1], "{workgroups} workgroups");
    }
}

#[test]
fn steps_that_cannot_share_a_kernel_are_refused() {
    let buffers = [
        BufferDecl {
            name: "x".into(),
            elem: Scalar::U32,
            access: Access::Read,
        },
        BufferDecl {
            name: "y".into(),
            elem: Scalar::F32,
            access: Access::ReadWrite,
        },
        BufferDecl {
            name: "z".into(),
            elem: Scalar::U32,
            access: Access::ReadWrite,
        },
    ];
    let (a, b) = (reverse(8), reverse(16));
    let p = [ParamValue::U32(8)];
    let step = |kernel, slots| FuseStep {
        kernel,
        grid: [1, 1, 1],
        params: &p,
        slots,
    };
    let sizes = fuse("f", &buffers, &[step(&a, &[0, 2]), step(&b, &[0, 2])], 2);
    assert!(
        matches!(sizes, Err(FuseError::WorkgroupSize { step: 1, .. })),
        "{sizes:?}"
    );
    // `out` is u32; fused buffer 1 is f32.
    let types = fuse("f", &buffers, &[step(&a, &[0, 1])], 2);
    assert!(
        matches!(
            types,
            Err(FuseError::Slot {
                step: 0,
                slot: 1,
                ..
            })
        ),
        "{types:?}"
    );
    let count = fuse("f", &buffers, &[step(&a, &[0])], 2);
    assert!(
        matches!(count, Err(FuseError::SlotCount { .. })),
        "{count:?}"
    );
    let params = fuse(
        "f",
        &buffers,
        &[FuseStep {
            params: &[],
            ..step(&a, &[0, 2])
        }],
        2,
    );
    assert!(
        matches!(params, Err(FuseError::Params { .. })),
        "{params:?}"
    );
    assert_eq!(fuse("f", &buffers, &[], 2), Err(FuseError::Empty));
    assert_eq!(
        fuse("f", &buffers, &[step(&a, &[0, 2])], 0),
        Err(FuseError::NoWorkgroups)
    );
}

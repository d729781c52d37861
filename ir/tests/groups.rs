//! Warpgroup products on the interpreter: a product over swizzled operands equals the plain
//! one, and each rule of [`trine_ir::GroupOp`] that a GPU leaves undefined is an error.

mod common;

use common::{f16s, inputs, to_f32s};
use trine_ir::interp::{interpret, InterpError};
use trine_ir::{
    group_swizzle, validate, Access, Kernel, KernelBuilder, Limits, Scalar, TileMemory,
    ValidationError, GROUP_ATOM, GROUP_K, GROUP_ROWS,
};

/// Tokens: two warpgroups of [`GROUP_ROWS`].
const M: u32 = 2 * GROUP_ROWS;
/// Accumulator columns.
const N: u32 = 24;
/// Two products' worth of K.
const K: u32 = 2 * GROUP_K;

/// How the product kernel goes wrong, for the rule tests.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// Stores the accumulator before waiting for its products.
    StoreUnwaited,
    /// Overwrites an operand while the product reading it runs.
    WriteOperand,
    /// Offsets the A operand by half an atom.
    Misaligned,
    /// Only the first warpgroup's first 64 invocations start the products.
    Partial,
}

/// `c = a·bᵀ` for `a` [M × K] and `bt` [N × K] (f16, row-major) into `c` [M × N] (f32): the
/// invocations stage each block of [`GROUP_K`] columns in the swizzled layout, then each
/// warpgroup multiplies its 64 rows.
fn product(fault: Fault) -> Kernel {
    let k = KernelBuilder::new("group_product", [256, 1, 1]);
    k.require_subgroup_width(32);
    let a = k.buffer("a", Scalar::F16, Access::Read);
    let bt = k.buffer("bt", Scalar::F16, Access::Read);
    let c = k.buffer("c", Scalar::F32, Access::Write);
    let a_sh = k.shared("a_sh", Scalar::F16, M * GROUP_K);
    // B's rows padded to whole atoms.
    let b_rows = N.next_multiple_of(8);
    let b_sh = k.shared("b_sh", Scalar::F16, b_rows * GROUP_K);
    let acc = k.group_acc("acc", N);
    let lid = k.local_index();
    let group = lid / k.u32(128);
    acc.zero();
    k.for_range(k.u32(0), k.u32(K), GROUP_K, |k0| {
        // Products of the step before read both arrays.
        k.group_wait(0);
        k.barrier();
        let stage = |sh, rows: u32, src| {
            k.for_range(lid, k.u32(rows * GROUP_K), 256, |i| {
                let (r, col) = (i / k.u32(GROUP_K), i % k.u32(GROUP_K));
                // group_swizzle, written in the IR.
                let line = (col / k.u32(8)) ^ (r % k.u32(8));
                let at = r * k.u32(GROUP_K) + line * k.u32(8) + col % k.u32(8);
                k.store_shared(sh, at, k.load(src, r * k.u32(K) + k0 + col));
            });
        };
        stage(a_sh, M, a);
        stage(b_sh, N, bt);
        k.barrier();
        let a_at = group * k.u32(GROUP_ROWS * GROUP_K)
            + k.u32(if fault == Fault::Misaligned {
                GROUP_ATOM / 2
            } else {
                0
            });
        let start = || acc.mma((a_sh, a_at), (b_sh, k.u32(0)));
        if fault == Fault::Partial {
            k.if_(lid.lt(k.u32(64)) | lid.ge(k.u32(128)), start);
        } else {
            start();
        }
        if fault == Fault::WriteOperand {
            k.if_(lid.eq(k.u32(0)), || {
                k.store_shared(a_sh, k.u32(0), k.f16(0.0));
            });
        }
    });
    if fault != Fault::StoreUnwaited {
        k.group_wait(0);
    }
    acc.store(
        TileMemory::Buffer(c),
        group * k.u32(GROUP_ROWS * N),
        k.u32(N),
    );
    k.finish()
}

fn run(fault: Fault) -> Result<Vec<f32>, InterpError> {
    let (a, bt) = inputs(M, N, K);
    let mut bufs = vec![f16s(&a), f16s(&bt), vec![0; (M * N * 4) as usize]];
    interpret(&product(fault), [1, 1, 1], &mut bufs, &[], 32)?;
    Ok(to_f32s(&bufs[2]))
}

#[test]
fn the_swizzle_permutes_each_rows_lines() {
    for r in 0..16 {
        let mut at: Vec<u32> = (0..GROUP_K).map(|c| group_swizzle(r, c)).collect();
        // Lines of 8 stay whole and in order inside.
        for c in (0..GROUP_K).step_by(8) {
            let line = at[c as usize];
            assert_eq!(line % 8, 0);
            assert_eq!(
                at[c as usize..c as usize + 8],
                (line..line + 8).collect::<Vec<_>>()
            );
        }
        at.sort_unstable();
        assert_eq!(at, (r * GROUP_K..(r + 1) * GROUP_K).collect::<Vec<_>>());
    }
    // Column 0 of rows 0..8 falls in eight different lines of 16 bytes.
    let lines: Vec<u32> = (0..8).map(|r| group_swizzle(r, 0) % GROUP_K / 8).collect();
    assert_eq!(lines, [0, 1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn a_group_product_equals_the_plain_one() {
    let (a, bt) = inputs(M, N, K);
    let want: Vec<f32> = (0..(M * N) as usize)
        .map(|i| {
            let (r, n) = (i / N as usize, i % N as usize);
            (0..K as usize)
                .map(|j| a[r * K as usize + j] * bt[n * K as usize + j])
                .sum()
        })
        .collect();
    assert_eq!(run(Fault::None).unwrap(), want);
}

#[test]
fn group_rules_are_errors_on_the_interpreter() {
    assert!(matches!(
        run(Fault::StoreUnwaited),
        Err(InterpError::GroupPending { .. })
    ));
    assert!(matches!(
        run(Fault::WriteOperand),
        Err(InterpError::GroupOperandWritten { .. })
    ));
    assert!(matches!(
        run(Fault::Misaligned),
        Err(InterpError::GroupMisaligned { .. })
    ));
    assert!(matches!(
        run(Fault::Partial),
        Err(InterpError::GroupPartial { .. })
    ));
}

#[test]
fn group_shapes_and_operands_are_validated() {
    let limits = Limits {
        max_shared_bytes: 1 << 20,
        max_invocations: 1024,
    };
    let k = KernelBuilder::new("odd_width", [128, 1, 1]);
    k.require_subgroup_width(32);
    k.group_acc("acc", 12).zero();
    assert!(matches!(
        validate(&k.finish(), &limits),
        Err(ValidationError::GroupCols { cols: 12, .. })
    ));
    let k = KernelBuilder::new("not_whole", [192, 1, 1]);
    k.require_subgroup_width(32);
    k.group_acc("acc", 16).zero();
    assert!(matches!(
        validate(&k.finish(), &limits),
        Err(ValidationError::GroupShape {
            invocations: 192,
            ..
        })
    ));
    let k = KernelBuilder::new("f32_operand", [128, 1, 1]);
    k.require_subgroup_width(32);
    let s = k.shared("s", Scalar::F32, GROUP_ATOM * 2);
    k.group_acc("acc", 16).mma((s, k.u32(0)), (s, k.u32(0)));
    assert!(matches!(
        validate(&k.finish(), &limits),
        Err(ValidationError::GroupOperand { .. })
    ));
}

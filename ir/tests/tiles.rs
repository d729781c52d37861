//! Matrix tiles on the interpreter: a tiled product equals the plain one, and each rule of
//! [`trine_ir::TileOp`] that a GPU leaves undefined is an error.

mod common;

use common::{f16s, inputs, to_f32s};
use trine_ir::interp::{interpret, InterpError};
use trine_ir::{
    validate, Access, Kernel, KernelBuilder, Limits, Scalar, TileLayout, TileMemory, TileRole,
    ValidationError, TILE,
};

const M: u32 = 32;
const N: u32 = 16;
const K: u32 = 48;

/// `c = a·bᵀ` for `a` [M × K] and `bt` [N × K] (f16, row-major) into `c` [M × N] (f32): each
/// subgroup of 32 takes one block of 16 rows, `a` staged through shared memory, `bt` read as
/// a column-major B straight from its buffer.
fn tiled_product() -> Kernel {
    let k = KernelBuilder::new("tiled_product", [64, 1, 1]);
    k.require_subgroups();
    let a = k.buffer("a", Scalar::F16, Access::Read);
    let bt = k.buffer("bt", Scalar::F16, Access::Read);
    let c = k.buffer("c", Scalar::F32, Access::Write);
    let a_sh = k.shared("a_sh", Scalar::F16, M * K);
    let lid = k.local_index();
    k.for_range(lid, k.u32(M * K), 64, |i| {
        k.store_shared(a_sh, i, k.load(a, i))
    });
    k.barrier();
    let ta = k.tile("ta", TileRole::A);
    let tb = k.tile("tb", TileRole::B);
    let acc = k.tile("acc", TileRole::Acc);
    let rows = k.subgroup_id() * k.u32(TILE);
    acc.zero();
    k.for_range(k.u32(0), k.u32(K), TILE, |kk| {
        let stride = k.u32(K);
        ta.load(
            TileMemory::Shared(a_sh),
            rows * stride + kk,
            stride,
            TileLayout::RowMajor,
        );
        tb.load(TileMemory::Buffer(bt), kk, stride, TileLayout::ColMajor);
        acc.mma(ta, tb);
    });
    acc.store(
        TileMemory::Buffer(c),
        rows * k.u32(N),
        k.u32(N),
        TileLayout::RowMajor,
    );
    k.finish()
}

#[test]
fn a_tiled_product_equals_the_plain_one() {
    let (a, bt) = inputs(M, N, K);
    let mut want = vec![0f32; (M * N) as usize];
    for r in 0..M as usize {
        for n in 0..N as usize {
            want[r * N as usize + n] = (0..K as usize)
                .map(|i| a[r * K as usize + i] * bt[n * K as usize + i])
                .sum();
        }
    }
    let kernel = tiled_product();
    let mut bufs = vec![f16s(&a), f16s(&bt), vec![0; (M * N * 4) as usize]];
    interpret(&kernel, [1, 1, 1], &mut bufs, &[], 32).unwrap();
    let got = to_f32s(&bufs[2]);
    assert_eq!(got, want);
    // Subgroups of 64: one subgroup, which computes rows 0..16 only.
    let mut bufs = vec![f16s(&a), f16s(&bt), vec![0; (M * N * 4) as usize]];
    interpret(&kernel, [1, 1, 1], &mut bufs, &[], 64).unwrap();
    let got = to_f32s(&bufs[2]);
    assert_eq!(got[..(16 * N) as usize], want[..(16 * N) as usize]);
    assert!(got[(16 * N) as usize..].iter().all(|&v| v == 0.0));
}

/// One tile load by the invocations below `active`, at `offset`: the rules a tile op must
/// keep.
fn one_load(size: u32, active: u32, offset: u32) -> Kernel {
    let k = KernelBuilder::new("one_load", [size, 1, 1]);
    let a = k.buffer("a", Scalar::F16, Access::Read);
    let t = k.tile("t", TileRole::A);
    k.if_(k.local_index().lt(k.u32(active)), || {
        t.load(
            TileMemory::Buffer(a),
            k.u32(offset),
            k.u32(16),
            TileLayout::RowMajor,
        )
    });
    k.finish()
}

fn run(kernel: &Kernel, subgroup: u32) -> Result<(), InterpError> {
    let mut bufs = vec![vec![0; 2 * 16 * 24]];
    interpret(kernel, [1, 1, 1], &mut bufs, &[], subgroup)
}

#[test]
fn tile_rules_are_errors_on_the_interpreter() {
    assert!(run(&one_load(32, 32, 8), 32).is_ok());
    let e = run(&one_load(32, 8, 0), 32).unwrap_err();
    assert!(matches!(e, InterpError::TilePartialSubgroup { .. }), "{e}");
    // A subgroup wholly inactive is fine: lanes 0..32 of 64 in subgroups of 32.
    assert!(run(&one_load(64, 32, 0), 32).is_ok());
    let e = run(&one_load(48, 48, 0), 32).unwrap_err();
    assert!(matches!(e, InterpError::TileSubgroups { .. }), "{e}");
    let e = run(&one_load(32, 32, 4), 32).unwrap_err();
    assert!(
        matches!(e, InterpError::TileMisaligned { offset: 4, .. }),
        "{e}"
    );
    // 16 rows of 16 from offset 128 end at element 383 of 384; from 136 they do not fit.
    let e = run(&one_load(32, 32, 136), 32).unwrap_err();
    assert!(matches!(e, InterpError::OutOfBounds { .. }), "{e}");

    let k = KernelBuilder::new("nonuniform", [32, 1, 1]);
    let a = k.buffer("a", Scalar::F16, Access::Read);
    let t = k.tile("t", TileRole::A);
    let offset = k.local_index() / k.u32(16) * k.u32(8);
    t.load(
        TileMemory::Buffer(a),
        offset,
        k.u32(16),
        TileLayout::RowMajor,
    );
    let e = run(&k.finish(), 32).unwrap_err();
    assert!(
        matches!(e, InterpError::TileNotUniform { what: "offset", .. }),
        "{e}"
    );

    let k = KernelBuilder::new("unset", [32, 1, 1]);
    k.buffer("a", Scalar::F16, Access::Read);
    let acc = k.tile("acc", TileRole::Acc);
    let (ta, tb) = (k.tile("ta", TileRole::A), k.tile("tb", TileRole::B));
    ta.zero();
    tb.zero();
    acc.mma(ta, tb);
    let e = run(&k.finish(), 32).unwrap_err();
    assert!(
        matches!(e, InterpError::TileUnset { ref tile, .. } if tile == "acc"),
        "{e}"
    );
}

#[test]
fn tile_types_and_the_capability_are_validated() {
    let limits = Limits::default();
    let k = KernelBuilder::new("roles", [32, 1, 1]);
    let acc = k.tile("acc", TileRole::Acc);
    let ta = k.tile("ta", TileRole::A);
    acc.zero();
    ta.zero();
    acc.mma(ta, ta);
    let e = validate(&k.finish(), &limits).unwrap_err();
    assert!(
        matches!(
            e,
            ValidationError::TileRole {
                expected: TileRole::B,
                found: TileRole::A,
                ..
            }
        ),
        "{e}"
    );

    let k = KernelBuilder::new("elem", [32, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let ta = k.tile("ta", TileRole::A);
    ta.load(
        TileMemory::Buffer(x),
        k.u32(0),
        k.u32(16),
        TileLayout::RowMajor,
    );
    let e = validate(&k.finish(), &limits).unwrap_err();
    assert!(matches!(e, ValidationError::TileMemory { .. }), "{e}");

    let k = KernelBuilder::new("readonly", [32, 1, 1]);
    let y = k.buffer("y", Scalar::F32, Access::Read);
    let acc = k.tile("acc", TileRole::Acc);
    acc.zero();
    acc.store(
        TileMemory::Buffer(y),
        k.u32(0),
        k.u32(16),
        TileLayout::RowMajor,
    );
    let e = validate(&k.finish(), &limits).unwrap_err();
    assert!(matches!(e, ValidationError::BufferAccess { .. }), "{e}");

    let mut kernel = tiled_product();
    assert!(validate(&kernel, &limits).is_ok());
    kernel.capabilities.tiles = false;
    let e = validate(&kernel, &limits).unwrap_err();
    assert!(
        matches!(
            e,
            ValidationError::CapabilityNotDeclared {
                capability: "tiles",
                ..
            }
        ),
        "{e}"
    );
}

/// A kernel written for one subgroup width runs only at it.
#[test]
fn a_required_subgroup_width_is_kept() {
    let k = KernelBuilder::new("width", [64, 1, 1]);
    k.require_subgroup_width(32);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    k.store(out, k.local_index(), k.subgroup_id());
    let kernel = k.finish();
    let mut bufs = vec![vec![0; 64 * 4]];
    assert!(interpret(&kernel, [1, 1, 1], &mut bufs, &[], 32).is_ok());
    let e = interpret(&kernel, [1, 1, 1], &mut bufs, &[], 16).unwrap_err();
    assert!(
        matches!(
            e,
            InterpError::SubgroupWidth {
                required: 32,
                given: 16
            }
        ),
        "{e}"
    );
}

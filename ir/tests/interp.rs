//! The interpreter reports what a GPU would leave undefined, and computes what it should.

use trine_ir::interp::{interpret, InterpError};
use trine_ir::{Access, KernelBuilder, ParamValue, Scalar};

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn saxpy_computes_and_masks_the_tail() {
    let k = KernelBuilder::new("saxpy", [4, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::ReadWrite);
    let a = k.param("a", Scalar::F32);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || k.store(y, i, a.fma(k.load(x, i), k.load(y, i))));
    let kernel = k.finish();
    let mut bufs = vec![
        f32s(&[1.0, 2.0, 3.0, 4.0, 5.0]),
        f32s(&[10.0, 20.0, 30.0, 40.0, 50.0]),
    ];
    let params = [ParamValue::F32(2.0), ParamValue::U32(5)];
    interpret(&kernel, [2, 1, 1], &mut bufs, &params, 8).unwrap();
    assert_eq!(to_f32s(&bufs[1]), [12.0, 24.0, 36.0, 48.0, 60.0]);
}

#[test]
fn out_of_bounds_load_is_an_error() {
    let k = KernelBuilder::new("oob", [4, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::ReadWrite);
    let i = k.global_id(0);
    k.store(x, i, k.load(x, i) + k.f32(1.0));
    let kernel = k.finish();
    let mut bufs = vec![f32s(&[0.0; 3])];
    let err = interpret(&kernel, [1, 1, 1], &mut bufs, &[], 8).unwrap_err();
    match err {
        InterpError::OutOfBounds { index, len, at, .. } => {
            assert_eq!((index, len, at.invocation), (3, 3, 3));
        }
        e => panic!("expected OutOfBounds, got {e}"),
    }
}

#[test]
fn divergent_barrier_is_an_error() {
    let k = KernelBuilder::new("divergent", [8, 1, 1]);
    let lid = k.local_index();
    k.if_(lid.lt(k.u32(4)), || k.barrier());
    let err = interpret(&k.finish(), [1, 1, 1], &mut [], &[], 8).unwrap_err();
    assert!(matches!(err, InterpError::DivergentBarrier { .. }), "{err}");
}

/// A pair of halves goes to an even index, and is read, by any invocation, only after a
/// barrier: the pair is then the word's halves, low first.
#[test]
fn shared_pairs_need_an_even_index_and_a_barrier() {
    let build = |(offset, with_barrier): (u32, bool)| {
        let k = KernelBuilder::new("pairs", [4, 1, 1]);
        let out = k.buffer("out", Scalar::F16, Access::Write);
        let sh = k.shared("s", Scalar::F16, 10);
        let lid = k.local_index();
        // 1.0 in the low half, -2.0 in the high one.
        k.store_shared_pair(sh, lid * k.u32(2) + k.u32(offset), k.u32(0xc000_3c00));
        if with_barrier {
            k.barrier();
        }
        let at = lid * k.u32(2) + k.u32(offset);
        k.store(out, lid * k.u32(2), k.load_shared(sh, at));
        k.store(
            out,
            lid * k.u32(2) + k.u32(1),
            k.load_shared(sh, at + k.u32(1)),
        );
        k.finish()
    };
    let run = |shape| {
        let mut bufs = vec![vec![0u8; 16]];
        interpret(&build(shape), [1, 1, 1], &mut bufs, &[], 4).map(|_| bufs.remove(0))
    };
    let err = run((1, true)).unwrap_err();
    assert!(
        matches!(err, InterpError::PairOdd { index: 1, .. }),
        "{err}"
    );
    let err = run((0, false)).unwrap_err();
    assert!(matches!(err, InterpError::PairNoBarrier { .. }), "{err}");
    let out = run((2, true)).unwrap();
    let halves: Vec<f32> = out
        .chunks(2)
        .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
        .collect();
    assert_eq!(halves, [1.0, -2.0, 1.0, -2.0, 1.0, -2.0, 1.0, -2.0]);
}

#[test]
fn shared_read_without_barrier_is_a_race() {
    let build = |with_barrier: bool| {
        let k = KernelBuilder::new("race", [8, 1, 1]);
        let out = k.buffer("out", Scalar::U32, Access::Write);
        let sh = k.shared("s", Scalar::U32, 8);
        let lid = k.local_index();
        k.store_shared(sh, lid, lid);
        if with_barrier {
            k.barrier();
        }
        let other = (lid + k.u32(1)) % k.u32(8);
        k.store(out, lid, k.load_shared(sh, other));
        k.finish()
    };
    let mut bufs = vec![vec![0u8; 32]];
    let err = interpret(&build(false), [1, 1, 1], &mut bufs, &[], 8).unwrap_err();
    assert!(matches!(err, InterpError::SharedRace { .. }), "{err}");
    interpret(&build(true), [1, 1, 1], &mut bufs, &[], 8).unwrap();
    let got: Vec<u32> = bufs[0]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(got, [1, 2, 3, 4, 5, 6, 7, 0]);
}

/// An overlay shares its array's bytes: a u32 overlay over an f16 array, written after the
/// halves were read, reads back what it wrote once a barrier separates the phases; without
/// one, overwriting halves another invocation read is a race, and the halves the overlay
/// overwrote are no longer written.
#[test]
fn an_overlay_shares_its_arrays_bytes() {
    #[derive(Clone, Copy)]
    enum Shape {
        Phases,
        NoBarrier,
        ReadBack,
    }
    let build = |shape: Shape| {
        let k = KernelBuilder::new("overlay", [4, 1, 1]);
        let out = k.buffer("out", Scalar::U32, Access::Write);
        let halves = k.shared("halves", Scalar::F16, 8);
        let words = k.shared_over("words", Scalar::U32, 4, halves);
        let lid = k.local_index();
        k.store_shared(halves, lid * k.u32(2), k.f16(1.0));
        k.store_shared(halves, lid * k.u32(2) + k.u32(1), k.f16(2.0));
        k.barrier();
        // Each invocation reads the halves of the next one's word.
        let next = (lid + k.u32(1)) % k.u32(4);
        let sum = k.load_shared(halves, next * k.u32(2))
            + k.load_shared(halves, next * k.u32(2) + k.u32(1));
        if !matches!(shape, Shape::NoBarrier) {
            k.barrier();
        }
        k.store_shared(words, lid, lid + k.u32(7));
        k.barrier();
        let read = match shape {
            Shape::ReadBack => k.load_shared(halves, lid * k.u32(2)).cast(Scalar::U32),
            _ => k.load_shared(words, next),
        };
        k.store(out, lid, read + sum.cast(Scalar::U32));
        k.finish()
    };
    let run = |shape| {
        let mut bufs = vec![vec![0u8; 16]];
        interpret(&build(shape), [1, 1, 1], &mut bufs, &[], 4).map(|_| bufs.remove(0))
    };
    let out = run(Shape::Phases).unwrap();
    let got: Vec<u32> = out
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(got, [11, 12, 13, 10]);
    let err = run(Shape::NoBarrier).unwrap_err();
    assert!(
        matches!(err, InterpError::OverlayRace { reader: 3, .. }),
        "{err}"
    );
    let err = run(Shape::ReadBack).unwrap_err();
    assert!(matches!(err, InterpError::UninitShared { .. }), "{err}");
}

#[test]
fn uninitialised_shared_read_is_an_error() {
    let k = KernelBuilder::new("uninit", [2, 1, 1]);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    let sh = k.shared("s", Scalar::F32, 2);
    let lid = k.local_index();
    k.store(out, lid, k.load_shared(sh, lid));
    let err = interpret(&k.finish(), [1, 1, 1], &mut [vec![0; 8]], &[], 8).unwrap_err();
    assert!(matches!(err, InterpError::UninitShared { .. }), "{err}");
}

#[test]
fn integer_division_by_zero_and_bad_float_to_int_are_errors() {
    let k = KernelBuilder::new("divz", [1, 1, 1]);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let d = k.param("d", Scalar::U32);
    k.store(out, k.u32(0), k.u32(7) / d);
    let kernel = k.finish();
    let err = interpret(
        &kernel,
        [1, 1, 1],
        &mut [vec![0; 4]],
        &[ParamValue::U32(0)],
        8,
    )
    .unwrap_err();
    assert!(matches!(err, InterpError::DivideByZero { .. }), "{err}");

    let k = KernelBuilder::new("f2i", [1, 1, 1]);
    let out = k.buffer("out", Scalar::I32, Access::Write);
    let v = k.param("v", Scalar::F32);
    k.store(out, k.u32(0), v.cast(Scalar::I32));
    let kernel = k.finish();
    let mut bufs = vec![vec![0; 4]];
    interpret(&kernel, [1, 1, 1], &mut bufs, &[ParamValue::F32(-2.75)], 8).unwrap();
    assert_eq!(i32::from_le_bytes(bufs[0][..4].try_into().unwrap()), -2);
    let err = interpret(&kernel, [1, 1, 1], &mut bufs, &[ParamValue::F32(3e9)], 8).unwrap_err();
    assert!(matches!(err, InterpError::FloatToInt { .. }), "{err}");
}

#[test]
fn subgroup_sum_is_per_subgroup_and_shuffle_checks_lanes() {
    let k = KernelBuilder::new("sg", [8, 1, 1]);
    k.require_subgroups();
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let lid = k.local_index();
    k.store(out, lid, lid.subgroup_sum());
    let kernel = k.finish();
    let mut bufs = vec![vec![0u8; 32]];
    interpret(&kernel, [1, 1, 1], &mut bufs, &[], 4).unwrap();
    let got: Vec<u32> = bufs[0]
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(got, [6, 6, 6, 6, 22, 22, 22, 22]);

    let k = KernelBuilder::new("shuf", [8, 1, 1]);
    k.require_subgroups();
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let lid = k.local_index();
    k.if_(lid.lt(k.u32(6)), || {
        k.store(out, lid, lid.shuffle_xor(k.u32(2)))
    });
    let err = interpret(&k.finish(), [1, 1, 1], &mut bufs, &[], 8).unwrap_err();
    assert!(
        matches!(err, InterpError::InactiveLane { lane: 6, .. }),
        "{err}"
    );
}

#[test]
fn wrong_params_are_rejected_before_running() {
    let k = KernelBuilder::new("p", [1, 1, 1]);
    let _ = k.param("n", Scalar::U32);
    let err = interpret(&k.finish(), [1, 1, 1], &mut [], &[ParamValue::F32(1.0)], 8).unwrap_err();
    assert!(matches!(err, InterpError::Params { .. }), "{err}");
}

#[test]
fn prefetch_changes_nothing_but_checks_its_index() {
    let k = KernelBuilder::new("pf", [4, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::ReadWrite);
    let i = k.global_id(0);
    k.prefetch(x, i);
    k.store(x, i, k.load(x, i) + k.f32(1.0));
    let kernel = k.finish();
    let mut bufs = vec![f32s(&[1.0, 2.0, 3.0, 4.0])];
    interpret(&kernel, [1, 1, 1], &mut bufs, &[], 8).unwrap();
    assert_eq!(to_f32s(&bufs[0]), [2.0, 3.0, 4.0, 5.0]);

    let k = KernelBuilder::new("pf_oob", [4, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    k.prefetch(x, k.global_id(0) + k.u32(1));
    let mut bufs = vec![f32s(&[1.0, 2.0, 3.0, 4.0])];
    let err = interpret(&k.finish(), [1, 1, 1], &mut bufs, &[], 8).unwrap_err();
    assert!(
        matches!(&err, InterpError::OutOfBounds { what, index: 4, len: 4, .. } if what.contains("prefetch")),
        "{err}"
    );
}

/// A kernel of 4 invocations each copying one line of 4 u32 words to shared memory from word
/// `skew` on, waiting (or not) before a barrier, then reading its neighbour's first word.
fn copy_kernel(skew: u32, wait: bool) -> trine_ir::Kernel {
    let k = KernelBuilder::new("copy", [4, 1, 1]);
    let src = k.buffer("src", Scalar::U32, Access::Read);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let sh = k.shared("s", Scalar::U32, 16);
    let lid = k.local_index();
    k.copy_async(src, lid * k.u32(4) + k.u32(skew), sh, lid * k.u32(4));
    k.copy_commit();
    if wait {
        k.copy_wait(0);
    }
    k.barrier();
    let other = (lid + k.u32(1)) % k.u32(4);
    k.store(out, lid, k.load_shared(sh, other * k.u32(4)));
    k.finish()
}

#[test]
fn copies_land_at_their_wait_and_not_before() {
    let words: Vec<u8> = (0u32..20).flat_map(|w| (w * 10).to_le_bytes()).collect();
    let mut bufs = vec![words.clone(), vec![0u8; 16]];
    interpret(&copy_kernel(0, true), [1, 1, 1], &mut bufs, &[], 4).unwrap();
    let got: Vec<u32> = bufs[1]
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, vec![40, 80, 120, 0]);

    // Without the wait, the line is still in flight when the neighbour reads it.
    let mut bufs = vec![words.clone(), vec![0u8; 16]];
    let err = interpret(&copy_kernel(0, false), [1, 1, 1], &mut bufs, &[], 4).unwrap_err();
    assert!(matches!(err, InterpError::CopyInFlight { .. }), "{err}");

    // A line must start on 16 bytes of the buffer.
    let mut bufs = vec![words, vec![0u8; 16]];
    let err = interpret(&copy_kernel(1, true), [1, 1, 1], &mut bufs, &[], 4).unwrap_err();
    assert!(matches!(err, InterpError::CopyMisaligned { .. }), "{err}");
}

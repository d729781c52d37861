//! The tests every GPU backend must pass, written once against the `Backend` trait: buffers,
//! ordering, grid folding, subgroups, f16 and u8 storage, shared memory, timing and the errors
//! of bad dispatches and kernels. Each backend's test file runs them on its own device.

use trine_backends::{
    Backend, BackendError, Binding, BufferHandle, Dispatch, ProgramId, Recording,
};
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

/// Declares one `#[test]` per shared test. Each opens its backend with `$open` (an `Option`:
/// `None` skips, having printed why), runs the test on it, and hands it to `$done`. The
/// tests of an optional capability take whether `TRINE_REQUIRE_BACKENDS` names the backend.
macro_rules! shared_tests {
    ($open:path, $done:path) => {
        $crate::gpu_suite::shared_tests!(@each $open, $done; buffers_round_trip, saxpy_matches_the_host_with_offset_bindings, many_dispatches_are_ordered_across_batches, wide_grids_are_folded, u8_buffers_with_unaligned_sizes, shared_memory_reduction, dispatch_timed_is_positive, copy_timed_copies, bad_dispatches_are_rejected, invalid_kernels_are_rejected, recordings_replay_with_a_step_buffer, long_recordings_stay_ordered);
        $crate::gpu_suite::shared_tests!(@required $open, $done; subgroup_sum, f16_buffers, declared_subgroup_widths_hold);
    };
    (@each $open:path, $done:path; $($name:ident),*) => {$(
        #[test]
        fn $name() {
            let Some(b) = $open() else { return };
            $crate::gpu_suite::$name(&b);
            $done(b);
        }
    )*};
    (@required $open:path, $done:path; $($name:ident),*) => {$(
        #[test]
        fn $name() {
            let Some(b) = $open() else { return };
            let required = $crate::gpu_suite::required(trine_backends::Backend::name(&b));
            $crate::gpu_suite::$name(&b, required);
            $done(b);
        }
    )*};
}
pub(crate) use shared_tests;

/// Whether `TRINE_REQUIRE_BACKENDS` names `backend`.
pub fn required(backend: &str) -> bool {
    std::env::var("TRINE_REQUIRE_BACKENDS").is_ok_and(|v| v.split(',').any(|b| b.trim() == backend))
}

/// For a device that reports no `capability`: a required backend fails (CI's lavapipe and
/// every GPU trine has run on have subgroups and f16, so losing one is a regression to see,
/// not a skip); otherwise the kernel that needs it must be refused as unsupported, the error
/// placement and conformance rely on to take a fallback, and the rest of the test is skipped
/// with the reason printed.
fn check_refused(b: &dyn Backend, required: bool, capability: &str, kernel: &Kernel) {
    assert!(
        !required,
        "{} is required, but its device {} reports no {capability}",
        b.name(),
        b.info().name
    );
    match b.compile(kernel) {
        Err(BackendError::Unsupported { .. }) => {}
        other => panic!(
            "{} reports no {capability}, but compiling {} gave {other:?}, not Unsupported",
            b.info().name,
            kernel.name
        ),
    }
    println!(
        "{}: no {capability} on {}: the kernel is refused as unsupported; not run",
        kernel.name,
        b.info().name
    );
}

pub fn upload<T: Copy>(b: &dyn Backend, data: &[T]) -> BufferHandle {
    let bytes = as_bytes(data);
    let h = b.alloc(bytes.len() as u64).unwrap();
    b.write(h, 0, bytes).unwrap();
    h
}

pub fn as_bytes<T: Copy>(data: &[T]) -> &[u8] {
    // SAFETY: the tests only pass plain numbers (f32, u32, u16, u8), which have no padding.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast(), std::mem::size_of_val(data)) }
}

pub fn download<T: Copy + Default>(b: &dyn Backend, h: BufferHandle, len: usize) -> Vec<T> {
    let mut out = vec![T::default(); len];
    // SAFETY: as in `as_bytes`; every bit pattern is a valid value of these types.
    let bytes = unsafe {
        std::slice::from_raw_parts_mut(
            out.as_mut_ptr().cast::<u8>(),
            std::mem::size_of_val(out.as_slice()),
        )
    };
    b.read(h, 0, bytes).unwrap();
    out
}

pub fn whole(h: BufferHandle, bytes: usize) -> Binding {
    Binding {
        buffer: h,
        offset: 0,
        size: bytes as u64,
    }
}

pub fn run(
    b: &dyn Backend,
    program: ProgramId,
    grid: [u32; 3],
    bindings: &[Binding],
    params: &[ParamValue],
) {
    b.dispatch(&Dispatch {
        program,
        grid,
        bindings,
        params,
    })
    .unwrap();
}

pub fn saxpy() -> Kernel {
    let k = KernelBuilder::new("saxpy", [64, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::ReadWrite);
    let a = k.param("a", Scalar::F32);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        k.store(y, i, a.fma(k.load(x, i), k.load(y, i)));
    });
    k.finish()
}

pub fn buffers_round_trip(b: &dyn Backend) {
    let data: Vec<u8> = (0..1001u32).map(|i| (i * 7 % 251) as u8).collect();
    let h = upload(b, &data);
    assert_eq!(download::<u8>(b, h, data.len()), data);

    b.write(h, 3, &[9, 8, 7, 6, 5]).unwrap();
    let mut part = [0u8; 7];
    b.read(h, 2, &mut part).unwrap();
    assert_eq!(part, [data[2], 9, 8, 7, 6, 5, data[8]]);
    let mut last = [0u8; 1];
    b.read(h, 1000, &mut last).unwrap();
    assert_eq!(last[0], data[1000]);

    assert!(matches!(
        b.write(h, 1000, &[1, 2]),
        Err(BackendError::OutOfRange { .. })
    ));
    assert!(matches!(
        b.read(h, u64::MAX, &mut [0u8; 2]),
        Err(BackendError::OutOfRange { .. })
    ));
    b.read(h, 1001, &mut []).unwrap();

    let empty = b.alloc(0).unwrap();
    b.read(empty, 0, &mut []).unwrap();
    b.free(empty);

    // Larger than one staging buffer, to cover the piecewise path where there is one.
    let big: Vec<u32> = (0..(40u32 << 20) / 4)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let hb = upload(b, &big);
    assert!(download::<u32>(b, hb, big.len()) == big);
    let mut tail = [0u8; 8];
    b.read(hb, (big.len() as u64 - 2) * 4, &mut tail).unwrap();
    assert_eq!(tail, as_bytes(&big[big.len() - 2..]));

    b.free(h);
    b.free(h);
    assert!(matches!(
        b.read(h, 0, &mut [0u8; 1]),
        Err(BackendError::UnknownBuffer(_))
    ));
    assert!(matches!(
        b.write(h, 0, &[1]),
        Err(BackendError::UnknownBuffer(_))
    ));
    // The error carries the bytes asked for, and the device's free memory where the backend
    // can report it (CUDA, HIP, Vulkan with VK_EXT_memory_budget; not wgpu), no more than its
    // size.
    match b.alloc(u64::MAX) {
        Err(BackendError::OutOfMemory {
            bytes: u64::MAX,
            free,
        }) => {
            assert_eq!(free.is_some(), b.free_memory().is_some(), "{free:?}");
            assert!(
                free.is_none_or(|f| f <= b.info().memory.device_local),
                "free {free:?} of {}",
                b.info().memory.device_local
            );
        }
        other => panic!("alloc(u64::MAX) gave {other:?}"),
    }
    b.free(hb);
}

pub fn saxpy_matches_the_host_with_offset_bindings(b: &dyn Backend) {
    let n = 1000usize;
    // `x` starts one binding alignment into its buffer, to exercise binding offsets.
    let pad = b.info().min_binding_alignment as usize / 4;
    let x: Vec<f32> = (0..pad + n)
        .map(|i| (i as f32 - pad as f32) * 0.5)
        .collect();
    let y: Vec<f32> = (0..n).map(|i| 2.0 - i as f32).collect();
    let a = 1.5f32;
    let hx = upload(b, &x);
    let hy = upload(b, &y);
    let program = b.compile(&saxpy()).unwrap();
    assert_eq!(
        b.compile(&saxpy()).unwrap(),
        program,
        "compiling again returns the cached program"
    );
    let bindings = [
        Binding {
            buffer: hx,
            offset: (pad * 4) as u64,
            size: (n * 4) as u64,
        },
        whole(hy, n * 4),
    ];
    let grid = [(n as u32).div_ceil(64), 1, 1];
    run(
        b,
        program,
        grid,
        &bindings,
        &[ParamValue::F32(a), ParamValue::U32(n as u32)],
    );
    let got: Vec<f32> = download(b, hy, n);
    for i in 0..n {
        let want = a * x[pad + i] + y[i];
        assert!(
            (got[i] - want).abs() <= 1e-5 * want.abs().max(1.0),
            "y[{i}] = {} want {want}",
            got[i]
        );
    }
}

/// `y[i] += 1`: dispatches that each depend on the one before.
fn add_one() -> Kernel {
    let k = KernelBuilder::new("add_one", [64, 1, 1]);
    let y = k.buffer("y", Scalar::U32, Access::ReadWrite);
    let i = k.global_id(0);
    k.store(y, i, k.load(y, i) + k.u32(1));
    k.finish()
}

pub fn many_dispatches_are_ordered_across_batches(b: &dyn Backend) {
    let program = b.compile(&add_one()).unwrap();
    let h = upload(b, &[0u32; 256]);
    // More than one batch (256 dispatches) and one descriptor pool.
    for _ in 0..600 {
        run(b, program, [4, 1, 1], &[whole(h, 1024)], &[]);
    }
    assert_eq!(download::<u32>(b, h, 256), vec![600u32; 256]);
}

pub fn wide_grids_are_folded(b: &dyn Backend) {
    let n = 65535 * 64 + 1000;
    let k = KernelBuilder::new("iota", [64, 1, 1]);
    let out = k.buffer("out", Scalar::U32, Access::Write);
    let len = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(len), || k.store(out, i, i));
    let program = b.compile(&k.finish()).unwrap();
    let h = b.alloc(n as u64 * 4).unwrap();
    // 65551 workgroups: folded on devices that allow 65535 per dimension (lavapipe, AMD).
    let groups = (n as u32).div_ceil(64);
    run(
        b,
        program,
        [groups, 1, 1],
        &[whole(h, n * 4)],
        &[ParamValue::U32(n as u32)],
    );
    let got: Vec<u32> = download(b, h, n);
    if let Some(bad) = (0..n).find(|&i| got[i] != i as u32) {
        panic!("out[{bad}] = {} (want {bad})", got[bad]);
    }
}

/// A kernel whose invocations each store the sum of `x` over their subgroup and the
/// subgroup's width; `width`, a width it declares.
fn subgroup_sum_kernel(name: &str, invocations: u32, width: Option<u32>) -> Kernel {
    let k = KernelBuilder::new(name, [invocations, 1, 1]);
    k.require_subgroups();
    if let Some(w) = width {
        k.require_subgroup_width(w);
    }
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let sums = k.buffer("sums", Scalar::F32, Access::Write);
    let sizes = k.buffer("sizes", Scalar::U32, Access::Write);
    let i = k.global_id(0);
    k.store(sums, i, k.load(x, i).subgroup_sum());
    k.store(sizes, i, k.subgroup_size());
    k.finish()
}

/// Runs a [`subgroup_sum_kernel`] of `invocations` on four workgroups, checks every lane's
/// sum against its subgroup's lanes of x, and returns the widths the lanes saw.
fn check_subgroup_sums(b: &dyn Backend, program: ProgramId, invocations: u32) -> Vec<u32> {
    let n = 4 * invocations as usize;
    let x: Vec<f32> = (0..n).map(|i| (i % 13) as f32).collect();
    let hx = upload(b, &x);
    let hs = b.alloc(n as u64 * 4).unwrap();
    let hz = b.alloc(n as u64 * 4).unwrap();
    run(
        b,
        program,
        [4, 1, 1],
        &[whole(hx, n * 4), whole(hs, n * 4), whole(hz, n * 4)],
        &[],
    );
    let got: Vec<f32> = download(b, hs, n);
    let sizes: Vec<u32> = download(b, hz, n);
    let size = sizes[0] as usize;
    assert!(size.is_power_of_two() && size <= 64, "subgroup size {size}");
    for (i, &got) in got.iter().enumerate() {
        let first = i / size * size;
        let want: f32 = x[first..first + size].iter().sum();
        assert_eq!(got, want, "lane {i} (subgroup size {size})");
    }
    sizes
}

pub fn subgroup_sum(b: &dyn Backend, required: bool) {
    let k = subgroup_sum_kernel("subgroup_sum", 64, None);
    if !b.info().subgroup_ops {
        return check_refused(b, required, "subgroup operations", &k);
    }
    let program = b.compile(&k).unwrap();
    check_subgroup_sums(b, program, 64);
}

/// A kernel that declares a subgroup width runs with exactly that width, for every width the
/// device says it runs (its one width, or each width of its range where the backend pins the
/// declared one: Vulkan's required subgroup size). Subgroup sums over its lanes must match.
/// A device without subgroup operations must refuse such a kernel, and fails where
/// `TRINE_REQUIRE_BACKENDS` names its backend ([`check_refused`]).
pub fn declared_subgroup_widths_hold(b: &dyn Backend, required: bool) {
    let info = b.info();
    if !info.subgroup_ops {
        let k = subgroup_sum_kernel("subgroup_sum_w32", 64, Some(32));
        check_refused(b, required, "subgroup operations", &k);
        return;
    }
    let widths: Vec<u32> = (0..8)
        .map(|p| 1u32 << p)
        .filter(|&w| info.runs_subgroup_width(w))
        .collect();
    assert!(
        !widths.is_empty(),
        "no width runs on {:?}",
        info.subgroup_sizes
    );
    for w in widths {
        let invocations = w.max(64);
        let k = subgroup_sum_kernel(&format!("subgroup_sum_w{w}"), invocations, Some(w));
        let program = b.compile(&k).unwrap();
        let sizes = check_subgroup_sums(b, program, invocations);
        assert!(sizes.iter().all(|&s| s == w), "width {w}: sizes {sizes:?}");
        println!("subgroups of {w} on {}", info.name);
    }
}

pub fn f16_buffers(b: &dyn Backend, required: bool) {
    let k = KernelBuilder::new("f16_scale", [64, 1, 1]);
    let x = k.buffer("x", Scalar::F16, Access::Read);
    let y = k.buffer("y", Scalar::F16, Access::Write);
    let i = k.global_id(0);
    k.store(y, i, k.load(x, i) * k.f16(2.0) + k.f16(0.5));
    let k = k.finish();
    if !b.info().f16 {
        return check_refused(b, required, "f16", &k);
    }
    let program = b.compile(&k).unwrap();
    let n = 128;
    let x: Vec<u16> = (0..n)
        .map(|i| half::f16::from_f32(i as f32 * 0.25 - 8.0).to_bits())
        .collect();
    let hx = upload(b, &x);
    let hy = b.alloc(n as u64 * 2).unwrap();
    run(
        b,
        program,
        [2, 1, 1],
        &[whole(hx, n * 2), whole(hy, n * 2)],
        &[],
    );
    let got: Vec<u16> = download(b, hy, n);
    for (i, &got) in got.iter().enumerate() {
        let want = (i as f32 * 0.25 - 8.0) * 2.0 + 0.5;
        assert_eq!(half::f16::from_bits(got).to_f32(), want, "y[{i}]");
    }
}

pub fn u8_buffers_with_unaligned_sizes(b: &dyn Backend) {
    let k = KernelBuilder::new("widen_u8", [64, 1, 1]);
    let x = k.buffer("x", Scalar::U8, Access::Read);
    let y = k.buffer("y", Scalar::U32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || k.store(y, i, k.load(x, i)));
    let program = b.compile(&k.finish()).unwrap();
    let x: Vec<u8> = (0..10).map(|i| 250 - i).collect();
    let hx = upload(b, &x);
    let hy = b.alloc(40).unwrap();
    run(
        b,
        program,
        [1, 1, 1],
        &[whole(hx, 10), whole(hy, 40)],
        &[ParamValue::U32(10)],
    );
    let want: Vec<u32> = x.iter().map(|&v| v.into()).collect();
    assert_eq!(download::<u32>(b, hy, 10), want);
}

pub fn shared_memory_reduction(b: &dyn Backend) {
    let k = KernelBuilder::new("block_sum", [64, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    let s = k.shared("s", Scalar::F32, 64);
    let lid = k.local_id(0);
    k.store_shared(s, lid, k.load(x, k.global_id(0)));
    k.barrier();
    for stride in [32, 16, 8, 4, 2, 1] {
        let stride = k.u32(stride);
        k.if_(lid.lt(stride), || {
            k.store_shared(
                s,
                lid,
                k.load_shared(s, lid) + k.load_shared(s, lid + stride),
            );
        });
        k.barrier();
    }
    k.if_(lid.eq(k.u32(0)), || {
        k.store(out, k.workgroup_id(0), k.load_shared(s, lid))
    });
    let program = b.compile(&k.finish()).unwrap();
    let groups = 37;
    let x: Vec<f32> = (0..groups * 64).map(|i| (i % 7) as f32).collect();
    let hx = upload(b, &x);
    let ho = b.alloc(groups as u64 * 4).unwrap();
    run(
        b,
        program,
        [groups as u32, 1, 1],
        &[whole(hx, x.len() * 4), whole(ho, groups * 4)],
        &[],
    );
    let want: Vec<f32> = x.chunks(64).map(|c| c.iter().sum()).collect();
    assert_eq!(download::<f32>(b, ho, groups), want);
}

pub fn dispatch_timed_is_positive(b: &dyn Backend) {
    let n = 1 << 16;
    let program = b.compile(&saxpy()).unwrap();
    let hx = upload(b, &vec![1.0f32; n]);
    let hy = upload(b, &vec![2.0f32; n]);
    let d = Dispatch {
        program,
        grid: [(n / 64) as u32, 1, 1],
        bindings: &[whole(hx, n * 4), whole(hy, n * 4)],
        params: &[ParamValue::F32(3.0), ParamValue::U32(n as u32)],
    };
    let t = b.dispatch_timed(&d).unwrap();
    eprintln!(
        "saxpy of {n}: {t:?} ({})",
        if b.info().timestamps {
            "device"
        } else {
            "host"
        }
    );
    assert!(!t.is_zero());
    assert_eq!(download::<f32>(b, hy, 4), [5.0; 4]);
}

/// The runtime's own copy, where the backend has one: exactly the bytes asked for, a positive
/// time, and a range past either buffer refused.
pub fn copy_timed_copies(b: &dyn Backend) {
    let n = 1 << 18;
    let src: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let hs = upload(b, &src);
    let hd = upload(b, &vec![7u32; n]);
    let bytes = 4 * (n as u64 - 1);
    let t = match b.copy_timed(hs, hd, bytes) {
        Ok(t) => t,
        Err(BackendError::Unsupported { what, .. }) => {
            eprintln!("skipping: {}: {what}", b.name());
            return;
        }
        Err(e) => panic!("copy_timed: {e}"),
    };
    eprintln!("copy of {bytes} bytes: {t:?}");
    assert!(!t.is_zero());
    let got = download::<u32>(b, hd, n);
    assert!(got[..n - 1] == src[..n - 1], "the copied words differ");
    assert_eq!(got[n - 1], 7, "the copy wrote past the bytes asked for");
    assert!(matches!(
        b.copy_timed(hs, hd, 4 * n as u64 + 4),
        Err(BackendError::OutOfRange { .. })
    ));
}

pub fn bad_dispatches_are_rejected(b: &dyn Backend) {
    let program = b.compile(&saxpy()).unwrap();
    let hx = b.alloc(256).unwrap();
    let hy = b.alloc(256).unwrap();
    let bindings = [whole(hx, 256), whole(hy, 256)];
    let params = [ParamValue::F32(1.0), ParamValue::U32(64)];
    let try_dispatch = |grid: [u32; 3], bindings: &[Binding], params: &[ParamValue]| {
        b.dispatch(&Dispatch {
            program,
            grid,
            bindings,
            params,
        })
    };
    let bad = |r: Result<(), BackendError>| match r {
        Err(BackendError::BadDispatch(msg)) => eprintln!("rejected: {msg}"),
        r => panic!("expected BadDispatch, got {r:?}"),
    };
    bad(try_dispatch([1, 1, 1], &bindings, &params[..1]));
    bad(try_dispatch(
        [1, 1, 1],
        &bindings,
        &[ParamValue::U32(1), ParamValue::U32(64)],
    ));
    bad(try_dispatch([1, 1, 1], &bindings[..1], &params));
    bad(try_dispatch([u32::MAX, u32::MAX, 1], &bindings, &params));
    let misaligned = [
        Binding {
            buffer: hx,
            offset: 2,
            size: 128,
        },
        bindings[1],
    ];
    bad(try_dispatch([1, 1, 1], &misaligned, &params));
    let outside = [
        Binding {
            buffer: hx,
            offset: 0,
            size: 260,
        },
        bindings[1],
    ];
    assert!(matches!(
        try_dispatch([1, 1, 1], &outside, &params),
        Err(BackendError::OutOfRange { .. })
    ));
    let unknown = [
        Binding {
            buffer: BufferHandle(u64::MAX),
            offset: 0,
            size: 4,
        },
        bindings[1],
    ];
    assert!(matches!(
        try_dispatch([1, 1, 1], &unknown, &params),
        Err(BackendError::UnknownBuffer(_))
    ));
    let missing = Dispatch {
        program: ProgramId(0),
        grid: [1, 1, 1],
        bindings: &bindings,
        params: &params,
    };
    assert!(matches!(
        b.dispatch(&missing),
        Err(BackendError::UnknownProgram(_))
    ));
    // The good dispatch still works after all that.
    try_dispatch([1, 1, 1], &bindings, &params).unwrap();
}

pub fn invalid_kernels_are_rejected(b: &dyn Backend) {
    let k = KernelBuilder::new("too_wide", [2048, 1, 1]);
    let y = k.buffer("y", Scalar::U32, Access::Write);
    k.store(y, k.global_id(0), k.u32(1));
    assert!(matches!(
        b.compile(&k.finish()),
        Err(BackendError::Invalid { .. })
    ));
}

/// `y[i] = x[i] + a · step[0]`: a kernel whose per-replay input lives in a buffer.
fn add_step() -> Kernel {
    let k = KernelBuilder::new("add_step", [64, 1, 1]);
    let step = k.buffer("step", Scalar::U32, Access::Read);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let a = k.param("a", Scalar::F32);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let s = k.load(step, k.u32(0)).cast(Scalar::F32);
        k.store(y, i, a.fma(s, k.load(x, i)));
    });
    k.finish()
}

/// A recording of three dispatches (the second reads what the first wrote, the third is
/// independent of the second) replayed with a new step value each time gives what direct
/// dispatches give; replaying after freeing a buffer it binds is a typed error.
pub fn recordings_replay_with_a_step_buffer(b: &dyn Backend) {
    let n = 300usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 7.0).collect();
    let hs = upload(b, &[0u32]);
    let hx = upload(b, &x);
    let (hy, hz, hw) = (upload(b, &x), upload(b, &x), upload(b, &x));
    let p = b.compile(&add_step()).unwrap();
    let grid = [(n as u32).div_ceil(64), 1, 1];
    let bind = |h| whole(h, n * 4);
    let step = whole(hs, 4);
    let (b1, b2, b3) = (
        [step, bind(hx), bind(hy)],
        [step, bind(hy), bind(hz)],
        [step, bind(hx), bind(hw)],
    );
    let params = [ParamValue::F32(1.0), ParamValue::U32(n as u32)];
    let halves = [ParamValue::F32(0.5), ParamValue::U32(n as u32)];
    let list = [
        Dispatch {
            program: p,
            grid,
            bindings: &b1,
            params: &params,
        },
        Dispatch {
            program: p,
            grid,
            bindings: &b2,
            params: &params,
        },
        Dispatch {
            program: p,
            grid,
            bindings: &b3,
            params: &halves,
        },
    ];
    let r: Recording = b.record(&list).unwrap();
    assert_eq!(r.len(), 3);
    // Vulkan orders only the dependent dispatch: the first barrier, then one before the second.
    assert!(r.barriers <= 2, "{} barriers", r.barriers);
    for s in [3u32, 0, 11] {
        b.write(hs, 0, as_bytes(&[s])).unwrap();
        b.replay(&r).unwrap();
        let (z, w): (Vec<f32>, Vec<f32>) = (download(b, hz, n), download(b, hw, n));
        for i in 0..n {
            assert_eq!(z[i], x[i] + 2.0 * s as f32, "z[{i}] at step {s}");
            assert_eq!(w[i], x[i] + 0.5 * s as f32, "w[{i}] at step {s}");
        }
    }
    b.free(hw);
    assert!(matches!(
        b.replay(&r),
        Err(BackendError::StaleRecording { buffer }) if buffer == hw
    ));
    b.release(r);
    for h in [hs, hx, hy, hz] {
        b.free(h);
    }
}

/// 600 dependent dispatches in one recording (more than a batch or a descriptor pool of the
/// direct path), replayed twice.
pub fn long_recordings_stay_ordered(b: &dyn Backend) {
    let program = b.compile(&add_one()).unwrap();
    let h = upload(b, &[0u32; 256]);
    let bindings = [whole(h, 1024)];
    let d = Dispatch {
        program,
        grid: [4, 1, 1],
        bindings: &bindings,
        params: &[],
    };
    let r = b.record(&vec![d; 600]).unwrap();
    b.replay(&r).unwrap();
    b.replay(&r).unwrap();
    run(b, program, [4, 1, 1], &bindings, &[]);
    assert_eq!(download::<u32>(b, h, 256), vec![1201u32; 256]);
    b.release(r);
    b.free(h);
}

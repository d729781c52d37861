//! The CUDA backend on the first NVIDIA GPU (or `TRINE_CUDA_DEVICE`).
//!
//! Skipped with a printed reason when CUDA is unavailable (no driver, no device, no NVRTC),
//! unless `TRINE_REQUIRE_BACKENDS` names `cuda`; then a missing cuBLAS fails its tests too.

mod gpu_suite;

use trine_backends::cuda::cublas::{self, Cublas, Gemm, GemmType, MathMode};
use trine_backends::cuda::CudaBackend;
use trine_backends::{
    Backend, BackendError, Binding, BufferHandle, DeviceType, Dispatch, ProgramId,
};
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

fn required() -> bool {
    std::env::var("TRINE_REQUIRE_BACKENDS").is_ok_and(|v| v.split(',').any(|b| b.trim() == "cuda"))
}

/// The backend, or `None` (with the reason printed) when CUDA is absent and not required.
fn backend() -> Option<CudaBackend> {
    match CudaBackend::new() {
        Ok(b) => Some(b),
        Err(BackendError::Unavailable(why)) if !required() => {
            eprintln!("skipping: cuda unavailable: {why}");
            None
        }
        Err(e) => panic!("cuda backend failed to open: {e}"),
    }
}

/// Waits for all work: a test that queued a fault fails here, not in the next test.
fn done(b: CudaBackend) {
    b.synchronize().unwrap();
}

gpu_suite::shared_tests!(backend, done);

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn u32_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn upload(b: &CudaBackend, bytes: &[u8]) -> BufferHandle {
    let h = b.alloc(bytes.len() as u64).unwrap();
    b.write(h, 0, bytes).unwrap();
    h
}

fn download(b: &CudaBackend, h: BufferHandle, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    b.read(h, 0, &mut out).unwrap();
    out
}

fn whole(h: BufferHandle, bytes: usize) -> Binding {
    Binding {
        buffer: h,
        offset: 0,
        size: bytes as u64,
    }
}

fn dispatch<'a>(
    program: ProgramId,
    grid: [u32; 3],
    bindings: &'a [Binding],
    params: &'a [ParamValue],
) -> Dispatch<'a> {
    Dispatch {
        program,
        grid,
        bindings,
        params,
    }
}

fn saxpy() -> Kernel {
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

#[test]
fn device_info_describes_an_nvidia_gpu() {
    let Some(b) = backend() else { return };
    let info = b.info();
    eprintln!("{info:#?}");
    assert_eq!(b.name(), "cuda");
    assert_eq!(info.vendor, "NVIDIA");
    assert!(matches!(
        info.device_type,
        DeviceType::Discrete | DeviceType::Integrated
    ));
    let arch = info.arch.as_deref().unwrap_or("");
    assert!(arch.starts_with("sm_"), "{arch}");
    assert_eq!(info.subgroup_sizes, [32]);
    assert!(info.max_shared_bytes >= 48 * 1024);
    assert!(info.max_invocations >= 1024);
    assert!(info.max_workgroups[0] >= 65535);
    assert!(info.memory.device_local > 1 << 30);
    assert!(info.timestamps && info.f16 && info.int8 && info.subgroup_ops);
    assert!(
        info.runtime_version.contains("NVRTC"),
        "{}",
        info.runtime_version
    );
}

#[test]
fn buffers_round_trip_through_staging() {
    let Some(b) = backend() else { return };
    let data: Vec<u8> = (0..1001u32).map(|i| (i * 7 % 251) as u8).collect();
    let h = upload(&b, &data);
    assert_eq!(download(&b, h, data.len()), data);
    b.write(h, 3, &[9, 8, 7]).unwrap();
    let mut part = [0u8; 5];
    b.read(h, 2, &mut part).unwrap();
    assert_eq!(part, [data[2], 9, 8, 7, data[6]]);
    assert!(matches!(
        b.write(h, 1000, &[1, 2]),
        Err(BackendError::OutOfRange { .. })
    ));
    // New buffers read as zeros.
    let z = b.alloc(4096).unwrap();
    assert!(download(&b, z, 4096).iter().all(|&v| v == 0));
    // Larger than the staging buffer: the piecewise path.
    let big: Vec<u32> = (0..(40u32 << 20) / 4)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let big = u32_bytes(&big);
    let hb = upload(&b, &big);
    assert!(download(&b, hb, big.len()) == big);
    b.free(h);
    b.free(h);
    assert!(matches!(
        b.read(h, 0, &mut [0u8; 1]),
        Err(BackendError::UnknownBuffer(_))
    ));
    // The error carries the bytes asked for and the device's free memory (cuMemGetInfo).
    match b.alloc(u64::MAX) {
        Err(BackendError::OutOfMemory {
            bytes: u64::MAX,
            free: Some(free),
        }) => assert!(
            free > 0 && free <= b.info().memory.device_local,
            "free {free} of {}",
            b.info().memory.device_local
        ),
        other => panic!("alloc(u64::MAX) gave {other:?}"),
    }
    b.free(hb);
    b.free(z);
}

#[test]
fn saxpy_with_an_offset_binding_and_a_timestamp() {
    let Some(b) = backend() else { return };
    let n = 100_000usize;
    let pad = b.info().min_binding_alignment as usize / 4;
    let x: Vec<f32> = (0..pad + n)
        .map(|i| (i as f32 - pad as f32) * 0.5)
        .collect();
    let y: Vec<f32> = (0..n).map(|i| 2.0 - i as f32).collect();
    let a = 1.5f32;
    let hx = upload(&b, &f32_bytes(&x));
    let hy = upload(&b, &f32_bytes(&y));
    let program = b.compile(&saxpy()).unwrap();
    assert_eq!(b.compile(&saxpy()).unwrap(), program);
    let bindings = [
        Binding {
            buffer: hx,
            offset: (pad * 4) as u64,
            size: (n * 4) as u64,
        },
        whole(hy, n * 4),
    ];
    let params = [ParamValue::F32(a), ParamValue::U32(n as u32)];
    let d = dispatch(program, [(n as u32).div_ceil(64), 1, 1], &bindings, &params);
    let t = b.dispatch_timed(&d).unwrap();
    assert!(t.as_nanos() > 0 && t.as_secs() < 1, "{t:?}");
    let got = f32s(&download(&b, hy, n * 4));
    for i in 0..n {
        assert_eq!(got[i], a.mul_add(x[pad + i], y[i]), "y[{i}]");
    }
    // A misaligned offset and a wrong parameter type are refused before launch.
    let mut bad = bindings;
    bad[0].offset = 4;
    assert!(matches!(
        b.dispatch(&dispatch(program, [1, 1, 1], &bad, &params)),
        Err(BackendError::BadDispatch(_))
    ));
    assert!(matches!(
        b.dispatch(&dispatch(
            program,
            [1, 1, 1],
            &bindings,
            &[ParamValue::U32(1), ParamValue::U32(1)]
        )),
        Err(BackendError::BadDispatch(_))
    ));
}

#[test]
fn unfused_multiply_add_rounds_twice_like_the_interpreter() {
    let Some(b) = backend() else { return };
    let k = KernelBuilder::new("mul_add", [64, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let i = k.global_id(0);
    let v = k.load(x, i);
    k.store(y, i, v * v - k.f32(1.0));
    let program = b.compile(&k.finish()).unwrap();
    // (1 + 2^-12)^2 - 1: rounded twice the 2^-24 term is lost; fused it survives.
    let e = 1.0 + f32::powi(2.0, -12);
    let hx = upload(&b, &f32_bytes(&[e; 64]));
    let hy = b.alloc(256).unwrap();
    b.dispatch(&dispatch(
        program,
        [1, 1, 1],
        &[whole(hx, 256), whole(hy, 256)],
        &[],
    ))
    .unwrap();
    let got = f32s(&download(&b, hy, 256))[0];
    assert_eq!(got, e * e - 1.0);
    assert_ne!(got, e.mul_add(e, -1.0));
}

#[test]
fn f16_kernels_compile_and_round_per_operation() {
    let Some(b) = backend() else { return };
    let k = KernelBuilder::new("f16_scale", [64, 1, 1]);
    let x = k.buffer("x", Scalar::F16, Access::Read);
    let y = k.buffer("y", Scalar::F16, Access::Write);
    let i = k.global_id(0);
    k.store(y, i, k.load(x, i) * k.f16(2.0) + k.f16(0.5));
    let program = b.compile(&k.finish()).unwrap();
    let n = 128;
    let x: Vec<u8> = (0..n)
        .flat_map(|i| half::f16::from_f32(i as f32 * 0.25 - 8.0).to_le_bytes())
        .collect();
    let hx = upload(&b, &x);
    let hy = b.alloc(n as u64 * 2).unwrap();
    b.dispatch(&dispatch(
        program,
        [2, 1, 1],
        &[whole(hx, n * 2), whole(hy, n * 2)],
        &[],
    ))
    .unwrap();
    let got = download(&b, hy, n * 2);
    for (i, c) in got.chunks_exact(2).enumerate() {
        let want = (i as f32 * 0.25 - 8.0) * 2.0 + 0.5;
        assert_eq!(
            half::f16::from_le_bytes([c[0], c[1]]).to_f32(),
            want,
            "y[{i}]"
        );
    }
}

#[test]
fn an_oversized_workgroup_is_refused() {
    let Some(b) = backend() else { return };
    let k = KernelBuilder::new("too_wide", [2048, 1, 1]);
    let y = k.buffer("y", Scalar::U32, Access::Write);
    k.store(y, k.global_id(0), k.u32(1));
    assert!(matches!(
        b.compile(&k.finish()),
        Err(BackendError::Invalid { .. } | BackendError::Unsupported { .. })
    ));
}

/// cuBLAS on `b`, or `None` (with the reason printed) when it is absent and CUDA not required.
fn cublas_of(b: &CudaBackend) -> Option<Cublas<'_>> {
    match b.cublas() {
        Ok(c) => Some(c),
        Err(BackendError::Unavailable(why)) if !required() => {
            eprintln!("skipping: cuBLAS unavailable: {why}");
            None
        }
        Err(e) => panic!("cuBLAS failed to open: {e}"),
    }
}

/// Values in [-1, 1) that f16 holds exactly, so that f32 and f16 runs share one reference.
fn matrix(len: usize, seed: u32) -> Vec<f32> {
    (0..len as u32)
        .map(|i| {
            ((i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 20) % 256) as f32 / 128.0 - 1.0
        })
        .collect()
}

fn input_bytes(v: &[f32], ty: GemmType) -> Vec<u8> {
    match ty {
        GemmType::F32 => f32_bytes(v),
        GemmType::F16 => v
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect(),
    }
}

/// `got` against an f64 reference: every element within f32 rounding of its sum of
/// |products| (k terms), which a wrong layout or type misses by whole units.
fn assert_close(got: &[f32], want: &[f64], magnitude: &[f64], k: usize, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, ((&g, &w), &mag)) in got.iter().zip(want).zip(magnitude).enumerate() {
        let tol = 2.0 * k as f64 * f64::from(f32::EPSILON) * mag + 1e-30;
        assert!(
            (f64::from(g) - w).abs() <= tol,
            "{what}: element {i} is {g}, the f64 reference {w} (tolerance {tol:e})"
        );
    }
}

#[test]
fn cublas_gemm_matches_an_f64_reference() {
    let Some(b) = backend() else { return };
    let Some(cublas) = cublas_of(&b) else { return };
    let (m, n, k) = (33usize, 17usize, 45usize);
    let a = matrix(m * k, 1);
    let bm = matrix(k * n, 2);
    let at = |r: usize, c: usize| f64::from(a[r * k + c]);
    let bt = |r: usize, c: usize| f64::from(bm[r * n + c]);
    let want: Vec<f64> = (0..m * n)
        .map(|e| (0..k).map(|p| at(e / n, p) * bt(p, e % n)).sum())
        .collect();
    let magnitude: Vec<f64> = (0..m * n)
        .map(|e| (0..k).map(|p| (at(e / n, p) * bt(p, e % n)).abs()).sum())
        .collect();
    // B as weights are stored: row-major [n×k].
    let b_weights: Vec<f32> = (0..n * k).map(|e| bm[(e % k) * n + e / k]).collect();
    for ty in [GemmType::F32, GemmType::F16] {
        for transposed in [false, true] {
            let ha = upload(&b, &input_bytes(&a, ty));
            let b_data = if transposed { &b_weights } else { &bm };
            let hb = upload(&b, &input_bytes(b_data, ty));
            let hc = upload(&b, &f32_bytes(&vec![f32::NAN; m * n]));
            let bytes = |len: usize, ty: GemmType| {
                len * match ty {
                    GemmType::F32 => 4,
                    GemmType::F16 => 2,
                }
            };
            let shape = Gemm {
                m: m as u32,
                n: n as u32,
                k: k as u32,
                b_transposed: transposed,
            };
            let t = cublas
                .gemm(
                    whole(ha, bytes(m * k, ty)),
                    whole(hb, bytes(k * n, ty)),
                    whole(hc, m * n * 4),
                    shape,
                    ty,
                )
                .unwrap();
            assert!(t.as_nanos() > 0 && t.as_secs() < 1, "{t:?}");
            let got = f32s(&download(&b, hc, m * n * 4));
            let what = format!("{ty:?} gemm, B transposed: {transposed}");
            assert_close(&got, &want, &magnitude, k, &what);
            for h in [ha, hb, hc] {
                b.free(h);
            }
        }
    }
}

#[test]
fn cublas_gemv_matches_an_f64_reference() {
    let Some(b) = backend() else { return };
    let Some(cublas) = cublas_of(&b) else { return };
    let (rows, cols) = (37usize, 45usize);
    let w = matrix(rows * cols, 3);
    let x = matrix(cols, 4);
    let want: Vec<f64> = (0..rows)
        .map(|r| {
            (0..cols)
                .map(|c| f64::from(w[r * cols + c]) * f64::from(x[c]))
                .sum()
        })
        .collect();
    let magnitude: Vec<f64> = (0..rows)
        .map(|r| {
            (0..cols)
                .map(|c| f64::from(w[r * cols + c] * x[c]).abs())
                .sum()
        })
        .collect();
    for (ty, elem) in [(GemmType::F32, 4), (GemmType::F16, 2)] {
        let hw = upload(&b, &input_bytes(&w, ty));
        let hx = upload(&b, &input_bytes(&x, ty));
        let hy = upload(&b, &f32_bytes(&vec![f32::NAN; rows]));
        let t = cublas
            .gemv(
                whole(hw, rows * cols * elem),
                whole(hx, cols * elem),
                whole(hy, rows * 4),
                rows as u32,
                cols as u32,
                ty,
            )
            .unwrap();
        assert!(t.as_nanos() > 0 && t.as_secs() < 1, "{t:?}");
        let got = f32s(&download(&b, hy, rows * 4));
        assert_close(&got, &want, &magnitude, cols, &format!("{ty:?} gemv"));
        for h in [hw, hx, hy] {
            b.free(h);
        }
    }
}

/// The check to run first on a GPU machine: which cuBLAS was loaded, in which math mode, and
/// one product small enough to verify by hand.
#[test]
fn cublas_multiplies_two_by_two_matrices() {
    let Some(b) = backend() else { return };
    let Some(cublas) = cublas_of(&b) else { return };
    let lib = cublas.library();
    eprintln!(
        "cuBLAS {:?} from {}, math mode {:?}, on {}",
        lib.version(),
        lib.path().display(),
        cublas.math(),
        b.info().name
    );
    assert_eq!(cublas.math(), MathMode::Default);
    let ha = upload(&b, &f32_bytes(&[1.0, 2.0, 3.0, 4.0]));
    let hb = upload(&b, &f32_bytes(&[5.0, 6.0, 7.0, 8.0]));
    let hc = b.alloc(16).unwrap();
    let shape = Gemm {
        m: 2,
        n: 2,
        k: 2,
        b_transposed: false,
    };
    let (wa, wb, wc) = (whole(ha, 16), whole(hb, 16), whole(hc, 16));
    cublas.gemm(wa, wb, wc, shape, GemmType::F32).unwrap();
    assert_eq!(f32s(&download(&b, hc, 16)), [19.0, 22.0, 43.0, 50.0]);
    let weights = Gemm {
        b_transposed: true,
        ..shape
    };
    cublas.gemm(wa, wb, wc, weights, GemmType::F32).unwrap();
    assert_eq!(f32s(&download(&b, hc, 16)), [17.0, 23.0, 39.0, 53.0]);
    cublas.set_math(MathMode::Pedantic).unwrap();
    assert_eq!(cublas.math(), MathMode::Pedantic);
    cublas.gemm(wa, wb, wc, shape, GemmType::F32).unwrap();
    assert_eq!(f32s(&download(&b, hc, 16)), [19.0, 22.0, 43.0, 50.0]);
    cublas.set_math(MathMode::Default).unwrap();
}

#[test]
fn cublas_refuses_bad_shapes_before_calling() {
    let Some(b) = backend() else { return };
    let Some(cublas) = cublas_of(&b) else { return };
    let h = b.alloc(64).unwrap();
    let all = whole(h, 64);
    let shape = |m, n, k| Gemm {
        m,
        n,
        k,
        b_transposed: false,
    };
    let zero = cublas.gemm(all, all, all, shape(0, 2, 2), GemmType::F32);
    assert!(
        matches!(&zero, Err(BackendError::BadDispatch(msg)) if msg.contains("m = 0")),
        "{zero:?}"
    );
    let huge = cublas.gemm(all, all, all, shape(4, 4, 1 << 31), GemmType::F16);
    assert!(
        matches!(huge, Err(BackendError::BadDispatch(_))),
        "{huge:?}"
    );
    // 64 bytes hold a 4×4 f32 matrix but not a 4×5 one.
    let short = cublas.gemv(all, all, all, 4, 5, GemmType::F32);
    assert!(
        matches!(&short, Err(BackendError::BadDispatch(msg)) if msg.contains("binding w")),
        "{short:?}"
    );
    let outside = Binding {
        buffer: h,
        offset: 16,
        size: 64,
    };
    assert!(matches!(
        cublas.gemv(outside, all, all, 2, 2, GemmType::F32),
        Err(BackendError::OutOfRange { .. })
    ));
}

/// Needs no GPU: an empty directory, with the loader's path left out, holds no cuBLAS.
#[test]
fn missing_cublas_is_unavailable_and_names_where_it_looked() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-cublas-here");
    std::fs::create_dir_all(&dir).unwrap();
    match cublas::Library::open_in(std::slice::from_ref(&dir), false) {
        Err(BackendError::Unavailable(why)) => {
            assert!(why.contains(&dir.display().to_string()), "{why}");
            assert!(why.contains("libcublas.so.12"), "{why}");
        }
        Err(e) => panic!("expected Unavailable, got {e}"),
        Ok(lib) => panic!(
            "found cuBLAS at {} in an empty directory",
            lib.path().display()
        ),
    }
}

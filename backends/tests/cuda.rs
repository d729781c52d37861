//! The CUDA backend on the first NVIDIA GPU (or `TRINE_CUDA_DEVICE`).
//!
//! Skipped with a printed reason when CUDA is unavailable (no driver, no device, no NVRTC),
//! unless `TRINE_REQUIRE_BACKENDS` names `cuda`.

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
    assert!(matches!(
        b.alloc(u64::MAX),
        Err(BackendError::OutOfMemory { .. })
    ));
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

//! The HIP backend on whatever AMD GPU ROCm finds.
//!
//! Without ROCm or without a GPU the tests check that the backend says so with the library's
//! path and version, and skip the device work; unless `TRINE_REQUIRE_BACKENDS` names `hip`,
//! in which case an unavailable backend fails. On a device, the backends' shared GPU suite runs
//! too, as on cuda, vulkan and wgpu.

mod gpu_suite;

use trine_backends::hip::{self, HipBackend};
use trine_backends::{Backend, BackendError, Binding, DeviceType};
use trine_ir::{Access, KernelBuilder, ParamValue, Scalar};

fn required() -> bool {
    std::env::var("TRINE_REQUIRE_BACKENDS").is_ok_and(|v| v.split(',').any(|b| b.trim() == "hip"))
}

/// The backend, or `None` after checking that the reason it is unavailable names what was
/// loaded.
fn backend() -> Option<HipBackend> {
    match HipBackend::new() {
        Ok(b) => Some(b),
        Err(BackendError::Unavailable(why)) if !required() => {
            if let Ok(rt) = hip::describe_runtime() {
                // A runtime was loaded: the reason must say which, and which version.
                assert!(why.contains(&rt.library), "{why}");
                if let Some(v) = &rt.version {
                    assert!(why.contains(v.as_str()), "{why}");
                }
            }
            eprintln!("skipping: hip unavailable: {why}");
            None
        }
        Err(e) => panic!("hip backend failed to open: {e}"),
    }
}

/// Waits for all work: a test that queued a fault fails here, not in the next test.
fn done(b: HipBackend) {
    b.synchronize().unwrap();
}

gpu_suite::shared_tests!(backend, done);

#[test]
fn the_runtime_is_described_without_a_device() {
    match hip::describe_runtime() {
        Ok(rt) => {
            println!("{rt:#?}");
            assert!(
                std::path::Path::new(&rt.library).is_file(),
                "{}",
                rt.library
            );
            let v = rt
                .version
                .expect("hipRuntimeGetVersion works without a device");
            assert!(v.split('.').count() == 3, "{v}");
            // The loaded library is among the visible installations.
            assert!(!rt.visible.is_empty());
        }
        Err(BackendError::Unavailable(why)) => {
            assert!(
                why.starts_with("no ROCm runtime found (searched: "),
                "{why}"
            );
            assert!(!required(), "{why}");
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn saxpy_runs_and_reports_its_device() {
    let Some(b) = backend() else {
        return;
    };
    let info = b.info();
    assert_eq!(info.backend, "hip");
    assert!(info.arch.as_deref().is_some_and(|a| a.starts_with("gfx")));
    assert!(matches!(
        info.device_type,
        DeviceType::Integrated | DeviceType::Discrete
    ));
    assert!(info.memory.device_local > 0);

    let k = KernelBuilder::new("saxpy", [64, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::ReadWrite);
    let a = k.param("a", Scalar::F32);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || k.store(y, i, a.fma(k.load(x, i), k.load(y, i))));
    let kernel = k.finish();

    let len = 1000usize;
    let xs: Vec<f32> = (0..len).map(|i| i as f32).collect();
    let ys: Vec<f32> = (0..len).map(|i| 1.0 - i as f32).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    let size = (len * 4) as u64;
    let (bx, by) = (b.alloc(size).unwrap(), b.alloc(size).unwrap());
    b.write(bx, 0, &bytes(&xs)).unwrap();
    b.write(by, 0, &bytes(&ys)).unwrap();
    let program = b.compile(&kernel).unwrap();
    let bindings = [
        Binding {
            buffer: bx,
            offset: 0,
            size,
        },
        Binding {
            buffer: by,
            offset: 0,
            size,
        },
    ];
    let params = [ParamValue::F32(2.0), ParamValue::U32(len as u32)];
    let dispatch = trine_backends::Dispatch {
        program,
        grid: [len.div_ceil(64) as u32, 1, 1],
        bindings: &bindings,
        params: &params,
    };
    b.dispatch(&dispatch).unwrap();
    let mut out = vec![0u8; len * 4];
    b.read(by, 0, &mut out).unwrap();
    for (i, c) in out.chunks_exact(4).enumerate() {
        let got = f32::from_le_bytes(c.try_into().unwrap());
        assert_eq!(got, 2.0 * xs[i] + ys[i], "element {i}");
    }
    // A wrong parameter type is refused before anything is queued.
    let wrong = [ParamValue::U32(2), ParamValue::U32(len as u32)];
    let bad = trine_backends::Dispatch {
        params: &wrong,
        ..dispatch
    };
    assert!(matches!(
        b.dispatch(&bad),
        Err(BackendError::BadDispatch(_))
    ));
    assert!(b.dispatch_timed(&dispatch).unwrap() > std::time::Duration::ZERO);
    b.free(bx);
    b.free(by);
    b.synchronize().unwrap();
}

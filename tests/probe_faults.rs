//! Probing survives runtimes that hang or abort.
//!
//! Fake HIP runtimes (`tests/fake_hip/fake_hip.c`, built here with `cc -shared -fPIC`) export
//! every function the HIP backend loads and misbehave in one place each: `hipInit` never
//! returns, the first `hipModuleLaunchKernel` never returns, or the first upload aborts. The
//! backend is pointed at them with `TRINE_ROCM_PATH` through a wrapper script around the
//! `trine` binary, which placement runs as the probe child. Each must be reported — hung in
//! init, hung in launch, crashed with SIGABRT in upload — within the timeout, with this
//! process alive, and placement must then run a kernel correctly on the next backend.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use trine_backends::probe::{probe, signal_name, ProbeOutcome, Step};
use trine_backends::{open_best, BackendKind, Binding, DeviceType, Dispatch};
use trine_ir::{Access, KernelBuilder, ParamValue, Scalar};

/// The probe timeout of these tests: short, as `TRINE_PROBE_TIMEOUT=2` would make it.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Time allowed beyond the timeout for killing the child and reaping it.
const SLACK: Duration = Duration::from_secs(3);

/// Builds the fake runtime of `mode` and a wrapper around `trine` that points the HIP backend
/// at it (and keeps its fake code objects out of the user's cache), in a directory of the
/// test's own (`test`), since tests run in parallel. Returns the wrapper.
fn fake(mode: &str, test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("fake_hip")
        .join(test);
    std::fs::create_dir_all(&dir).unwrap();
    let lib = dir.join("libamdhip64.so");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fake_hip/fake_hip.c");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-DFAKE_{mode}"))
        .arg("-o")
        .arg(&lib)
        .arg(&source)
        .output()
        .expect("`cc` is needed to build the fake HIP runtimes");
    assert!(
        out.status.success(),
        "cc failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let wrapper = dir.join("trine");
    let script = format!(
        "#!/bin/sh\nexport TRINE_ROCM_PATH='{}'\nexport TRINE_CACHE_DIR='{}'\nexec '{}' \"$@\"\n",
        lib.display(),
        dir.join("cache").display(),
        env!("CARGO_BIN_EXE_trine")
    );
    std::fs::write(&wrapper, script).unwrap();
    let mut perms = std::fs::metadata(&wrapper).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&wrapper, perms).unwrap();
    wrapper
}

/// Probes HIP through `wrapper`, checking the answer comes within the timeout.
fn probe_hip(wrapper: &Path) -> ProbeOutcome {
    let t = Instant::now();
    let outcome = probe(wrapper, BackendKind::Hip, TIMEOUT);
    assert!(
        t.elapsed() < TIMEOUT + SLACK,
        "the probe took {:?}: {outcome}",
        t.elapsed()
    );
    outcome
}

/// Placement over HIP (faulty), Vulkan and the CPU falls back past HIP to the better of the
/// others, and the backend it opens runs `y = 3x + 1` correctly.
fn falls_back_and_computes(wrapper: &Path) {
    let t = Instant::now();
    let kinds = [BackendKind::Hip, BackendKind::Vulkan, BackendKind::Cpu];
    let (backend, probes) = match open_best(wrapper, &kinds, TIMEOUT) {
        Ok(placed) => placed,
        Err(e) => panic!("placement failed: {e}"),
    };
    assert!(
        t.elapsed() < TIMEOUT + SLACK,
        "placement took {:?}",
        t.elapsed()
    );
    assert_eq!(probes.len(), 3);
    assert!(!probes[0].1.is_ok(), "hip probed ok: {}", probes[0].1);
    assert_ne!(backend.name(), "hip");
    // Vulkan on a GPU comes before the CPU backend; Vulkan on the CPU (lavapipe) after it.
    let expected = match probes[1].1.device() {
        Some(info) if probes[1].1.is_ok() && info.device_type != DeviceType::Cpu => "vulkan",
        _ => "cpu",
    };
    let summary: Vec<String> = probes.iter().map(|(k, o)| format!("{k} {o}")).collect();
    let summary = summary.join("; ");
    assert_eq!(backend.name(), expected, "probes: {summary}");
    println!("fell back to {}: {summary}", backend.name());

    let k = KernelBuilder::new("affine3", [64, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        k.store(y, i, k.load(x, i) * k.f32(3.0) + k.f32(1.0))
    });
    let program = backend.compile(&k.finish()).unwrap();
    let len = 1000u32;
    let input: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 - 100.0).collect();
    let bytes: Vec<u8> = input.iter().flat_map(|v| v.to_le_bytes()).collect();
    let hx = backend.alloc(bytes.len() as u64).unwrap();
    let hy = backend.alloc(bytes.len() as u64).unwrap();
    backend.write(hx, 0, &bytes).unwrap();
    let whole = |buffer| Binding {
        buffer,
        offset: 0,
        size: bytes.len() as u64,
    };
    backend
        .dispatch(&Dispatch {
            program,
            grid: [len.div_ceil(64), 1, 1],
            bindings: &[whole(hx), whole(hy)],
            params: &[ParamValue::U32(len)],
        })
        .unwrap();
    let mut out = vec![0u8; bytes.len()];
    backend.read(hy, 0, &mut out).unwrap();
    for (i, (c, x)) in out.chunks_exact(4).zip(&input).enumerate() {
        let got = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        assert_eq!(got, x * 3.0 + 1.0, "y[{i}] on {}", backend.name());
    }
    backend.free(hx);
    backend.free(hy);
}

#[test]
fn a_runtime_that_hangs_in_init_is_reported_hung_in_init() {
    let wrapper = fake("HANG_INIT", "hang_init");
    match probe_hip(&wrapper) {
        ProbeOutcome::Hung { step, device } => {
            assert_eq!(step, Step::Init);
            assert!(device.is_none(), "no device can be known before init");
        }
        other => panic!("expected hung in init, got {other}"),
    }
    falls_back_and_computes(&wrapper);
}

#[test]
fn a_runtime_that_hangs_in_launch_is_reported_hung_in_launch() {
    let wrapper = fake("HANG_LAUNCH", "hang_launch");
    match probe_hip(&wrapper) {
        ProbeOutcome::Hung { step, device } => {
            assert_eq!(step, Step::Launch);
            // The steps before it passed: the device was described, the kernel compiled.
            let device = device.expect("the device was reported before the launch");
            assert_eq!(device.name, "trine fake HIP device");
            assert_eq!(device.arch.as_deref(), Some("gfx1030"));
        }
        other => panic!("expected hung in launch, got {other}"),
    }
    falls_back_and_computes(&wrapper);
}

#[test]
fn a_runtime_that_aborts_is_reported_crashed_with_sigabrt() {
    let wrapper = fake("ABORT", "abort");
    let t = Instant::now();
    match probe_hip(&wrapper) {
        ProbeOutcome::Crashed(c) => {
            assert_eq!(c.signal.and_then(signal_name), Some("SIGABRT"), "{c}");
            assert_eq!(c.step, Step::Upload);
            assert!(
                c.stderr.contains("munmap_chunk(): invalid pointer"),
                "{:?}",
                c.stderr
            );
        }
        other => panic!("expected crashed, got {other}"),
    }
    // A crash is reported when it happens, not at the timeout.
    assert!(t.elapsed() < TIMEOUT, "took {:?}", t.elapsed());
    falls_back_and_computes(&wrapper);
}

#[test]
fn doctor_reports_a_hung_runtime_with_the_library_it_loaded() {
    let wrapper = fake("HANG_LAUNCH", "doctor");
    let t = Instant::now();
    let out = Command::new(&wrapper)
        .args(["doctor", "--json"])
        .env("TRINE_PROBE_TIMEOUT", "2")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        t.elapsed() < TIMEOUT + SLACK,
        "doctor took {:?}",
        t.elapsed()
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let hip = report
        .as_array()
        .and_then(|a| a.iter().find(|b| b["backend"] == "hip"))
        .expect("a hip entry");
    assert_eq!(hip["status"], "hung", "{hip}");
    assert_eq!(hip["step"], "launch", "{hip}");
    assert_eq!(hip["info"]["arch"], "gfx1030", "{hip}");
    let library = hip["runtime"]["library"].as_str().unwrap_or_default();
    assert!(library.ends_with("doctor/libamdhip64.so"), "{hip}");
    assert_eq!(hip["runtime"]["version"], "6.3.0", "{hip}");
    let cpu = report
        .as_array()
        .and_then(|a| a.iter().find(|b| b["backend"] == "cpu"));
    assert_eq!(cpu.map(|c| &c["status"]), Some(&"ok".into()));
}

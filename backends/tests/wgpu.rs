//! The wgpu backend on whatever adapter wgpu finds (lavapipe through Vulkan in CI): the shared
//! GPU tests, what it reports about the device, and a device and buffers shared with a host
//! application.
//!
//! Skipped with a printed reason when wgpu finds no adapter, unless `TRINE_REQUIRE_BACKENDS`
//! names `wgpu`. Built where the backend is (the `wgpu` feature, or macOS and Windows).
#![cfg(trine_wgpu)]

mod gpu_suite;

use gpu_suite::{as_bytes, saxpy};
use trine_backends::wgpu::{api as wgpu, device_descriptor, WgpuBackend};
use trine_backends::{Backend, BackendError, Binding, DeviceType, Dispatch};
use trine_ir::ParamValue;

fn required() -> bool {
    std::env::var("TRINE_REQUIRE_BACKENDS").is_ok_and(|v| v.split(',').any(|b| b.trim() == "wgpu"))
}

fn skip_or_fail(e: BackendError) -> Option<WgpuBackend> {
    match e {
        BackendError::Unavailable(why) if !required() => {
            eprintln!("skipping: wgpu unavailable: {why}");
            None
        }
        e => panic!("wgpu backend failed to open: {e}"),
    }
}

/// The backend, or `None` (with the reason printed) when wgpu is absent and not required.
fn backend() -> Option<WgpuBackend> {
    WgpuBackend::new().map_or_else(skip_or_fail, Some)
}

fn done(b: WgpuBackend) {
    b.synchronize().unwrap();
}

gpu_suite::shared_tests!(backend, done);

#[test]
fn device_info_is_sane() {
    let Some(b) = backend() else { return };
    let info = b.info();
    eprintln!("{info:#?}");
    assert_eq!(b.name(), "wgpu");
    assert_eq!(info.backend, "wgpu");
    assert!(!info.name.is_empty() && !info.vendor.is_empty());
    assert!(info.runtime_version.starts_with("wgpu 30 on "));
    // WebGPU's minimums, which every wgpu adapter meets.
    assert!(info.max_workgroups.iter().all(|&m| m >= 65535));
    assert!(info.max_invocations >= 256);
    assert!(info.max_shared_bytes >= 16384);
    assert!(info.max_binding_bytes >= 1 << 27);
    assert!(info.min_binding_alignment >= 4 && info.min_binding_alignment.is_power_of_two());
    if info.name.contains("llvmpipe") {
        // What the Vulkan backend reports for the same driver.
        assert_eq!(info.device_type, DeviceType::Cpu);
        assert_eq!(info.vendor, "Mesa");
        assert_eq!(info.subgroup_sizes, [8]);
        assert!(info.subgroup_ops && info.f16 && info.timestamps);
        assert_eq!(info.max_shared_bytes, 32 * 1024);
        assert!(info.driver.starts_with("llvmpipe Mesa"), "{}", info.driver);
    }
}

/// A host application's own device and buffer: trine's saxpy runs on them, and the
/// application reads the result through its own mapping.
#[test]
fn kernels_run_on_a_host_applications_device_and_buffers() {
    let Some(probe) = backend() else { return };
    drop(probe);
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default()))
        .expect("an adapter, since the backend opened");
    let (device, queue) =
        pollster::block_on(adapter.request_device(&device_descriptor(&adapter))).unwrap();
    let usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let n = 1000usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let y: Vec<f32> = (0..n).map(|i| 1.0 - i as f32).collect();
    let app_buffer = |data: &[f32]| {
        let b = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("app"),
            size: (data.len() * 4) as u64,
            usage,
            mapped_at_creation: false,
        });
        queue.write_buffer(&b, 0, as_bytes(data));
        b
    };
    let (app_x, app_y) = (app_buffer(&x), app_buffer(&y));

    let trine = WgpuBackend::from_device(device.clone(), queue.clone()).unwrap();
    let hx = trine.import_buffer(app_x.clone()).unwrap();
    let hy = trine.import_buffer(app_y.clone()).unwrap();
    let program = trine.compile(&saxpy()).unwrap();
    let whole = |buffer| Binding {
        buffer,
        offset: 0,
        size: (n * 4) as u64,
    };
    trine
        .dispatch(&Dispatch {
            program,
            grid: [n.div_ceil(64) as u32, 1, 1],
            bindings: &[whole(hx), whole(hy)],
            params: &[ParamValue::F32(2.0), ParamValue::U32(n as u32)],
        })
        .unwrap();
    trine.flush().unwrap();

    // The application's own readback, after trine's work on the shared queue.
    let readback = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("app readback"),
        size: (n * 4) as u64,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(&app_y, 0, &readback, 0, (n * 4) as u64);
    queue.submit([encoder.finish()]);
    readback.map_async(wgpu::MapMode::Read, .., |r| r.unwrap());
    device.poll(wgpu::PollType::wait_indefinitely()).unwrap();
    let got: Vec<f32> = readback
        .get_mapped_range(..)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    for i in 0..n {
        assert_eq!(got[i], 2.0 * x[i] + y[i], "y[{i}]");
    }

    // trine's buffers go the other way: the application binds or copies them.
    let own = trine.alloc(16).unwrap();
    assert_eq!(trine.wgpu_buffer(own).unwrap().size(), 16);
    trine.free(own);

    // Freeing an imported handle leaves the application's buffer alive.
    trine.free(hy);
    assert!(matches!(
        trine.read(hy, 0, &mut [0u8; 4]),
        Err(BackendError::UnknownBuffer(_))
    ));
    let mut encoder = device.create_command_encoder(&Default::default());
    encoder.copy_buffer_to_buffer(&app_y, 0, &app_x, 0, 4);
    queue.submit([encoder.finish()]);
    let mut first = [0u8; 4];
    trine.read(hx, 0, &mut first).unwrap();
    assert_eq!(f32::from_le_bytes(first), got[0]);

    // A buffer trine cannot bind is refused with the usage it lacks.
    let uniform = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 16,
        usage: wgpu::BufferUsages::UNIFORM,
        mapped_at_creation: false,
    });
    let err = trine.import_buffer(uniform).unwrap_err();
    assert!(err.to_string().contains("lacks STORAGE"), "{err}");
}

/// A device made without trine's descriptor lacks immediates: refused, and the reason says
/// how to ask for them.
#[test]
fn a_device_without_immediates_is_refused_with_the_reason() {
    let Some(probe) = backend() else { return };
    drop(probe);
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default())).unwrap();
    let (device, queue) = pollster::block_on(adapter.request_device(&Default::default())).unwrap();
    match WgpuBackend::from_device(device, queue) {
        Err(BackendError::Unavailable(why)) => {
            assert!(
                why.contains("IMMEDIATES") && why.contains("device_descriptor"),
                "{why}"
            )
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened a device without immediates"),
    }
}

/// wgpu forbids one buffer bound read-only and writable in one dispatch; trine says so
/// before wgpu would reject the whole batch.
#[test]
fn aliasing_a_read_and_a_written_binding_is_a_typed_error() {
    let Some(b) = backend() else { return };
    let program = b.compile(&saxpy()).unwrap();
    let h = b.alloc(512).unwrap();
    let half = |offset| Binding {
        buffer: h,
        offset,
        size: 256,
    };
    let err = b
        .dispatch(&Dispatch {
            program,
            grid: [1, 1, 1],
            bindings: &[half(0), half(256)],
            params: &[ParamValue::F32(1.0), ParamValue::U32(64)],
        })
        .unwrap_err();
    assert!(
        matches!(err, BackendError::BadDispatch(ref m) if m.contains("same buffer")),
        "{err}"
    );
    b.free(h);
    b.synchronize().unwrap();
}

//! A wgpu device with nothing but what every kernel needs (immediates): what a host
//! application's device may offer. Kernels that use subgroups run their variants without them,
//! f16 kernels are skipped with the feature named, and every other case still passes.
//! Skipped with a printed reason when wgpu finds no adapter, unless `TRINE_REQUIRE_BACKENDS`
//! names `wgpu`.

use std::sync::Arc;
use trine_backends::wgpu::{api as wgpu, WgpuBackend};
use trine_backends::{Backend, BackendError};
use trine_conformance::Status;

fn bare_device() -> Option<WgpuBackend> {
    let required = trine_conformance::required_backends()
        .iter()
        .any(|b| b == "wgpu");
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let Ok(adapter) = pollster::block_on(instance.request_adapter(&Default::default())) else {
        assert!(!required, "wgpu is required but found no adapter");
        println!("wgpu skipped: no adapter");
        return None;
    };
    let desc = wgpu::DeviceDescriptor {
        required_features: wgpu::Features::IMMEDIATES,
        required_limits: adapter.limits(),
        ..Default::default()
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&desc)).unwrap();
    Some(WgpuBackend::from_device(device, queue).unwrap())
}

#[test]
fn kernels_fall_back_on_a_device_without_subgroups_or_f16() {
    let Some(backend) = bare_device() else { return };
    let info = backend.info();
    assert!(!info.subgroup_ops && !info.f16 && info.subgroup_sizes.is_empty());
    assert!(info.notes.iter().any(|n| n.contains("Features::SUBGROUP")));

    let subgroup_kernel = trine_conformance::suite()
        .into_iter()
        .find(|c| c.kernel.capabilities.subgroup)
        .expect("the suite has subgroup kernels");
    match backend.compile(&subgroup_kernel.kernel) {
        Err(BackendError::Unsupported { what, .. }) => assert!(what.contains("SUBGROUP"), "{what}"),
        other => panic!("a subgroup kernel compiled without subgroups: {other:?}"),
    }

    let cases: Vec<_> = trine_conformance::suite()
        .into_iter()
        .filter(|c| {
            [
                "reduce_subgroup/",
                "rms_norm/shared/",
                "axpy/f16",
                "copy/f32->f16/",
                "saxpy/f32/n=1000",
            ]
            .iter()
            .any(|p| c.name.starts_with(p))
        })
        .collect();
    let backend: Arc<dyn Backend> = Arc::new(backend);
    let mut fell_back = 0;
    for case in &cases {
        let reference = trine_conformance::reference(case);
        let r = trine_conformance::check_backend(case, &backend, &reference);
        let f16 = case
            .kernel
            .buffers
            .iter()
            .any(|b| b.elem == trine_ir::Scalar::F16);
        if f16 {
            assert_eq!(r.status, Status::Skip, "{}: {:?}", r.case, r.reason);
            let why = r.reason.unwrap_or_default();
            assert!(why.contains("SHADER_F16"), "{}: {why}", r.case);
            continue;
        }
        assert_eq!(r.status, Status::Pass, "{}: {:?}", r.case, r.reason);
        if case.kernel.capabilities.subgroup {
            let fallback = case
                .fallback
                .as_ref()
                .expect("subgroup cases have a fallback");
            assert_eq!(r.kernel, fallback.name, "{}", r.case);
            fell_back += 1;
        }
    }
    assert!(fell_back >= 2, "only {fell_back} cases ran a fallback");
}

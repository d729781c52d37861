//! The Vulkan backend on whatever device the loader finds (lavapipe in CI).
//!
//! Skipped with a printed reason when no Vulkan device is available, unless
//! `TRINE_REQUIRE_BACKENDS` names `vulkan`. With `TRINE_VULKAN_VALIDATION=1` every test also
//! fails on any validation-layer error.

mod gpu_suite;

use trine_backends::proxy::{Hooks, Proxy};
use trine_backends::vulkan::{VulkanBackend, VALIDATION_ENV};
use trine_backends::{Backend, BackendError, DeviceType, ProgramId};
use trine_ir::{Kernel, Scalar};

fn required() -> bool {
    std::env::var("TRINE_REQUIRE_BACKENDS")
        .is_ok_and(|v| v.split(',').any(|b| b.trim() == "vulkan"))
}

/// The backend, or `None` (with the reason printed) when Vulkan is absent and not required.
fn backend() -> Option<VulkanBackend> {
    match VulkanBackend::new() {
        Ok(b) => {
            if std::env::var(VALIDATION_ENV).is_ok_and(|v| v == "1") {
                assert!(
                    b.validation_enabled(),
                    "{VALIDATION_ENV}=1 but the validation layer is not on"
                );
            }
            Some(b)
        }
        Err(BackendError::Unavailable(why)) if !required() => {
            eprintln!("skipping: vulkan unavailable: {why}");
            None
        }
        Err(e) => panic!("vulkan backend failed to open: {e}"),
    }
}

/// Waits for all work and fails on any validation error the layer reported.
fn done(b: VulkanBackend) {
    b.synchronize().unwrap();
    assert_eq!(b.validation_errors(), 0, "validation errors (see stderr)");
}

#[test]
fn device_info_is_sane() {
    let Some(b) = backend() else { return };
    let info = b.info();
    eprintln!("{info:#?}");
    assert_eq!(b.name(), "vulkan");
    assert_eq!(info.backend, "vulkan");
    assert!(!info.name.is_empty() && !info.vendor.is_empty() && !info.driver.is_empty());
    assert!(
        info.runtime_version.starts_with("Vulkan 1."),
        "{}",
        info.runtime_version
    );
    // The minimums the Vulkan specification guarantees.
    assert!(info.max_workgroups.iter().all(|&m| m >= 65535));
    assert!(info.max_invocations >= 128);
    assert!(info.max_shared_bytes >= 16384);
    assert!(info.max_binding_bytes >= 1 << 27);
    assert!(info.min_binding_alignment >= 4 && info.min_binding_alignment.is_power_of_two());
    assert!(info.memory.device_local > 0);
    // VK_EXT_memory_budget, which NVIDIA's drivers have offered since 2019: what is left of
    // the heaps `device_local` counts.
    let free = b.free_memory();
    assert!(
        free.is_some() || info.vendor != "NVIDIA",
        "no memory budget"
    );
    assert!(
        free.is_none_or(|f| f > 0 && f <= info.memory.device_local),
        "free {free:?} of {}",
        info.memory.device_local
    );
    if info.subgroup_ops {
        assert!(!info.subgroup_sizes.is_empty());
        assert!(info.subgroup_sizes.iter().all(|s| s.is_power_of_two()));
    }
    if info.name.contains("llvmpipe") {
        assert_eq!(info.device_type, DeviceType::Cpu);
        assert_eq!(info.vendor, "Mesa");
        assert!(info.memory.unified);
        assert_eq!(info.subgroup_sizes, [8]);
        assert!(info.subgroup_ops && info.f16 && info.int8 && info.timestamps);
        assert_eq!(info.max_shared_bytes, 32 * 1024);
        assert_eq!(info.max_invocations, 1024);
        assert!(info.driver.contains("Mesa"), "{}", info.driver);
    }
    done(b);
}

gpu_suite::shared_tests!(backend, done);

/// A driver without subgroups or f16: it refuses the kernels that need them.
struct Without;

impl Hooks for Without {
    fn compile(&self, inner: &dyn Backend, kernel: &Kernel) -> Result<ProgramId, BackendError> {
        if kernel.capabilities.subgroup || kernel.buffers.iter().any(|b| b.elem == Scalar::F16) {
            return Err(BackendError::Unsupported {
                kernel: kernel.name.clone(),
                what: "subgroups or f16, hidden by this test".into(),
            });
        }
        inner.compile(kernel)
    }
}

/// The suite's subgroup and f16 tests fail a required backend whose device lacks the
/// capability, and on an optional one check that the kernel is refused as unsupported.
#[test]
fn a_required_device_without_subgroups_or_f16_fails_the_suite() {
    let Some(inner) = backend() else { return };
    let hide = |info: &mut trine_backends::DeviceInfo| {
        info.subgroup_ops = false;
        info.subgroup_sizes.clear();
        info.f16 = false;
    };
    let vulkan = std::sync::Arc::new(inner);
    let b = Proxy::new(vulkan.clone(), "vulkan", hide, Without);
    type SuiteTest = fn(&dyn Backend, bool);
    let tests: [(&str, SuiteTest); 2] = [
        ("subgroup_sum", gpu_suite::subgroup_sum),
        ("f16_buffers", gpu_suite::f16_buffers),
    ];
    for (name, test) in tests {
        let required = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| test(&b, true)));
        assert!(
            required.is_err(),
            "{name} passed a required device without its capability"
        );
        test(&b, false);
    }
    drop(b);
    done(std::sync::Arc::into_inner(vulkan).expect("the proxy is gone"));
}

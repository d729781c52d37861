//! The Vulkan backend on whatever device the loader finds (lavapipe in CI).
//!
//! Skipped with a printed reason when no Vulkan device is available, unless
//! `TRINE_REQUIRE_BACKENDS` names `vulkan`. With `TRINE_VULKAN_VALIDATION=1` every test also
//! fails on any validation-layer error.

mod gpu_suite;

use trine_backends::vulkan::{VulkanBackend, VALIDATION_ENV};
use trine_backends::{Backend, BackendError, DeviceType};

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

//! Opening Vulkan without `XDG_RUNTIME_DIR` prints nothing. wgpu enables every window-system
//! extension of the instance, so Mesa's drivers (lavapipe) connect to Wayland and libwayland
//! prints "XDG_RUNTIME_DIR is invalid or not set" on each device enumeration when it is unset,
//! as it is under CI, ssh and cron; the `trine` binary sets it to a private directory before
//! anything opens Vulkan.
//!
//! The probe subcommand opens a backend in the binary's own process and runs a kernel on it,
//! so its stderr is what a user of `trine generate --backend wgpu` would see. A backend that
//! is not found is skipped with a printed reason, unless `TRINE_REQUIRE_BACKENDS` names it.

use std::path::Path;
use std::process::Command;
use trine_backends::probe::SUBCOMMAND;

fn required(backend: &str) -> bool {
    std::env::var("TRINE_REQUIRE_BACKENDS").is_ok_and(|v| v.split(',').any(|b| b.trim() == backend))
}

#[test]
fn vulkan_drivers_open_without_the_runtime_dir_warning() {
    // A temporary directory of the test's own, so the runtime directory the binary makes is
    // made fresh here.
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("runtime_dir");
    std::fs::create_dir_all(&tmp).unwrap();
    for backend in ["vulkan", "wgpu"] {
        let out = Command::new(env!("CARGO_BIN_EXE_trine"))
            .args([SUBCOMMAND, backend])
            .env_remove("XDG_RUNTIME_DIR")
            .env("TMPDIR", &tmp)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            assert!(
                !required(backend),
                "TRINE_REQUIRE_BACKENDS names {backend}, but its probe failed:\n{stdout}\n{stderr}"
            );
            println!("{backend} skipped: its probe failed:\n{stdout}");
            continue;
        }
        assert!(
            stdout.contains(r#""done":"compare""#),
            "{backend}: the probe did not finish:\n{stdout}"
        );
        assert!(
            !stderr.contains("XDG_RUNTIME_DIR"),
            "{backend}: stderr:\n{stderr}"
        );
    }
}

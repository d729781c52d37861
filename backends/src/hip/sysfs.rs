//! The amdgpu driver's memory counters in sysfs, matched to a HIP device by PCI bus id.
//!
//! `hipMemGetInfo` on an APU can report only the VRAM carve-out (often 512 MiB) while the GPU
//! really works from the GTT pool in system memory (half of RAM by default). The driver
//! publishes both under `/sys/class/drm/cardN/device/mem_info_{vram,gtt}_{total,used}`.

use std::path::Path;

pub(super) const DRM_ROOT: &str = "/sys/class/drm";

/// The driver's counters for one GPU, in bytes; a counter the driver lacks is `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct DrmMemory {
    pub vram_total: Option<u64>,
    pub vram_used: Option<u64>,
    pub gtt_total: Option<u64>,
    pub gtt_used: Option<u64>,
}

/// The counters of the card whose PCI address is `pci_bus_id` (`0000:c3:00.0`, as
/// `hipDeviceGetPCIBusId` writes it; compared without case). `None` when no card matches or
/// it has no counters (another driver, a container without sysfs).
pub(super) fn drm_memory(root: &Path, pci_bus_id: &str) -> Option<DrmMemory> {
    let want = pci_bus_id.trim().to_ascii_lowercase();
    for entry in std::fs::read_dir(root).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // `card0`, not the connectors `card0-DP-1` nor the render nodes.
        let is_card = name
            .strip_prefix("card")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !is_card {
            continue;
        }
        let device = entry.path().join("device");
        let Ok(target) = std::fs::canonicalize(&device) else {
            continue;
        };
        let address = target
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase());
        if address.as_deref() != Some(want.as_str()) {
            continue;
        }
        let read = |file: &str| -> Option<u64> {
            std::fs::read_to_string(device.join(file))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        let m = DrmMemory {
            vram_total: read("mem_info_vram_total"),
            vram_used: read("mem_info_vram_used"),
            gtt_total: read("mem_info_gtt_total"),
            gtt_used: read("mem_info_gtt_used"),
        };
        return (m != DrmMemory::default()).then_some(m);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A fake `/sys`: `devices/<pci>/…` and `class/drm/cardN/device` symlinks to them.
    fn fake_sys(name: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("trine-sysfs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dev = |pci: &str, files: &[(&str, &str)]| {
            let d = root.join("devices").join(pci);
            std::fs::create_dir_all(&d).unwrap();
            for (f, v) in files {
                std::fs::write(d.join(f), v).unwrap();
            }
            d
        };
        let igpu = dev(
            "0000:c3:00.0",
            &[
                ("mem_info_vram_total", "536870912\n"),
                ("mem_info_vram_used", "104857600\n"),
                ("mem_info_gtt_total", "16642998272\n"),
                ("mem_info_gtt_used", "20971520\n"),
            ],
        );
        let other = dev("0000:01:00.0", &[]);
        let drm = root.join("class").join("drm");
        for (card, target) in [("card1", &igpu), ("card0", &other), ("card1-eDP-1", &igpu)] {
            std::fs::create_dir_all(drm.join(card)).unwrap();
            std::os::unix::fs::symlink(target, drm.join(card).join("device")).unwrap();
        }
        root
    }

    #[test]
    fn finds_the_card_by_pci_address() {
        let root = fake_sys("match");
        let drm = root.join("class").join("drm");
        let m = drm_memory(&drm, "0000:C3:00.0").unwrap();
        assert_eq!(m.vram_total, Some(512 << 20));
        assert_eq!(m.vram_used, Some(100 << 20));
        assert_eq!(m.gtt_total, Some(16642998272));
        assert_eq!(m.gtt_used, Some(20 << 20));
        // A card without counters, and an address no card has.
        assert_eq!(drm_memory(&drm, "0000:01:00.0"), None);
        assert_eq!(drm_memory(&drm, "0000:02:00.0"), None);
        assert_eq!(drm_memory(&root.join("missing"), "0000:c3:00.0"), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}

//! What the HIP runtime and the amdgpu driver say about one device, and the [`DeviceInfo`]
//! made from it.
//!
//! Everything comes from `hipDeviceGetAttribute`, `hipDeviceGetName` and
//! `hipDeviceGetPCIBusId`, whose interfaces are stable across ROCm 5 to 7, except the ISA
//! name, which only `hipGetDeviceProperties` reports (see [`super::ffi::Props`]).

use super::comgr::isa_of;
use super::ffi::{self, attr, until_nul};
use super::loader::Runtime;
use super::sysfs::{self, DrmMemory};
use crate::error::BackendError;
use crate::info::{DeviceInfo, DeviceType, MemoryInfo};
use std::ffi::{c_char, c_int};
use std::path::Path;

pub(super) struct Device {
    pub name: String,
    /// `gcnArchName`, features included (`gfx90a:sramecc+:xnack-`).
    pub gcn_arch: String,
    /// The ISA name kernels are compiled for (`gfx90a`).
    pub isa: String,
    pub integrated: bool,
    pub warp_size: u32,
    pub max_shared: u64,
    pub max_threads: u32,
    pub max_grid: [u32; 3],
    pub compute_units: u32,
    pub pci_bus_id: Option<String>,
    pub mem_free: u64,
    pub mem_total: u64,
    pub drm: Option<DrmMemory>,
}

/// Queries device `index`, which is current on this thread.
pub(super) fn query(rt: &Runtime, index: c_int) -> Result<Device, BackendError> {
    let hip = &rt.hip;
    let attribute = |call: &'static str, a: c_int| -> Result<i32, BackendError> {
        let mut v = 0;
        // SAFETY: an out-parameter, a known attribute, a valid device index.
        hip.check(call, unsafe {
            (hip.hipDeviceGetAttribute)(&mut v, a, index)
        })?;
        Ok(v)
    };
    // Attributes are non-negative ints; a negative one would be a runtime bug, read as 0.
    let unsigned = |v: i32| u32::try_from(v).unwrap_or(0);

    let mut name = [0u8; 256];
    // SAFETY: the buffer holds `len` bytes; the runtime writes a NUL-terminated name into it.
    let code = unsafe {
        (hip.hipDeviceGetName)(
            name.as_mut_ptr().cast::<c_char>(),
            name.len() as c_int,
            index,
        )
    };
    hip.check("hipDeviceGetName", code)?;
    let name = String::from_utf8_lossy(until_nul(&name)).trim().to_string();

    let mut bus = [0u8; 64];
    // SAFETY: as for the name.
    let code = unsafe {
        (hip.hipDeviceGetPCIBusId)(bus.as_mut_ptr().cast::<c_char>(), bus.len() as c_int, index)
    };
    let pci_bus_id = (code == ffi::SUCCESS)
        .then(|| String::from_utf8_lossy(until_nul(&bus)).trim().to_string())
        .filter(|s| !s.is_empty());

    let props = rt.props.as_ref().ok_or_else(|| {
        BackendError::Unavailable(format!(
            "cannot read the device's architecture: ROCm {} has no hipGetDeviceProperties \
             trine knows the layout of",
            rt.info.version.as_deref().unwrap_or("(unknown version)")
        ))
    })?;
    let gcn_arch = props.arch_name(hip, index)?;
    let isa = isa_of(&gcn_arch).to_string();

    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: out-parameters; the device is current.
    hip.check("hipMemGetInfo", unsafe {
        (hip.hipMemGetInfo)(&mut free, &mut total)
    })?;

    Ok(Device {
        name,
        gcn_arch,
        isa,
        integrated: attribute("hipDeviceGetAttribute(Integrated)", attr::INTEGRATED)? != 0,
        warp_size: unsigned(attribute(
            "hipDeviceGetAttribute(WarpSize)",
            attr::WARP_SIZE,
        )?),
        max_shared: u64::from(unsigned(attribute(
            "hipDeviceGetAttribute(MaxSharedMemoryPerBlock)",
            attr::MAX_SHARED_MEMORY_PER_BLOCK,
        )?)),
        max_threads: unsigned(attribute(
            "hipDeviceGetAttribute(MaxThreadsPerBlock)",
            attr::MAX_THREADS_PER_BLOCK,
        )?),
        max_grid: [
            unsigned(attribute(
                "hipDeviceGetAttribute(MaxGridDimX)",
                attr::MAX_GRID_DIM_X,
            )?),
            unsigned(attribute(
                "hipDeviceGetAttribute(MaxGridDimY)",
                attr::MAX_GRID_DIM_Y,
            )?),
            unsigned(attribute(
                "hipDeviceGetAttribute(MaxGridDimZ)",
                attr::MAX_GRID_DIM_Z,
            )?),
        ],
        compute_units: unsigned(attribute(
            "hipDeviceGetAttribute(MultiprocessorCount)",
            attr::MULTIPROCESSOR_COUNT,
        )?),
        drm: pci_bus_id
            .as_deref()
            .and_then(|id| sysfs::drm_memory(Path::new(sysfs::DRM_ROOT), id)),
        pci_bus_id,
        mem_free: free as u64,
        mem_total: total as u64,
    })
}

/// The memory a device can use. On an APU the budget is the larger of what HIP reports and
/// the driver's GTT pool: HIP may report only the VRAM carve-out (often 512 MiB) while the
/// GPU works from system memory mapped through the GTT.
pub(super) fn memory(dev: &Device) -> (MemoryInfo, String) {
    let gtt = dev.drm.and_then(|d| d.gtt_total);
    let device_local = if dev.integrated {
        dev.mem_total.max(gtt.unwrap_or(0))
    } else {
        dev.mem_total
    };
    let mib = |b: u64| format!("{} MiB", b >> 20);
    let pair = |used: Option<u64>, total: Option<u64>| match (used, total) {
        (Some(u), Some(t)) => format!("{} used of {}", mib(u), mib(t)),
        (None, Some(t)) => mib(t),
        _ => "unknown".to_string(),
    };
    let mut note = format!(
        "memory: hipMemGetInfo {} free of {}",
        mib(dev.mem_free),
        mib(dev.mem_total)
    );
    match &dev.drm {
        Some(d) => note.push_str(&format!(
            "; amdgpu VRAM {}, GTT {}",
            pair(d.vram_used, d.vram_total),
            pair(d.gtt_used, d.gtt_total)
        )),
        None => note.push_str("; no amdgpu memory counters in sysfs for this device"),
    }
    if dev.integrated && device_local > dev.mem_total {
        note.push_str(&format!(
            "; budget {} (the GTT pool, not the VRAM carve-out)",
            mib(device_local)
        ));
    }
    let info = MemoryInfo {
        device_local,
        host_visible: gtt.unwrap_or(0),
        unified: dev.integrated,
        zero_copy: false,
    };
    (info, note)
}

/// Whether the HIP lowering's matrix tiles run on `isa`: RDNA3's WMMA (gfx11) in wave32, the
/// form trine_codegen's HIP tiles take. gfx12 has WMMA with another operand layout.
fn has_wmma(isa: &str, warp_size: u32) -> bool {
    isa.starts_with("gfx11") && warp_size == 32
}

/// The device's [`DeviceInfo`].
pub(super) fn device_info(rt: &Runtime, dev: &Device) -> DeviceInfo {
    let (memory, memory_note) = memory(dev);
    let mut notes = rt.info.notes.clone();
    if dev.gcn_arch != dev.isa {
        notes.push(format!(
            "gcnArchName {} (kernels are compiled for {})",
            dev.gcn_arch, dev.isa
        ));
    }
    if let Ok(v) = std::env::var("HSA_OVERRIDE_GFX_VERSION") {
        notes.push(format!(
            "HSA_OVERRIDE_GFX_VERSION={v} is set: the device presents itself as {}",
            dev.isa
        ));
    }
    match &rt.info.compiler_isas {
        Some(isas) if !isas.contains(&dev.isa) => notes.push(format!(
            "the compiler (comgr) does not list {}: kernels compile in a child process and \
             will likely fail",
            dev.isa
        )),
        _ => {}
    }
    if let Some(bus) = &dev.pci_bus_id {
        notes.push(format!("PCI {bus}, {} compute units", dev.compute_units));
    }
    notes.push(memory_note);
    if let Some(hiprtc) = &rt.info.hiprtc {
        notes.push(format!("hiprtc from {hiprtc}"));
    }
    let version = rt.info.version.as_deref().unwrap_or("unknown");
    DeviceInfo {
        backend: "hip".into(),
        name: dev.name.clone(),
        vendor: "AMD".into(),
        device_type: if dev.integrated {
            DeviceType::Integrated
        } else {
            DeviceType::Discrete
        },
        arch: Some(dev.isa.clone()),
        max_binding_bytes: memory.device_local,
        memory,
        subgroup_sizes: vec![dev.warp_size],
        subgroup_width_pinned: false,
        // Wavefront shuffles are part of every AMD ISA HIP supports.
        subgroup_ops: dev.warp_size > 0,
        f16: true,
        int8: true,
        tiles: has_wmma(&dev.isa, dev.warp_size),
        async_copy: false,
        group_mma: false,
        compute_units: Some(dev.compute_units).filter(|&n| n > 0),
        max_shared_bytes: dev.max_shared,
        max_invocations: dev.max_threads,
        max_workgroups: dev.max_grid,
        min_binding_alignment: 4,
        timestamps: true,
        driver: rt.info.library.clone(),
        runtime_version: format!("HIP {version}"),
        notes,
        tuning: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(integrated: bool, total: u64, gtt: Option<u64>) -> Device {
        Device {
            name: "test".into(),
            gcn_arch: "gfx1103".into(),
            isa: "gfx1103".into(),
            integrated,
            warp_size: 32,
            max_shared: 65536,
            max_threads: 1024,
            max_grid: [u32::MAX; 3],
            compute_units: 12,
            pci_bus_id: Some("0000:c3:00.0".into()),
            mem_free: total / 2,
            mem_total: total,
            drm: gtt.map(|g| DrmMemory {
                vram_total: Some(total),
                vram_used: Some(0),
                gtt_total: Some(g),
                gtt_used: Some(0),
            }),
        }
    }

    #[test]
    fn tiles_on_rdna3_in_wave32_only() {
        assert!(has_wmma("gfx1103", 32) && has_wmma("gfx1151", 32) && has_wmma("gfx1100", 32));
        assert!(!has_wmma("gfx1100", 64));
        for isa in ["gfx1030", "gfx1013", "gfx90c", "gfx942", "gfx1201"] {
            assert!(!has_wmma(isa, 32), "{isa}");
        }
    }

    #[test]
    fn an_apu_budgets_the_gtt_pool() {
        let (m, note) = memory(&device(true, 512 << 20, Some(16 << 30)));
        assert_eq!(m.device_local, 16 << 30);
        assert!(m.unified);
        assert!(note.contains("budget 16384 MiB (the GTT pool"), "{note}");
        assert!(note.contains("GTT 0 MiB used of 16384 MiB"), "{note}");
    }

    #[test]
    fn a_discrete_gpu_budgets_its_vram() {
        let (m, note) = memory(&device(false, 8 << 30, Some(16 << 30)));
        assert_eq!(m.device_local, 8 << 30);
        assert!(!m.unified);
        assert!(!note.contains("budget"), "{note}");
        // Without sysfs counters an APU keeps what HIP reports.
        let (m, note) = memory(&device(true, 512 << 20, None));
        assert_eq!(m.device_local, 512 << 20);
        assert!(note.contains("no amdgpu memory counters"), "{note}");
    }
}

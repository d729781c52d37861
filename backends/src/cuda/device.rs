//! Choosing the CUDA device and describing it as a [`DeviceInfo`].

use super::driver::{attr, CuDevice, Driver, CUDA_ERROR_NO_DEVICE, CUDA_SUCCESS};
use super::nvrtc::Nvrtc;
use crate::error::BackendError;
use crate::info::{DeviceInfo, DeviceType, MemoryInfo};
use std::ffi::{c_char, c_int};

/// Environment variable choosing the device by index (default 0).
pub const DEVICE_ENV: &str = "TRINE_CUDA_DEVICE";

/// Alignment of binding offsets: 16 bytes, so that a lowering may load four words at once;
/// allocations themselves are 256-byte aligned.
const BINDING_ALIGNMENT: u64 = 16;

/// What the backend needs to know about its device beyond [`DeviceInfo`].
pub struct Device {
    /// Compute capability as `major * 10 + minor` (90 for sm_90).
    pub arch: u32,
    pub max_block: [u32; 3],
}

/// The device `TRINE_CUDA_DEVICE` names, or the first. No device → `Unavailable`.
pub fn select(driver: &Driver) -> Result<CuDevice, BackendError> {
    let mut count: c_int = 0;
    // SAFETY: a valid out-pointer; the driver is initialised.
    let code = unsafe { (driver.device_get_count)(&mut count) };
    if code == CUDA_ERROR_NO_DEVICE || (code == CUDA_SUCCESS && count == 0) {
        return Err(BackendError::Unavailable(
            "the NVIDIA driver reports no CUDA device".into(),
        ));
    }
    driver.check("cuDeviceGetCount", code)?;
    let index = match std::env::var(DEVICE_ENV) {
        Err(_) => 0,
        Ok(v) => match v.trim().parse::<c_int>() {
            Ok(i) if (0..count).contains(&i) => i,
            _ => {
                return Err(BackendError::Unavailable(format!(
                    "{DEVICE_ENV}={v:?} is not a device index (this machine has {count})"
                )))
            }
        },
    };
    let mut device: CuDevice = 0;
    // SAFETY: a valid out-pointer and an ordinal below the device count.
    driver.check("cuDeviceGet", unsafe {
        (driver.device_get)(&mut device, index)
    })?;
    Ok(device)
}

fn attribute(driver: &Driver, device: CuDevice, which: c_int) -> Result<u32, BackendError> {
    let mut v: c_int = 0;
    // SAFETY: a valid out-pointer, a device from cuDeviceGet and a documented attribute.
    driver.check("cuDeviceGetAttribute", unsafe {
        (driver.device_get_attribute)(&mut v, which, device)
    })?;
    Ok(u32::try_from(v).unwrap_or(0))
}

/// The kernel driver's version from `/proc/driver/nvidia/version` ("580.159.04"), which the
/// CUDA API does not report.
fn kernel_driver_version() -> Option<String> {
    parse_driver_version(&std::fs::read_to_string("/proc/driver/nvidia/version").ok()?)
}

/// The first dotted number after "Kernel Module" on the first line: both the proprietary
/// ("Kernel Module  580.159.04") and the open ("Kernel Module for x86_64  580.159.04") wording.
fn parse_driver_version(text: &str) -> Option<String> {
    let after = text.lines().next()?.split("Kernel Module").nth(1)?;
    after
        .split_whitespace()
        .find(|t| {
            t.contains('.')
                && t.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

/// Reads the device's properties. `free_memory` is what `cuMemGetInfo` reported once the
/// context was current.
pub fn describe(
    driver: &Driver,
    nvrtc: &Nvrtc,
    device: CuDevice,
    free_memory: Option<u64>,
) -> Result<(Device, DeviceInfo), BackendError> {
    let a = |which| attribute(driver, device, which);
    let mut name = [0 as c_char; 256];
    // SAFETY: the buffer holds 256 bytes, the length passed; the driver NUL-terminates.
    driver.check("cuDeviceGetName", unsafe {
        (driver.device_get_name)(name.as_mut_ptr(), name.len() as c_int, device)
    })?;
    let name: Vec<u8> = name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let name = String::from_utf8_lossy(&name).into_owned();
    let mut total = 0usize;
    // SAFETY: a valid out-pointer and device.
    driver.check("cuDeviceTotalMem", unsafe {
        (driver.device_total_mem)(&mut total, device)
    })?;
    let mut version: c_int = 0;
    // SAFETY: a valid out-pointer.
    driver.check("cuDriverGetVersion", unsafe {
        (driver.driver_get_version)(&mut version)
    })?;
    let (major, minor) = (
        a(attr::COMPUTE_CAPABILITY_MAJOR)?,
        a(attr::COMPUTE_CAPABILITY_MINOR)?,
    );
    let arch = major * 10 + minor;
    let integrated = a(attr::INTEGRATED)? != 0;
    let warp = a(attr::WARP_SIZE)?;
    let shared = a(attr::MAX_SHARED_MEMORY_PER_BLOCK)?;
    let shared_optin = a(attr::MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?;
    let sms = a(attr::MULTIPROCESSOR_COUNT)?;
    let max_block = [
        a(attr::MAX_BLOCK_DIM_X)?,
        a(attr::MAX_BLOCK_DIM_Y)?,
        a(attr::MAX_BLOCK_DIM_Z)?,
    ];
    let cuda = format!("{}.{}", version / 1000, (version % 1000) / 10);
    let driver_text = match kernel_driver_version() {
        Some(v) => format!("NVIDIA {v}, CUDA {cuda}"),
        None => format!("NVIDIA, CUDA {cuda}"),
    };
    let (nv_major, nv_minor) = nvrtc.version;
    let mut notes = vec![
        format!("compute capability {major}.{minor}, {sms} multiprocessors"),
        format!(
            "shared memory: {shared} bytes per block declared statically, {shared_optin} with \
             the dynamic opt-in, which kernels of more than {} bytes take",
            trine_codegen::CUDA_STATIC_SHARED_BYTES
        ),
        format!("NVRTC {nv_major}.{nv_minor} at {}", nvrtc.path.display()),
        "compiled with --fmad=false: a*b+c rounds twice, as in the interpreter".into(),
    ];
    match &nvrtc.include {
        Some(dir) => notes.push(format!("cuda_fp16.h from {}", dir.display())),
        None => notes.push(
            "no CUDA include directory found: kernels using f16 will not compile (set CUDA_PATH)"
                .into(),
        ),
    }
    if let Some(free) = free_memory {
        notes.push(format!("{} MiB free at start", free >> 20));
    }
    let info = DeviceInfo {
        backend: "cuda".into(),
        name,
        vendor: "NVIDIA".into(),
        device_type: if integrated {
            DeviceType::Integrated
        } else {
            DeviceType::Discrete
        },
        arch: Some(format!("sm_{arch}")),
        memory: MemoryInfo {
            device_local: total as u64,
            host_visible: 0,
            unified: integrated,
            zero_copy: false,
        },
        subgroup_sizes: vec![warp],
        subgroup_width_pinned: false,
        subgroup_ops: true,
        f16: true,
        int8: true,
        tiles: arch >= super::TILES_MIN_ARCH,
        async_copy: arch >= super::ASYNC_COPY_MIN_ARCH,
        group_mma: arch == super::GROUP_MMA_ARCH,
        compute_units: Some(sms).filter(|&n| n > 0),
        max_shared_bytes: u64::from(shared.max(shared_optin)),
        max_invocations: a(attr::MAX_THREADS_PER_BLOCK)?,
        max_workgroups: [
            a(attr::MAX_GRID_DIM_X)?,
            a(attr::MAX_GRID_DIM_Y)?,
            a(attr::MAX_GRID_DIM_Z)?,
        ],
        max_binding_bytes: total as u64,
        min_binding_alignment: BINDING_ALIGNMENT,
        timestamps: true,
        driver: driver_text,
        runtime_version: format!("CUDA {cuda}, NVRTC {nv_major}.{nv_minor}"),
        notes,
        tuning: crate::Tuning {
            launches_overlap: super::overlaps(arch, driver),
            ..Default::default()
        },
    };
    Ok((Device { arch, max_block }, info))
}

#[cfg(test)]
mod tests {
    use super::parse_driver_version;

    #[test]
    fn driver_version_from_either_kernel_module() {
        let proprietary = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct 2 \
                           2025\nGCC version: gcc 12";
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release";
        assert_eq!(
            parse_driver_version(proprietary).as_deref(),
            Some("580.159.04")
        );
        assert_eq!(parse_driver_version(open).as_deref(), Some("580.159.04"));
        assert_eq!(parse_driver_version("garbage"), None);
    }
}

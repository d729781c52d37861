//! The device's [`DeviceInfo`], read from what wgpu reports: the adapter's description, the
//! device's features and its limits (which, for a device a host application made, may be
//! lower than the adapter's).

use crate::info::{driver_string, vendor_name, DeviceInfo, DeviceType, MemoryInfo};

pub fn device_info(device: &wgpu::Device) -> DeviceInfo {
    let a = device.adapter_info();
    let features = device.features();
    let limits = device.limits();
    let mut notes = vec![];
    let subgroup_ops = features.contains(wgpu::Features::SUBGROUP);
    let subgroup_sizes = if subgroup_ops {
        let mut sizes = vec![a.subgroup_min_size, a.subgroup_max_size];
        sizes.dedup();
        sizes
    } else {
        notes.push("subgroup kernels unavailable: the device lacks Features::SUBGROUP".into());
        vec![]
    };
    let f16 = features.contains(wgpu::Features::SHADER_F16);
    if !f16 {
        notes.push("f16 kernels unavailable: the device lacks Features::SHADER_F16".into());
    }
    let timestamps = features.contains(wgpu::Features::TIMESTAMP_QUERY);
    if !timestamps {
        notes.push("no timestamp queries: dispatch_timed measures host time".into());
    }
    notes.push(
        "wgpu reports no memory sizes; buffers are read and written through a staging buffer"
            .into(),
    );
    let device_type = match a.device_type {
        wgpu::DeviceType::DiscreteGpu => DeviceType::Discrete,
        wgpu::DeviceType::IntegratedGpu => DeviceType::Integrated,
        wgpu::DeviceType::VirtualGpu => DeviceType::Virtual,
        wgpu::DeviceType::Cpu => DeviceType::Cpu,
        wgpu::DeviceType::Other => DeviceType::Other,
    };
    let per_dim = limits.max_compute_workgroups_per_dimension;
    DeviceInfo {
        backend: "wgpu".into(),
        name: a.name.clone(),
        vendor: vendor_name(a.vendor),
        device_type,
        arch: None,
        memory: MemoryInfo {
            device_local: 0,
            host_visible: 0,
            unified: matches!(device_type, DeviceType::Integrated | DeviceType::Cpu),
            zero_copy: false,
        },
        subgroup_sizes,
        // wgpu has no way to require a subgroup size.
        subgroup_width_pinned: false,
        subgroup_ops,
        f16,
        // Kernels read 8-bit data as 32-bit words; no 8-bit arithmetic is asked of wgpu.
        int8: false,
        // wgpu's cooperative matrices are experimental and not requested.
        tiles: false,
        async_copy: false,
        group_mma: false,
        compute_units: None,
        max_shared_bytes: limits.max_compute_workgroup_storage_size.into(),
        max_invocations: limits.max_compute_invocations_per_workgroup,
        max_workgroups: [per_dim; 3],
        max_binding_bytes: limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size),
        // Storage-only buffers are read as u32 words, so offsets stay word aligned everywhere.
        min_binding_alignment: u64::from(limits.min_storage_buffer_offset_alignment).max(4),
        timestamps,
        driver: driver_string(&a.driver, &a.driver_info),
        runtime_version: format!("wgpu 30 on {}", a.backend),
        notes,
        tuning: Default::default(),
    }
}

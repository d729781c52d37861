//! The adapter trine runs on, and the device it asks wgpu for: every feature of trine's
//! kernels the adapter has, and the adapter's own limits (not WebGPU's defaults, which cap
//! bindings at 128 MiB and shared memory at 16 KiB).

use crate::error::BackendError;

/// Names the adapter: its index in `trine doctor`'s order, or a substring of its name.
pub const ADAPTER_ENV: &str = "TRINE_WGPU_ADAPTER";

/// The features trine's kernels use where the adapter has them. `IMMEDIATES` carries the grid
/// words and parameters of every kernel; the rest pick kernel variants.
pub fn wanted_features() -> wgpu::Features {
    wgpu::Features::IMMEDIATES
        | wgpu::Features::SHADER_F16
        | wgpu::Features::SUBGROUP
        | wgpu::Features::SUBGROUP_BARRIER
        | wgpu::Features::TIMESTAMP_QUERY
}

/// What a host application passes to `Adapter::request_device` so that the device it then
/// shares with trine ([`super::WgpuBackend::from_device`]) runs every kernel variant the
/// adapter can: trine's features where the adapter has them, and the adapter's limits.
pub fn device_descriptor(adapter: &wgpu::Adapter) -> wgpu::DeviceDescriptor<'static> {
    wgpu::DeviceDescriptor {
        label: Some("trine"),
        required_features: adapter.features() & wanted_features(),
        required_limits: adapter.limits(),
        memory_hints: wgpu::MemoryHints::Performance,
        ..Default::default()
    }
}

/// Every adapter wgpu finds, in its order (the order `TRINE_WGPU_ADAPTER`'s index counts). The
/// APIs searched follow `WGPU_BACKEND` (e.g. `vulkan`, `metal`, `dx12`), default all that this
/// build has.
pub fn adapters() -> Vec<wgpu::Adapter> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    // No validation layers or debug labels unless asked for (`WGPU_VALIDATION=1`,
    // `WGPU_DEBUG=1`): debug builds turn them on by default, and the layer may be absent.
    desc.flags = wgpu::InstanceFlags::empty();
    let instance = wgpu::Instance::new(desc.with_env());
    // Adapters keep what they need of their instance alive.
    pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
}

/// The adapter `TRINE_WGPU_ADAPTER` names, else the best: discrete, integrated, virtual, CPU,
/// other; among equals, the one with the most of trine's features.
pub fn choose(adapters: Vec<wgpu::Adapter>) -> Result<wgpu::Adapter, BackendError> {
    if adapters.is_empty() {
        return Err(BackendError::Unavailable(
            "wgpu found no adapter (no Vulkan, Metal or DX12 device; WGPU_BACKEND limits \
             which are searched)"
                .into(),
        ));
    }
    let listed = || {
        adapters
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let info = a.get_info();
                format!("{i}: {} ({:?})", info.name, info.backend)
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Ok(want) = std::env::var(ADAPTER_ENV) {
        let want = want.trim();
        let at = match want.parse::<usize>() {
            Ok(i) => (i < adapters.len()).then_some(i),
            Err(_) => adapters.iter().position(|a| {
                a.get_info()
                    .name
                    .to_lowercase()
                    .contains(&want.to_lowercase())
            }),
        };
        return match at {
            Some(i) => Ok(adapters.into_iter().nth(i).expect("index checked")),
            None => Err(BackendError::Unavailable(format!(
                "{ADAPTER_ENV}={want:?} names no adapter; wgpu has {}",
                listed()
            ))),
        };
    }
    let rank = |a: &wgpu::Adapter| {
        let kind = match a.get_info().device_type {
            wgpu::DeviceType::DiscreteGpu => 4,
            wgpu::DeviceType::IntegratedGpu => 3,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Cpu => 1,
            wgpu::DeviceType::Other => 0,
        };
        let has = a.features();
        let features = wanted_features()
            .iter()
            .filter(|&f| has.contains(f))
            .count();
        (kind, features)
    };
    let mut adapters = adapters;
    // Stable: among equal ranks the first wgpu listed wins.
    let best = (0..adapters.len())
        .rev()
        .max_by_key(|&i| rank(&adapters[i]))
        .expect("not empty");
    Ok(adapters.swap_remove(best))
}

/// A device on `adapter` with [`device_descriptor`]'s features and limits.
pub fn request(adapter: &wgpu::Adapter) -> Result<(wgpu::Device, wgpu::Queue), BackendError> {
    pollster::block_on(adapter.request_device(&device_descriptor(adapter))).map_err(|e| {
        BackendError::Unavailable(format!(
            "wgpu could not open a device on {}: {e}",
            adapter.get_info().name
        ))
    })
}

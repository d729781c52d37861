//! What the chosen device can do: its [`DeviceInfo`], and the features trine enables on it.

use super::instance::{version, Candidate, Enable, Instance};
use super::memory::MemoryPlan;
use crate::info::{DeviceInfo, DeviceType, MemoryInfo};
use ash::vk;
use std::ffi::CStr;

/// The features kernels may need, as enabled on the device.
#[derive(Clone, Copy, Debug, Default)]
pub struct Features {
    pub float16: bool,
    /// Both `storageBuffer16BitAccess` and `uniformAndStorageBuffer16BitAccess`: naga declares
    /// the latter's capability for f16 buffers.
    pub storage16: bool,
    /// Subgroup basic, arithmetic and shuffle operations in compute shaders.
    pub subgroups: bool,
    /// `shaderZeroInitializeWorkgroupMemory`: workgroup variables with initializers.
    pub zero_init_workgroup: bool,
    /// `shaderIntegerDotProduct`: packed 8-bit dot products as `OpSDot`/`OpUDot`.
    pub integer_dot: bool,
    /// Cooperative matrices of the tiles' shape, with the Vulkan memory model.
    pub tiles: bool,
    /// `subgroupSizeControl` for compute shaders: a kernel that declares a subgroup width
    /// gets it as the pipeline's required subgroup size, where the device has several.
    pub pinned_width: bool,
    /// `computeFullSubgroups`: a pinned kernel whose workgroups are whole subgroups is asked
    /// for them (`REQUIRE_FULL_SUBGROUPS`), as its division of work among subgroups assumes.
    pub full_subgroups: bool,
    /// The driver's statistics of each pipeline it compiles, printed to stderr
    /// ([`PIPELINE_STATS_ENV`]).
    pub pipeline_stats: bool,
}

/// `TRINE_VULKAN_PIPELINE_STATS=1`: print the driver's statistics of every compute pipeline
/// built (registers, spills, shared memory, as the driver names them), where it has
/// VK_KHR_pipeline_executable_properties. For finding why a kernel runs slower under one
/// driver than another; off by default, as capturing them may slow compiles.
pub const PIPELINE_STATS_ENV: &str = "TRINE_VULKAN_PIPELINE_STATS";

/// Everything learned about the device before creating it.
pub struct Probe {
    pub info: DeviceInfo,
    pub enable: Enable,
    pub features: Features,
    pub limits: vk::PhysicalDeviceLimits,
    pub memory: MemoryPlan,
    /// The heaps `DeviceInfo::memory.device_local` counts, where VK_EXT_memory_budget can say
    /// how much of them is left.
    pub budget_heaps: Option<Vec<usize>>,
}

const SUBGROUP_OPS: vk::SubgroupFeatureFlags = vk::SubgroupFeatureFlags::from_raw(
    vk::SubgroupFeatureFlags::BASIC.as_raw()
        | vk::SubgroupFeatureFlags::ARITHMETIC.as_raw()
        | vk::SubgroupFeatureFlags::SHUFFLE.as_raw(),
);

pub fn probe(instance: &Instance, c: &Candidate) -> Probe {
    let vk_instance = &instance.instance;
    let api12 = c.api >= vk::API_VERSION_1_2;
    let api13 = c.api >= vk::API_VERSION_1_3;
    // SAFETY: a plain query on a physical device of this instance.
    let extensions = unsafe { vk_instance.enumerate_device_extension_properties(c.physical) }
        .unwrap_or_default();
    let has_ext = |name: &CStr| {
        extensions
            .iter()
            .any(|e| e.extension_name_as_c_str() == Ok(name))
    };
    // Structs of 1.2/1.3 are only chained where the API version or the extension defines them.
    let float16_int8_ext = !api12 && has_ext(vk::KHR_SHADER_FLOAT16_INT8_NAME);
    let storage8_ext = !api12 && has_ext(vk::KHR_8BIT_STORAGE_NAME);
    let float16_int8_struct = api12 || float16_int8_ext;
    let storage8_struct = api12 || storage8_ext;
    let driver_struct = api12 || has_ext(vk::KHR_DRIVER_PROPERTIES_NAME);
    let size_control_ext = !api13 && has_ext(vk::EXT_SUBGROUP_SIZE_CONTROL_NAME);
    let size_control_struct = api13 || size_control_ext;
    let zero_init_ext = !api13 && has_ext(vk::KHR_ZERO_INITIALIZE_WORKGROUP_MEMORY_NAME);
    let zero_init_struct = api13 || zero_init_ext;
    let dot_ext = !api13 && has_ext(vk::KHR_SHADER_INTEGER_DOT_PRODUCT_NAME);
    let dot_struct = api13 || dot_ext;
    // The memory model's struct is core in 1.2; before that its extension would be needed too,
    // and no driver with cooperative matrices is older.
    let coop_ext = api12 && has_ext(vk::KHR_COOPERATIVE_MATRIX_NAME);
    let stats_wanted = std::env::var(PIPELINE_STATS_ENV).is_ok_and(|v| v.trim() == "1");
    let stats_ext = stats_wanted && has_ext(vk::KHR_PIPELINE_EXECUTABLE_PROPERTIES_NAME);

    let mut storage16 = vk::PhysicalDevice16BitStorageFeatures::default();
    let mut float16_int8 = vk::PhysicalDeviceShaderFloat16Int8Features::default();
    let mut storage8 = vk::PhysicalDevice8BitStorageFeatures::default();
    let mut zero_init = vk::PhysicalDeviceZeroInitializeWorkgroupMemoryFeatures::default();
    let mut integer_dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
    let mut cooperative = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut size_control_features = vk::PhysicalDeviceSubgroupSizeControlFeatures::default();
    let mut memory_model = vk::PhysicalDeviceVulkanMemoryModelFeatures::default();
    let mut executables = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
    let mut features2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut storage16);
    if float16_int8_struct {
        features2 = features2.push_next(&mut float16_int8);
    }
    if storage8_struct {
        features2 = features2.push_next(&mut storage8);
    }
    if zero_init_struct {
        features2 = features2.push_next(&mut zero_init);
    }
    if dot_struct {
        features2 = features2.push_next(&mut integer_dot);
    }
    if size_control_struct {
        features2 = features2.push_next(&mut size_control_features);
    }
    if coop_ext {
        features2 = features2
            .push_next(&mut cooperative)
            .push_next(&mut memory_model);
    }
    if stats_ext {
        features2 = features2.push_next(&mut executables);
    }
    // SAFETY: the chain holds only structs this device's API version or extensions define,
    // each borrowed for the call.
    unsafe { vk_instance.get_physical_device_features2(c.physical, &mut features2) };
    let pipeline_stats = stats_ext && executables.pipeline_executable_info == vk::TRUE;

    let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
    let mut size_control = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
    let mut driver = vk::PhysicalDeviceDriverProperties::default();
    let mut maintenance3 = vk::PhysicalDeviceMaintenance3Properties::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default()
        .push_next(&mut subgroup)
        .push_next(&mut maintenance3);
    if size_control_struct {
        props2 = props2.push_next(&mut size_control);
    }
    if driver_struct {
        props2 = props2.push_next(&mut driver);
    }
    let mut nv_sms = vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV::default();
    let nv_sms_ext = has_ext(vk::NV_SHADER_SM_BUILTINS_NAME);
    if nv_sms_ext {
        props2 = props2.push_next(&mut nv_sms);
    }
    let mut amd_cores = vk::PhysicalDeviceShaderCorePropertiesAMD::default();
    let amd_cores_ext = has_ext(vk::AMD_SHADER_CORE_PROPERTIES_NAME);
    if amd_cores_ext {
        props2 = props2.push_next(&mut amd_cores);
    }
    // SAFETY: as for the features above.
    unsafe { vk_instance.get_physical_device_properties2(c.physical, &mut props2) };
    let props = props2.properties;
    let compute_units = if nv_sms_ext {
        Some(nv_sms.shader_sm_count)
    } else if amd_cores_ext {
        Some(
            amd_cores.shader_engine_count
                * amd_cores.shader_arrays_per_engine_count
                * amd_cores.compute_units_per_shader_array,
        )
    } else {
        None
    }
    .filter(|&n| n > 0);
    // SAFETY: a plain query on a physical device of this instance.
    let memory_props = unsafe { vk_instance.get_physical_device_memory_properties(c.physical) };

    let shape = if coop_ext && cooperative.cooperative_matrix == vk::TRUE {
        tile_shape(instance, c.physical)
    } else {
        Err("no VK_KHR_cooperative_matrix".to_string())
    };
    let tiles = shape.is_ok()
        && memory_model.vulkan_memory_model == vk::TRUE
        && memory_model.vulkan_memory_model_device_scope == vk::TRUE;
    let pinned_width = size_control_struct
        && size_control_features.subgroup_size_control == vk::TRUE
        && size_control
            .required_subgroup_size_stages
            .contains(vk::ShaderStageFlags::COMPUTE);
    let full_subgroups = pinned_width && size_control_features.compute_full_subgroups == vk::TRUE;
    let enable = Enable {
        storage16: storage16.storage_buffer16_bit_access == vk::TRUE,
        uniform_storage16: storage16.uniform_and_storage_buffer16_bit_access == vk::TRUE,
        float16: float16_int8.shader_float16 == vk::TRUE,
        int8: float16_int8.shader_int8 == vk::TRUE,
        storage8: storage8.storage_buffer8_bit_access == vk::TRUE,
        zero_init_workgroup: zero_init.shader_zero_initialize_workgroup_memory == vk::TRUE,
        integer_dot: integer_dot.shader_integer_dot_product == vk::TRUE,
        float16_int8_struct,
        storage8_struct,
        zero_init_struct,
        integer_dot_struct: dot_struct,
        tiles,
        pinned_width,
        full_subgroups,
        pipeline_stats,
        extensions: [
            (float16_int8_ext, vk::KHR_SHADER_FLOAT16_INT8_NAME),
            (storage8_ext, vk::KHR_8BIT_STORAGE_NAME),
            (zero_init_ext, vk::KHR_ZERO_INITIALIZE_WORKGROUP_MEMORY_NAME),
            (
                dot_ext && integer_dot.shader_integer_dot_product == vk::TRUE,
                vk::KHR_SHADER_INTEGER_DOT_PRODUCT_NAME,
            ),
            (tiles, vk::KHR_COOPERATIVE_MATRIX_NAME),
            (
                size_control_ext && pinned_width,
                vk::EXT_SUBGROUP_SIZE_CONTROL_NAME,
            ),
            (pipeline_stats, vk::KHR_PIPELINE_EXECUTABLE_PROPERTIES_NAME),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect(),
    };
    let features = Features {
        float16: enable.float16,
        storage16: enable.storage16 && enable.uniform_storage16,
        subgroups: subgroup
            .supported_stages
            .contains(vk::ShaderStageFlags::COMPUTE)
            && subgroup.supported_operations.contains(SUBGROUP_OPS),
        zero_init_workgroup: enable.zero_init_workgroup,
        integer_dot: enable.integer_dot,
        tiles,
        pinned_width,
        full_subgroups,
        pipeline_stats,
    };

    let device_type = match c.device_type {
        vk::PhysicalDeviceType::DISCRETE_GPU => DeviceType::Discrete,
        vk::PhysicalDeviceType::INTEGRATED_GPU => DeviceType::Integrated,
        vk::PhysicalDeviceType::VIRTUAL_GPU => DeviceType::Virtual,
        vk::PhysicalDeviceType::CPU => DeviceType::Cpu,
        _ => DeviceType::Other,
    };
    let unified = matches!(device_type, DeviceType::Integrated | DeviceType::Cpu);
    let max_allocation = if maintenance3.max_memory_allocation_size > 0 {
        maintenance3.max_memory_allocation_size
    } else {
        u64::MAX
    };
    let memory = MemoryPlan::new(&memory_props, unified, max_allocation);

    let mut notes = instance.notes.clone();
    if stats_wanted && !pipeline_stats {
        notes.push(format!(
            "{PIPELINE_STATS_ENV}=1, but the driver offers no pipeline statistics \
             (VK_KHR_pipeline_executable_properties)"
        ));
    }
    let subgroup_sizes = if features.subgroups {
        subgroup_sizes(
            &subgroup,
            size_control_struct.then_some(&size_control),
            &mut notes,
        )
    } else {
        notes.push(format!(
            "subgroup kernels unavailable: compute stage subgroup support {:?} with operations {:?} \
             (trine needs basic, arithmetic and shuffle)",
            subgroup.supported_stages, subgroup.supported_operations
        ));
        vec![]
    };
    if let Err(why) = &shape {
        notes.push(format!("matrix tiles unavailable: {why}"));
    } else if !tiles {
        notes.push("matrix tiles unavailable: no vulkanMemoryModel (device scope)".into());
    }
    let f16 = features.float16 && features.storage16;
    if !f16 {
        notes.push(format!(
            "f16 kernels unavailable: shaderFloat16 {}, storageBuffer16BitAccess {}, \
             uniformAndStorageBuffer16BitAccess {}",
            enable.float16, enable.storage16, enable.uniform_storage16
        ));
    }
    if !features.zero_init_workgroup {
        notes.push(
            "no shaderZeroInitializeWorkgroupMemory: kernels whose SPIR-V zero-initialises \
             shared memory are unsupported"
                .into(),
        );
    }
    let timestamps = c.timestamp_bits > 0 && props.limits.timestamp_period > 0.0;
    if !timestamps {
        notes.push("no timestamps on the compute queue: dispatch_timed measures host time".into());
    }
    notes.push(if memory.zero_copy() {
        "buffers are host-mapped device memory (zero copy)".into()
    } else {
        "buffers live in device-local memory; reads and writes go through a staging buffer".into()
    });

    let heaps = memory_props.memory_heaps_as_slice();
    let local_heaps: Vec<usize> = if unified {
        (0..heaps.len()).collect()
    } else {
        (0..heaps.len())
            .filter(|&i| heaps[i].flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
            .max_by_key(|&i| heaps[i].size)
            .into_iter()
            .collect()
    };
    let device_local = local_heaps.iter().map(|&i| heaps[i].size).sum();
    let host_visible = heaps
        .iter()
        .enumerate()
        .filter(|&(i, _)| {
            memory_props.memory_types_as_slice().iter().any(|t| {
                t.heap_index as usize == i
                    && t.property_flags
                        .contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
            })
        })
        .map(|(_, h)| h.size)
        .sum();

    let info = DeviceInfo {
        backend: "vulkan".into(),
        name: c.name.clone(),
        vendor: crate::info::vendor_name(props.vendor_id),
        device_type,
        arch: None,
        memory: MemoryInfo {
            device_local,
            host_visible,
            unified,
            zero_copy: memory.zero_copy(),
        },
        subgroup_sizes,
        subgroup_width_pinned: features.pinned_width,
        subgroup_ops: features.subgroups,
        f16,
        int8: enable.int8 && enable.storage8,
        tiles: tiles && f16,
        async_copy: false,
        group_mma: false,
        compute_units,
        max_shared_bytes: props.limits.max_compute_shared_memory_size.into(),
        max_invocations: props.limits.max_compute_work_group_invocations,
        max_workgroups: props.limits.max_compute_work_group_count,
        max_binding_bytes: props.limits.max_storage_buffer_range.into(),
        // Storage-only buffers are read as u32 words, so offsets stay word aligned everywhere.
        min_binding_alignment: props.limits.min_storage_buffer_offset_alignment.max(4),
        timestamps,
        driver: if driver_struct {
            driver_name(&driver)
        } else {
            format!("driver version {}", version(props.driver_version))
        },
        runtime_version: format!("Vulkan {}", version(props.api_version)),
        notes,
        tuning: tuning(props.vendor_id),
    };
    Probe {
        info,
        enable,
        features,
        limits: props.limits,
        memory,
        budget_heaps: has_ext(vk::EXT_MEMORY_BUDGET_NAME).then_some(local_heaps),
    }
}

/// Whether VK_KHR_cooperative_matrix offers the IR's tile product at subgroup scope: 16 × 16
/// × 16 with f16 A and B and an f32 accumulator and result (NVIDIA from Turing, RADV on RDNA3
/// with ACO); else what it offers, in words.
fn tile_shape(instance: &Instance, physical: vk::PhysicalDevice) -> Result<(), String> {
    let coop = ash::khr::cooperative_matrix::Instance::new(&instance.entry, &instance.instance);
    // SAFETY: a plain query on a physical device of this instance, whose extension is present.
    let props = unsafe { coop.get_physical_device_cooperative_matrix_properties(physical) }
        .map_err(|e| format!("vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR: {e}"))?;
    let n = trine_ir::TILE;
    let f16 = vk::ComponentTypeKHR::FLOAT16;
    let f32 = vk::ComponentTypeKHR::FLOAT32;
    let fits = |p: &vk::CooperativeMatrixPropertiesKHR<'_>| {
        (p.m_size, p.n_size, p.k_size) == (n, n, n)
            && (p.a_type, p.b_type, p.c_type, p.result_type) == (f16, f16, f32, f32)
            && p.scope == vk::ScopeKHR::SUBGROUP
            && p.saturating_accumulation == vk::FALSE
    };
    if props.iter().any(fits) {
        return Ok(());
    }
    let offered: Vec<String> = props
        .iter()
        .map(|p| {
            format!(
                "{}x{}x{} {:?}*{:?}+{:?}",
                p.m_size, p.n_size, p.k_size, p.a_type, p.b_type, p.c_type
            )
        })
        .collect();
    Err(format!(
        "cooperative matrices offer no {n}x{n}x{n} f16*f16+f32 at subgroup scope ({})",
        offered.join(", ")
    ))
}

/// Smallest and largest subgroup width: the size-control range where the device reports one,
/// else the one fixed size.
fn subgroup_sizes(
    subgroup: &vk::PhysicalDeviceSubgroupProperties<'_>,
    size_control: Option<&vk::PhysicalDeviceSubgroupSizeControlProperties<'_>>,
    notes: &mut Vec<String>,
) -> Vec<u32> {
    let default = subgroup.subgroup_size;
    match size_control {
        Some(s) if s.min_subgroup_size > 0 && s.min_subgroup_size < s.max_subgroup_size => {
            notes.push(format!("compute kernels run with subgroups of {default}"));
            vec![s.min_subgroup_size, s.max_subgroup_size]
        }
        _ => vec![default],
    }
}

fn driver_name(d: &vk::PhysicalDeviceDriverProperties<'_>) -> String {
    let text = |s: Result<&CStr, _>| {
        s.map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    crate::info::driver_string(
        &text(d.driver_name_as_c_str()),
        &text(d.driver_info_as_c_str()),
    )
}

/// NVIDIA's Vulkan driver: its tiled flash attention takes about twice CUDA's time per block
/// of keys, so cutting the keys into chunks shortens the dispatch (`docs/bench/prefill.md`).
fn tuning(vendor_id: u32) -> crate::Tuning {
    const NVIDIA: u32 = 0x10de;
    let nvidia = vendor_id == NVIDIA;
    crate::Tuning {
        flash_key_chunks: nvidia,
        ..Default::default()
    }
}

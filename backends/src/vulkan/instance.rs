//! The loader, the instance (with the validation layer on request) and the choice of device.

use crate::error::BackendError;
use ash::vk;
use std::ffi::{c_void, CStr};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// Env var that turns the validation layer on (`1`).
pub const VALIDATION_ENV: &str = "TRINE_VULKAN_VALIDATION";
/// Env var that picks a device by index or by a substring of its name.
pub const DEVICE_ENV: &str = "TRINE_VULKAN_DEVICE";

/// The loader and the instance. Dropping it destroys the instance: every device made from it
/// must be gone by then.
pub struct Instance {
    pub instance: ash::Instance,
    /// The API version the instance was created with (1.1, 1.2 or 1.3).
    pub api: u32,
    messenger: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    /// Validation errors reported so far. Boxed so that its address, handed to the layer as
    /// user data, stays put while the instance lives.
    validation_errors: Box<AtomicU64>,
    pub notes: Vec<String>,
    /// The process's loader ([`loader`]), which outlives every instance.
    pub entry: ash::Entry,
}

/// The system's Vulkan loader, opened once per process and never closed, with its drivers
/// pinned ([`pin_drivers`]).
fn loader() -> Result<ash::Entry, BackendError> {
    static LOADER: OnceLock<Result<ash::Entry, String>> = OnceLock::new();
    LOADER
        .get_or_init(|| {
            // SAFETY: opening the system's Vulkan loader runs its initialisers; it is the
            // library every Vulkan program loads, and this static keeps it open for good.
            let entry = unsafe { ash::Entry::load() }.map_err(|e| {
                format!(
                    "the Vulkan loader (libvulkan.so.1) could not be opened: {e}; install it \
                     (Debian/Ubuntu: libvulkan1) and a driver (mesa-vulkan-drivers or the GPU \
                     vendor's)"
                )
            })?;
            pin_drivers(&entry);
            Ok(entry)
        })
        .clone()
        .map_err(BackendError::Unavailable)
}

/// Creates one bare instance that is never destroyed, so that the loader never unloads the
/// drivers. The loader closes a driver's library when the last instance that loaded it is
/// destroyed, but NVIDIA's driver leaves thread-exit destructors behind in the threads that
/// used it, which then jump into the unmapped library: about half the runs of the executor
/// tests, whose threads each open and drop a Vulkan and a CUDA backend, ended in a SIGSEGV at a
/// test thread's exit (the faulting address unmapped, beside the driver's mappings), and none
/// with this instance. Where it cannot be made, the real instance reports why.
fn pin_drivers(entry: &ash::Entry) {
    // SAFETY: a default create info (API 1.0, no layers or extensions) borrows nothing; the
    // instance is deliberately never destroyed.
    let _pinned = unsafe { entry.create_instance(&vk::InstanceCreateInfo::default(), None) };
}

impl Instance {
    pub fn new() -> Result<Instance, BackendError> {
        let entry = loader()?;
        // SAFETY: a plain query on a loaded entry.
        let loader = unsafe { entry.try_enumerate_instance_version() }
            .map_err(|e| unavailable("vkEnumerateInstanceVersion", e))?
            .unwrap_or(vk::API_VERSION_1_0);
        if loader < vk::API_VERSION_1_1 {
            return Err(BackendError::Unavailable(format!(
                "the Vulkan loader supports only API {}; trine needs 1.1",
                version(loader)
            )));
        }
        let api = if loader >= vk::API_VERSION_1_3 {
            vk::API_VERSION_1_3
        } else {
            vk::make_api_version(0, 1, vk::api_version_minor(loader), 0)
        };

        let mut notes = vec![];
        let wants_validation = std::env::var(VALIDATION_ENV).is_ok_and(|v| v.trim() == "1");
        let validation = wants_validation && has_layer(&entry, VALIDATION_LAYER);
        if wants_validation && !validation {
            let msg = format!(
                "{VALIDATION_ENV}=1 but {} is not installed (Debian: vulkan-validationlayers)",
                VALIDATION_LAYER.to_string_lossy()
            );
            let _ = writeln!(std::io::stderr(), "trine vulkan: {msg}");
            notes.push(msg);
        }
        let layer_exts = if validation {
            // SAFETY: a plain query on a loaded entry with a NUL-terminated layer name.
            unsafe { entry.enumerate_instance_extension_properties(Some(VALIDATION_LAYER)) }
                .unwrap_or_default()
        } else {
            vec![]
        };
        let layer_has = |name: &CStr| {
            layer_exts
                .iter()
                .any(|e| e.extension_name_as_c_str() == Ok(name))
        };
        let debug_utils = validation && layer_has(vk::EXT_DEBUG_UTILS_NAME);
        let sync_validation = validation && layer_has(vk::EXT_VALIDATION_FEATURES_NAME);

        let layers = if validation {
            vec![VALIDATION_LAYER.as_ptr()]
        } else {
            vec![]
        };
        let mut extensions = vec![];
        if debug_utils {
            extensions.push(vk::EXT_DEBUG_UTILS_NAME.as_ptr());
        }
        if sync_validation {
            extensions.push(vk::EXT_VALIDATION_FEATURES_NAME.as_ptr());
        }

        let validation_errors = Box::new(AtomicU64::new(0));
        let user_data = std::ptr::from_ref::<AtomicU64>(&validation_errors)
            .cast_mut()
            .cast::<c_void>();
        let mut messenger_info = messenger_create_info(user_data);
        let enabled_features = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut validation_features =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(&enabled_features);
        let app = vk::ApplicationInfo::default()
            .application_name(c"trine")
            .engine_name(c"trine")
            .api_version(api);
        let mut create = vk::InstanceCreateInfo::default()
            .application_info(&app)
            .enabled_layer_names(&layers)
            .enabled_extension_names(&extensions);
        if debug_utils {
            // Chained too so that instance creation and destruction are reported.
            create = create.push_next(&mut messenger_info);
        }
        if sync_validation {
            create = create.push_next(&mut validation_features);
        }
        // SAFETY: every pointer in `create` borrows locals that outlive the call; the user
        // data points into a box that outlives the instance (see `validation_errors`).
        let instance = unsafe { entry.create_instance(&create, None) }.map_err(|e| match e {
            vk::Result::ERROR_INCOMPATIBLE_DRIVER => BackendError::Unavailable(
                "no Vulkan driver found (vkCreateInstance: ERROR_INCOMPATIBLE_DRIVER); install \
                 one (mesa-vulkan-drivers or the GPU vendor's)"
                    .into(),
            ),
            e => unavailable("vkCreateInstance", e),
        })?;

        let mut this = Instance {
            instance,
            api,
            messenger: None,
            validation_errors,
            notes,
            entry,
        };
        if debug_utils {
            let loader = ash::ext::debug_utils::Instance::new(&this.entry, &this.instance);
            let info = messenger_create_info(user_data);
            // SAFETY: the instance enabled VK_EXT_debug_utils; the user data outlives the
            // messenger, which `Drop` destroys before the instance.
            let messenger = unsafe { loader.create_debug_utils_messenger(&info, None) }
                .map_err(|e| unavailable("vkCreateDebugUtilsMessengerEXT", e))?;
            this.messenger = Some((loader, messenger));
        }
        if validation {
            this.notes.push(format!(
                "validation layer on{}",
                if sync_validation {
                    " (with synchronization validation)"
                } else {
                    ""
                }
            ));
        }
        Ok(this)
    }

    /// Whether the validation layer reports to this instance.
    pub fn validation(&self) -> bool {
        self.messenger.is_some()
    }

    /// Validation errors the layer has reported so far.
    pub fn validation_errors(&self) -> u64 {
        self.validation_errors.load(Ordering::Relaxed)
    }

    /// The physical device to use: the one `TRINE_VULKAN_DEVICE` names, otherwise the best
    /// type (discrete > integrated > virtual > CPU) among those that can run trine.
    pub fn select(&self) -> Result<Candidate, BackendError> {
        // SAFETY: a plain query on a live instance.
        let devices = unsafe { self.instance.enumerate_physical_devices() }
            .map_err(|e| unavailable("vkEnumeratePhysicalDevices", e))?;
        if devices.is_empty() {
            return Err(BackendError::Unavailable(
                "the Vulkan loader found no device; install a driver (mesa-vulkan-drivers for \
                 AMD/Intel and the CPU, the vendor's for NVIDIA)"
                    .into(),
            ));
        }
        let candidates: Vec<Result<Candidate, String>> =
            devices.iter().map(|&pd| self.candidate(pd)).collect();
        let names: Vec<String> = candidates
            .iter()
            .enumerate()
            .map(|(i, c)| match c {
                Ok(c) => format!("{i}: {}", c.name),
                Err(why) => format!("{i}: {why}"),
            })
            .collect();

        if let Ok(wanted) = std::env::var(DEVICE_ENV) {
            let wanted = wanted.trim();
            let index = match wanted.parse::<usize>() {
                Ok(i) => Some(i),
                Err(_) => candidates.iter().position(|c| match c {
                    Ok(c) => c.name.to_lowercase().contains(&wanted.to_lowercase()),
                    Err(_) => false,
                }),
            };
            return match index.and_then(|i| candidates.into_iter().nth(i)) {
                Some(Ok(c)) => Ok(c),
                Some(Err(why)) => Err(BackendError::Unavailable(format!(
                    "{DEVICE_ENV}={wanted} names a device trine cannot use: {why}"
                ))),
                None => Err(BackendError::Unavailable(format!(
                    "{DEVICE_ENV}={wanted} matches no device; devices: {}",
                    names.join("; ")
                ))),
            };
        }
        candidates
            .into_iter()
            .flatten()
            .min_by_key(|c| type_rank(c.device_type))
            .ok_or_else(|| {
                BackendError::Unavailable(format!(
                    "no Vulkan device can run trine: {}",
                    names.join("; ")
                ))
            })
    }

    /// Whether `pd` can run trine (API ≥ 1.1, a compute queue), with what selection needs.
    fn candidate(&self, pd: vk::PhysicalDevice) -> Result<Candidate, String> {
        // SAFETY: plain queries on a physical device of this instance.
        let (props, families) = unsafe {
            (
                self.instance.get_physical_device_properties(pd),
                self.instance
                    .get_physical_device_queue_family_properties(pd),
            )
        };
        let name = props
            .device_name_as_c_str()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "unnamed device".into());
        if props.api_version < vk::API_VERSION_1_1 {
            return Err(format!(
                "{name} supports only Vulkan {}; trine needs 1.1",
                version(props.api_version)
            ));
        }
        let queue_family =
            pick_queue_family(&families).ok_or_else(|| format!("{name} has no compute queue"))?;
        Ok(Candidate {
            physical: pd,
            name,
            device_type: props.device_type,
            api: props.api_version.min(self.api),
            queue_family,
            timestamp_bits: families[queue_family as usize].timestamp_valid_bits,
            pipeline_cache_key: format!(
                "{:04x}-{:04x}-{:08x}-{}",
                props.vendor_id,
                props.device_id,
                props.driver_version,
                props
                    .pipeline_cache_uuid
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            ),
        })
    }

    /// Creates the logical device with one queue of the candidate's family and `enable`'s
    /// features and extensions.
    pub fn create_device(&self, c: &Candidate, enable: &Enable) -> Result<Device, BackendError> {
        let priorities = [1.0f32];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(c.queue_family)
            .queue_priorities(&priorities)];
        let mut storage16 = vk::PhysicalDevice16BitStorageFeatures::default()
            .storage_buffer16_bit_access(enable.storage16)
            .uniform_and_storage_buffer16_bit_access(enable.uniform_storage16);
        let mut float16_int8 = vk::PhysicalDeviceShaderFloat16Int8Features::default()
            .shader_float16(enable.float16)
            .shader_int8(enable.int8);
        let mut storage8 = vk::PhysicalDevice8BitStorageFeatures::default()
            .storage_buffer8_bit_access(enable.storage8);
        let mut zero_init = vk::PhysicalDeviceZeroInitializeWorkgroupMemoryFeatures::default()
            .shader_zero_initialize_workgroup_memory(enable.zero_init_workgroup);
        let mut integer_dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default()
            .shader_integer_dot_product(enable.integer_dot);
        let mut cooperative = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default()
            .cooperative_matrix(enable.tiles);
        let mut memory_model = vk::PhysicalDeviceVulkanMemoryModelFeatures::default()
            .vulkan_memory_model(enable.tiles)
            .vulkan_memory_model_device_scope(enable.tiles);
        let mut executables = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
            .pipeline_executable_info(enable.pipeline_stats);
        let mut size_control = vk::PhysicalDeviceSubgroupSizeControlFeatures::default()
            .subgroup_size_control(true)
            .compute_full_subgroups(enable.full_subgroups);
        let extensions: Vec<_> = enable.extensions.iter().map(|e| e.as_ptr()).collect();
        let mut create = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&extensions)
            .push_next(&mut storage16);
        if enable.float16_int8_struct {
            create = create.push_next(&mut float16_int8);
        }
        if enable.storage8_struct {
            create = create.push_next(&mut storage8);
        }
        if enable.zero_init_struct {
            create = create.push_next(&mut zero_init);
        }
        if enable.integer_dot_struct {
            create = create.push_next(&mut integer_dot);
        }
        if enable.tiles {
            create = create
                .push_next(&mut cooperative)
                .push_next(&mut memory_model);
        }
        if enable.pipeline_stats {
            create = create.push_next(&mut executables);
        }
        if enable.pinned_width {
            create = create.push_next(&mut size_control);
        }
        // SAFETY: `create` borrows locals that outlive the call; the feature structs are only
        // chained where the device's API version or an enabled extension defines them.
        let device = unsafe { self.instance.create_device(c.physical, &create, None) }
            .map_err(|e| unavailable("vkCreateDevice", e))?;
        // SAFETY: the device was created with one queue of this family.
        let queue = unsafe { device.get_device_queue(c.queue_family, 0) };
        Ok(Device {
            device,
            queue,
            queue_family: c.queue_family,
        })
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: every device made from this instance is destroyed by now (the backend's field
        // order ensures it); the messenger belongs to this instance.
        unsafe {
            if let Some((loader, messenger)) = self.messenger.take() {
                loader.destroy_debug_utils_messenger(messenger, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

/// A physical device trine can use.
pub struct Candidate {
    pub physical: vk::PhysicalDevice,
    pub name: String,
    pub device_type: vk::PhysicalDeviceType,
    /// The API version usable with it: the lower of the device's and the instance's.
    pub api: u32,
    pub queue_family: u32,
    pub timestamp_bits: u32,
    /// Names this device and driver's pipeline cache on disk: vendor, device, driver version
    /// and the driver's pipeline cache UUID, so another driver never gets the file.
    pub pipeline_cache_key: String,
}

/// What the logical device is created with (decided by `info::probe`).
#[derive(Default)]
pub struct Enable {
    pub storage16: bool,
    pub uniform_storage16: bool,
    pub float16: bool,
    pub int8: bool,
    pub storage8: bool,
    pub zero_init_workgroup: bool,
    pub integer_dot: bool,
    /// Whether `VkPhysicalDeviceShaderFloat16Int8Features` exists here (1.2 or its extension).
    pub float16_int8_struct: bool,
    /// Whether `VkPhysicalDevice8BitStorageFeatures` exists here.
    pub storage8_struct: bool,
    /// Whether `VkPhysicalDeviceZeroInitializeWorkgroupMemoryFeatures` exists here (1.3 or
    /// its extension).
    pub zero_init_struct: bool,
    /// Whether `VkPhysicalDeviceShaderIntegerDotProductFeatures` exists here (1.3 or its
    /// extension).
    pub integer_dot_struct: bool,
    /// `cooperativeMatrix` with `vulkanMemoryModel`, which its SPIR-V declares: on only where
    /// VK_KHR_cooperative_matrix offers the tiles' shape (see `info::tile_shape`).
    pub tiles: bool,
    /// `subgroupSizeControl` (VK_EXT_subgroup_size_control or 1.3), offered for compute
    /// shaders: kernels that declare a subgroup width are pinned to it.
    pub pinned_width: bool,
    /// `computeFullSubgroups` beside it.
    pub full_subgroups: bool,
    /// `pipelineExecutableInfo` (VK_KHR_pipeline_executable_properties), asked for by
    /// `info::PIPELINE_STATS_ENV`.
    pub pipeline_stats: bool,
    pub extensions: Vec<&'static CStr>,
}

/// The logical device and its queue. Dropping it destroys the device: everything made from it
/// must be destroyed first.
pub struct Device {
    pub device: ash::Device,
    pub queue: vk::Queue,
    pub queue_family: u32,
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: the backend destroys every object of this device before dropping it; waiting
        // first keeps a device that is still busy (after an error) from being destroyed in use.
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_device(None);
        }
    }
}

/// A compute-only family where there is one (it does not compete with graphics work), else
/// any family with compute; families with timestamps preferred within each.
fn pick_queue_family(families: &[vk::QueueFamilyProperties]) -> Option<u32> {
    families
        .iter()
        .enumerate()
        .filter(|(_, f)| f.queue_flags.contains(vk::QueueFlags::COMPUTE) && f.queue_count > 0)
        .min_by_key(|(_, f)| {
            (
                f.queue_flags.contains(vk::QueueFlags::GRAPHICS),
                f.timestamp_valid_bits == 0,
            )
        })
        .and_then(|(i, _)| u32::try_from(i).ok())
}

fn type_rank(t: vk::PhysicalDeviceType) -> u32 {
    match t {
        vk::PhysicalDeviceType::DISCRETE_GPU => 0,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 3,
        _ => 4,
    }
}

fn has_layer(entry: &ash::Entry, name: &CStr) -> bool {
    // SAFETY: a plain query on a loaded entry.
    unsafe { entry.enumerate_instance_layer_properties() }
        .unwrap_or_default()
        .iter()
        .any(|l| l.layer_name_as_c_str() == Ok(name))
}

fn messenger_create_info(user_data: *mut c_void) -> vk::DebugUtilsMessengerCreateInfoEXT<'static> {
    vk::DebugUtilsMessengerCreateInfoEXT::default()
        .message_severity(
            vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
        )
        .message_type(
            vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
        )
        .pfn_user_callback(Some(on_message))
        .user_data(user_data)
}

/// Prints every message to stderr and counts validation errors, so that tests can fail on them.
unsafe extern "system" fn on_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user_data: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the layer passes a valid callback-data struct (or null) for the duration of the
    // call, and `user_data` is the `AtomicU64` the instance keeps boxed while the messenger lives.
    let (message, errors) = unsafe {
        let message = data
            .as_ref()
            .and_then(|d| d.message_as_c_str())
            .map(|m| m.to_string_lossy().into_owned())
            .unwrap_or_default();
        (message, user_data.cast::<AtomicU64>().as_ref())
    };
    let is_error = severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR);
    if is_error && types.contains(vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION) {
        if let Some(errors) = errors {
            errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    let level = if is_error { "error" } else { "warning" };
    // Writing to stderr must not panic here: unwinding out of a callback the driver calls
    // would abort the process.
    let _ = writeln!(std::io::stderr(), "vulkan {level}: {message}");
    vk::FALSE
}

/// `major.minor.patch` of a Vulkan version number.
pub fn version(v: u32) -> String {
    format!(
        "{}.{}.{}",
        vk::api_version_major(v),
        vk::api_version_minor(v),
        vk::api_version_patch(v)
    )
}

fn unavailable(call: &str, e: vk::Result) -> BackendError {
    BackendError::Unavailable(format!("{call} failed: {e}"))
}

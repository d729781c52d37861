//! The CUDA driver API (`libcuda.so.1`), loaded at run time: the few functions the backend
//! calls, their types, and error codes turned into [`BackendError`]s.
//!
//! Only the driver's system copy is opened: the toolkit's `stubs/libcuda.so` exists for linking
//! and fails every call, so it is never searched for.

use crate::error::BackendError;
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;

pub type CuResult = c_int;
pub type CuDevice = c_int;
pub type CuDevicePtr = u64;
pub type CuContext = *mut c_void;
pub type CuModule = *mut c_void;
pub type CuFunction = *mut c_void;
pub type CuStream = *mut c_void;
pub type CuEvent = *mut c_void;
pub type CuGraph = *mut c_void;
pub type CuGraphExec = *mut c_void;

pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;
pub const CUDA_ERROR_NO_DEVICE: CuResult = 100;
/// `CU_STREAM_NON_BLOCKING`: the stream does not wait for the legacy default stream, which
/// other libraries in the process may use.
pub const STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`: a capture fails only on unsafe calls made by the
/// capturing thread, so other CUDA users in the process are left alone.
pub const CAPTURE_THREAD_LOCAL: c_uint = 1;

/// `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`: the launched kernel may start
/// while the kernel before it in the stream runs, and waits for it itself.
pub const LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: c_int = 6;
/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
pub const FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;

/// `CUlaunchAttribute`: an id, padding to 8 bytes, and a 64-byte union of values.
#[repr(C)]
pub struct LaunchAttribute {
    pub id: c_int,
    pub pad: [u8; 4],
    pub value: [u64; 8],
}

/// `CUlaunchConfig`, the launch description of `cuLaunchKernelEx`.
#[repr(C)]
pub struct LaunchConfig {
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared_mem_bytes: c_uint,
    pub stream: CuStream,
    pub attrs: *mut LaunchAttribute,
    pub num_attrs: c_uint,
}

/// `cuLaunchKernelEx` (CUDA 12.0 and later).
pub type LaunchKernelEx = unsafe extern "C" fn(
    *const LaunchConfig,
    CuFunction,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CuResult;

/// `CUdevice_attribute` values the backend reads.
pub mod attr {
    use std::ffi::c_int;
    pub const MAX_THREADS_PER_BLOCK: c_int = 1;
    pub const MAX_BLOCK_DIM_X: c_int = 2;
    pub const MAX_BLOCK_DIM_Y: c_int = 3;
    pub const MAX_BLOCK_DIM_Z: c_int = 4;
    pub const MAX_GRID_DIM_X: c_int = 5;
    pub const MAX_GRID_DIM_Y: c_int = 6;
    pub const MAX_GRID_DIM_Z: c_int = 7;
    pub const MAX_SHARED_MEMORY_PER_BLOCK: c_int = 8;
    pub const WARP_SIZE: c_int = 10;
    pub const MULTIPROCESSOR_COUNT: c_int = 16;
    pub const INTEGRATED: c_int = 18;
    pub const COMPUTE_CAPABILITY_MAJOR: c_int = 75;
    pub const COMPUTE_CAPABILITY_MINOR: c_int = 76;
    pub const MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: c_int = 97;
}

/// Declares the function table: one field per entry point, looked up by its exported name.
macro_rules! driver_api {
    ($($field:ident = $symbol:literal : fn($($arg:ty),*);)*) => {
        /// The driver's entry points. Valid while `_lib` is loaded, which is as long as the
        /// struct lives.
        pub struct Driver {
            $(pub $field: unsafe extern "C" fn($($arg),*) -> CuResult,)*
            /// `cuEventElapsedTime_v2` where the driver has it (CUDA 12.8+, the only name in
            /// CUDA 13's header), else the original with the same signature.
            pub event_elapsed_time: unsafe extern "C" fn(*mut f32, CuEvent, CuEvent) -> CuResult,
            /// `cuLaunchKernelEx` where the driver has it; without it no launch overlaps the
            /// one before it.
            pub launch_kernel_ex: Option<LaunchKernelEx>,
            get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
            _lib: Library,
        }

        impl Driver {
            /// Opens `libcuda.so.1` and looks up every entry point.
            fn load() -> Result<Driver, BackendError> {
                let lib = open_library()?;
                // SAFETY: each symbol is looked up under its documented name and given the
                // signature cuda.h declares for it; the pointers are kept beside the library
                // that owns them and never outlive it.
                unsafe {
                    type Elapsed = unsafe extern "C" fn(*mut f32, CuEvent, CuEvent) -> CuResult;
                    Ok(Driver {
                        $($field: *lib
                            .get::<unsafe extern "C" fn($($arg),*) -> CuResult>($symbol)
                            .map_err(|e| missing($symbol, e))?,)*
                        event_elapsed_time: *lib
                            .get::<Elapsed>(b"cuEventElapsedTime_v2\0")
                            .or_else(|_| lib.get::<Elapsed>(b"cuEventElapsedTime\0"))
                            .map_err(|e| missing(b"cuEventElapsedTime\0", e))?,
                        launch_kernel_ex: lib
                            .get::<LaunchKernelEx>(b"cuLaunchKernelEx\0")
                            .ok()
                            .map(|f| *f),
                        get_error_name: *lib
                            .get::<unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult>(
                                b"cuGetErrorName\0",
                            )
                            .map_err(|e| missing(b"cuGetErrorName\0", e))?,
                        _lib: lib,
                    })
                }
            }
        }
    };
}

driver_api! {
    init = b"cuInit\0": fn(c_uint);
    driver_get_version = b"cuDriverGetVersion\0": fn(*mut c_int);
    device_get_count = b"cuDeviceGetCount\0": fn(*mut c_int);
    device_get = b"cuDeviceGet\0": fn(*mut CuDevice, c_int);
    device_get_name = b"cuDeviceGetName\0": fn(*mut c_char, c_int, CuDevice);
    device_total_mem = b"cuDeviceTotalMem_v2\0": fn(*mut usize, CuDevice);
    device_get_attribute = b"cuDeviceGetAttribute\0": fn(*mut c_int, c_int, CuDevice);
    primary_ctx_retain = b"cuDevicePrimaryCtxRetain\0": fn(*mut CuContext, CuDevice);
    primary_ctx_release = b"cuDevicePrimaryCtxRelease_v2\0": fn(CuDevice);
    ctx_set_current = b"cuCtxSetCurrent\0": fn(CuContext);
    mem_get_info = b"cuMemGetInfo_v2\0": fn(*mut usize, *mut usize);
    stream_create = b"cuStreamCreate\0": fn(*mut CuStream, c_uint);
    stream_destroy = b"cuStreamDestroy_v2\0": fn(CuStream);
    stream_synchronize = b"cuStreamSynchronize\0": fn(CuStream);
    mem_alloc = b"cuMemAlloc_v2\0": fn(*mut CuDevicePtr, usize);
    mem_free = b"cuMemFree_v2\0": fn(CuDevicePtr);
    mem_alloc_host = b"cuMemAllocHost_v2\0": fn(*mut *mut c_void, usize);
    mem_free_host = b"cuMemFreeHost\0": fn(*mut c_void);
    memset_d8_async = b"cuMemsetD8Async\0": fn(CuDevicePtr, u8, usize, CuStream);
    memcpy_htod_async = b"cuMemcpyHtoDAsync_v2\0": fn(CuDevicePtr, *const c_void, usize, CuStream);
    memcpy_dtoh_async = b"cuMemcpyDtoHAsync_v2\0": fn(*mut c_void, CuDevicePtr, usize, CuStream);
    memcpy_dtod_async = b"cuMemcpyDtoDAsync_v2\0": fn(CuDevicePtr, CuDevicePtr, usize, CuStream);
    module_load_data = b"cuModuleLoadData\0": fn(*mut CuModule, *const c_void);
    module_unload = b"cuModuleUnload\0": fn(CuModule);
    module_get_function = b"cuModuleGetFunction\0": fn(*mut CuFunction, CuModule, *const c_char);
    func_set_attribute = b"cuFuncSetAttribute\0": fn(CuFunction, c_int, c_int);
    launch_kernel = b"cuLaunchKernel\0": fn(
        CuFunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CuStream,
        *mut *mut c_void, *mut *mut c_void
    );
    event_create = b"cuEventCreate\0": fn(*mut CuEvent, c_uint);
    event_destroy = b"cuEventDestroy_v2\0": fn(CuEvent);
    event_record = b"cuEventRecord\0": fn(CuEvent, CuStream);
    event_synchronize = b"cuEventSynchronize\0": fn(CuEvent);
    stream_begin_capture = b"cuStreamBeginCapture_v2\0": fn(CuStream, c_uint);
    stream_end_capture = b"cuStreamEndCapture\0": fn(CuStream, *mut CuGraph);
    graph_instantiate = b"cuGraphInstantiateWithFlags\0": fn(*mut CuGraphExec, CuGraph, u64);
    graph_launch = b"cuGraphLaunch\0": fn(CuGraphExec, CuStream);
    graph_exec_destroy = b"cuGraphExecDestroy\0": fn(CuGraphExec);
    graph_destroy = b"cuGraphDestroy\0": fn(CuGraph);
}

fn missing(symbol: &[u8], e: libloading::Error) -> BackendError {
    let name = String::from_utf8_lossy(symbol.strip_suffix(b"\0").unwrap_or(symbol)).into_owned();
    BackendError::Unavailable(format!("libcuda.so.1 lacks {name} (driver too old?): {e}"))
}

/// Where the driver library is looked for: the loader's path, then where NVIDIA's container
/// toolkit mounts it when that directory is not on the path.
const LIBRARIES: [&str; 2] = ["libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1"];

/// The driver library: the system's `libcuda.so.1` (installed with the kernel driver).
fn open_library() -> Result<Library, BackendError> {
    let mut errors = vec![];
    for name in LIBRARIES {
        // SAFETY: loading the CUDA driver runs its initialisers, which only set up its own
        // state.
        match unsafe { Library::new(name) } {
            Ok(lib) => return Ok(lib),
            Err(e) => errors.push(e.to_string()),
        }
    }
    Err(BackendError::Unavailable(format!(
        "no NVIDIA driver: libcuda.so.1 could not be loaded ({})",
        errors.join("; ")
    )))
}

/// The driver, loaded and initialised (`cuInit`) once per process and never unloaded: the
/// driver starts threads of its own, and unloading the code under them crashes the process.
pub fn driver() -> Result<&'static Driver, BackendError> {
    static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();
    DRIVER
        .get_or_init(|| {
            let driver = Driver::load().map_err(|e| reason(&e))?;
            // SAFETY: cuInit takes flags 0 and may be called any number of times.
            let code = unsafe { (driver.init)(0) };
            match code {
                CUDA_SUCCESS => Ok(driver),
                CUDA_ERROR_NO_DEVICE => Err("the NVIDIA driver reports no CUDA device".into()),
                _ => Err(format!(
                    "cuInit failed: {} (driver and kernel module mismatched, or no permission on \
                     /dev/nvidia*?)",
                    driver.error_name(code)
                )),
            }
        })
        .as_ref()
        .map_err(|why| BackendError::Unavailable(why.clone()))
}

/// The words of an `Unavailable` error, the display of any other.
fn reason(e: &BackendError) -> String {
    match e {
        BackendError::Unavailable(why) => why.clone(),
        e => e.to_string(),
    }
}

impl Driver {
    /// `CUDA_ERROR_…` name of a result code, or its number when the driver has no name for it.
    pub fn error_name(&self, code: CuResult) -> String {
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: `name` is a valid out-pointer; on success the driver stores a pointer to a
        // static NUL-terminated string.
        let ok = unsafe { (self.get_error_name)(code, &mut name) } == CUDA_SUCCESS;
        if ok && !name.is_null() {
            // SAFETY: a static NUL-terminated string owned by the driver, checked non-null.
            let s = unsafe { CStr::from_ptr(name) }.to_string_lossy();
            format!("{s} ({code})")
        } else {
            format!("CUresult {code}")
        }
    }

    /// `Ok` on success, otherwise the error of `call`.
    pub fn check(&self, call: &'static str, code: CuResult) -> Result<(), BackendError> {
        if code == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(BackendError::Driver {
                call,
                code: self.error_name(code),
            })
        }
    }
}

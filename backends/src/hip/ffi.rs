//! The HIP runtime and hiprtc functions trine calls, as tables of function pointers resolved
//! from libraries opened at run time. Only the functions used are declared; their signatures
//! are the same in ROCm 5, 6 and 7.

use crate::error::BackendError;
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

pub(super) type HipError = c_int;
pub(super) type Stream = *mut c_void;
pub(super) type Module = *mut c_void;
pub(super) type Function = *mut c_void;
pub(super) type Event = *mut c_void;
pub(super) type RtcProgram = *mut c_void;
pub(super) type Graph = *mut c_void;
pub(super) type GraphExec = *mut c_void;

/// `hipStreamCaptureModeThreadLocal`: as CUDA's, a capture fails only on unsafe calls made by
/// the capturing thread.
pub(super) const CAPTURE_THREAD_LOCAL: c_int = 1;

pub(super) const SUCCESS: HipError = 0;
pub(super) const ERROR_OUT_OF_MEMORY: HipError = 2;
pub(super) const ERROR_NO_DEVICE: HipError = 100;
pub(super) const RTC_SUCCESS: c_int = 0;

/// `hipDeviceAttribute_t` values. The enum was renumbered once, in ROCm 5.0; these values
/// are the same in the 5.2 headers and the ROCm 6 and 7 ones (new attributes were only
/// appended to its ranges since).
pub(super) mod attr {
    use std::ffi::c_int;
    pub const INTEGRATED: c_int = 16;
    pub const MAX_GRID_DIM_X: c_int = 29;
    pub const MAX_GRID_DIM_Y: c_int = 30;
    pub const MAX_GRID_DIM_Z: c_int = 31;
    pub const MAX_THREADS_PER_BLOCK: c_int = 56;
    pub const MULTIPROCESSOR_COUNT: c_int = 63;
    pub const MAX_SHARED_MEMORY_PER_BLOCK: c_int = 74;
    pub const WARP_SIZE: c_int = 87;
}

/// Declares a table of C functions and its loader. Field names are the C symbol names.
macro_rules! table {
    ($(#[$meta:meta])* $name:ident { $($f:ident: fn($($a:ty),* $(,)?) -> $r:ty;)* }) => {
        $(#[$meta])*
        #[allow(non_snake_case)]
        pub(super) struct $name {
            $(pub $f: unsafe extern "C" fn($($a),*) -> $r,)*
        }

        impl $name {
            /// Resolves every function of the table in `lib`; the error names the first
            /// missing symbol.
            ///
            /// # Safety
            /// `lib` exports each symbol with the signature declared here and stays loaded
            /// for as long as the table is used.
            pub unsafe fn load(lib: &Library) -> Result<Self, String> {
                Ok(Self {
                    $($f: {
                        let name = concat!(stringify!($f), "\0").as_bytes();
                        // SAFETY: the caller's contract: the symbol has this signature.
                        let symbol = unsafe {
                            lib.get::<unsafe extern "C" fn($($a),*) -> $r>(name)
                        };
                        *symbol.map_err(|e| format!("{}: {e}", stringify!($f)))?
                    },)*
                })
            }
        }
    };
}
pub(super) use table;

table! {
    /// The HIP runtime (libamdhip64).
    Hip {
        hipInit: fn(c_uint) -> HipError;
        hipRuntimeGetVersion: fn(*mut c_int) -> HipError;
        hipDriverGetVersion: fn(*mut c_int) -> HipError;
        hipGetDeviceCount: fn(*mut c_int) -> HipError;
        hipDeviceGetAttribute: fn(*mut c_int, c_int, c_int) -> HipError;
        hipDeviceGetName: fn(*mut c_char, c_int, c_int) -> HipError;
        hipDeviceGetPCIBusId: fn(*mut c_char, c_int, c_int) -> HipError;
        hipSetDevice: fn(c_int) -> HipError;
        hipMemGetInfo: fn(*mut usize, *mut usize) -> HipError;
        hipMalloc: fn(*mut *mut c_void, usize) -> HipError;
        hipFree: fn(*mut c_void) -> HipError;
        hipMemset: fn(*mut c_void, c_int, usize) -> HipError;
        hipHostMalloc: fn(*mut *mut c_void, usize, c_uint) -> HipError;
        hipHostFree: fn(*mut c_void) -> HipError;
        hipMemcpyHtoDAsync: fn(*mut c_void, *mut c_void, usize, Stream) -> HipError;
        hipMemcpyDtoHAsync: fn(*mut c_void, *mut c_void, usize, Stream) -> HipError;
        hipStreamCreate: fn(*mut Stream) -> HipError;
        hipStreamSynchronize: fn(Stream) -> HipError;
        hipStreamDestroy: fn(Stream) -> HipError;
        hipModuleLoadData: fn(*mut Module, *const c_void) -> HipError;
        hipModuleUnload: fn(Module) -> HipError;
        hipModuleGetFunction: fn(*mut Function, Module, *const c_char) -> HipError;
        hipModuleLaunchKernel: fn(
            Function,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            c_uint,
            Stream,
            *mut *mut c_void,
            *mut *mut c_void,
        ) -> HipError;
        hipEventCreate: fn(*mut Event) -> HipError;
        hipEventRecord: fn(Event, Stream) -> HipError;
        hipEventSynchronize: fn(Event) -> HipError;
        hipEventElapsedTime: fn(*mut f32, Event, Event) -> HipError;
        hipEventDestroy: fn(Event) -> HipError;
        hipGetErrorString: fn(HipError) -> *const c_char;
    }
}

table! {
    /// HIP graphs (ROCm 4.3 and later): recordings are captured from the stream into one.
    Graphs {
        hipStreamBeginCapture: fn(Stream, c_int) -> HipError;
        hipStreamEndCapture: fn(Stream, *mut Graph) -> HipError;
        hipGraphInstantiate: fn(*mut GraphExec, Graph, *mut c_void, *mut c_char, usize) -> HipError;
        hipGraphLaunch: fn(GraphExec, Stream) -> HipError;
        hipGraphExecDestroy: fn(GraphExec) -> HipError;
        hipGraphDestroy: fn(Graph) -> HipError;
    }
}

table! {
    /// hiprtc: inside libamdhip64 on ROCm 5, libhiprtc on ROCm 6 and later.
    Rtc {
        hiprtcVersion: fn(*mut c_int, *mut c_int) -> c_int;
        hiprtcCreateProgram: fn(
            *mut RtcProgram,
            *const c_char,
            *const c_char,
            c_int,
            *const *const c_char,
            *const *const c_char,
        ) -> c_int;
        hiprtcCompileProgram: fn(RtcProgram, c_int, *const *const c_char) -> c_int;
        hiprtcGetProgramLogSize: fn(RtcProgram, *mut usize) -> c_int;
        hiprtcGetProgramLog: fn(RtcProgram, *mut c_char) -> c_int;
        hiprtcGetCodeSize: fn(RtcProgram, *mut usize) -> c_int;
        hiprtcGetCode: fn(RtcProgram, *mut c_char) -> c_int;
        hiprtcDestroyProgram: fn(*mut RtcProgram) -> c_int;
        hiprtcGetErrorString: fn(c_int) -> *const c_char;
    }
}

/// Copies a C string the library owns; `""` for a null pointer.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that stays valid during the call.
pub(super) unsafe fn c_string(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The text before the first NUL of a buffer a library filled (all of it if there is none).
pub(super) fn until_nul(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..end]
}

impl Hip {
    /// `hipErrorNoDevice (100)`: the runtime's name for the code, and the code.
    pub fn describe(&self, code: HipError) -> String {
        // SAFETY: hipGetErrorString accepts any value and returns a static string.
        let text = unsafe { c_string((self.hipGetErrorString)(code)) };
        format!("{text} ({code})")
    }

    /// `Ok` for hipSuccess, otherwise the driver error naming `call`.
    pub fn check(&self, call: &'static str, code: HipError) -> Result<(), BackendError> {
        if code == SUCCESS {
            return Ok(());
        }
        Err(BackendError::Driver {
            call,
            code: self.describe(code),
        })
    }
}

impl Rtc {
    pub fn describe(&self, code: c_int) -> String {
        // SAFETY: hiprtcGetErrorString accepts any value and returns a static string.
        let text = unsafe { c_string((self.hiprtcGetErrorString)(code)) };
        format!("{text} ({code})")
    }
}

/// `hipGetDeviceProperties`, used for the one thing no other call reports: the ISA name
/// (`gcnArchName`). Its struct changed in ROCm 6 (`hipDeviceProp_tR0600`, resolved under that
/// name; the plain name stays bound to the old layout for old binaries), so the struct is
/// not declared: the call fills a buffer larger than either layout and the name is read at
/// the offset of the layout matching the symbol.
pub(super) struct Props {
    get: unsafe extern "C" fn(*mut c_void, c_int) -> HipError,
    symbol: &'static str,
    /// Offset of `char gcnArchName[256]`.
    arch_offset: usize,
}

/// Larger than both layouts (792 bytes in ROCm 5, 1472 in R0600), so the call cannot write
/// past it even if a future release grows the struct a little.
const PROPS_BUFFER: usize = 4096;
const ARCH_NAME_LEN: usize = 256;

/// The layouts: symbol, offset of `gcnArchName`, and the ROCm major versions it applies to.
/// Offsets from `offsetof` over the ROCm 5.2 header and over ROCm 6.0's R0600 declaration.
const LAYOUTS: [(&str, usize, std::ops::RangeInclusive<u32>); 2] = [
    ("hipGetDevicePropertiesR0600", 1160, 6..=u32::MAX),
    ("hipGetDeviceProperties", 396, 5..=5),
];

#[repr(C, align(8))]
struct PropsBuffer([u8; PROPS_BUFFER]);

impl Props {
    /// The variant for a runtime of major version `major`; `None` when the version is unknown
    /// or no symbol fits it (then the arch cannot be read safely).
    ///
    /// # Safety
    /// `lib` is the HIP runtime of that major version and stays loaded while this is used.
    pub unsafe fn load(lib: &Library, major: Option<u32>) -> Option<Props> {
        let major = major?;
        LAYOUTS
            .iter()
            .filter(|(_, _, majors)| majors.contains(&major))
            .find_map(|&(symbol, arch_offset, _)| {
                let name = format!("{symbol}\0");
                // SAFETY: both symbols are `hipError_t f(hipDeviceProp_t*, int)`; the struct
                // behind the pointer is the caller's choice of layout, handled by `arch_name`.
                let get = unsafe {
                    lib.get::<unsafe extern "C" fn(*mut c_void, c_int) -> HipError>(name.as_bytes())
                };
                get.ok().map(|get| Props {
                    get: *get,
                    symbol,
                    arch_offset,
                })
            })
    }

    /// `gcnArchName` of `device`, e.g. `gfx90a:sramecc+:xnack-`. Errors when the call fails
    /// or the field does not hold a `gfx…` name (a layout trine does not know).
    pub fn arch_name(&self, hip: &Hip, device: c_int) -> Result<String, BackendError> {
        let mut buffer = Box::new(PropsBuffer([0; PROPS_BUFFER]));
        // SAFETY: the buffer is 8-byte aligned (as the struct is) and larger than every
        // layout this symbol fills, so the runtime writes only inside it.
        let code = unsafe { (self.get)(buffer.0.as_mut_ptr().cast(), device) };
        hip.check(self.symbol, code)?;
        let field = &buffer.0[self.arch_offset..self.arch_offset + ARCH_NAME_LEN];
        let name = until_nul(field);
        match std::str::from_utf8(name) {
            Ok(s) if s.starts_with("gfx") && s.bytes().all(|b| b.is_ascii_graphic()) => {
                Ok(s.to_string())
            }
            _ => Err(BackendError::Driver {
                call: self.symbol,
                code: format!(
                    "gcnArchName at offset {} holds {:?}, not a gfx name: this ROCm's \
                     hipDeviceProp_t layout is not one trine knows",
                    self.arch_offset,
                    String::from_utf8_lossy(name)
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_nul_stops_at_the_first_nul() {
        assert_eq!(until_nul(b"gfx1030\0junk"), b"gfx1030");
        assert_eq!(until_nul(b"no nul"), b"no nul");
        assert_eq!(until_nul(b"\0"), b"");
    }

    #[test]
    fn layouts_fit_the_buffer() {
        for (symbol, offset, _) in LAYOUTS {
            assert!(offset + ARCH_NAME_LEN <= PROPS_BUFFER, "{symbol}");
        }
    }
}

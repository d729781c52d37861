//! `libcublas`, loaded at run time: the entry points the peer calls, their C types and enum
//! values (from `cublas_api.h` and `library_types.h`), and status codes as [`BackendError`]s.

use crate::error::BackendError;
use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub type Status = c_int;
pub type Handle = *mut c_void;

pub const STATUS_SUCCESS: Status = 0;
/// `cublasOperation_t`.
pub const OP_N: c_int = 0;
pub const OP_T: c_int = 1;
/// `cudaDataType_t`.
pub const R_32F: c_int = 0;
pub const R_16F: c_int = 2;
/// `cublasComputeType_t`: f32 arithmetic and accumulation whatever the input type.
pub const COMPUTE_32F: c_int = 68;
/// `cublasGemmAlgo_t`: cuBLAS's own heuristic choice.
pub const GEMM_DEFAULT: c_int = -1;
/// `cublasMath_t`.
pub const DEFAULT_MATH: c_int = 0;
pub const PEDANTIC_MATH: c_int = 2;
/// `libraryPropertyType_t`.
const MAJOR_VERSION: c_int = 0;
const MINOR_VERSION: c_int = 1;
const PATCH_LEVEL: c_int = 2;

/// Sonames, newest first: each major version has its own ABI-stable name; the bare name is a
/// toolkit's development link.
const NAMES: [&str; 4] = [
    "libcublas.so.13",
    "libcublas.so.12",
    "libcublas.so.11",
    "libcublas.so",
];

type GemmEx = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    c_int,
    c_int,
    *const c_void,
    c_int,
    c_int,
    *const c_void,
    *mut c_void,
    c_int,
    c_int,
    c_int,
    c_int,
) -> Status;

type Sgemm = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const f32,
    *const f32,
    c_int,
    *const f32,
    c_int,
    *const f32,
    *mut f32,
    c_int,
) -> Status;

type Sgemv = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    *const f32,
    *const f32,
    c_int,
    *const f32,
    c_int,
    *const f32,
    *mut f32,
    c_int,
) -> Status;

/// cuBLAS's entry points, valid while the libraries below are loaded: as long as this lives.
pub struct Library {
    pub create: unsafe extern "C" fn(*mut Handle) -> Status,
    pub destroy: unsafe extern "C" fn(Handle) -> Status,
    /// Takes a `cudaStream_t`, which is the driver API's `CUstream`.
    pub set_stream: unsafe extern "C" fn(Handle, *mut c_void) -> Status,
    pub set_math_mode: unsafe extern "C" fn(Handle, c_int) -> Status,
    pub sgemm: Sgemm,
    pub sgemv: Sgemv,
    pub gemm_ex: GemmEx,
    path: PathBuf,
    version: (i32, i32, i32),
    // Declared before `_lt`, so cuBLAS is unloaded before the library it depends on.
    _lib: libloading::Library,
    _lt: Option<libloading::Library>,
}

impl Library {
    /// Opens the first cuBLAS found in `dirs`, then (if `system_path`) through the dynamic
    /// loader's own search. The error lists every place tried.
    pub fn open_in(dirs: &[PathBuf], system_path: bool) -> Result<Library, BackendError> {
        let mut tried = vec![];
        for dir in dirs {
            for name in NAMES {
                let path = dir.join(name);
                if !path.exists() {
                    continue;
                }
                // libcublas needs libcublasLt of the same version. CUDA 13's toolkit and wheel
                // find it through RUNPATH $ORIGIN; loading it by full path first covers
                // builds without that, once the soname resolves to the loaded copy.
                let lt = dir.join(name.replacen("libcublas", "libcublasLt", 1));
                // SAFETY: cuBLAS's own companion library; its initialisers set up its state.
                let lt = lt
                    .exists()
                    .then(|| unsafe { libloading::Library::new(&lt) });
                let lt = match lt.transpose() {
                    Ok(lt) => lt,
                    Err(e) => {
                        tried.push(format!("{}: {e}", path.display()));
                        continue;
                    }
                };
                // SAFETY: loading cuBLAS runs initialisers that only set up its own state.
                match unsafe { libloading::Library::new(&path) } {
                    Ok(lib) => return Library::bind(lib, lt, path),
                    Err(e) => tried.push(format!("{}: {e}", path.display())),
                }
            }
        }
        if system_path {
            for name in NAMES {
                // SAFETY: as above; the dynamic loader searches its path.
                match unsafe { libloading::Library::new(name) } {
                    Ok(lib) => return Library::bind(lib, None, PathBuf::from(name)),
                    Err(e) => tried.push(format!("{name}: {e}")),
                }
            }
        }
        let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        Err(BackendError::Unavailable(format!(
            "cuBLAS ({}) not found in [{}]{}; tried: {}",
            NAMES.join(", "),
            dirs.join(", "),
            if system_path {
                " nor on the loader's path"
            } else {
                ""
            },
            if tried.is_empty() {
                "no such file".to_string()
            } else {
                tried.join("; ")
            }
        )))
    }

    fn bind(
        lib: libloading::Library,
        lt: Option<libloading::Library>,
        path: PathBuf,
    ) -> Result<Library, BackendError> {
        let missing = |symbol: &str, e: libloading::Error| {
            BackendError::Unavailable(format!(
                "{} lacks {symbol} (older than CUDA 11?): {e}",
                path.display()
            ))
        };
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: looked up under its documented name and given the signature
                // cublas_api.h declares for it; kept beside the library that owns it.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| missing($name, e))?
            };
        }
        let get_property: unsafe extern "C" fn(c_int, *mut c_int) -> Status =
            sym!("cublasGetProperty");
        let mut version = [0; 3];
        for (v, property) in version
            .iter_mut()
            .zip([MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL])
        {
            // SAFETY: a valid out-pointer; the call needs no handle or device.
            check("cublasGetProperty", unsafe { get_property(property, v) })?;
        }
        Ok(Library {
            create: sym!("cublasCreate_v2"),
            destroy: sym!("cublasDestroy_v2"),
            set_stream: sym!("cublasSetStream_v2"),
            set_math_mode: sym!("cublasSetMathMode"),
            sgemm: sym!("cublasSgemm_v2"),
            sgemv: sym!("cublasSgemv_v2"),
            gemm_ex: sym!("cublasGemmEx"),
            version: (version[0], version[1], version[2]),
            path,
            _lib: lib,
            _lt: lt,
        })
    }

    /// The file loaded (a bare soname when the dynamic loader found it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Major, minor, patch.
    pub fn version(&self) -> (i32, i32, i32) {
        self.version
    }
}

/// cuBLAS from the places NVRTC is searched, then the loader's path; loaded once per process
/// and never unloaded, since handles made from it live as long as their backends.
pub fn library() -> Result<&'static Library, BackendError> {
    static CUBLAS: OnceLock<Result<Library, String>> = OnceLock::new();
    CUBLAS
        .get_or_init(|| {
            Library::open_in(&super::super::nvrtc::search_dirs(), true).map_err(|e| match e {
                BackendError::Unavailable(why) => why,
                e => e.to_string(),
            })
        })
        .as_ref()
        .map_err(|why| BackendError::Unavailable(why.clone()))
}

/// `CUBLAS_STATUS_…` name of a status, with its number.
pub fn status_name(code: Status) -> String {
    let name = match code {
        0 => "CUBLAS_STATUS_SUCCESS",
        1 => "CUBLAS_STATUS_NOT_INITIALIZED",
        3 => "CUBLAS_STATUS_ALLOC_FAILED",
        7 => "CUBLAS_STATUS_INVALID_VALUE",
        8 => "CUBLAS_STATUS_ARCH_MISMATCH",
        11 => "CUBLAS_STATUS_MAPPING_ERROR",
        13 => "CUBLAS_STATUS_EXECUTION_FAILED",
        14 => "CUBLAS_STATUS_INTERNAL_ERROR",
        15 => "CUBLAS_STATUS_NOT_SUPPORTED",
        16 => "CUBLAS_STATUS_LICENSE_ERROR",
        _ => return format!("cublasStatus_t {code}"),
    };
    format!("{name} ({code})")
}

/// `Ok` on success, otherwise the error of `call` with the status's name.
pub fn check(call: &'static str, code: Status) -> Result<(), BackendError> {
    if code == STATUS_SUCCESS {
        Ok(())
    } else {
        Err(BackendError::Driver {
            call,
            code: status_name(code),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_have_their_header_names() {
        assert_eq!(status_name(7), "CUBLAS_STATUS_INVALID_VALUE (7)");
        assert_eq!(status_name(15), "CUBLAS_STATUS_NOT_SUPPORTED (15)");
        assert_eq!(status_name(2), "cublasStatus_t 2");
        let failed = check("cublasGemmEx", 13);
        assert!(
            matches!(&failed, Err(BackendError::Driver { call: "cublasGemmEx", code })
                if code == "CUBLAS_STATUS_EXECUTION_FAILED (13)"),
            "{failed:?}"
        );
    }
}

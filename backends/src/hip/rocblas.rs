//! rocBLAS GEMM, when librocblas is installed (it is optional, and absent from Debian).
//!
//! The library is located when the backend opens (a file check, so its absence is a note) and
//! loaded on the first GEMM: loading it maps hundreds of megabytes of kernels.

use super::ffi::{table, Stream};
use crate::backend::Binding;
use crate::checks::check_range;
use crate::error::BackendError;
use libloading::Library;
use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};

type Handle = *mut c_void;

table! {
    /// librocblas (rocBLAS 2 to 5 share these signatures; `rocblas_int` is 32-bit).
    Table {
        rocblas_create_handle: fn(*mut Handle) -> c_int;
        rocblas_destroy_handle: fn(Handle) -> c_int;
        rocblas_set_stream: fn(Handle, Stream) -> c_int;
        rocblas_sgemm: fn(
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
        ) -> c_int;
        rocblas_gemm_ex: fn(
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
            *const c_void,
            c_int,
            c_int,
            *mut c_void,
            c_int,
            c_int,
            c_int,
            c_int,
            i32,
            u32,
        ) -> c_int;
    }
}

const STATUS_SUCCESS: c_int = 0;
const OPERATION_NONE: c_int = 111;
const DATATYPE_F16_R: c_int = 150;
const DATATYPE_F32_R: c_int = 151;
const GEMM_ALGO_STANDARD: c_int = 0;

const NAMES: [&str; 5] = [
    "librocblas.so",
    "librocblas.so.5",
    "librocblas.so.4",
    "librocblas.so.3",
    "librocblas.so.0",
];

/// The element type of a GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmType {
    F32,
    /// f16 inputs and output, accumulated in f32.
    F16,
}

impl GemmType {
    fn bytes(self) -> u64 {
        match self {
            GemmType::F32 => 4,
            GemmType::F16 => 2,
        }
    }
}

/// `C = alpha * A * B + beta * C` on row-major, densely packed matrices: A is `m × k`, B is
/// `k × n`, C is `m × n`, each at its binding.
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    pub ty: GemmType,
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub alpha: f32,
    pub beta: f32,
    pub a: Binding,
    pub b: Binding,
    pub c: Binding,
}

/// The first librocblas file in `dir` (the ROCm runtime's directory), then the system's.
pub(super) fn find(dir: Option<&Path>) -> Option<PathBuf> {
    let multiarch = PathBuf::from(format!("/usr/lib/{}-linux-gnu", std::env::consts::ARCH));
    let mut dirs: Vec<PathBuf> = dir.map(Path::to_path_buf).into_iter().collect();
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&paths));
    }
    dirs.extend([multiarch, "/usr/lib64".into(), "/usr/lib".into()]);
    dirs.iter()
        .flat_map(|d| NAMES.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
}

/// A loaded rocBLAS with its handle, bound to the backend's stream.
pub(super) struct Blas {
    table: Table,
    handle: Handle,
    _library: Library,
}

impl Blas {
    /// Loads `path` and creates a handle on `stream`. The device is current.
    pub fn open(path: &Path, stream: Stream) -> Result<Blas, BackendError> {
        let unavailable = |why: String| BackendError::Unavailable(format!("rocBLAS: {why}"));
        // SAFETY: loading runs rocBLAS's initialisers, which take no input.
        let library = unsafe { Library::new(path) }
            .map_err(|e| unavailable(format!("{}: {e}", path.display())))?;
        // SAFETY: librocblas exports these functions with these signatures.
        let table = unsafe { Table::load(&library) }.map_err(unavailable)?;
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: an out-parameter.
        let status = unsafe { (table.rocblas_create_handle)(&mut handle) };
        if status != STATUS_SUCCESS {
            return Err(unavailable(format!(
                "rocblas_create_handle returned {status}"
            )));
        }
        let blas = Blas {
            table,
            handle,
            _library: library,
        };
        // SAFETY: a live handle and the backend's live stream.
        let status = unsafe { (blas.table.rocblas_set_stream)(blas.handle, stream) };
        if status != STATUS_SUCCESS {
            return Err(unavailable(format!("rocblas_set_stream returned {status}")));
        }
        Ok(blas)
    }

    /// Queues `g` on the stream. `ptr` gives each binding's device address after checking it
    /// against its buffer (`size` is the buffer's).
    pub fn gemm(
        &self,
        g: &Gemm,
        ptr: impl Fn(&Binding) -> Result<(*mut u8, u64), BackendError>,
    ) -> Result<(), BackendError> {
        let bad = |what: String| BackendError::BadDispatch(format!("rocblas_gemm: {what}"));
        let dim = |name: &str, v: u32| {
            c_int::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| bad(format!("{name} = {v} is not in 1..=i32::MAX")))
        };
        let (m, n, k) = (dim("m", g.m)?, dim("n", g.n)?, dim("k", g.k)?);
        let elem = g.ty.bytes();
        let mut addresses = [std::ptr::null_mut(); 3];
        for (i, (name, binding, rows, cols)) in [
            ("A", &g.a, g.m, g.k),
            ("B", &g.b, g.k, g.n),
            ("C", &g.c, g.m, g.n),
        ]
        .into_iter()
        .enumerate()
        {
            let need = u64::from(rows) * u64::from(cols) * elem;
            if binding.size < need {
                return Err(bad(format!(
                    "{name} is {rows}×{cols} ({need} bytes), its binding has {}",
                    binding.size
                )));
            }
            if binding.offset % elem != 0 {
                return Err(bad(format!(
                    "{name}'s offset {} is not a multiple of {elem}",
                    binding.offset
                )));
            }
            let (base, size) = ptr(binding)?;
            check_range(binding.offset, need, size)?;
            // SAFETY: the range was just checked to lie inside the buffer at `base`.
            addresses[i] = unsafe { base.add(binding.offset as usize) };
        }
        let [a, b, c] = addresses;
        // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: swap the operands and m with n.
        // SAFETY: the handle is live; every matrix lies inside its buffer (checked above);
        // alpha and beta are host f32 (the handle's default pointer mode, and the compute
        // type of both calls).
        let status = unsafe {
            match g.ty {
                GemmType::F32 => (self.table.rocblas_sgemm)(
                    self.handle,
                    OPERATION_NONE,
                    OPERATION_NONE,
                    n,
                    m,
                    k,
                    &g.alpha,
                    b.cast(),
                    n,
                    a.cast(),
                    k,
                    &g.beta,
                    c.cast(),
                    n,
                ),
                GemmType::F16 => (self.table.rocblas_gemm_ex)(
                    self.handle,
                    OPERATION_NONE,
                    OPERATION_NONE,
                    n,
                    m,
                    k,
                    (&g.alpha as *const f32).cast(),
                    b.cast(),
                    DATATYPE_F16_R,
                    n,
                    a.cast(),
                    DATATYPE_F16_R,
                    k,
                    (&g.beta as *const f32).cast(),
                    c.cast(),
                    DATATYPE_F16_R,
                    n,
                    c.cast(),
                    DATATYPE_F16_R,
                    n,
                    DATATYPE_F32_R,
                    GEMM_ALGO_STANDARD,
                    0,
                    0,
                ),
            }
        };
        if status != STATUS_SUCCESS {
            return Err(BackendError::Driver {
                call: "rocblas gemm",
                code: format!("rocblas_status {status}"),
            });
        }
        Ok(())
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: the handle is live and destroyed once; the backend synchronised its stream.
        unsafe { (self.table.rocblas_destroy_handle)(self.handle) };
    }
}

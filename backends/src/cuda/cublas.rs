//! cuBLAS as a peer of the CUDA backend: its GEMM and GEMV on the backend's buffers, context
//! and stream, timed with the backend's events, so that trine's kernels can be measured
//! against it in the same run.
//!
//! Math mode: [`MathMode::Default`] unless changed with [`Cublas::set_math`]. In it cuBLAS
//! keeps f32 GEMM and GEMV in plain FP32 (TF32 tensor cores are not enabled) and may use
//! tensor cores for f16 inputs, which multiply exactly and accumulate in f32
//! (`CUBLAS_COMPUTE_32F`). [`MathMode::Pedantic`] asks for the prescribed precision in every
//! phase; it was measured as fast as the default on every shape (f16 GEMM at tensor-core
//! speed), so it does not forbid tensor cores for f16 inputs.
//!
//! Layout: trine's matrices are row-major, cuBLAS's column-major. A row-major `r×c` matrix
//! read column-major is its `c×r` transpose, with leading dimension `c`. So the row-major
//! `C = A·B` is computed as the column-major `Cᵀ = Bᵀ·Aᵀ`: cuBLAS's first operand is trine's
//! B, its second trine's A, and its `m` and `n` are trine's `n` and `m`. A weight stored
//! row-major `n×k` (B transposed) reads column-major as B itself, so cuBLAS is asked for its
//! transpose (`OP_T`, leading dimension `k`).

mod layout;
mod library;

pub use library::Library;

use super::CudaBackend;
use crate::backend::Binding;
use crate::checks::check_binding;
use crate::error::BackendError;
use layout::{dim, gemm_layout, gemv_layout, ColumnMajor};
use library::{check, COMPUTE_32F, GEMM_DEFAULT, R_16F, R_32F};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Element type of GEMM and GEMV inputs; outputs are always f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmType {
    F32,
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

/// `C[m×n] = A[m×k]·B[k×n]`, all row-major; with `b_transposed`, B is stored `[n×k]`
/// row-major, as weights are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gemm {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub b_transposed: bool,
}

/// `cublasMath_t` the handle runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MathMode {
    /// `CUBLAS_DEFAULT_MATH`.
    Default,
    /// `CUBLAS_PEDANTIC_MATH`.
    Pedantic,
}

/// A cuBLAS handle bound to the backend's stream; made once per backend, destroyed with it.
pub(super) struct Handle {
    lib: &'static Library,
    raw: library::Handle,
    pedantic: AtomicBool,
}

// SAFETY: the handle is used only under the backend's lock with its context current, never
// from two threads at once, which is all cuBLAS asks of a handle.
unsafe impl Send for Handle {}
// SAFETY: as above.
unsafe impl Sync for Handle {}

impl Handle {
    /// # Safety
    /// The context the handle was made in is current; no queued work uses it.
    pub(super) unsafe fn destroy(self) {
        // SAFETY: the caller's contract; made by cublasCreate and destroyed once.
        unsafe { (self.lib.destroy)(self.raw) };
    }
}

/// cuBLAS on a backend: see the module's notes on layout and math mode.
pub struct Cublas<'a> {
    backend: &'a CudaBackend,
    handle: &'a Handle,
}

impl CudaBackend {
    /// cuBLAS on this backend's context and stream, loaded on first use. No cuBLAS →
    /// `Unavailable` with the places searched.
    pub fn cublas(&self) -> Result<Cublas<'_>, BackendError> {
        if let Some(handle) = self.cublas.get() {
            return Ok(Cublas {
                backend: self,
                handle,
            });
        }
        let lib = library::library()?;
        let _state = self.enter()?;
        let handle = match self.cublas.get() {
            Some(h) => h,
            None => {
                let h = create(lib, self.handles.stream)?;
                self.cublas.get_or_init(|| h)
            }
        };
        Ok(Cublas {
            backend: self,
            handle,
        })
    }
}

/// A handle on the current context, bound to `stream`, in the default math mode.
fn create(lib: &'static Library, stream: super::CuStream) -> Result<Handle, BackendError> {
    let mut raw: library::Handle = std::ptr::null_mut();
    // SAFETY: a valid out-pointer; the backend's context is current (the caller holds its lock).
    check("cublasCreate_v2", unsafe { (lib.create)(&mut raw) })?;
    let handle = Handle {
        lib,
        raw,
        pedantic: AtomicBool::new(false),
    };
    // SAFETY: a live handle and a live stream of the current context.
    let bound = check("cublasSetStream_v2", unsafe {
        (lib.set_stream)(raw, stream)
    })
    .and_then(|()| {
        // SAFETY: a live handle; the mode is a cublasMath_t value.
        check("cublasSetMathMode", unsafe {
            (lib.set_math_mode)(raw, library::DEFAULT_MATH)
        })
    });
    match bound {
        Ok(()) => Ok(handle),
        Err(e) => {
            // SAFETY: the context is current; nothing was queued with the handle.
            unsafe { handle.destroy() };
            Err(e)
        }
    }
}

impl Cublas<'_> {
    /// The library in use.
    pub fn library(&self) -> &'static Library {
        self.handle.lib
    }

    pub fn math(&self) -> MathMode {
        if self.handle.pedantic.load(Ordering::Relaxed) {
            MathMode::Pedantic
        } else {
            MathMode::Default
        }
    }

    pub fn set_math(&self, mode: MathMode) -> Result<(), BackendError> {
        let _state = self.backend.enter()?;
        let value = match mode {
            MathMode::Default => library::DEFAULT_MATH,
            MathMode::Pedantic => library::PEDANTIC_MATH,
        };
        // SAFETY: a live handle used under the backend's lock; a cublasMath_t value.
        check("cublasSetMathMode", unsafe {
            (self.handle.lib.set_math_mode)(self.handle.raw, value)
        })?;
        self.handle
            .pedantic
            .store(mode == MathMode::Pedantic, Ordering::Relaxed);
        Ok(())
    }

    /// `C = A·B` (see [`Gemm`]) with f32 or f16 A and B and f32 C, on the backend's stream.
    /// Returns the device time between events recorded around the call.
    pub fn gemm(
        &self,
        a: Binding,
        b: Binding,
        c: Binding,
        shape: Gemm,
        ty: GemmType,
    ) -> Result<Duration, BackendError> {
        let (m, n, k) = (dim("m", shape.m)?, dim("n", shape.n)?, dim("k", shape.k)?);
        let routine = match ty {
            GemmType::F32 => Routine::Sgemm,
            GemmType::F16 => Routine::GemmEx,
        };
        let state = self.backend.enter()?;
        let [pa, pb, pc] = self.pointers(
            &state,
            routine.name(),
            [
                (a, "a", [shape.m, shape.k], ty.bytes()),
                (b, "b", [shape.k, shape.n], ty.bytes()),
                (c, "c", [shape.m, shape.n], 4),
            ],
        )?;
        let l = gemm_layout(m, n, k, shape.b_transposed);
        self.run(routine, l, pb, pa, pc)
    }

    /// `y[rows] = W[rows×cols]·x[cols]`, W row-major; W and x f32 or f16 (both of `ty`), y f32.
    /// f32 runs `cublasSgemv`; f16 runs `cublasGemmEx` with one column, since cuBLAS has no
    /// f16 GEMV outside its batched API. Returns the device time as [`Cublas::gemm`] does.
    pub fn gemv(
        &self,
        w: Binding,
        x: Binding,
        y: Binding,
        rows: u32,
        cols: u32,
        ty: GemmType,
    ) -> Result<Duration, BackendError> {
        let (r, c) = (dim("rows", rows)?, dim("cols", cols)?);
        let routine = match ty {
            GemmType::F32 => Routine::Sgemv,
            GemmType::F16 => Routine::GemmEx,
        };
        let state = self.backend.enter()?;
        let [pw, px, py] = self.pointers(
            &state,
            routine.name(),
            [
                (w, "w", [rows, cols], ty.bytes()),
                (x, "x", [cols, 1], ty.bytes()),
                (y, "y", [rows, 1], 4),
            ],
        )?;
        self.run(routine, gemv_layout(r, c), pw, px, py)
    }

    /// Device pointers of the bindings, each checked to lie in its buffer, aligned, and to hold
    /// its matrix.
    fn pointers(
        &self,
        state: &super::State,
        call: &str,
        bindings: [(Binding, &str, [u32; 2], u64); 3],
    ) -> Result<[u64; 3], BackendError> {
        let align = self.backend.info.min_binding_alignment;
        let mut out = [0; 3];
        for (i, (b, name, [r, c], elem)) in bindings.into_iter().enumerate() {
            let buffer = state.buffers.get(b.buffer)?;
            check_binding(call, i, &b, buffer.size, align)?;
            let need = u64::from(r)
                .checked_mul(u64::from(c))
                .and_then(|e| e.checked_mul(elem));
            if need.is_none_or(|need| need > b.size) {
                return Err(BackendError::BadDispatch(format!(
                    "{call}: binding {name} holds {} bytes, a {r}×{c} matrix of {elem}-byte \
                     elements needs {}",
                    b.size,
                    need.map_or("more than 2^64".into(), |n| n.to_string())
                )));
            }
            out[i] = buffer.ptr + b.offset;
        }
        Ok(out)
    }

    /// Queues one column-major product `C' = op(A')·op(B')` between the timing events.
    fn run(
        &self,
        routine: Routine,
        l: ColumnMajor,
        a: u64,
        b: u64,
        c: u64,
    ) -> Result<Duration, BackendError> {
        let (one, zero) = (1f32, 0f32);
        let (lib, h) = (self.handle.lib, self.handle.raw);
        let (pa, pb, pc) = (a as *const c_void, b as *const c_void, c as *mut c_void);
        let call = routine.name();
        // Each call below gets: a live handle bound to the backend's stream, used under its
        // lock with the context current; host scalars (the default pointer mode) that outlive
        // the call; device pointers inside live allocations that hold each operand whole
        // (checked by `pointers`) with the leading dimensions of `gemm_layout`/`gemv_layout`.
        self.backend.timed(|| match routine {
            // Sgemv's matrix is A' before `op`: `k×m` column-major.
            // SAFETY: see above; x and y are contiguous (increments 1).
            Routine::Sgemv => check(call, unsafe {
                (lib.sgemv)(
                    h,
                    l.trans_a,
                    l.k,
                    l.m,
                    &one,
                    pa.cast(),
                    l.lda,
                    pb.cast(),
                    1,
                    &zero,
                    pc.cast(),
                    1,
                )
            }),
            // SAFETY: see above.
            Routine::Sgemm => check(call, unsafe {
                (lib.sgemm)(
                    h,
                    l.trans_a,
                    l.trans_b,
                    l.m,
                    l.n,
                    l.k,
                    &one,
                    pa.cast(),
                    l.lda,
                    pb.cast(),
                    l.ldb,
                    &zero,
                    pc.cast(),
                    l.ldc,
                )
            }),
            // SAFETY: see above; with COMPUTE_32F the scalars are f32.
            Routine::GemmEx => check(call, unsafe {
                (lib.gemm_ex)(
                    h,
                    l.trans_a,
                    l.trans_b,
                    l.m,
                    l.n,
                    l.k,
                    (&one as *const f32).cast(),
                    pa,
                    R_16F,
                    l.lda,
                    pb,
                    R_16F,
                    l.ldb,
                    (&zero as *const f32).cast(),
                    pc,
                    R_32F,
                    l.ldc,
                    COMPUTE_32F,
                    GEMM_DEFAULT,
                )
            }),
        })
    }
}

/// The cuBLAS routine a product runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Routine {
    Sgemm,
    Sgemv,
    /// f16 inputs, f32 output and arithmetic.
    GemmEx,
}

impl Routine {
    fn name(self) -> &'static str {
        match self {
            Routine::Sgemm => "cublasSgemm_v2",
            Routine::Sgemv => "cublasSgemv_v2",
            Routine::GemmEx => "cublasGemmEx",
        }
    }
}

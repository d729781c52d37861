//! The CPU backend: kernels lowered to C (`trine_codegen::c`), compiled at run time by the
//! system C compiler and run with their workgroups spread over all cores.
//!
//! It is the backend that always works: where no C compiler runs (none installed, `TRINE_CC`
//! naming a missing one, a compiler that cannot build the probe kernel), it falls back to the
//! reference interpreter and says why in [`DeviceInfo::notes`] (and so in `trine doctor`).
//! The interpreter stays the reference either way.
//!
//! Each runner keeps buffers of its own kind: the compiled one plain bytes in aligned
//! allocations ([`memory::HostMemory`], copied in and out with `memcpy`), the interpreter the
//! checked, atomic words it runs on (`trine_ir::interp::Words`), so that it stays free of
//! unsafe code. A runner is chosen once, when the backend opens, so no buffer ever passes from
//! one kind to the other. One lock orders every operation on them: a dispatch runs to the end
//! before a read, write, allocation or free proceeds (the in-order queue of the trait), which
//! is also what makes the compiled runner's raw pointers sound.

mod memory;
mod pool;
mod run;
mod sysinfo;
mod toolchain;

pub use sysinfo::vector_registers;
pub use toolchain::{compiler_from_env, ToolchainError, CC_ENV, FLAGS};

use crate::backend::{Backend, Binding, BufferHandle, Dispatch, ProgramId};
use crate::checks::check_range;
use crate::error::BackendError;
use crate::info::{DeviceInfo, DeviceType, MemoryInfo};
use memory::HostMemory;
use rayon::prelude::*;
use std::collections::HashMap;
use std::ffi::{c_void, OsStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use toolchain::{Compiled, Toolchain};
use trine_codegen::{COptions, C_MAX_FRAME_BYTES};
use trine_ir::interp::{Launch, View, Words};
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar, MAX_PARAMS};

/// Subgroup width the CPU backend reports: the f32 lane count of an AVX2 register. The
/// compiled code lowers subgroup operations for it, and the interpreter runs with it.
pub const CPU_SUBGROUP_SIZE: u32 = 8;

/// The driver string ([`DeviceInfo::driver`]) of a CPU backend that interprets its kernels,
/// having found no working C compiler (or been asked to).
pub const INTERPRETER_DRIVER: &str = "trine reference interpreter";

/// How the note of a CPU backend that found no working C compiler begins; the reason follows.
pub const INTERPRETED: &str = "kernels are interpreted (slow):";

/// Bindings a compiled dispatch passes from the stack; kernels with more use the heap.
const INLINE_BINDINGS: usize = 16;

/// Stack of each worker thread: the largest workgroup frame the lowering allows, plus room for
/// the kernel's own locals.
const WORKER_STACK_BYTES: usize = C_MAX_FRAME_BYTES as usize + (4 << 20);

/// Kernels whose per-workgroup frame is at most this run on the dispatching thread too, beside
/// the workers: any thread's stack has room for it (Rust gives spawned threads 2 MiB).
const CALLER_FRAME_BYTES: u64 = 256 << 10;

/// How kernels run, and the buffers they run on (module documentation).
enum Runner {
    Compiled {
        toolchain: Toolchain,
        pool: pool::Pool,
        buffers: Mutex<HashMap<u64, HostMemory>>,
    },
    Interpreter {
        buffers: Mutex<HashMap<u64, Words>>,
    },
}

impl Runner {
    fn interpreter() -> Runner {
        Runner::Interpreter {
            buffers: Mutex::new(HashMap::new()),
        }
    }
}

/// A compiled kernel, in the variant for non-overlapping bindings and, made on first need, the
/// one without `restrict` for bindings that overlap.
struct Code {
    /// Bytes of per-workgroup state in the function's stack frame.
    frame_bytes: u64,
    exclusive: Compiled,
    overlapping: OnceLock<Result<Compiled, String>>,
}

struct Program {
    kernel: Kernel,
    /// `None` under the interpreter; always there under the compiled runner.
    code: Option<Code>,
}

pub struct CpuBackend {
    info: DeviceInfo,
    runner: Runner,
    programs: Mutex<HashMap<u64, Arc<Program>>>,
    next: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in another thread cannot leave these maps half-updated (every update is one
    // insert or remove), so a poisoned lock is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A kernel that exercises the whole tool chain (f16 loads through `_Float16`, compile,
/// load, call): `y[i] = f32(x[i]) * 2`.
fn probe_kernel() -> Kernel {
    let k = KernelBuilder::new("probe", [8, 1, 1]);
    let x = k.buffer("x", Scalar::F16, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let i = k.global_id(0);
    k.store(y, i, k.load(x, i).cast(Scalar::F32) * k.f32(2.0));
    k.finish()
}

impl CpuBackend {
    /// Compiles with the compiler [`compiler_from_env`] names, or interprets where it fails.
    pub fn new() -> CpuBackend {
        CpuBackend::with_compiler(&compiler_from_env())
    }

    /// Compiles with `cc`, or interprets (with the reason in the notes) where it fails.
    pub fn with_compiler(cc: &OsStr) -> CpuBackend {
        match Self::compiled_runner(cc) {
            Ok(runner) => CpuBackend::with_runner(runner, None),
            Err(why) => CpuBackend::with_runner(
                Runner::interpreter(),
                Some(format!("{INTERPRETED} no working C compiler ({why})")),
            ),
        }
    }

    /// The reference interpreter on all cores, whatever compiler there is: to compare with.
    pub fn interpreter() -> CpuBackend {
        CpuBackend::with_runner(
            Runner::interpreter(),
            Some("kernels are interpreted: the interpreter was asked for".into()),
        )
    }

    fn with_runner(runner: Runner, note: Option<String>) -> CpuBackend {
        let threads = match &runner {
            // The workers, and the dispatching thread.
            Runner::Compiled { pool, .. } => pool.workers() + 1,
            Runner::Interpreter { .. } => rayon::current_num_threads(),
        };
        let (driver, how) = match &runner {
            Runner::Compiled { toolchain, .. } => (toolchain.describe(), "compiled"),
            Runner::Interpreter { .. } => (INTERPRETER_DRIVER.to_string(), "interpreter"),
        };
        let mut notes: Vec<String> = note.into_iter().collect();
        if let Runner::Compiled { .. } = runner {
            notes.push(match crate::cache::writable_dir() {
                Ok(d) => format!(
                    "compiled kernels are cached in {}",
                    d.join("cpu-c").display()
                ),
                Err(e) => format!(
                    "kernels compile again at every start: {e}; {}",
                    crate::cache::Unusable::ADVICE
                ),
            });
        }
        let ram = sysinfo::total_memory().unwrap_or(0);
        let info = DeviceInfo {
            backend: "cpu".into(),
            name: format!("{} ({threads} threads, {how})", sysinfo::cpu_name()),
            vendor: sysinfo::cpu_vendor(),
            device_type: DeviceType::Cpu,
            arch: Some(std::env::consts::ARCH.into()),
            memory: MemoryInfo {
                device_local: ram,
                host_visible: ram,
                unified: true,
                zero_copy: true,
            },
            subgroup_sizes: vec![CPU_SUBGROUP_SIZE],
            subgroup_width_pinned: false,
            subgroup_ops: true,
            f16: true,
            int8: true,
            tiles: false,
            async_copy: false,
            group_mma: false,
            // The threads that run workgroups at once.
            compute_units: u32::try_from(threads).ok(),
            max_shared_bytes: 64 * 1024,
            max_invocations: 1024,
            max_workgroups: [u32::MAX; 3],
            max_binding_bytes: u64::MAX,
            min_binding_alignment: 4,
            timestamps: false,
            driver,
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            notes,
            tuning: crate::Tuning::default(),
        };
        CpuBackend {
            info,
            runner,
            programs: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }

    /// The compiled runner, after building and running the probe kernel; the reason otherwise.
    fn compiled_runner(cc: &OsStr) -> Result<Runner, String> {
        let toolchain = Toolchain::find(cc).map_err(|e| e.to_string())?;
        // One thread per core, the dispatching thread being one of them.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let pool = pool::Pool::new(cores.saturating_sub(1).max(1), WORKER_STACK_BYTES)
            .map_err(|e| format!("cannot start worker threads: {e}"))?;
        let probe = probe_kernel();
        let source = trine_codegen::c(&probe, &COptions::new(CPU_SUBGROUP_SIZE))
            .map_err(|e| e.to_string())?;
        let code = toolchain
            .build(&source, &trine_codegen::c_symbol(&probe))
            .map_err(|e| e.to_string())?;
        // 1.5 in binary16.
        let x = [0x3e00u16; 8];
        let mut y = [0f32; 8];
        let buffers = [x.as_ptr() as *mut c_void, y.as_mut_ptr() as *mut c_void];
        // SAFETY: the probe kernel reads 8 f16 from `x` and writes 8 f32 to `y`, which are
        // that long, aligned, and untouched by anything else until `run` returns.
        unsafe { run::run(&pool, code.entry(), &buffers, &[], [1, 1, 1], (1, true)) };
        if y != [3.0; 8] {
            return Err(format!(
                "the probe kernel computed {y:?} instead of 3.0 each"
            ));
        }
        Ok(Runner::Compiled {
            toolchain,
            pool,
            buffers: Mutex::new(HashMap::new()),
        })
    }

    fn buffer<M>(map: &HashMap<u64, M>, h: BufferHandle) -> Result<&M, BackendError> {
        map.get(&h.0).ok_or(BackendError::UnknownBuffer(h))
    }

    fn buffer_mut<M>(map: &mut HashMap<u64, M>, h: BufferHandle) -> Result<&mut M, BackendError> {
        map.get_mut(&h.0).ok_or(BackendError::UnknownBuffer(h))
    }

    fn program(&self, id: ProgramId) -> Result<Arc<Program>, BackendError> {
        lock(&self.programs)
            .get(&id.0)
            .cloned()
            .ok_or(BackendError::UnknownProgram(id))
    }

    fn interpret(
        &self,
        map: &HashMap<u64, Words>,
        kernel: &Kernel,
        d: &Dispatch<'_>,
    ) -> Result<(), BackendError> {
        let views = d
            .bindings
            .iter()
            .map(|b| {
                let w = Self::buffer(map, b.buffer)?;
                check_range(b.offset, b.size, w.len())?;
                Ok(View {
                    words: w,
                    offset: b.offset,
                    len: b.size,
                })
            })
            .collect::<Result<Vec<_>, BackendError>>()?;
        let launch = Launch::new(
            kernel,
            &self.info.limits(),
            d.grid,
            &views,
            d.params,
            CPU_SUBGROUP_SIZE,
        )
        .map_err(|e| BackendError::BadDispatch(e.to_string()))?;
        (0..launch.workgroups())
            .into_par_iter()
            .try_for_each(|n| launch.run_workgroup(launch.workgroup_id(n)))
            .map_err(|source| BackendError::Fault {
                kernel: kernel.name.clone(),
                source,
            })
    }

    /// Checks a dispatch of `kernel` the way `Launch::new` does for the interpreter, and
    /// returns the number of workgroups and the parameter words.
    fn check_dispatch(
        kernel: &Kernel,
        d: &Dispatch<'_>,
    ) -> Result<(u64, [u32; MAX_PARAMS]), BackendError> {
        let bad = |m: String| Err(BackendError::BadDispatch(m));
        if d.bindings.len() != kernel.buffers.len() {
            return bad(format!(
                "kernel takes {} buffers, {} given",
                kernel.buffers.len(),
                d.bindings.len()
            ));
        }
        let matches = d.params.len() == kernel.params.len()
            && d.params
                .iter()
                .zip(&kernel.params)
                .all(|(v, p)| v.ty() == p.ty);
        if !matches {
            let expected: Vec<_> = kernel.params.iter().map(|p| p.ty.name()).collect();
            let found: Vec<_> = d.params.iter().map(|p| p.ty().name()).collect();
            return bad(format!(
                "kernel takes parameters {expected:?}, given {found:?}"
            ));
        }
        if let Some(b) = d.bindings.iter().find(|b| b.offset % 4 != 0) {
            return bad(format!(
                "binding offset {} is not a multiple of 4",
                b.offset
            ));
        }
        let workgroups = d
            .grid
            .iter()
            .try_fold(1u64, |n, &g| n.checked_mul(g as u64));
        let Some(workgroups) = workgroups else {
            return bad(format!("grid {:?} has more than 2^64 workgroups", d.grid));
        };
        let mut params = [0u32; MAX_PARAMS];
        for (w, p) in params.iter_mut().zip(d.params) {
            *w = ParamValue::bits(*p);
        }
        Ok((workgroups, params))
    }

    /// Whether two bindings overlap where at least one is written: the kernel then needs its
    /// variant without `restrict`.
    fn overlapping(kernel: &Kernel, bindings: &[Binding]) -> bool {
        let writes = |i: usize| kernel.buffers[i].access.can_write();
        bindings.iter().enumerate().any(|(i, a)| {
            bindings.iter().enumerate().skip(i + 1).any(|(j, b)| {
                a.buffer == b.buffer
                    && a.offset < b.offset + b.size
                    && b.offset < a.offset + a.size
                    && (writes(i) || writes(j))
            })
        })
    }

    fn run_compiled(
        &self,
        map: &HashMap<u64, HostMemory>,
        pool: &pool::Pool,
        toolchain: &Toolchain,
        program: &Program,
        code: &Code,
        d: &Dispatch<'_>,
    ) -> Result<(), BackendError> {
        let kernel = &program.kernel;
        let (workgroups, params) = Self::check_dispatch(kernel, d)?;
        let pointer = |b: &Binding| -> Result<*mut c_void, BackendError> {
            let m = Self::buffer(map, b.buffer)?;
            check_range(b.offset, b.size, m.len())?;
            Ok(m.as_ptr().wrapping_add(b.offset as usize) as *mut c_void)
        };
        // Checked before anything runs, so a bad binding fails the dispatch as a whole.
        let mut inline = [std::ptr::null_mut(); INLINE_BINDINGS];
        let heap: Vec<*mut c_void>;
        let pointers: &[*mut c_void] = if d.bindings.len() <= INLINE_BINDINGS {
            for (p, b) in inline.iter_mut().zip(d.bindings) {
                *p = pointer(b)?;
            }
            &inline[..d.bindings.len()]
        } else {
            heap = d.bindings.iter().map(pointer).collect::<Result<_, _>>()?;
            &heap
        };
        if workgroups == 0 {
            return Ok(());
        }
        let compiled = if Self::overlapping(kernel, d.bindings) {
            let variant = code.overlapping.get_or_init(|| {
                let options = COptions {
                    restrict: false,
                    ..COptions::new(CPU_SUBGROUP_SIZE)
                };
                trine_codegen::c(kernel, &options)
                    .map_err(|e| e.to_string())
                    .and_then(|source| {
                        toolchain
                            .build(&source, &trine_codegen::c_symbol(kernel))
                            .map_err(|e| e.to_string())
                    })
            });
            variant.as_ref().map_err(|message| BackendError::Compile {
                kernel: kernel.name.clone(),
                message: message.clone(),
            })?
        } else {
            &code.exclusive
        };
        // SAFETY: `compiled` was lowered from `kernel` with the ABI `run` expects; one pointer
        // per buffer, each inside a live allocation (the buffer map is locked, so nothing frees,
        // reads or writes them until the dispatch ends: see `memory`) and aligned to 4 bytes
        // (buffers start cache-line aligned, offsets are checked to be multiples of 4), which
        // covers every element type. What the kernel does with its indices is the kernel's business,
        // as on a GPU: out-of-bounds accesses and data races happen in the C code.
        unsafe {
            run::run(
                pool,
                compiled.entry(),
                pointers,
                &params[..kernel.params.len()],
                d.grid,
                (workgroups, code.frame_bytes <= CALLER_FRAME_BYTES),
            )
        };
        Ok(())
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend::new()
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn free_memory(&self) -> Option<u64> {
        sysinfo::available_memory()
    }

    fn alloc(&self, bytes: u64) -> Result<BufferHandle, BackendError> {
        if bytes > self.info.memory.device_local && self.info.memory.device_local > 0 {
            return Err(BackendError::OutOfMemory {
                bytes,
                free: self.free_memory(),
            });
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        match &self.runner {
            Runner::Compiled { buffers, .. } => {
                let m = HostMemory::zeroed(bytes).ok_or_else(|| BackendError::OutOfMemory {
                    bytes,
                    free: self.free_memory(),
                })?;
                lock(buffers).insert(id, m);
            }
            Runner::Interpreter { buffers } => {
                lock(buffers).insert(id, Words::zeroed(bytes));
            }
        }
        Ok(BufferHandle(id))
    }

    fn free(&self, buffer: BufferHandle) {
        match &self.runner {
            Runner::Compiled { buffers, .. } => {
                lock(buffers).remove(&buffer.0);
            }
            Runner::Interpreter { buffers } => {
                lock(buffers).remove(&buffer.0);
            }
        }
    }

    fn write(&self, buffer: BufferHandle, offset: u64, data: &[u8]) -> Result<(), BackendError> {
        match &self.runner {
            Runner::Compiled { buffers, .. } => {
                Self::buffer_mut(&mut lock(buffers), buffer)?.write(offset, data)
            }
            Runner::Interpreter { buffers } => {
                let map = lock(buffers);
                let w = Self::buffer(&map, buffer)?;
                check_range(offset, data.len() as u64, w.len())?;
                w.write(offset, data);
                Ok(())
            }
        }
    }

    fn read(&self, buffer: BufferHandle, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        match &self.runner {
            Runner::Compiled { buffers, .. } => {
                Self::buffer(&lock(buffers), buffer)?.read(offset, out)
            }
            Runner::Interpreter { buffers } => {
                let map = lock(buffers);
                let w = Self::buffer(&map, buffer)?;
                check_range(offset, out.len() as u64, w.len())?;
                w.read(offset, out);
                Ok(())
            }
        }
    }

    fn compile(&self, kernel: &Kernel) -> Result<ProgramId, BackendError> {
        let hash = crate::checks::check_kernel(kernel, &self.info)?;
        if lock(&self.programs).contains_key(&hash) {
            return Ok(ProgramId(hash));
        }
        let code = match &self.runner {
            Runner::Interpreter { .. } => None,
            Runner::Compiled { toolchain, .. } => {
                let source = trine_codegen::c_source(kernel, &COptions::new(CPU_SUBGROUP_SIZE))
                    .map_err(|e| BackendError::Unsupported {
                        kernel: kernel.name.clone(),
                        what: e.to_string(),
                    })?;
                let exclusive = toolchain
                    .build(&source.text, &trine_codegen::c_symbol(kernel))
                    .map_err(|e| BackendError::Compile {
                        kernel: kernel.name.clone(),
                        message: e.to_string(),
                    })?;
                Some(Code {
                    frame_bytes: source.frame_bytes,
                    exclusive,
                    overlapping: OnceLock::new(),
                })
            }
        };
        let program = Arc::new(Program {
            kernel: kernel.clone(),
            code,
        });
        lock(&self.programs).entry(hash).or_insert(program);
        Ok(ProgramId(hash))
    }

    fn dispatch(&self, d: &Dispatch<'_>) -> Result<(), BackendError> {
        let program = self.program(d.program)?;
        // The buffer map's lock is held for the whole dispatch: see the module documentation.
        match &self.runner {
            Runner::Compiled {
                toolchain,
                pool,
                buffers,
            } => {
                // `compile` made code for every program of this runner.
                let code = program
                    .code
                    .as_ref()
                    .ok_or(BackendError::UnknownProgram(d.program))?;
                self.run_compiled(&lock(buffers), pool, toolchain, &program, code, d)
            }
            Runner::Interpreter { buffers } => self.interpret(&lock(buffers), &program.kernel, d),
        }
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run by [`trine_cc_names_the_compiler`] in a child process with `TRINE_CC` set, since
    /// changing the environment of this multi-threaded process would race other tests.
    #[test]
    #[ignore = "run in a child process by trine_cc_names_the_compiler"]
    fn child_with_missing_trine_cc() {
        assert_eq!(
            std::env::var_os(CC_ENV).as_deref(),
            Some(OsStr::new("/nonexistent"))
        );
        let info = CpuBackend::new().info().clone();
        assert_eq!(info.driver, "trine reference interpreter");
        assert!(
            info.notes.iter().any(|n| n.contains("/nonexistent")),
            "{:?}",
            info.notes
        );
    }

    #[test]
    fn trine_cc_names_the_compiler() {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([
                "--exact",
                "cpu::tests::child_with_missing_trine_cc",
                "--ignored",
            ])
            .env(CC_ENV, "/nonexistent")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("1 passed"), "{text}");
    }

    /// An allocation larger than the host's memory says how much it asked for and how much
    /// the host has available (Linux's MemAvailable, which never exceeds MemTotal).
    #[test]
    fn out_of_memory_carries_the_bytes_asked_and_free() {
        let b = CpuBackend::new();
        match b.alloc(u64::MAX) {
            Err(BackendError::OutOfMemory {
                bytes: u64::MAX,
                free: Some(free),
            }) => assert!(
                free > 0 && free <= b.info().memory.device_local,
                "free {free} of {}",
                b.info().memory.device_local
            ),
            other => panic!("alloc(u64::MAX) gave {other:?}"),
        }
    }

    /// `cc` is there wherever Rust builds: it is the linker.
    #[test]
    fn compiled_when_the_compiler_works() {
        let b = CpuBackend::with_compiler(OsStr::new("cc"));
        assert!(
            b.info().driver.starts_with("C compiled by"),
            "{:?}",
            b.info()
        );
    }

    #[test]
    fn a_missing_compiler_falls_back_to_the_interpreter_with_the_reason() {
        let b = CpuBackend::with_compiler(OsStr::new("/nonexistent"));
        let info = b.info();
        assert_eq!(info.driver, "trine reference interpreter");
        assert!(info.name.ends_with("interpreter)"), "{}", info.name);
        let note = info.notes.join("\n");
        assert!(
            note.contains("no working C compiler") && note.contains("/nonexistent"),
            "{note}"
        );
        // And it still runs kernels.
        let bits = half::f16::from_f32(0.25).to_bits().to_le_bytes();
        let out = halves_to_floats(&b, &probe_kernel(), &bits.repeat(8), 1);
        assert_eq!(&out[..4], &0.5f32.to_le_bytes());
    }

    /// Runs `k` (x f16, y f32, an element an invocation) over `groups` workgroups on the f16
    /// bytes `x`, and gives y's bytes.
    fn halves_to_floats(b: &CpuBackend, k: &Kernel, x: &[u8], groups: u32) -> Vec<u8> {
        let p = b.compile(k).unwrap();
        let n = x.len() as u64 / 2;
        let (hx, hy) = (b.alloc(2 * n).unwrap(), b.alloc(4 * n).unwrap());
        b.write(hx, 0, x).unwrap();
        let binding = |buffer, size| Binding {
            buffer,
            offset: 0,
            size,
        };
        b.dispatch(&Dispatch {
            program: p,
            grid: [groups, 1, 1],
            bindings: &[binding(hx, 2 * n), binding(hy, 4 * n)],
            params: &[],
        })
        .unwrap();
        let mut out = vec![0u8; 4 * n as usize];
        b.read(hy, 0, &mut out).unwrap();
        out
    }

    /// The compiled C widens every one of the 65,536 halves as the `half` crate does (the
    /// interpreter's conversion): each finite one exactly, subnormals included, infinities, and
    /// NaNs made quiet with their payload kept.
    #[test]
    fn every_half_widens_as_the_interpreter_widens_it() {
        let b = CpuBackend::with_compiler(OsStr::new("cc"));
        let k = KernelBuilder::new("widen_every_half", [64, 1, 1]);
        let x = k.buffer("x", Scalar::F16, Access::Read);
        let y = k.buffer("y", Scalar::F32, Access::Write);
        let i = k.global_id(0);
        k.store(y, i, k.load(x, i).cast(Scalar::F32));
        let halves: Vec<u8> = (0..=u16::MAX).flat_map(u16::to_le_bytes).collect();
        let out = halves_to_floats(&b, &k.finish(), &halves, (1 << 16) / 64);
        for (h, got) in out.chunks_exact(4).enumerate() {
            let got = u32::from_le_bytes([got[0], got[1], got[2], got[3]]);
            let want = half::f16::from_bits(h as u16).to_f32().to_bits();
            assert_eq!(got, want, "{h:#06x}: {got:#010x}, want {want:#010x}");
        }
    }
}

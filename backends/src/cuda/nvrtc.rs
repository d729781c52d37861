//! NVRTC, CUDA's run-time compiler, loaded at run time, and the search for it.
//!
//! Search order: `$CUDA_PATH`, then `/usr/local/cuda` and `/usr/local/cuda-*` (newest first),
//! each in `lib64`, `lib` and `targets/x86_64-linux/lib`, then the system's library path. The include
//! directory beside the library found supplies `cuda_fp16.h`, which NVRTC up to CUDA 13.0
//! does not carry built in.

use crate::error::BackendError;
use libloading::Library;
use std::ffi::{c_char, c_int, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Environment variable naming a CUDA toolkit root searched first.
pub const CUDA_PATH_ENV: &str = "CUDA_PATH";

type NvrtcResult = c_int;
type Program = *mut std::ffi::c_void;
const NVRTC_SUCCESS: NvrtcResult = 0;

/// Library names, newest first: the unversioned development link, then each major version
/// NVRTC has shipped with a stable ABI.
const NAMES: [&str; 4] = [
    "libnvrtc.so",
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
];

pub struct Nvrtc {
    version_fn: unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvrtcResult,
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> NvrtcResult,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> NvrtcResult,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
    log: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    cubin_size: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
    cubin: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    ptx_size: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
    ptx: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    destroy: unsafe extern "C" fn(*mut Program) -> NvrtcResult,
    error_string: unsafe extern "C" fn(NvrtcResult) -> *const c_char,
    num_archs: unsafe extern "C" fn(*mut c_int) -> NvrtcResult,
    archs: unsafe extern "C" fn(*mut c_int) -> NvrtcResult,
    /// The file loaded.
    pub path: PathBuf,
    /// Where `cuda_fp16.h` was found, if anywhere.
    pub include: Option<PathBuf>,
    pub version: (i32, i32),
    /// Real architectures (`sm_XY` as `XY`) this NVRTC can compile for, ascending.
    pub archs_supported: Vec<u32>,
    /// `libnvrtc-builtins` from NVRTC's directory, loaded before NVRTC asks for it by name.
    _builtins: Vec<Library>,
    _lib: Library,
}

/// How to compile: for a real arch (`sm_XY`, a cubin), the same with its architecture-specific
/// instructions (`sm_XYa`, a cubin that runs on that arch only), or a virtual one
/// (`compute_XY`, PTX).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Sm(u32),
    SmA(u32),
    Compute(u32),
}

impl Target {
    /// The architecture as `major * 10 + minor`, real or virtual.
    pub fn arch(self) -> u32 {
        match self {
            Target::Sm(a) | Target::SmA(a) | Target::Compute(a) => a,
        }
    }

    pub fn option(self) -> String {
        format!("--gpu-architecture={}", self.name())
    }

    pub fn name(self) -> String {
        match self {
            Target::Sm(a) => format!("sm_{a}"),
            Target::SmA(a) => format!("sm_{a}a"),
            Target::Compute(a) => format!("compute_{a}"),
        }
    }

    /// The target `kernel` compiles for here: warpgroup products (`wgmma`) are sm_90's own
    /// instructions, which only `sm_90a` compiles.
    pub fn for_kernel(self, kernel: &trine_ir::Kernel) -> Target {
        match self {
            Target::Sm(a) if kernel.capabilities.group_mma => Target::SmA(a),
            t => t,
        }
    }
}

/// See [`Nvrtc::target`]; `supported` is ascending.
fn pick_target(supported: &[u32], arch: u32) -> Option<Target> {
    if supported.contains(&arch) {
        return Some(Target::Sm(arch));
    }
    supported
        .iter()
        .rev()
        .find(|&&a| a <= arch)
        .map(|&a| Target::Compute(a))
}

/// Directories searched for NVRTC, in order (the system path comes after them).
pub(super) fn search_dirs() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = vec![];
    if let Some(p) = std::env::var_os(CUDA_PATH_ENV).filter(|p| !p.is_empty()) {
        roots.push(PathBuf::from(p));
    }
    roots.push(PathBuf::from("/usr/local/cuda"));
    if let Ok(entries) = std::fs::read_dir("/usr/local") {
        let mut versioned: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("cuda-"))
            })
            .collect();
        versioned.sort_by_key(|p| std::cmp::Reverse(version_key(p)));
        roots.extend(versioned);
    }
    // `lib` is the layout of NVIDIA's Python wheels (`site-packages/nvidia/cu13/lib`), which
    // carry NVRTC and the headers without a toolkit.
    roots
        .iter()
        .flat_map(|r| {
            [
                r.join("lib64"),
                r.join("lib"),
                r.join("targets/x86_64-linux/lib"),
            ]
        })
        .collect()
}

/// `/usr/local/cuda-12.4` → `[12, 4]`, so that 12.10 sorts after 12.9.
fn version_key(p: &Path) -> Vec<u32> {
    p.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("cuda-"))
        .map(|v| v.split('.').map(|x| x.parse().unwrap_or(0)).collect())
        .unwrap_or_default()
}

/// The include directory with `cuda_fp16.h` that belongs to the library at `lib`, or the one
/// under `$CUDA_PATH`.
fn find_include(lib: &Path) -> Option<PathBuf> {
    let mut candidates = vec![];
    if let Some(dir) = lib.parent() {
        // lib64 or lib → ../include; targets/x86_64-linux/lib → ../include (the same tree).
        candidates.push(dir.join("../include"));
    }
    if let Some(p) = std::env::var_os(CUDA_PATH_ENV).filter(|p| !p.is_empty()) {
        candidates.push(PathBuf::from(p).join("include"));
    }
    candidates.push(PathBuf::from("/usr/local/cuda/include"));
    candidates
        .into_iter()
        .find(|d| d.join("cuda_fp16.h").is_file())
        .map(|d| d.canonicalize().unwrap_or(d))
}

/// Loads the `libnvrtc-builtins.so*` files beside NVRTC at `lib`. NVRTC opens that library by
/// its bare name at its first compile; a toolkit's directory is usually on the loader's path,
/// but a wheel's or a `CUDA_PATH` outside it is not, and then every compile would fail. Once
/// loaded, the name resolves to the loaded library. Failures are left to NVRTC to report.
fn preload_builtins(lib: &Path) -> Vec<Library> {
    let Some(dir) = lib.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return vec![];
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                // `.alt.` builds are NVRTC's alternative (static libstdc++) flavour.
                .is_some_and(|n| n.starts_with("libnvrtc-builtins.so") && !n.contains(".alt."))
        })
        // SAFETY: NVRTC's own companion library, whose initialisers only set up its state.
        .filter_map(|p| unsafe { Library::new(&p) }.ok())
        .collect()
}

/// Opens the first NVRTC found; the error lists where it looked.
fn open_library() -> Result<(Library, PathBuf), BackendError> {
    let mut tried = vec![];
    for dir in search_dirs() {
        for name in NAMES {
            let path = dir.join(name);
            if !path.exists() {
                continue;
            }
            // SAFETY: NVRTC's initialisers only set up its own state.
            match unsafe { Library::new(&path) } {
                Ok(lib) => return Ok((lib, path)),
                Err(e) => tried.push(format!("{}: {e}", path.display())),
            }
        }
    }
    for name in NAMES {
        // SAFETY: as above; the dynamic loader searches the system path.
        match unsafe { Library::new(name) } {
            Ok(lib) => return Ok((lib, PathBuf::from(name))),
            Err(e) => tried.push(format!("{name}: {e}")),
        }
    }
    Err(BackendError::Unavailable(format!(
        "NVRTC (libnvrtc.so) not found; set {CUDA_PATH_ENV} to a CUDA toolkit. Tried: {}",
        tried.join("; ")
    )))
}

macro_rules! sym {
    ($lib:expr, $name:literal) => {
        *$lib.get($name).map_err(|e| {
            BackendError::Unavailable(format!(
                "NVRTC lacks {} (older than CUDA 11.2?): {e}",
                String::from_utf8_lossy(&$name[..$name.len() - 1])
            ))
        })?
    };
}

/// NVRTC, loaded once per process (finding it scans several directories) and kept.
pub fn nvrtc() -> Result<&'static Nvrtc, BackendError> {
    static NVRTC: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
    NVRTC
        .get_or_init(|| {
            Nvrtc::load().map_err(|e| match e {
                BackendError::Unavailable(why) => why,
                e => e.to_string(),
            })
        })
        .as_ref()
        .map_err(|why| BackendError::Unavailable(why.clone()))
}

impl Nvrtc {
    fn load() -> Result<Nvrtc, BackendError> {
        let (lib, path) = open_library()?;
        // SAFETY: every symbol is looked up under its documented name with the signature
        // nvrtc.h declares; the pointers live beside the library that owns them.
        let mut n = unsafe {
            Nvrtc {
                version_fn: sym!(lib, b"nvrtcVersion\0"),
                create: sym!(lib, b"nvrtcCreateProgram\0"),
                compile: sym!(lib, b"nvrtcCompileProgram\0"),
                log_size: sym!(lib, b"nvrtcGetProgramLogSize\0"),
                log: sym!(lib, b"nvrtcGetProgramLog\0"),
                cubin_size: sym!(lib, b"nvrtcGetCUBINSize\0"),
                cubin: sym!(lib, b"nvrtcGetCUBIN\0"),
                ptx_size: sym!(lib, b"nvrtcGetPTXSize\0"),
                ptx: sym!(lib, b"nvrtcGetPTX\0"),
                destroy: sym!(lib, b"nvrtcDestroyProgram\0"),
                error_string: sym!(lib, b"nvrtcGetErrorString\0"),
                num_archs: sym!(lib, b"nvrtcGetNumSupportedArchs\0"),
                archs: sym!(lib, b"nvrtcGetSupportedArchs\0"),
                include: find_include(&path),
                _builtins: preload_builtins(&path),
                path,
                version: (0, 0),
                archs_supported: vec![],
                _lib: lib,
            }
        };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        n.check("nvrtcVersion", unsafe {
            (n.version_fn)(&mut major, &mut minor)
        })?;
        n.version = (major, minor);
        let mut count = 0;
        // SAFETY: a valid out-pointer.
        n.check("nvrtcGetNumSupportedArchs", unsafe {
            (n.num_archs)(&mut count)
        })?;
        let mut archs = vec![0 as c_int; usize::try_from(count).unwrap_or(0)];
        if !archs.is_empty() {
            // SAFETY: `archs` has room for the `count` entries NVRTC writes.
            n.check("nvrtcGetSupportedArchs", unsafe {
                (n.archs)(archs.as_mut_ptr())
            })?;
        }
        n.archs_supported = archs
            .into_iter()
            .filter_map(|a| u32::try_from(a).ok())
            .collect();
        n.archs_supported.sort_unstable();
        Ok(n)
    }

    fn error(&self, code: NvrtcResult) -> String {
        // SAFETY: NVRTC returns a static NUL-terminated string for any code (or null).
        let s = unsafe { (self.error_string)(code) };
        if s.is_null() {
            format!("nvrtcResult {code}")
        } else {
            // SAFETY: non-null, static, NUL-terminated.
            let name = unsafe { CStr::from_ptr(s) }.to_string_lossy();
            format!("{name} ({code})")
        }
    }

    fn check(&self, call: &'static str, code: NvrtcResult) -> Result<(), BackendError> {
        if code == NVRTC_SUCCESS {
            Ok(())
        } else {
            Err(BackendError::Driver {
                call,
                code: self.error(code),
            })
        }
    }

    /// The target for a device of compute capability `arch` (`major * 10 + minor`): its own
    /// `sm_XY` when this NVRTC knows it, otherwise PTX for the newest arch it knows below it,
    /// which the driver compiles at load. `None` when NVRTC knows nothing at or below it.
    pub fn target(&self, arch: u32) -> Option<Target> {
        pick_target(&self.archs_supported, arch)
    }

    /// Compiles `source` with `options` (which name `target`): a cubin for an `sm_XY` target,
    /// NUL-terminated PTX for a `compute_XY` one, which the driver finishes at load. The error
    /// carries NVRTC's log.
    pub fn compile(
        &self,
        kernel: &str,
        source: &str,
        target: Target,
        options: &[String],
    ) -> Result<Vec<u8>, BackendError> {
        let compile_error = |message: String| BackendError::Compile {
            kernel: kernel.to_string(),
            message,
        };
        let src = CString::new(source)
            .map_err(|_| compile_error("the lowered source contains a NUL byte".into()))?;
        let name = CString::new(format!("{kernel}.cu"))
            .map_err(|_| compile_error("the kernel name contains a NUL byte".into()))?;
        let options: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()))
            .collect::<Result<_, _>>()
            .map_err(|_| compile_error("an NVRTC option contains a NUL byte".into()))?;
        let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: valid NUL-terminated strings; no headers are passed (count 0, null arrays).
        self.check("nvrtcCreateProgram", unsafe {
            (self.create)(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        })?;
        let result = self.compile_program(prog, &option_ptrs, target, &compile_error);
        // SAFETY: `prog` was created above and is destroyed once.
        unsafe { (self.destroy)(&mut prog) };
        result
    }

    fn compile_program(
        &self,
        prog: Program,
        options: &[*const c_char],
        target: Target,
        compile_error: &dyn Fn(String) -> BackendError,
    ) -> Result<Vec<u8>, BackendError> {
        let count = c_int::try_from(options.len())
            .map_err(|_| compile_error(format!("{} NVRTC options", options.len())))?;
        // SAFETY: a live program and `count` valid option strings.
        let code = unsafe { (self.compile)(prog, count, options.as_ptr()) };
        if code != NVRTC_SUCCESS {
            let mut message = format!("{}\n{}", self.error(code), self.program_log(prog));
            if self.include.is_none() && message.contains("cuda_fp16.h") {
                message.push_str(&format!(
                    "\nno CUDA include directory with cuda_fp16.h was found; set {CUDA_PATH_ENV}"
                ));
            }
            return Err(compile_error(message));
        }
        let (size_fn, get_fn, call) = match target {
            Target::Sm(_) | Target::SmA(_) => (self.cubin_size, self.cubin, "nvrtcGetCUBIN"),
            Target::Compute(_) => (self.ptx_size, self.ptx, "nvrtcGetPTX"),
        };
        let mut size = 0usize;
        // SAFETY: a live, compiled program and a valid out-pointer.
        self.check(call, unsafe { size_fn(prog, &mut size) })?;
        let mut image = vec![0u8; size];
        // SAFETY: `image` has the `size` bytes NVRTC writes.
        self.check(call, unsafe { get_fn(prog, image.as_mut_ptr().cast()) })?;
        Ok(image)
    }

    /// The compiler's log, or a note that it could not be read.
    fn program_log(&self, prog: Program) -> String {
        let mut size = 0usize;
        // SAFETY: a live program and a valid out-pointer.
        if unsafe { (self.log_size)(prog, &mut size) } != NVRTC_SUCCESS || size == 0 {
            return "(no compiler log)".into();
        }
        let mut log = vec![0u8; size];
        // SAFETY: `log` has the `size` bytes (NUL included) NVRTC writes.
        if unsafe { (self.log)(prog, log.as_mut_ptr().cast()) } != NVRTC_SUCCESS {
            return "(the compiler log could not be read)".into();
        }
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        String::from_utf8_lossy(&log[..end]).trim_end().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toolkit_versions_sort_numerically() {
        let mut v = [
            PathBuf::from("/usr/local/cuda-12.9"),
            PathBuf::from("/usr/local/cuda-12.10"),
            PathBuf::from("/usr/local/cuda-11.8"),
        ];
        v.sort_by_key(|p| std::cmp::Reverse(version_key(p)));
        assert_eq!(v[0], PathBuf::from("/usr/local/cuda-12.10"));
        assert_eq!(v[2], PathBuf::from("/usr/local/cuda-11.8"));
    }

    #[test]
    fn search_covers_both_library_layouts() {
        let dirs = search_dirs();
        assert!(dirs.contains(&PathBuf::from("/usr/local/cuda/lib64")));
        assert!(dirs.contains(&PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib")));
    }

    #[test]
    fn a_device_newer_than_nvrtc_gets_ptx_of_the_newest_older_arch() {
        let known = [75, 80, 86, 89, 90];
        assert_eq!(pick_target(&known, 90), Some(Target::Sm(90)));
        assert_eq!(pick_target(&known, 100), Some(Target::Compute(90)));
        assert_eq!(pick_target(&known, 87), Some(Target::Compute(86)));
        assert_eq!(pick_target(&known, 70), None);
    }

    #[test]
    fn targets_name_their_architecture() {
        assert_eq!(Target::SmA(90).option(), "--gpu-architecture=sm_90a");
        assert_eq!(Target::Sm(90).option(), "--gpu-architecture=sm_90");
        assert_eq!(Target::Compute(120).name(), "compute_120");
    }
}

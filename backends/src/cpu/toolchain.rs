//! The system C compiler: finding it, compiling a kernel's C into a shared object, caching the
//! object on disk and loading it.
//!
//! Objects are cached under `cache::cache_dir()/cpu-c/<key>`, where the key hashes everything
//! that changes the machine code: the C text (which holds the kernel and the lowering's
//! choices), the compiler's identity (`cc --version`'s first line), the flags, and the host CPU
//! (`-march=native` means different instructions on different CPUs, and a cache directory may
//! be shared between machines). A second run finds the object and only loads it.

use crate::cache;
use std::ffi::{c_void, OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use thiserror::Error;

/// Names the compiler to use instead of `cc`.
pub const CC_ENV: &str = "TRINE_CC";

/// Namespace of compiled kernels in the on-disk cache.
const CACHE_NS: &str = "cpu-c";

/// Flags for every kernel, and why:
/// - `-O3`: vectorise the loops over invocations;
/// - `-march=native`: with the host's vector extensions (AVX2, AVX-512, F16C conversions);
/// - `-ffp-contract=off`: no `a * b + c` fused into one rounding, so every float result is
///   rounded where the interpreter rounds it (an explicit `Fma` still fuses);
/// - `-fno-math-errno`: `sqrtf` and friends never set `errno`, so they inline to instructions
///   (kernels cannot read `errno` anyway);
/// - `-fno-trapping-math`: no floating-point exception is observed, so a float comparison in a
///   select may run for every lane and a loop over invocations holding one is vectorised
///   (values are unchanged: it permits no reordering or contraction);
/// - `-fopenmp-simd`: `omp declare simd` declarations of helpers with hand-written vector
///   versions (the packed dot products), without OpenMP's runtime;
/// - `-fPIC -shared`: a shared object to load with `dlopen`.
pub const FLAGS: &[&str] = &[
    "-O3",
    "-march=native",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fopenmp-simd",
    "-fPIC",
    "-shared",
];

/// The C entry point of every kernel (see `trine_codegen::c`).
pub(crate) type Entry = unsafe extern "C" fn(
    buffers: *const *mut c_void,
    params: *const u32,
    grid: *const u32,
    wg_begin: u64,
    wg_end: u64,
);

#[derive(Debug, Error)]
pub enum ToolchainError {
    #[error("cannot run the C compiler {cc:?}: {source}")]
    Spawn {
        cc: String,
        #[source]
        source: io::Error,
    },
    #[error("the C compiler {cc:?} printed no version")]
    NoVersion { cc: String },
    #[error("{cc:?} failed ({status}) compiling {symbol}: {stderr}")]
    Failed {
        cc: String,
        symbol: String,
        status: String,
        stderr: String,
    },
    #[error("{what} {path:?}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("loading {path:?}: {source}")]
    Load {
        path: PathBuf,
        #[source]
        source: libloading::Error,
    },
}

/// The compiler named by `TRINE_CC` (when set and not empty), else `cc`.
pub fn compiler_from_env() -> OsString {
    compiler_from(std::env::var_os(CC_ENV))
}

fn compiler_from(var: Option<OsString>) -> OsString {
    var.filter(|v| !v.is_empty())
        .unwrap_or_else(|| OsString::from("cc"))
}

/// A compiled kernel: its loaded object and entry point.
pub(crate) struct Compiled {
    entry: Entry,
    // Keeps the object mapped while `entry` may be called; dropped after it.
    _lib: libloading::Library,
}

impl Compiled {
    pub(crate) fn entry(&self) -> Entry {
        self.entry
    }
}

/// A working C compiler.
pub(crate) struct Toolchain {
    cc: OsString,
    /// The first line of `cc --version`.
    pub identity: String,
    /// What distinguishes this CPU's `-march=native` (model and feature flags).
    cpu: String,
}

fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl Toolchain {
    /// Asks `cc` for its version, which also shows that it runs.
    pub(crate) fn find(cc: &OsStr) -> Result<Toolchain, ToolchainError> {
        let name = cc.to_string_lossy().into_owned();
        let out = Command::new(cc)
            .arg("--version")
            .output()
            .map_err(|source| ToolchainError::Spawn {
                cc: name.clone(),
                source,
            })?;
        let text = String::from_utf8_lossy(&out.stdout);
        let identity = text.lines().next().unwrap_or("").trim().to_string();
        if !out.status.success() || identity.is_empty() {
            return Err(ToolchainError::NoVersion { cc: name });
        }
        Ok(Toolchain {
            cc: cc.to_os_string(),
            identity,
            cpu: super::sysinfo::cpu_signature(),
        })
    }

    /// The compiler and flags, for `DeviceInfo::driver`.
    pub(crate) fn describe(&self) -> String {
        format!("C compiled by {} with {}", self.identity, FLAGS.join(" "))
    }

    /// Compiles `source` (or finds it in the cache) and loads `symbol` from it.
    pub(crate) fn build(&self, source: &str, symbol: &str) -> Result<Compiled, ToolchainError> {
        let key = format!(
            "{:016x}.so",
            fnv(&[source, &self.identity, &FLAGS.join(" "), &self.cpu].join("\0"))
        );
        let cached = cache::cache_dir().map(|d| d.join(CACHE_NS).join(&key));
        if let Some(path) = cached.as_deref().filter(|p| p.is_file()) {
            // A damaged entry is a miss: compiling again replaces it.
            if let Ok(c) = load(path, symbol) {
                return Ok(c);
            }
        }
        let scratch = Scratch::new()?;
        let object = self.compile(source, symbol, &scratch)?;
        // The cache is an optimisation: when it cannot be written, the object is loaded from
        // the scratch directory (and compiled again next time).
        let stored = std::fs::read(&object)
            .ok()
            .and_then(|bytes| cache::store(CACHE_NS, &key, &bytes).ok());
        match (stored, cached) {
            (Some(()), Some(path)) => load(&path, symbol),
            _ => load(&object, symbol),
        }
    }

    fn compile(
        &self,
        source: &str,
        symbol: &str,
        scratch: &Scratch,
    ) -> Result<PathBuf, ToolchainError> {
        let c = scratch.0.join("kernel.c");
        let object = scratch.0.join("kernel.so");
        std::fs::write(&c, source).map_err(|source| ToolchainError::Io {
            what: "writing",
            path: c.clone(),
            source,
        })?;
        let cc = self.cc.to_string_lossy().into_owned();
        let out = Command::new(&self.cc)
            .args(FLAGS)
            .arg("-o")
            .arg(&object)
            .arg(&c)
            .output()
            .map_err(|source| ToolchainError::Spawn {
                cc: cc.clone(),
                source,
            })?;
        if !out.status.success() {
            return Err(ToolchainError::Failed {
                cc,
                symbol: symbol.to_string(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(object)
    }
}

fn load(path: &Path, symbol: &str) -> Result<Compiled, ToolchainError> {
    let err = |source| ToolchainError::Load {
        path: path.to_path_buf(),
        source,
    };
    // SAFETY: loading runs the object's initialisers; ours are the C compiler's own for a file
    // of plain functions (the lowering emits no constructors), from our cache or scratch dir.
    let lib = unsafe { libloading::Library::new(path) }.map_err(err)?;
    // SAFETY: every lowered kernel exports `symbol` with exactly the `Entry` signature (the
    // ABI in trine_codegen::c); the pointer is only called while `lib` is alive, since both
    // live in the returned `Compiled`.
    let entry = unsafe { lib.get::<Entry>(symbol.as_bytes()) }.map(|s| *s);
    let entry = entry.map_err(err)?;
    Ok(Compiled { entry, _lib: lib })
}

/// A private directory for one compilation, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, ToolchainError> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "trine-cc-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|source| ToolchainError::Io {
            what: "creating",
            path: dir.clone(),
            source,
        })?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // Leftovers in the temporary directory are harmless; nothing to report.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiler_defaults_to_cc() {
        assert_eq!(compiler_from(None), OsString::from("cc"));
        assert_eq!(compiler_from(Some("".into())), OsString::from("cc"));
        assert_eq!(compiler_from(Some("clang".into())), OsString::from("clang"));
    }

    #[test]
    fn a_missing_compiler_is_a_spawn_error() {
        let e = Toolchain::find(OsStr::new("/nonexistent/cc")).err();
        assert!(
            matches!(&e, Some(ToolchainError::Spawn { cc, .. }) if cc == "/nonexistent/cc"),
            "{e:?}"
        );
    }
}

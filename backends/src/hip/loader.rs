//! Finding and opening ROCm: libamdhip64, hiprtc and comgr, once per process.
//!
//! Search order: `TRINE_ROCM_PATH` (a library file, a ROCm prefix or its `lib` directory),
//! `ROCM_PATH`, `/opt/rocm*/lib` newest first, then the system library path (dlopen by bare
//! name). In each place `libamdhip64.so`, `.so.7`, `.so.6`, `.so.5` are tried in turn.
//! hiprtc is taken from the runtime library itself when it exports it (ROCm 5), otherwise
//! from `libhiprtc.so` beside it (ROCm 6 and later); comgr likewise from beside it.
//!
//! The libraries stay loaded until the process exits: ROCm's runtime starts threads and
//! registers exit handlers, and unloading it is a known way to crash at exit. Environment
//! variables are read on first use only.

use super::comgr::Comgr;
use super::ffi::{self, Graphs, Hip, Props, Rtc};
use crate::error::BackendError;
use libloading::Library;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Where to look for ROCm first: a library file, a ROCm prefix, or its `lib` directory.
pub const ROCM_PATH_ENV: &str = "TRINE_ROCM_PATH";

const HIP_NAMES: [&str; 4] = [
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
];
const HIPRTC_NAMES: [&str; 3] = ["libhiprtc.so", "libhiprtc.so.7", "libhiprtc.so.6"];
const COMGR_NAMES: [&str; 3] = ["libamd_comgr.so", "libamd_comgr.so.3", "libamd_comgr.so.2"];

/// What was loaded, reported even when there is no device (`trine doctor`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeInfo {
    /// The libamdhip64 file the dynamic linker mapped, symlinks resolved.
    pub library: String,
    /// `hipRuntimeGetVersion` as `major.minor.patch` (`5.2.21153`); `None` if the call failed.
    pub version: Option<String>,
    /// The file hiprtc was taken from; `None` when there is none (see `notes`).
    pub hiprtc: Option<String>,
    /// `hiprtcVersion` as `major.minor` (hiprtc's own numbering, not ROCm's).
    pub hiprtc_version: Option<String>,
    /// The ISAs the compiler knows (`gfx1030`, …), from comgr; `None` when comgr could not be
    /// opened, in which case every compile runs in a child process.
    pub compiler_isas: Option<Vec<String>>,
    /// Every ROCm runtime library found on the machine, with the version in its file name.
    pub visible: Vec<Install>,
    /// Warnings: different ROCm versions visible, hiprtc or comgr missing.
    pub notes: Vec<String>,
}

/// One ROCm runtime library on disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Install {
    /// The file, symlinks resolved.
    pub path: String,
    /// From the file name: `libamdhip64.so.6.3.60300` → `6.3.60300`.
    pub version: String,
}

/// The opened runtime. Lives in a static for the rest of the process.
pub(super) struct Runtime {
    pub hip: Hip,
    /// `None` in a runtime without graphs: recordings then replay launch by launch.
    pub graphs: Option<Graphs>,
    /// `None` when the layout for this version is unknown: the arch cannot be read.
    pub props: Option<Props>,
    pub rtc: Result<Rtc, String>,
    pub info: RuntimeInfo,
    /// Keeps the libraries mapped; the function pointers above point into them.
    _libraries: Vec<Library>,
}

/// The runtime, loaded on first use. No library → `Unavailable` with everything searched.
pub(super) fn runtime() -> Result<&'static Runtime, BackendError> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(load)
        .as_ref()
        .map_err(|e| BackendError::Unavailable(e.clone()))
}

/// What [`runtime`] loaded: the library, its version, hiprtc, the compiler's ISAs and the
/// other ROCm installations visible. Works without an AMD GPU.
pub fn describe_runtime() -> Result<RuntimeInfo, BackendError> {
    runtime().map(|rt| rt.info.clone())
}

/// A place to try: a file path, or a bare name for the system search.
struct Candidate {
    file: PathBuf,
    dir: Option<PathBuf>,
}

/// Every candidate in search order; `searched` says where was looked, `failures` gets a
/// `TRINE_ROCM_PATH` that holds no runtime (so falling back elsewhere is not silent).
fn candidates(searched: &mut Vec<String>, failures: &mut Vec<String>) -> Vec<Candidate> {
    let mut out = vec![];
    let in_dirs = |dirs: Vec<PathBuf>, out: &mut Vec<Candidate>| {
        for dir in dirs {
            for name in HIP_NAMES {
                let file = dir.join(name);
                if file.is_file() {
                    out.push(Candidate {
                        file,
                        dir: Some(dir.clone()),
                    });
                }
            }
        }
    };
    match std::env::var_os(ROCM_PATH_ENV).map(PathBuf::from) {
        Some(p) if p.is_file() => {
            searched.push(format!("{ROCM_PATH_ENV}={}", p.display()));
            out.push(Candidate {
                dir: p.parent().map(Path::to_path_buf),
                file: p,
            });
        }
        Some(p) => {
            searched.push(format!("{ROCM_PATH_ENV}={}", p.display()));
            in_dirs(vec![p.join("lib"), p.clone()], &mut out);
            if out.is_empty() {
                failures.push(format!(
                    "{ROCM_PATH_ENV}={}: no libamdhip64.so* in it or its lib/",
                    p.display()
                ));
            }
        }
        None => searched.push(format!("{ROCM_PATH_ENV} (unset)")),
    }
    match std::env::var_os("ROCM_PATH").map(PathBuf::from) {
        Some(p) => {
            searched.push(format!("ROCM_PATH={}", p.display()));
            in_dirs(vec![p.join("lib")], &mut out);
        }
        None => searched.push("ROCM_PATH (unset)".into()),
    }
    let opt = opt_installs(Path::new("/opt"));
    searched.push(if opt.is_empty() {
        "/opt/rocm*/lib (none)".into()
    } else {
        let dirs: Vec<String> = opt.iter().map(|d| d.display().to_string()).collect();
        dirs.join(", ")
    });
    in_dirs(opt, &mut out);
    searched.push(format!(
        "the system library path ({})",
        HIP_NAMES.join(", ")
    ));
    out.extend(HIP_NAMES.iter().map(|n| Candidate {
        file: PathBuf::from(n),
        dir: None,
    }));
    out
}

/// `<root>/rocm*/lib` directories, newest version first (versions from the directory name or
/// the `.info/version` file; symlinks such as `/opt/rocm` resolved, duplicates dropped;
/// unversioned ones last).
fn opt_installs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return vec![];
    };
    let mut found: BTreeMap<PathBuf, Option<(u32, u32, u32)>> = BTreeMap::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("rocm") {
            continue;
        }
        let Ok(real) = std::fs::canonicalize(entry.path()) else {
            continue;
        };
        if !real.join("lib").is_dir() {
            continue;
        }
        let from_name = |p: &Path| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("rocm-"))
                .and_then(parse_version)
        };
        let version = from_name(&real).or_else(|| {
            std::fs::read_to_string(real.join(".info").join("version"))
                .ok()
                .and_then(|v| parse_version(v.trim()))
        });
        found.insert(real, version);
    }
    let mut dirs: Vec<_> = found.into_iter().collect();
    // Newest first; `None` sorts below every version.
    dirs.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    dirs.into_iter().map(|(d, _)| d.join("lib")).collect()
}

/// The leading `major.minor[.patch]` of `s` (`6.3.0-39` → (6, 3, 0)).
pub(super) fn parse_version(s: &str) -> Option<(u32, u32, u32)> {
    let mut parts = s.split(['.', '-']).map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

/// `hipRuntimeGetVersion`'s number (`major * 10^7 + minor * 10^5 + patch`) as text.
fn format_version(v: i32) -> String {
    format!("{}.{}.{}", v / 10_000_000, (v / 100_000) % 100, v % 100_000)
}

fn load() -> Result<Runtime, String> {
    let mut searched = vec![];
    let mut failures = vec![];
    for c in candidates(&mut searched, &mut failures) {
        // SAFETY: loading a library runs its initialisers; these are ROCm's own runtime
        // libraries, found where ROCm installs them, whose initialisers take no input.
        let lib = match unsafe { Library::new(&c.file) } {
            Ok(lib) => lib,
            Err(e) => {
                // A bare name that is simply absent is the normal case on most machines.
                if c.dir.is_some() {
                    failures.push(format!("{}: {e}", c.file.display()));
                }
                continue;
            }
        };
        // SAFETY: the library is libamdhip64 (by name and location), which exports these
        // functions with these signatures in ROCm 5, 6 and 7; it is kept loaded forever.
        match unsafe { Hip::load(&lib) } {
            Ok(hip) => {
                let mut rt = open(lib, hip, c);
                // Say what was passed over: a TRINE_ROCM_PATH that did not load is easy to
                // miss when another ROCm loads instead.
                let skipped = failures.into_iter().map(|f| format!("not used: {f}"));
                rt.info.notes.splice(0..0, skipped);
                return Ok(rt);
            }
            Err(e) => failures.push(format!("{}: {e}", c.file.display())),
        }
    }
    let mut why = format!("no ROCm runtime found (searched: {})", searched.join("; "));
    if !failures.is_empty() {
        why.push_str(&format!("; could not open: {}", failures.join("; ")));
    }
    Err(why)
}

fn open(lib: Library, hip: Hip, c: Candidate) -> Runtime {
    let mut notes = vec![];
    // The real file, symlinks resolved: it names the exact release.
    let mapped =
        mapped_path(hip.hipInit as *const ()).map_or_else(|| c.file.clone(), PathBuf::from);
    let library = std::fs::canonicalize(&mapped)
        .unwrap_or(mapped)
        .display()
        .to_string();
    let version_of = |get: unsafe extern "C" fn(*mut i32) -> ffi::HipError| {
        let mut raw = 0;
        // SAFETY: a plain out-parameter; neither version call needs a device.
        let code = unsafe { get(&mut raw) };
        (code == ffi::SUCCESS)
            .then(|| format_version(raw))
            .ok_or(code)
    };
    let runtime_version = version_of(hip.hipRuntimeGetVersion);
    let driver_version = version_of(hip.hipDriverGetVersion);
    let version = match (&runtime_version, &driver_version) {
        (Ok(r), Ok(d)) if r != d => {
            notes.push(format!("HIP runtime {r}, driver {d}"));
            Some(r.clone())
        }
        (Ok(v), _) | (Err(_), Ok(v)) => Some(v.clone()),
        (Err(code), Err(_)) => {
            notes.push(format!(
                "hipRuntimeGetVersion failed: {}",
                hip.describe(*code)
            ));
            None
        }
    };
    let major = version.as_deref().and_then(parse_version).map(|v| v.0);
    // SAFETY: `lib` is the runtime of version `major`, kept loaded below.
    let props = unsafe { Props::load(&lib, major) };
    let mut libraries = vec![];
    // SAFETY: libamdhip64 exports the graph functions with these signatures since ROCm 4.3.
    let graphs = unsafe { Graphs::load(&lib) }.ok();

    // hiprtc: in the runtime itself (ROCm 5), else beside it (ROCm 6+).
    // SAFETY: hiprtc's functions have these signatures wherever they are exported.
    let (rtc, hiprtc) = match unsafe { Rtc::load(&lib) } {
        Ok(rtc) => (Ok(rtc), Some(library.clone())),
        Err(_) => match open_beside(c.dir.as_deref(), &HIPRTC_NAMES, |l| {
            // SAFETY: as above; libhiprtc is ROCm's hiprtc library.
            unsafe { Rtc::load(l) }
        }) {
            Ok((l, rtc, path)) => {
                libraries.push(l);
                (Ok(rtc), Some(path))
            }
            Err(e) => {
                let why = format!("hiprtc not found: not in {library}, and {e}");
                notes.push(why.clone());
                (Err(why), None)
            }
        },
    };
    let comgr = match open_beside(c.dir.as_deref(), &COMGR_NAMES, |l| {
        // SAFETY: libamd_comgr exports these functions with these signatures since 2.0.
        unsafe { Comgr::load(l) }
    }) {
        Ok((l, comgr, _)) => Some((l, comgr)),
        Err(e) => {
            notes.push(format!(
                "comgr not found ({e}): the compiler's ISA list is unknown, so every kernel \
                 compiles in a child process"
            ));
            None
        }
    };
    let compiler_isas = comgr.as_ref().and_then(|(_, c)| match c.isas() {
        Ok(isas) => Some(isas),
        Err(e) => {
            notes.push(format!("comgr's ISA list could not be read: {e}"));
            None
        }
    });
    libraries.extend(comgr.map(|(l, _)| l));
    let hiprtc_version = rtc.as_ref().ok().and_then(|rtc| {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: plain out-parameters.
        let code = unsafe { (rtc.hiprtcVersion)(&mut major, &mut minor) };
        (code == ffi::RTC_SUCCESS).then(|| format!("{major}.{minor}"))
    });
    let visible = visible_installs(&library, c.dir.as_deref());
    notes.extend(mismatch_note(&library, &visible));
    libraries.push(lib);
    Runtime {
        hip,
        graphs,
        props,
        rtc,
        info: RuntimeInfo {
            library,
            version,
            hiprtc,
            hiprtc_version,
            compiler_isas,
            visible,
            notes,
        },
        _libraries: libraries,
    }
}

/// Opens the first of `names` in `dir` (or by bare name when `dir` is `None`) whose table
/// loads. Returns the library, the table and the file's path.
pub(super) fn open_beside<T>(
    dir: Option<&Path>,
    names: &[&str],
    table: impl Fn(&Library) -> Result<T, String>,
) -> Result<(Library, T, String), String> {
    let mut tried = vec![];
    for name in names {
        let file = dir.map_or_else(|| PathBuf::from(name), |d| d.join(name));
        if dir.is_some() && !file.is_file() {
            continue;
        }
        // SAFETY: as in `load`: ROCm's own libraries, found beside its runtime.
        match unsafe { Library::new(&file) } {
            Ok(lib) => match table(&lib) {
                Ok(t) => {
                    let path = file.display().to_string();
                    return Ok((lib, t, path));
                }
                Err(e) => tried.push(format!("{}: {e}", file.display())),
            },
            Err(e) if dir.is_some() => tried.push(format!("{}: {e}", file.display())),
            Err(_) => {}
        }
    }
    let place = dir.map_or_else(
        || "on the system library path".to_string(),
        |d| format!("in {}", d.display()),
    );
    if tried.is_empty() {
        Err(format!("none of {} {place}", names.join(", ")))
    } else {
        Err(tried.join("; "))
    }
}

/// The file the dynamic linker mapped `symbol` from (what a bare-name dlopen resolved to).
fn mapped_path(symbol: *const ()) -> Option<String> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the address and fills `info`, whose strings point into the
    // linker's tables of a library that stays loaded.
    let found = unsafe { libc::dladdr(symbol.cast(), &mut info) } != 0;
    // SAFETY: on success `dli_fname` is null or a NUL-terminated path owned by the linker.
    let path = unsafe { ffi::c_string(info.dli_fname) };
    (found && !path.is_empty()).then_some(path)
}

/// Every libamdhip64 on the machine: the loaded one, `/opt/rocm*`, `$ROCM_PATH`,
/// `$TRINE_ROCM_PATH` and the usual system directories (including `LD_LIBRARY_PATH`).
fn visible_installs(loaded: &str, loaded_dir: Option<&Path>) -> Vec<Install> {
    let mut dirs: Vec<PathBuf> = opt_installs(Path::new("/opt"));
    for var in [ROCM_PATH_ENV, "ROCM_PATH"] {
        if let Some(p) = std::env::var_os(var).map(PathBuf::from) {
            dirs.push(p.join("lib"));
            dirs.push(p);
        }
    }
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&paths));
    }
    let multiarch = format!("/usr/lib/{}-linux-gnu", std::env::consts::ARCH);
    let system = [&multiarch, "/usr/lib64", "/usr/lib", "/usr/local/lib"];
    dirs.extend(system.iter().map(PathBuf::from));
    dirs.extend(loaded_dir.map(Path::to_path_buf));
    let mut files = vec![PathBuf::from(loaded)];
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        files.extend(
            entries
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("libamdhip64.so")
                })
                .map(|e| e.path()),
        );
    }
    let mut out: Vec<Install> = vec![];
    for file in files {
        let Ok(real) = std::fs::canonicalize(&file) else {
            continue;
        };
        let path = real.display().to_string();
        if out.iter().any(|i| i.path == path) {
            continue;
        }
        if let Some(version) = library_version(&real) {
            out.push(Install { path, version });
        }
    }
    out
}

/// `libamdhip64.so.6.3.60300` → `6.3.60300`; `None` for a name without major and minor.
fn library_version(file: &Path) -> Option<String> {
    let name = file.file_name()?.to_str()?;
    let v = name.strip_prefix("libamdhip64.so.")?;
    parse_version(v).map(|_| v.to_string())
}

/// The warning when runtimes of different major.minor versions are visible: a bundled ROCm
/// (6.3 in an application's directory) beside the system's (7.2) is a classic cause of hangs
/// and crashes, since the two load each other's libraries.
fn mismatch_note(loaded: &str, visible: &[Install]) -> Option<String> {
    let mut versions: BTreeMap<(u32, u32), Vec<&str>> = BTreeMap::new();
    for i in visible {
        if let Some((major, minor, _)) = parse_version(&i.version) {
            versions.entry((major, minor)).or_default().push(&i.path);
        }
    }
    if versions.len() < 2 {
        return None;
    }
    let list: Vec<String> = versions
        .iter()
        .map(|((major, minor), paths)| format!("{major}.{minor} ({})", paths.join(", ")))
        .collect();
    Some(format!(
        "different ROCm versions are visible: {}; trine loaded {loaded}. Mixing them (one \
         version's runtime picking up the other's libraries) hangs or crashes: choose one with \
         {ROCM_PATH_ENV} or ROCM_PATH and keep LD_LIBRARY_PATH free of the other",
        list.join(" and ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_from_names_and_numbers() {
        assert_eq!(parse_version("6.3.0-39"), Some((6, 3, 0)));
        assert_eq!(parse_version("5.2.21153"), Some((5, 2, 21153)));
        assert_eq!(parse_version("7.2"), Some((7, 2, 0)));
        assert_eq!(parse_version("7"), None);
        assert_eq!(parse_version("x.1"), None);
        assert_eq!(format_version(50221153), "5.2.21153");
        assert_eq!(format_version(60342134), "6.3.42134");
        assert_eq!(
            library_version(Path::new("/usr/lib/libamdhip64.so.5.2.21153")).as_deref(),
            Some("5.2.21153")
        );
        assert_eq!(
            library_version(Path::new("/opt/rocm/lib/libamdhip64.so")),
            None
        );
        assert_eq!(library_version(Path::new("/x/libamdhip64.so.6")), None);
    }

    #[test]
    fn two_versions_warn_and_one_does_not() {
        let i = |path: &str, version: &str| Install {
            path: path.into(),
            version: version.into(),
        };
        let same = [
            i("/opt/rocm-6.3.0/lib/libamdhip64.so.6.3.60300", "6.3.60300"),
            i("/app/lib/libamdhip64.so.6.3.60301", "6.3.60301"),
        ];
        assert_eq!(mismatch_note("/x", &same), None);
        let mixed = [
            i("/opt/rocm-7.2.0/lib/libamdhip64.so.7.2.70200", "7.2.70200"),
            i("/app/bundle/libamdhip64.so.6.3.60300", "6.3.60300"),
        ];
        let note = mismatch_note("/opt/rocm-7.2.0/lib/libamdhip64.so", &mixed).unwrap();
        assert!(
            note.contains("6.3 (/app/bundle/libamdhip64.so.6.3.60300)"),
            "{note}"
        );
        assert!(note.contains("7.2 (/opt/rocm-7.2.0/lib/"), "{note}");
        assert!(note.contains(ROCM_PATH_ENV), "{note}");
    }

    #[test]
    fn opt_installs_are_newest_first_and_deduplicated() {
        let root = std::env::temp_dir().join(format!("trine-opt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["rocm-6.3.0", "rocm-7.2.0", "rocm-5.7.1", "rocmish-no-lib"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for d in ["rocm-6.3.0", "rocm-7.2.0", "rocm-5.7.1"] {
            std::fs::create_dir_all(root.join(d).join("lib")).unwrap();
        }
        // `/opt/rocm` is usually a symlink to one of them: listed once.
        std::os::unix::fs::symlink(root.join("rocm-6.3.0"), root.join("rocm")).unwrap();
        let real = std::fs::canonicalize(&root).unwrap();
        let got = opt_installs(&root);
        let want: Vec<PathBuf> = ["rocm-7.2.0", "rocm-6.3.0", "rocm-5.7.1"]
            .iter()
            .map(|d| real.join(d).join("lib"))
            .collect();
        assert_eq!(got, want);
        std::fs::remove_dir_all(&root).unwrap();
    }
}

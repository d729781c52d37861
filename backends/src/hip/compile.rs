//! The HIP lowering compiled by hiprtc into an AMDGPU code object, in this process when the
//! compiler lists the arch and in a child process otherwise; code objects cached on disk.

use super::child;
use super::comgr::isa_of;
use super::ffi::{self, Rtc, RtcProgram};
use super::loader::{runtime, Runtime};
use crate::error::BackendError;
use std::ffi::{c_char, CString};
use std::sync::Mutex;
use trine_codegen::Dialect;
use trine_ir::Kernel;

/// Cache namespace of HIP code objects.
const CACHE_NS: &str = "hip";

/// The ELF machine number of AMDGPU code objects.
const EM_AMDGPU: u16 = 224;

/// hiprtc options for `arch`. `-ffp-contract=off` keeps the compiler from fusing `a * b + c`
/// into one fma: the interpreter rounds the product and the sum separately, and the IR has
/// an explicit fma where a kernel wants one.
pub fn compile_options(arch: &str) -> Vec<String> {
    vec![
        format!("--offload-arch={arch}"),
        "-O3".into(),
        "-ffp-contract=off".into(),
    ]
}

/// Whether `bytes` is an AMDGPU ELF code object (ELF magic, `e_machine` 224).
pub fn is_amdgpu_code_object(bytes: &[u8]) -> bool {
    bytes.len() >= 20
        && bytes.starts_with(b"\x7fELF")
        && u16::from_le_bytes([bytes[18], bytes[19]]) == EM_AMDGPU
}

/// The HIP lowering of `kernel` compiled by hiprtc for `arch` (`gfx1030`; features such as
/// `:xnack-` are dropped). Needs hiprtc, not a GPU; uncached. When the compiler does not
/// list `arch` (or comgr cannot say), the compile runs in a child process started from the
/// running executable (see [`child::compile_child_main`]), so a compiler that aborts costs a
/// typed error instead of this process.
pub fn compile_for_arch(kernel: &Kernel, arch: &str) -> Result<Vec<u8>, BackendError> {
    let source = lower(kernel)?;
    let rt = runtime()?;
    compile_source(rt, &kernel.name, &source, arch)
}

pub(super) fn lower(kernel: &Kernel) -> Result<String, BackendError> {
    trine_codegen::hip(kernel, Dialect::Hip).map_err(|e| BackendError::Compile {
        kernel: kernel.name.clone(),
        message: e.to_string(),
    })
}

/// `arch`'s ISA name after checking it is one (`gfx` and lowercase letters or digits, with
/// optional `:feature+`/`:feature-` suffixes). It ends up in a compiler option and a file
/// name, so anything else is refused.
pub(super) fn check_arch<'a>(kernel: &str, arch: &'a str) -> Result<&'a str, BackendError> {
    let isa = isa_of(arch);
    let isa_ok = isa.strip_prefix("gfx").is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
    });
    let features_ok = arch.split(':').skip(1).all(|f| {
        f.len() > 1
            && (f.ends_with('+') || f.ends_with('-'))
            && f[..f.len() - 1].bytes().all(|b| b.is_ascii_lowercase())
    });
    if isa_ok && features_ok && !arch.contains("--") {
        Ok(isa)
    } else {
        Err(BackendError::Compile {
            kernel: kernel.to_string(),
            message: format!("{arch:?} is not an AMD GPU architecture name (gfx…)"),
        })
    }
}

/// Why a compile for `isa` must run in a child process; `None` when it may run here.
fn isolation_reason(rt: &Runtime, isa: &str) -> Option<String> {
    match &rt.info.compiler_isas {
        Some(isas) if isas.iter().any(|i| i == isa) => None,
        Some(_) => Some(format!(
            "the compiler's ISA list (comgr) does not include {isa}"
        )),
        None => Some("the compiler's ISA list (comgr) could not be read".into()),
    }
}

/// Compiles `source` for `arch`, here or in a child.
pub(super) fn compile_source(
    rt: &Runtime,
    kernel: &str,
    source: &str,
    arch: &str,
) -> Result<Vec<u8>, BackendError> {
    let isa = check_arch(kernel, arch)?;
    if isolation_reason(rt, isa).is_none() {
        let rtc = rt
            .rtc
            .as_ref()
            .map_err(|e| BackendError::Unavailable(e.clone()))?;
        return compile_in_process(rtc, kernel, source, isa);
    }
    let exe = std::env::current_exe().map_err(|e| BackendError::Compile {
        kernel: kernel.to_string(),
        message: format!("cannot find the running executable to compile in a child: {e}"),
    })?;
    child::compile_isolated(&exe, kernel, source, isa)
}

/// A hiprtc program, destroyed on every path out.
struct Program<'a> {
    rtc: &'a Rtc,
    handle: RtcProgram,
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle came from hiprtcCreateProgram and is destroyed only here.
        unsafe { (self.rtc.hiprtcDestroyProgram)(&mut self.handle) };
    }
}

/// Compiles in this process. The caller has made sure the compiler knows `isa`.
pub(super) fn compile_in_process(
    rtc: &Rtc,
    kernel: &str,
    source: &str,
    isa: &str,
) -> Result<Vec<u8>, BackendError> {
    // hiprtc's thread safety differs between releases; compiles are rare and cached, so one
    // at a time costs nothing that matters.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let fail = |message: String| BackendError::Compile {
        kernel: kernel.to_string(),
        message,
    };
    let src = CString::new(source).map_err(|_| fail("the source contains a NUL byte".into()))?;
    let name = c"trine.hip";
    let options: Vec<CString> = compile_options(isa)
        .into_iter()
        .map(CString::new)
        .collect::<Result<_, _>>()
        .map_err(|_| fail(format!("arch {isa:?} contains a NUL byte")))?;
    let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();

    let mut handle: RtcProgram = std::ptr::null_mut();
    // SAFETY: both strings are NUL-terminated and outlive the call; no headers are passed.
    let code = unsafe {
        (rtc.hiprtcCreateProgram)(
            &mut handle,
            src.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if code != ffi::RTC_SUCCESS {
        return Err(fail(format!("hiprtcCreateProgram: {}", rtc.describe(code))));
    }
    let program = Program { rtc, handle };
    // SAFETY: a live program; `option_ptrs` holds `len` NUL-terminated strings that outlive
    // the call.
    let code = unsafe {
        (rtc.hiprtcCompileProgram)(
            program.handle,
            option_ptrs.len() as i32,
            option_ptrs.as_ptr(),
        )
    };
    if code != ffi::RTC_SUCCESS {
        let log = program_log(&program);
        return Err(fail(format!(
            "hiprtc for {isa}: {}{}{log}",
            rtc.describe(code),
            if log.is_empty() { "" } else { ":\n" }
        )));
    }
    let mut size = 0usize;
    // SAFETY: a compiled program and an out-parameter.
    let code = unsafe { (rtc.hiprtcGetCodeSize)(program.handle, &mut size) };
    if code != ffi::RTC_SUCCESS {
        return Err(fail(format!("hiprtcGetCodeSize: {}", rtc.describe(code))));
    }
    let mut bytes = vec![0u8; size];
    // SAFETY: `bytes` holds the `size` bytes hiprtc said the code has.
    let code = unsafe { (rtc.hiprtcGetCode)(program.handle, bytes.as_mut_ptr().cast()) };
    if code != ffi::RTC_SUCCESS {
        return Err(fail(format!("hiprtcGetCode: {}", rtc.describe(code))));
    }
    if !is_amdgpu_code_object(&bytes) {
        return Err(fail(format!(
            "hiprtc returned {} bytes that are not an AMDGPU code object",
            bytes.len()
        )));
    }
    Ok(bytes)
}

/// The compiler's log, trimmed; empty when there is none or it cannot be read.
fn program_log(program: &Program<'_>) -> String {
    let rtc = program.rtc;
    let mut size = 0usize;
    // SAFETY: a live program and an out-parameter.
    if unsafe { (rtc.hiprtcGetProgramLogSize)(program.handle, &mut size) } != ffi::RTC_SUCCESS
        || size == 0
    {
        return String::new();
    }
    let mut log = vec![0u8; size];
    // SAFETY: `log` holds the `size` bytes hiprtc said the log has (its NUL included).
    if unsafe { (rtc.hiprtcGetProgramLog)(program.handle, log.as_mut_ptr().cast()) }
        != ffi::RTC_SUCCESS
    {
        return String::new();
    }
    String::from_utf8_lossy(ffi::until_nul(&log))
        .trim()
        .to_string()
}

/// The cache key: kernel hash, a digest of the lowered text and the options (so a change of
/// the lowering or the options misses), the ISA and the runtime version.
fn cache_key(kernel_hash: u64, source: &str, isa: &str, version: &str) -> String {
    let text = format!("{source}\0{}", compile_options(isa).join(" "));
    // FNV-1a, as the IR's hash: stable across Rust releases, unlike std's hasher.
    let digest = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{kernel_hash:016x}-{digest:016x}-{isa}-rocm{version}")
}

/// A code object for `kernel` on `isa`: from the disk cache when `use_cache` and there is a
/// valid entry, otherwise compiled and stored (replacing the entry). Also says whether it
/// came from the cache, so a cached object the runtime rejects can be compiled afresh.
pub(super) fn code_object(
    rt: &Runtime,
    kernel: &Kernel,
    source: &str,
    isa: &str,
    use_cache: bool,
) -> Result<(Vec<u8>, bool), BackendError> {
    let version = rt.info.version.as_deref().unwrap_or("unknown");
    let key = cache_key(trine_ir::kernel_hash(kernel), source, isa, version);
    if use_cache {
        let hit = crate::cache::load(CACHE_NS, &key).filter(|b| is_amdgpu_code_object(b));
        if let Some(bytes) = hit {
            return Ok((bytes, true));
        }
    }
    let bytes = compile_source(rt, &kernel.name, source, isa)?;
    // A cache that cannot be written only costs the next start a compile.
    let _ = crate::cache::store(CACHE_NS, &key, &bytes);
    Ok((bytes, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_names_are_checked() {
        for ok in ["gfx1030", "gfx90c", "gfx90a:sramecc+:xnack-", "gfx1151"] {
            assert_eq!(check_arch("k", ok).unwrap(), isa_of(ok), "{ok}");
        }
        for bad in [
            "",
            "gfx",
            "sm_90",
            "gfx1030 -O0",
            "gfx10/30",
            "GFX1030",
            "gfx1030:xnack",
            "amdgcn-amd-amdhsa--gfx1030",
        ] {
            let e = check_arch("k", bad).unwrap_err();
            assert!(
                matches!(&e, BackendError::Compile { message, .. } if message.contains("not an AMD GPU")),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn code_objects_are_recognised() {
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[18..20].copy_from_slice(&224u16.to_le_bytes());
        assert!(is_amdgpu_code_object(&elf));
        elf[18] = 62; // x86-64
        assert!(!is_amdgpu_code_object(&elf));
        assert!(!is_amdgpu_code_object(b"\x7fELF"));
    }

    #[test]
    fn cache_keys_change_with_every_input() {
        let base = cache_key(1, "src", "gfx1030", "5.2.21153");
        assert_eq!(base, cache_key(1, "src", "gfx1030", "5.2.21153"));
        for other in [
            cache_key(2, "src", "gfx1030", "5.2.21153"),
            cache_key(1, "src2", "gfx1030", "5.2.21153"),
            cache_key(1, "src", "gfx1031", "5.2.21153"),
            cache_key(1, "src", "gfx1030", "6.3.42134"),
        ] {
            assert_ne!(base, other);
        }
        assert!(base
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
    }

    #[test]
    fn options_pin_the_arch_and_the_rounding() {
        assert_eq!(
            compile_options("gfx1030"),
            ["--offload-arch=gfx1030", "-O3", "-ffp-contract=off"]
        );
    }
}

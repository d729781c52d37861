//! Kernels: the HIP lowering in its CUDA dialect, compiled by NVRTC (cached on disk), loaded as
//! modules.

use super::driver::{CuFunction, CuModule, Driver};
use super::nvrtc::{Nvrtc, Target};
use crate::error::BackendError;
use std::ffi::{c_int, c_void, CString};
use trine_codegen::Dialect;
use trine_ir::{Kernel, Scalar};

/// Cache namespace of compiled CUDA images.
const CACHE_NS: &str = "cuda";

/// A loaded kernel and what a dispatch of it must match.
pub struct Program {
    pub name: String,
    pub module: CuModule,
    pub function: CuFunction,
    pub buffers: usize,
    pub params: Vec<(String, Scalar)>,
    /// The bindings it reads in 16-byte lines (copies, quads), whose offsets must be aligned
    /// to them.
    pub line_sources: Vec<usize>,
    pub block: [u32; 3],
    /// Bytes of dynamic shared memory each launch takes (see
    /// `trine_codegen::cuda_dynamic_shared_bytes`).
    pub dynamic_shared: u32,
    /// Whether it is launched to overlap the kernel before it in the stream: compiled for
    /// sm_90 or later, where its first statement waits for that kernel
    /// (`trine_wait_prior_grid`), and the driver has `cuLaunchKernelEx`.
    pub overlap: bool,
}

/// FNV-1a, the hash `trine_ir::kernel_hash` uses: stable across runs and Rust versions, which
/// an on-disk key needs.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// NVRTC options for `target`.
///
/// `--fmad=false`: NVRTC would otherwise contract `a * b + c` into one fused multiply-add,
/// rounding once where the reference interpreter (and the Vulkan and CPU backends) round
/// twice; explicit `fma` in the IR is still a fused `fmaf`.
pub fn options(nvrtc: &Nvrtc, target: Target) -> Vec<String> {
    let mut o = vec![target.option(), "--fmad=false".to_string()];
    if let Some(dir) = &nvrtc.include {
        o.push(format!("--include-path={}", dir.display()));
    }
    o
}

fn lower(kernel: &Kernel) -> Result<String, BackendError> {
    trine_codegen::hip(kernel, Dialect::Cuda).map_err(|e| BackendError::Compile {
        kernel: kernel.name.clone(),
        message: e.to_string(),
    })
}

/// `kernel` lowered and compiled for `target`, uncached.
pub fn compile(nvrtc: &Nvrtc, kernel: &Kernel, target: Target) -> Result<Vec<u8>, BackendError> {
    let source = lower(kernel)?;
    nvrtc.compile(&kernel.name, &source, target, &options(nvrtc, target))
}

/// The compiled image of `kernel` for `target`: from the disk cache, or lowered and compiled
/// by NVRTC and then cached. The key covers the lowered text and options (so a changed
/// lowering never reuses an old image), the target and the NVRTC version.
pub fn image(nvrtc: &Nvrtc, kernel: &Kernel, target: Target) -> Result<Vec<u8>, BackendError> {
    let source = lower(kernel)?;
    let options = options(nvrtc, target);
    let mut keyed = source.clone().into_bytes();
    for o in &options {
        keyed.push(0);
        keyed.extend_from_slice(o.as_bytes());
    }
    let (major, minor) = nvrtc.version;
    let key = format!(
        "{}-{:016x}-{}-nvrtc{major}.{minor}",
        kernel.name,
        fnv1a(&keyed),
        target.name()
    );
    if let Some(image) = crate::cache::load(CACHE_NS, &key).filter(|i| plausible(i, target)) {
        return Ok(image);
    }
    let image = nvrtc.compile(&kernel.name, &source, target, &options)?;
    // A cache that cannot be written only costs a recompile next time.
    let _ = crate::cache::store(CACHE_NS, &key, &image);
    Ok(image)
}

/// Whether a cached image is whole: the driver trusts the sizes inside an image, so a file cut
/// short (a full disk, a killed writer) must be recompiled, never loaded. PTX ends with its
/// NUL; a cubin is a 64-bit ELF whose program and section header tables lie inside it.
fn plausible(image: &[u8], target: Target) -> bool {
    match target {
        Target::Compute(_) => image.last() == Some(&0),
        Target::Sm(_) | Target::SmA(_) => {
            let u16_at = |at: usize| {
                image
                    .get(at..at + 2)
                    .map(|b| u16::from_le_bytes([b[0], b[1]]))
            };
            let u64_at = |at: usize| {
                image
                    .get(at..at + 8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes)
            };
            let table_end = |off: usize, entsize: usize, num: usize| -> Option<u64> {
                let count = u64::from(u16_at(num)?) * u64::from(u16_at(entsize)?);
                u64_at(off)?.checked_add(count)
            };
            image.starts_with(b"\x7fELF")
                && image.get(4) == Some(&2)
                && [table_end(0x20, 0x36, 0x38), table_end(0x28, 0x3a, 0x3c)]
                    .iter()
                    .all(|end| end.is_some_and(|e| e <= image.len() as u64))
        }
    }
}

/// Loads `image` as a module and finds the kernel's function in it. The context is current.
/// `target` is what the image was compiled for, for [`Program::overlap`].
pub fn load(
    driver: &Driver,
    kernel: &Kernel,
    image: &[u8],
    target: Target,
) -> Result<Program, BackendError> {
    let name = CString::new(kernel.name.as_str()).map_err(|_| BackendError::Compile {
        kernel: kernel.name.clone(),
        message: "the kernel name contains a NUL byte".into(),
    })?;
    let load_error = |call: &str, code| BackendError::Compile {
        kernel: kernel.name.clone(),
        message: format!("{call}: {}", driver.error_name(code)),
    };
    // cuModuleLoadData reads PTX up to its NUL: NVRTC's PTX ends with one, and a cubin is an
    // ELF image whose size the driver reads from its header.
    let mut module: CuModule = std::ptr::null_mut();
    // SAFETY: a valid out-pointer and an image NVRTC produced (or the cache returned, which
    // stores exactly what NVRTC produced under a key naming the target).
    let code = unsafe { (driver.module_load_data)(&mut module, image.as_ptr().cast::<c_void>()) };
    if code != 0 {
        return Err(load_error("cuModuleLoadData", code));
    }
    let mut function: CuFunction = std::ptr::null_mut();
    // SAFETY: a live module and a NUL-terminated name.
    let code = unsafe { (driver.module_get_function)(&mut function, module, name.as_ptr()) };
    if code != 0 {
        // SAFETY: the module was loaded above and nothing uses it.
        unsafe { (driver.module_unload)(module) };
        return Err(load_error("cuModuleGetFunction", code));
    }
    let dynamic = trine_codegen::cuda_dynamic_shared_bytes(kernel);
    if dynamic > 0 {
        // SAFETY: a live function; the size is within the device's opt-in maximum, which the
        // kernel was validated against.
        let code = unsafe {
            (driver.func_set_attribute)(
                function,
                super::driver::FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                dynamic as c_int,
            )
        };
        if code != 0 {
            // SAFETY: the module was loaded above and nothing uses it.
            unsafe { (driver.module_unload)(module) };
            return Err(load_error("cuFuncSetAttribute", code));
        }
    }
    Ok(Program {
        name: kernel.name.clone(),
        module,
        function,
        buffers: kernel.buffers.len(),
        params: kernel
            .params
            .iter()
            .map(|p| (p.name.clone(), p.ty))
            .collect(),
        line_sources: kernel.line_sources().iter().map(|b| b.0 as usize).collect(),
        block: kernel.workgroup_size,
        dynamic_shared: dynamic as u32,
        overlap: super::overlaps(target.arch(), driver),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-byte ELF64 header whose section header table (`shnum` entries of 64 bytes) starts
    /// at byte 64.
    fn elf(shnum: u16, extra: usize) -> Vec<u8> {
        let mut h = vec![0u8; 64 + extra];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[0x28..0x30].copy_from_slice(&64u64.to_le_bytes());
        h[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        h[0x3c..0x3e].copy_from_slice(&shnum.to_le_bytes());
        h
    }

    #[test]
    fn truncated_cached_images_are_refused() {
        assert!(plausible(&elf(2, 128), Target::Sm(90)));
        assert!(!plausible(&elf(2, 127), Target::Sm(90)));
        assert!(!plausible(b"\x7fELF", Target::Sm(90)));
        assert!(!plausible(
            b"not an elf at all, but long enough to hold a header.......",
            Target::Sm(90)
        ));
        assert!(plausible(b".version 8.0\0", Target::Compute(90)));
        assert!(!plausible(b".version 8.0", Target::Compute(90)));
    }

    #[test]
    fn the_cache_hash_is_fnv1a() {
        // Reference values of 64-bit FNV-1a.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}

//! The compiler's list of supported ISAs, from AMD's code object manager (comgr).
//!
//! hiprtc compiles through comgr, and an ISA comgr does not list is where hiprtc misbehaves:
//! HIP 5.2's aborts the whole process (`munmap_chunk(): invalid pointer`) for gfx11xx. So the
//! list decides whether a compile may run in this process.

use super::ffi::table;
use libloading::Library;
use std::ffi::{c_char, c_int};

table! {
    /// libamd_comgr (the ISA queries exist since comgr 2.0, ROCm 3.x).
    Comgr {
        amd_comgr_get_isa_count: fn(*mut usize) -> c_int;
        amd_comgr_get_isa_name: fn(usize, *mut *const c_char) -> c_int;
    }
}

const COMGR_SUCCESS: c_int = 0;

impl Comgr {
    /// The ISA names comgr knows, without target triple or features (`gfx90a`), in its
    /// order, each once.
    pub fn isas(&self) -> Result<Vec<String>, String> {
        let mut count = 0usize;
        // SAFETY: a plain out-parameter.
        let status = unsafe { (self.amd_comgr_get_isa_count)(&mut count) };
        if status != COMGR_SUCCESS {
            return Err(format!("amd_comgr_get_isa_count returned status {status}"));
        }
        let mut out: Vec<String> = vec![];
        for i in 0..count {
            let mut name: *const c_char = std::ptr::null();
            // SAFETY: `i` is below the count comgr reported; the name it returns is a static
            // string owned by comgr.
            let status = unsafe { (self.amd_comgr_get_isa_name)(i, &mut name) };
            if status != COMGR_SUCCESS {
                return Err(format!(
                    "amd_comgr_get_isa_name({i}) returned status {status}"
                ));
            }
            // SAFETY: comgr returned success, so `name` is a NUL-terminated string.
            let full = unsafe { super::ffi::c_string(name) };
            let isa = isa_of(&full).to_string();
            if !isa.is_empty() && !out.contains(&isa) {
                out.push(isa);
            }
        }
        Ok(out)
    }
}

/// `amdgcn-amd-amdhsa--gfx90a:xnack+` → `gfx90a`; also strips features from a bare name
/// (`gfx90a:sramecc+:xnack-` → `gfx90a`).
pub(super) fn isa_of(name: &str) -> &str {
    let name = name.rsplit("--").next().unwrap_or(name);
    name.split(':').next().unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn isa_names_lose_triple_and_features() {
        assert_eq!(isa_of("amdgcn-amd-amdhsa--gfx1030"), "gfx1030");
        assert_eq!(isa_of("amdgcn-amd-amdhsa--gfx90a:xnack+"), "gfx90a");
        assert_eq!(isa_of("gfx90a:sramecc+:xnack-"), "gfx90a");
        assert_eq!(isa_of("gfx1151"), "gfx1151");
    }
}

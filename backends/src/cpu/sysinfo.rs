//! What the CPU backend reports about the host, read from /proc where it exists.

pub(crate) fn cpu_name() -> String {
    proc_field("/proc/cpuinfo", "model name").unwrap_or_else(|| std::env::consts::ARCH.into())
}

pub(crate) fn cpu_vendor() -> String {
    proc_field("/proc/cpuinfo", "vendor_id").unwrap_or_else(|| "unknown".into())
}

/// The CPU model and its feature flags: what `-march=native` compiles for.
pub(crate) fn cpu_signature() -> String {
    let flags = proc_field("/proc/cpuinfo", "flags")
        .or_else(|| proc_field("/proc/cpuinfo", "Features"))
        .unwrap_or_default();
    format!("{} {} [{flags}]", std::env::consts::ARCH, cpu_name())
}

/// Vector registers the compiled kernels have (`-march=native` compiles for this host): 32
/// with AVX-512 (zmm0-31, whose low halves are 32 ymm registers) and on AArch64, 16 on other
/// x86-64 CPUs (ymm0-15 with AVX2) and wherever the flags cannot be read.
pub fn vector_registers() -> u32 {
    if cfg!(target_arch = "aarch64") {
        return 32;
    }
    let flags = proc_field("/proc/cpuinfo", "flags").unwrap_or_default();
    if flags.split_whitespace().any(|f| f == "avx512f") {
        32
    } else {
        16
    }
}

/// Total RAM in bytes.
pub(crate) fn total_memory() -> Option<u64> {
    meminfo("MemTotal")
}

/// RAM the kernel could give to new allocations without swapping, in bytes.
pub(crate) fn available_memory() -> Option<u64> {
    meminfo("MemAvailable")
}

/// A field of /proc/meminfo, which counts in KiB.
fn meminfo(key: &str) -> Option<u64> {
    let kb = proc_field("/proc/meminfo", key)?;
    let kb: u64 = kb.split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

fn proc_field(path: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

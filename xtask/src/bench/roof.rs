//! The bandwidth roof of a backend: the fastest of the runtime's own buffer copy
//! (`cuMemcpyDtoDAsync`, `vkCmdCopyBuffer`, where the backend times one) and two copy
//! kernels, a word an invocation (f32) and a quad (16 bytes, loaded as one where the target
//! can), over the largest buffer the device binds (up to 256 MiB), timed like every op.
//! Bandwidth counts the bytes read plus those written.

use super::exec::{self, Skip, Work};
use super::measure::{Policy, Stats};
use trine_backends::{Backend, BackendError};
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};
use trine_ops::elementwise::{self, copy_kernel, WG};
use trine_ops::support::Float;

const MAX_BYTES: u64 = 256 << 20;

/// Bytes of each of the two buffers: the binding limit or 256 MiB, whichever is smaller, in
/// whole workgroups of f32.
pub fn buffer_bytes(max_binding_bytes: u64) -> u64 {
    let unit = 4 * WG as u64;
    MAX_BYTES.min(max_binding_bytes) / unit * unit
}

/// GB/s (10⁹ bytes) of a copy of `bytes` that took `us` microseconds.
pub fn copy_gbps(bytes: u64, us: f64) -> f64 {
    2.0 * bytes as f64 / (us * 1e3)
}

pub struct Roof {
    /// What copied: "driver copy" or the copy kernel's name.
    pub how: String,
    pub bytes: u64,
    pub stats: Stats,
    pub gbps: f64,
}

/// The runtime's own copy where the backend has one, then the two copy kernels.
pub fn measure(backend: &dyn Backend, policy: &Policy) -> Result<Vec<Roof>, Skip> {
    let bytes = buffer_bytes(backend.info().max_binding_bytes);
    let roof = |how: String, stats: Stats| Roof {
        how,
        bytes,
        gbps: copy_gbps(bytes, stats.median_us),
        stats,
    };
    let mut out = vec![];
    match exec::time_copy(backend, bytes, policy) {
        Ok(stats) => out.push(roof("driver copy".into(), stats)),
        Err(Skip::Failed(BackendError::Unsupported { .. })) => {}
        Err(e) => return Err(e),
    }
    let x = vec![0x3fu8; bytes as usize];
    let y = vec![0u8; bytes as usize];
    for (kernel, n) in [
        (copy_kernel(Float::F32, Float::F32), bytes / 4),
        (quad_copy_kernel(), bytes / 16),
    ] {
        let n = n as u32;
        let grid = elementwise::grid(n).map_err(|e| Skip::NoKernel(e.to_string()))?;
        let params = [ParamValue::U32(n), ParamValue::U32(0), ParamValue::U32(0)];
        let work = Work {
            kernel: &kernel,
            grid,
            params: &params,
            buffers: vec![("x", x.as_slice()), ("y", y.as_slice())],
        };
        let stats = exec::time(backend, &work, policy)?;
        out.push(roof(kernel.name.clone(), stats));
    }
    Ok(out)
}

/// `y = x` for `n` quads of words, an invocation a quad: its four words come from one load
/// where the target loads quads whole ([`trine_ir::Expr::LoadLane`]), where the f32 copy
/// issues a load a word. Params as the f32 copy's (the offsets unused), so one call serves
/// both.
fn quad_copy_kernel() -> Kernel {
    let k = KernelBuilder::new("copy_quads", [WG, 1, 1]);
    let x = k.buffer("x", Scalar::U32, Access::Read);
    let y = k.buffer("y", Scalar::U32, Access::Write);
    let n = k.param("n", Scalar::U32);
    k.param("x_at", Scalar::U32);
    k.param("y_at", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        for (lane, word) in k.load_quad(x, i).into_iter().enumerate() {
            k.store(y, i * k.u32(4) + k.u32(lane as u32), word);
        }
    });
    k.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_respects_the_binding_limit() {
        assert_eq!(buffer_bytes(128 << 20), 128 << 20);
        assert_eq!(buffer_bytes(4 << 30), 256 << 20);
        // Rounded down to whole 1 KiB workgroups.
        assert_eq!(buffer_bytes(1_000_000), 999_424);
    }

    /// The quad copy moves every word where it was, on the reference interpreter.
    #[test]
    fn the_quad_copy_copies() {
        let x: Vec<u8> = (0..64u32)
            .flat_map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes())
            .collect();
        let mut bufs = vec![x, vec![0u8; 256]];
        let params = [ParamValue::U32(16), ParamValue::U32(0), ParamValue::U32(0)];
        trine_ir::interp::interpret(&quad_copy_kernel(), [1, 1, 1], &mut bufs, &params, 32)
            .unwrap();
        assert_eq!(bufs[1], bufs[0]);
    }

    #[test]
    fn bandwidth_counts_read_and_write() {
        // 256 MiB read and written in 10 ms: 53.687 GB/s.
        let g = copy_gbps(256 << 20, 10_000.0);
        assert!((g - 53.687_091_2).abs() < 1e-6, "{g}");
    }
}

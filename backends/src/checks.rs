//! Checks every backend makes before a copy or a launch reaches its device, written once so
//! that a bad dispatch gets the same typed error whichever backend receives it.

use crate::backend::{Binding, Dispatch};
use crate::error::BackendError;
use crate::info::DeviceInfo;
use trine_codegen::abi::fold_grid;
use trine_ir::{Kernel, Scalar};

/// Validates `kernel` against the device's limits and returns its hash, the key of every
/// compiled-code cache.
pub fn check_kernel(kernel: &Kernel, info: &DeviceInfo) -> Result<u64, BackendError> {
    trine_ir::validate(kernel, &info.limits()).map_err(|source| BackendError::Invalid {
        kernel: kernel.name.clone(),
        source,
    })?;
    if let Some(w) = kernel.capabilities.subgroup_width {
        if !info.runs_subgroup_width(w) {
            return Err(BackendError::Unsupported {
                kernel: kernel.name.clone(),
                what: format!(
                    "subgroups of exactly {w} invocations (the device's: {:?})",
                    info.subgroup_sizes
                ),
            });
        }
    }
    if kernel.capabilities.tiles && !info.tiles {
        return Err(BackendError::Unsupported {
            kernel: kernel.name.clone(),
            what: "matrix tiles (16x16x16 f16 multiply-accumulate on matrix units)".into(),
        });
    }
    if kernel.capabilities.async_copy && !info.async_copy {
        return Err(BackendError::Unsupported {
            kernel: kernel.name.clone(),
            what: "asynchronous copies from global to shared memory".into(),
        });
    }
    if kernel.capabilities.group_mma && !info.group_mma {
        return Err(BackendError::Unsupported {
            kernel: kernel.name.clone(),
            what: "warpgroup products (wgmma, sm_90)".into(),
        });
    }
    Ok(trine_ir::kernel_hash(kernel))
}

/// The bindings a kernel reads in lines of [`trine_ir::COPY_BYTES`] (`sources`, from
/// `trine_ir::Kernel::line_sources`: asynchronous copies, quad loads) must start a whole line
/// from their buffer's start, which is aligned that much: else the lines' addresses would be
/// misaligned, a fault on the device.
pub fn check_line_alignment(
    kernel: &str,
    sources: &[usize],
    d: &Dispatch<'_>,
) -> Result<(), BackendError> {
    let align = u64::from(trine_ir::COPY_BYTES);
    for &i in sources {
        if let Some(b) = d
            .bindings
            .get(i)
            .filter(|b| !b.offset.is_multiple_of(align))
        {
            return Err(bad_dispatch(
                kernel,
                format!(
                    "binding {i} is read in lines of {align} bytes: its offset {} is not a multiple of {align}",
                    b.offset
                ),
            ));
        }
    }
    Ok(())
}

/// `offset + len` must lie within a buffer of `size` bytes.
pub fn check_range(offset: u64, len: u64, size: u64) -> Result<(), BackendError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(BackendError::OutOfRange { offset, len, size }),
    }
}

/// A dispatch that does not fit kernel `kernel`.
pub fn bad_dispatch(kernel: &str, msg: String) -> BackendError {
    BackendError::BadDispatch(format!("kernel {kernel:?}: {msg}"))
}

/// The dispatch binds as many buffers as the kernel declares and passes parameters of the
/// kernel's count and types.
pub fn check_signature(
    kernel: &str,
    buffers: usize,
    params: &[(String, Scalar)],
    d: &Dispatch<'_>,
) -> Result<(), BackendError> {
    if d.bindings.len() != buffers {
        return Err(bad_dispatch(
            kernel,
            format!(
                "it has {buffers} buffers, the dispatch binds {}",
                d.bindings.len()
            ),
        ));
    }
    if d.params.len() != params.len() {
        return Err(bad_dispatch(
            kernel,
            format!(
                "it has {} parameters, the dispatch passes {}",
                params.len(),
                d.params.len()
            ),
        ));
    }
    for (j, (value, (name, ty))) in d.params.iter().zip(params).enumerate() {
        if value.ty() != *ty {
            return Err(bad_dispatch(
                kernel,
                format!(
                    "parameter {j} ({name}) is {ty}, the dispatch passes {}",
                    value.ty()
                ),
            ));
        }
    }
    Ok(())
}

/// Binding `i` lies within its buffer of `size` bytes at an offset aligned to `align`.
pub fn check_binding(
    kernel: &str,
    i: usize,
    b: &Binding,
    size: u64,
    align: u64,
) -> Result<(), BackendError> {
    check_range(b.offset, b.size, size)?;
    if !b.offset.is_multiple_of(align) {
        return Err(bad_dispatch(
            kernel,
            format!(
                "binding {i} has offset {}, not a multiple of the device's {align}",
                b.offset
            ),
        ));
    }
    Ok(())
}

/// What the SPIR-V backends (ash, wgpu) round a buffer's allocation up to: whole quads of
/// [`trine_ir::COPY_BYTES`], because the SPIR-V of a kernel that loads quads of a buffer
/// declares it as quads, and a binding must then hold every quad its words lie in.
pub const SPIRV_BUFFER_GRANULE: u64 = trine_ir::COPY_BYTES as u64;

/// Binding `i` as the SPIR-V backends (ash, wgpu) bind it, checked against its buffer and the
/// device: `(offset, range)`. Storage-only buffers are read as u32 words, so the range is
/// word-rounded; a binding at a whole quad from its buffer's start is rounded to whole quads
/// where its allocation (`capacity` bytes, [`SPIRV_BUFFER_GRANULE`]-rounded unless imported)
/// holds them, so that its last words are inside a kernel's quad view. An
/// empty range cannot be bound, and its kernel reads nothing from it, so it binds the buffer's
/// first word.
pub fn storage_binding(
    kernel: &str,
    i: usize,
    b: &Binding,
    buffer_size: u64,
    capacity: u64,
    info: &DeviceInfo,
) -> Result<(u64, u64), BackendError> {
    check_binding(kernel, i, b, buffer_size, info.min_binding_alignment)?;
    let words = b.size.max(4).next_multiple_of(4);
    let quads = b.size.max(4).next_multiple_of(SPIRV_BUFFER_GRANULE);
    let whole_quads = b.offset.is_multiple_of(SPIRV_BUFFER_GRANULE)
        && b.offset + quads <= capacity
        && quads <= info.max_binding_bytes;
    let range = if whole_quads { quads } else { words };
    if range > info.max_binding_bytes {
        return Err(bad_dispatch(
            kernel,
            format!(
                "binding {i} has {} bytes, more than the device's {}",
                b.size, info.max_binding_bytes
            ),
        ));
    }
    let offset = if b.size == 0 { 0 } else { b.offset };
    Ok((offset, range))
}

/// The physical grid of `d` on a device that folds wide grids ([`fold_grid`]), and its
/// push-constant (immediate) block: the grid words, then the parameters' bits, cut to `bytes`.
pub fn folded_launch(
    kernel: &str,
    d: &Dispatch<'_>,
    info: &DeviceInfo,
    bytes: usize,
) -> Result<([u32; 3], Vec<u8>), BackendError> {
    let (groups, grid_words) = fold_grid(d.grid, info.max_workgroups).ok_or_else(|| {
        bad_dispatch(
            kernel,
            format!(
                "grid {:?} does not fit the device's workgroup counts {:?}, even folded",
                d.grid, info.max_workgroups
            ),
        )
    })?;
    let block = grid_words
        .into_iter()
        .chain(d.params.iter().map(|p| p.bits()))
        .flat_map(u32::to_ne_bytes)
        .take(bytes)
        .collect();
    Ok((groups, block))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BufferHandle, ProgramId};
    use trine_ir::ParamValue;

    #[test]
    fn ranges_are_checked_without_overflow() {
        assert!(check_range(0, 16, 16).is_ok());
        assert!(check_range(16, 0, 16).is_ok());
        assert!(matches!(
            check_range(8, 16, 16),
            Err(BackendError::OutOfRange {
                offset: 8,
                len: 16,
                size: 16
            })
        ));
        assert!(check_range(u64::MAX, 2, 16).is_err());
    }

    /// A binding read in 16-byte lines (here as quads) must start on one.
    #[test]
    fn lines_are_read_from_aligned_bindings_only() {
        use trine_ir::{Access, KernelBuilder};
        let k = KernelBuilder::new("quad_lanes", [1, 1, 1]);
        let w = k.buffer("w", Scalar::U32, Access::Read);
        let x = k.buffer("x", Scalar::U32, Access::Read);
        let y = k.buffer("y", Scalar::U32, Access::Write);
        let [a, ..] = k.load_quad(w, k.u32(0));
        k.store(y, k.u32(0), a + k.load(x, k.u32(0)));
        let sources: Vec<usize> = k
            .finish()
            .line_sources()
            .iter()
            .map(|b| b.0 as usize)
            .collect();
        assert_eq!(sources, [0], "the quads' buffer w only");
        let at = |offset| {
            let bindings = [0, 1, 2].map(|i| Binding {
                buffer: BufferHandle(i),
                offset: if i == 0 { offset } else { 4 },
                size: 64,
            });
            let d = Dispatch {
                program: ProgramId(0),
                grid: [1, 1, 1],
                bindings: &bindings,
                params: &[],
            };
            check_line_alignment("quad_lanes", &sources, &d)
        };
        assert!(at(32).is_ok());
        let e = at(4).unwrap_err().to_string();
        assert!(e.contains("quad_lanes") && e.contains("offset 4"), "{e}");
    }

    #[test]
    fn signature_and_binding_mismatches_name_the_kernel() {
        let params = [("n".to_string(), Scalar::U32)];
        let b = Binding {
            buffer: BufferHandle(1),
            offset: 8,
            size: 4,
        };
        let d = |bindings: &'static [Binding], params: &'static [ParamValue]| Dispatch {
            program: ProgramId(0),
            grid: [1, 1, 1],
            bindings,
            params,
        };
        assert!(check_signature("k", 0, &params, &d(&[], &[ParamValue::U32(3)])).is_ok());
        let err = check_signature("k", 1, &params, &d(&[], &[ParamValue::U32(3)])).unwrap_err();
        assert_eq!(err.to_string(), "dispatch does not match the kernel: kernel \"k\": it has 1 buffers, the dispatch binds 0");
        let err = check_signature("k", 0, &params, &d(&[], &[ParamValue::F32(3.0)])).unwrap_err();
        assert!(
            err.to_string()
                .contains("parameter 0 (n) is u32, the dispatch passes f32"),
            "{err}"
        );
        assert!(check_binding("k", 0, &b, 12, 4).is_ok());
        let err = check_binding("k", 0, &b, 12, 16).unwrap_err();
        assert!(
            err.to_string()
                .contains("binding 0 has offset 8, not a multiple of the device's 16"),
            "{err}"
        );
        assert!(matches!(
            check_binding("k", 0, &b, 10, 4),
            Err(BackendError::OutOfRange { .. })
        ));
    }
}

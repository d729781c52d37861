//! The compiled runner's buffers: plain bytes in aligned, allocator-zeroed allocations, which
//! compiled kernels read and write through raw pointers and the host copies in and out with
//! `memcpy`.
//!
//! The allocator zeroes them: asked for its own 16-byte alignment, the system allocator takes
//! zeroed memory from `calloc`, fresh pages from the kernel for a large buffer, so untouched
//! pages (a KV cache's unused end) cost nothing; a larger alignment would make it `memset` the
//! whole buffer, a cost a model's upload would pay per buffer. Each buffer's first byte is then
//! placed half a page past a page boundary, for the copies: a large `memcpy` (glibc's
//! non-temporal loop) runs at a third of its speed when its destination lies up to a few
//! hundred bytes past its source modulo 4 KiB (4K aliasing), and the host's
//! large vectors start 16 bytes into a page, so a buffer 64 bytes into a page would hit that on
//! every upload, and one at a page boundary on every download.
//!
//! Nothing here is atomic, so soundness rests on the backend's contract rather than on the
//! type: every access to a buffer's bytes happens with the backend's buffer map locked. The
//! host writes through `&mut HostMemory` and reads through `&HostMemory`, both under the lock;
//! a dispatch takes its raw pointers under the lock and keeps it until every workgroup has
//! returned (`run::run` waits for them, `synchronize` has nothing left to wait for). So no copy
//! ever overlaps a kernel, and no two dispatches run at once. Within a dispatch, workgroups on
//! different threads write through raw pointers, not references, so writes to disjoint ranges
//! are plain concurrent stores to different bytes; overlapping ones are the kernel's data race,
//! in its C code, as on a GPU. The pool's release/acquire handshake at the end of a job makes
//! every worker's stores visible to the host before it reads.

use crate::checks::check_range;
use crate::error::BackendError;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::{self, NonNull};

const PAGE: usize = 4096;

/// Where every buffer's first byte lies modulo a page (see the module documentation): a
/// multiple of the 64-byte cache line, so the alignment of every element type and vector.
const START: usize = 2048;

/// The alignment asked of the allocator: its own, at which it zeroes with `calloc`.
const ALLOC_ALIGN: usize = 16;

/// One buffer's bytes. It owns its allocation through raw pointers, not a slice, so that a
/// `&HostMemory` held while a kernel writes the bytes asserts nothing about them.
pub(super) struct HostMemory {
    /// The allocation, and its layout.
    base: NonNull<u8>,
    layout: Layout,
    /// The buffer's first byte, [`START`] modulo a page, inside the allocation.
    ptr: NonNull<u8>,
    /// Bytes asked for.
    len: u64,
}

// SAFETY: a `HostMemory` owns its allocation as a `Box<[u8]>` would, with nothing tied to the
// thread that made it; sharing it is what the buffer map's lock governs (module documentation).
unsafe impl Send for HostMemory {}

impl HostMemory {
    /// `len` zero bytes, zeroed by the allocator; `None` where the allocator has no room or
    /// the size does not fit the address space.
    pub(super) fn zeroed(len: u64) -> Option<HostMemory> {
        // A page more than asked, room to move the start to `START` within it.
        let size = usize::try_from(len).ok()?.checked_add(PAGE)?;
        let layout = Layout::from_size_align(size, ALLOC_ALIGN).ok()?;
        // SAFETY: `layout` has a nonzero size.
        let base = NonNull::new(unsafe { alloc_zeroed(layout) })?;
        let shift = START.wrapping_sub(base.as_ptr() as usize) % PAGE;
        // SAFETY: `shift` is under a page, so the buffer's `len` bytes from it stay inside the
        // allocation of `len` and a page.
        let ptr = unsafe { base.add(shift) };
        Some(HostMemory {
            base,
            layout,
            ptr,
            len,
        })
    }

    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// The first byte, for compiled kernels; see the module documentation for when they may
    /// use it.
    pub(super) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Copies `out.len()` bytes out from `offset`.
    pub(super) fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        check_range(offset, out.len() as u64, self.len)?;
        // SAFETY: the range is inside the buffer (checked above), so inside the allocation;
        // `out` is a distinct Rust slice, and no kernel runs while the caller holds the
        // buffer map's lock (module documentation).
        unsafe {
            ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset as usize),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        Ok(())
    }

    /// Copies `data` in at `offset`.
    pub(super) fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), BackendError> {
        check_range(offset, data.len() as u64, self.len)?;
        // SAFETY: as in `read`; `&mut self` rules out any other host access meanwhile.
        unsafe {
            ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.ptr.as_ptr().add(offset as usize),
                data.len(),
            )
        };
        Ok(())
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        // SAFETY: `base` came from `alloc_zeroed` with this `layout` and is freed only here.
        unsafe { dealloc(self.base.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buffers start zeroed and where they should in a page, copies land where asked around every edge, and a
    /// range past the end is refused without touching anything.
    #[test]
    fn zeroed_aligned_and_copies_exactly() {
        for len in [0u64, 1, 3, 63, 64, 65, 1000] {
            let mut m = HostMemory::zeroed(len).unwrap();
            assert_eq!(m.as_ptr() as usize % PAGE, START);
            let mut all = vec![0xeeu8; len as usize];
            m.read(0, &mut all).unwrap();
            assert!(all.iter().all(|&b| b == 0), "length {len}");
            let mut model = vec![0u8; len as usize];
            for offset in 0..len.min(9) {
                let n = (len - offset).min(13) as usize;
                let data: Vec<u8> = (0..n as u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
                m.write(offset, &data).unwrap();
                model[offset as usize..offset as usize + n].copy_from_slice(&data);
                m.read(0, &mut all).unwrap();
                assert_eq!(all, model, "length {len}, offset {offset}");
            }
            assert!(matches!(
                m.write(len, &[1]),
                Err(BackendError::OutOfRange { .. })
            ));
            assert!(matches!(
                m.read(u64::MAX, &mut [0]),
                Err(BackendError::OutOfRange { .. })
            ));
        }
        assert!(HostMemory::zeroed(u64::MAX).is_none());
    }
}

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
//! every upload, and one at a page boundary on every download. A buffer's whole huge pages
//! are advised to the kernel as such (`advise_huge_pages`).
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
        advise_huge_pages(base.as_ptr() as usize, size);
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

/// Bytes of a transparent huge page on x86-64 and AArch64's 4 KiB granule.
const HUGE_PAGE: usize = 2 << 20;

/// Asks the kernel to back the whole huge pages inside the allocation at `base` of `size`
/// bytes with huge pages (Linux's `MADV_HUGEPAGE`, which a system whose transparent huge
/// pages are set to `madvise` waits for): a decode step streams every weight, and a long
/// context's attention reads its K cache a position block at a time across every element's
/// row, each 4 KiB page of which costs a page walk. The allocator's fresh pages are still
/// untouched, so they fault in as huge pages. A hint: where it fails nothing changes.
#[cfg(target_os = "linux")]
fn advise_huge_pages(base: usize, size: usize) {
    let start = base.next_multiple_of(HUGE_PAGE);
    let end = (base + size) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: the range lies inside this buffer's own allocation, and MADV_HUGEPAGE
        // changes how its pages are backed, never what they hold.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

/// Elsewhere there is no such hint to give.
#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_base: usize, _size: usize) {}

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

    /// A buffer over several huge pages, advised to use them, still starts zeroed and holds
    /// what is written across a huge page's edge and at both ends.
    #[test]
    fn huge_page_buffers_hold_their_bytes() {
        let len = 3 * HUGE_PAGE as u64 + 12_345;
        let mut m = HostMemory::zeroed(len).unwrap();
        assert_eq!(m.as_ptr() as usize % PAGE, START);
        let edge = (m.as_ptr() as usize).next_multiple_of(HUGE_PAGE) - m.as_ptr() as usize;
        let data: Vec<u8> = (0..64u8).map(|i| i ^ 0xa5).collect();
        for at in [0, edge as u64 - 32, len - 64] {
            let mut before = vec![0xeeu8; 64];
            m.read(at, &mut before).unwrap();
            assert!(before.iter().all(|&b| b == 0), "at {at}");
            m.write(at, &data).unwrap();
            let mut after = vec![0u8; 64];
            m.read(at, &mut after).unwrap();
            assert_eq!(after, data, "at {at}");
        }
    }
}

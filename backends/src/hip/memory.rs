//! Device buffers, and the pinned host buffer that uploads and downloads go through.
//!
//! Buffers stay resident in device memory. A write copies the caller's bytes into pinned
//! (page-locked) host memory and queues an asynchronous copy on the stream, so it returns
//! without waiting; the staging space is reused only after the stream has drained it. A read
//! queues the copy back and waits for it, which also waits for every kernel before it.

use super::ffi::{self, Hip, Stream};
use crate::backend::BufferHandle;
use crate::error::BackendError;
use std::collections::HashMap;
use std::ffi::c_void;

/// Size of the pinned staging buffer; larger transfers go through it in pieces.
pub(super) const STAGING_BYTES: usize = 32 << 20;
/// Alignment of each piece within the staging buffer (the DMA engines' preferred one).
const STAGING_ALIGN: usize = 256;

/// The current device's free memory, as `hipMemGetInfo` reports it.
pub(super) fn free_memory(hip: &Hip) -> Option<u64> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: out-parameters; callers make the device current first.
    (unsafe { (hip.hipMemGetInfo)(&mut free, &mut total) } == ffi::SUCCESS).then_some(free as u64)
}

pub(super) struct DeviceBuffer {
    pub ptr: *mut c_void,
    pub size: u64,
}

#[derive(Default)]
pub(super) struct Buffers {
    map: HashMap<u64, DeviceBuffer>,
    next: u64,
}

impl Buffers {
    /// Allocates `bytes` (rounded up to whole 4-byte words, at least one, as every backend
    /// does, so kernels reading words never end mid-word).
    pub fn alloc(&mut self, hip: &Hip, bytes: u64) -> Result<BufferHandle, BackendError> {
        let oom = || BackendError::OutOfMemory {
            bytes,
            free: free_memory(hip),
        };
        let capacity = bytes.max(4).checked_next_multiple_of(4).ok_or_else(oom)?;
        let capacity = usize::try_from(capacity).map_err(|_| oom())?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: an out-parameter and a non-zero size; the device is current (the caller
        // set it).
        let code = unsafe { (hip.hipMalloc)(&mut ptr, capacity) };
        if code == ffi::ERROR_OUT_OF_MEMORY || (code == ffi::SUCCESS && ptr.is_null()) {
            return Err(oom());
        }
        hip.check("hipMalloc", code)?;
        // hipMalloc leaves whatever the memory held; buffers start zeroed (the trait's promise).
        // SAFETY: `ptr` is the fresh allocation of `capacity` bytes made above.
        let code = unsafe { (hip.hipMemset)(ptr, 0, capacity) };
        if code != ffi::SUCCESS {
            // SAFETY: allocated above, never used.
            unsafe { (hip.hipFree)(ptr) };
            hip.check("hipMemset", code)?;
        }
        self.next += 1;
        self.map
            .insert(self.next, DeviceBuffer { ptr, size: bytes });
        Ok(BufferHandle(self.next))
    }

    pub fn get(&self, h: BufferHandle) -> Result<&DeviceBuffer, BackendError> {
        self.map.get(&h.0).ok_or(BackendError::UnknownBuffer(h))
    }

    pub fn remove(&mut self, h: BufferHandle) -> Option<DeviceBuffer> {
        self.map.remove(&h.0)
    }

    pub fn drain(&mut self) -> impl Iterator<Item = DeviceBuffer> + '_ {
        self.map.drain().map(|(_, b)| b)
    }
}

/// Pinned host memory used as a ring of pieces: `used` bytes from the start are owned by
/// copies that may still be queued.
pub(super) struct Staging {
    ptr: *mut u8,
    used: usize,
}

impl Default for Staging {
    fn default() -> Self {
        Staging {
            ptr: std::ptr::null_mut(),
            used: 0,
        }
    }
}

impl Staging {
    /// Space for `len` (≤ [`STAGING_BYTES`]) bytes that no queued copy uses. Allocates the
    /// buffer on first use; waits for the stream when the buffer is full.
    fn reserve(&mut self, hip: &Hip, stream: Stream, len: usize) -> Result<*mut u8, BackendError> {
        if self.ptr.is_null() {
            let mut ptr = std::ptr::null_mut();
            // SAFETY: an out-parameter, a non-zero size, default flags.
            let code = unsafe { (hip.hipHostMalloc)(&mut ptr, STAGING_BYTES, 0) };
            hip.check("hipHostMalloc", code)?;
            self.ptr = ptr.cast();
            self.used = 0;
        }
        if self.used + len > STAGING_BYTES {
            // SAFETY: the stream is live.
            hip.check("hipStreamSynchronize", unsafe {
                (hip.hipStreamSynchronize)(stream)
            })?;
            self.used = 0;
        }
        // SAFETY: `used + len <= STAGING_BYTES`, so the piece lies inside the allocation.
        let piece = unsafe { self.ptr.add(self.used) };
        self.used = (self.used + len).next_multiple_of(STAGING_ALIGN);
        Ok(piece)
    }

    /// Every queued copy has completed (the caller synchronised the stream).
    pub fn drained(&mut self) {
        self.used = 0;
    }

    /// Queues copies of `data` to device address `dst`, without waiting for them.
    ///
    /// # Safety
    /// `dst..dst + data.len()` lies inside a live device allocation; the device is current.
    pub unsafe fn upload(
        &mut self,
        hip: &Hip,
        stream: Stream,
        dst: *mut u8,
        data: &[u8],
    ) -> Result<(), BackendError> {
        for (i, piece) in data.chunks(STAGING_BYTES).enumerate() {
            let slot = self.reserve(hip, stream, piece.len())?;
            // SAFETY: `slot` has `piece.len()` bytes no queued copy reads; the regions are
            // distinct allocations.
            unsafe { std::ptr::copy_nonoverlapping(piece.as_ptr(), slot, piece.len()) };
            // SAFETY: the caller's range; the pinned slot stays untouched until the stream
            // has passed this copy (`reserve` waits before reusing it).
            let code = unsafe {
                (hip.hipMemcpyHtoDAsync)(
                    dst.add(i * STAGING_BYTES).cast(),
                    slot.cast(),
                    piece.len(),
                    stream,
                )
            };
            hip.check("hipMemcpyHtoDAsync", code)?;
        }
        Ok(())
    }

    /// Copies device address `src..src + out.len()` into `out`, waiting for everything queued
    /// before.
    ///
    /// # Safety
    /// The range lies inside a live device allocation; the device is current.
    pub unsafe fn download(
        &mut self,
        hip: &Hip,
        stream: Stream,
        src: *const u8,
        out: &mut [u8],
    ) -> Result<(), BackendError> {
        for (i, piece) in out.chunks_mut(STAGING_BYTES).enumerate() {
            let slot = self.reserve(hip, stream, piece.len())?;
            // SAFETY: the caller's range; `slot` has room for the piece.
            let code = unsafe {
                (hip.hipMemcpyDtoHAsync)(
                    slot.cast(),
                    src.add(i * STAGING_BYTES).cast_mut().cast(),
                    piece.len(),
                    stream,
                )
            };
            hip.check("hipMemcpyDtoHAsync", code)?;
            // SAFETY: the stream is live.
            hip.check("hipStreamSynchronize", unsafe {
                (hip.hipStreamSynchronize)(stream)
            })?;
            self.drained();
            // SAFETY: the copy into `slot` has completed; `piece` is a distinct allocation.
            unsafe { std::ptr::copy_nonoverlapping(slot, piece.as_mut_ptr(), piece.len()) };
        }
        Ok(())
    }

    /// Frees the pinned buffer.
    ///
    /// # Safety
    /// No queued copy uses it (the stream is idle).
    pub unsafe fn free(&mut self, hip: &Hip) {
        if !self.ptr.is_null() {
            // SAFETY: allocated by hipHostMalloc and freed once.
            unsafe { (hip.hipHostFree)(self.ptr.cast()) };
            self.ptr = std::ptr::null_mut();
        }
    }
}

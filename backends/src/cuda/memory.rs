//! Buffers: device memory that stays resident, filled and read through one pinned host
//! staging buffer with asynchronous copies on the backend's stream.

use super::driver::{
    CuDevicePtr, CuEvent, CuStream, Driver, CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS,
};
use crate::backend::BufferHandle;
use crate::error::BackendError;
use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr::NonNull;

/// Largest staging buffer; bigger transfers go through it in pieces.
pub const STAGING_MAX: usize = 32 << 20;
/// Smallest staging buffer, so that a run of small transfers does not reallocate it.
const STAGING_MIN: usize = 1 << 20;

/// The current context's free device memory, as `cuMemGetInfo` reports it.
pub fn free_memory(driver: &Driver) -> Option<u64> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers; callers make the context current first.
    (unsafe { (driver.mem_get_info)(&mut free, &mut total) } == CUDA_SUCCESS).then_some(free as u64)
}

/// One device allocation.
pub struct Buffer {
    pub ptr: CuDevicePtr,
    /// Bytes the caller asked for: the range reads, writes and bindings may use.
    pub size: u64,
}

/// Pinned host memory that copies go through, and the event marking its last copy.
pub struct Staging {
    ptr: NonNull<u8>,
    capacity: usize,
    /// Recorded after each copy through the buffer; waited for before the host touches it.
    event: CuEvent,
    pending: bool,
}

/// Every buffer of the backend, by handle, and the staging buffer.
pub struct Buffers {
    map: HashMap<u64, Buffer>,
    next: u64,
    staging: Option<Staging>,
}

impl Buffers {
    pub fn new() -> Buffers {
        Buffers {
            map: HashMap::new(),
            next: 1,
            staging: None,
        }
    }

    /// Allocates `bytes` of device memory, zeroed on the stream (as the CPU backend's are), so
    /// that no kernel reads what an earlier user of the memory left there.
    pub fn alloc(
        &mut self,
        driver: &Driver,
        stream: CuStream,
        bytes: u64,
    ) -> Result<BufferHandle, BackendError> {
        let oom = || BackendError::OutOfMemory {
            bytes,
            free: free_memory(driver),
        };
        // cuMemAlloc refuses 0 bytes; one word keeps every handle backed by real memory.
        let size = usize::try_from(bytes.max(4)).map_err(|_| oom())?;
        let mut ptr: CuDevicePtr = 0;
        // SAFETY: a valid out-pointer; the context is current (the caller's lock holds it).
        let code = unsafe { (driver.mem_alloc)(&mut ptr, size) };
        if code == CUDA_ERROR_OUT_OF_MEMORY {
            return Err(oom());
        }
        driver.check("cuMemAlloc", code)?;
        // SAFETY: `ptr` is a fresh allocation of `size` bytes; the memset is ordered on the
        // stream before any later copy or launch that uses the buffer.
        let zeroed = driver.check("cuMemsetD8Async", unsafe {
            (driver.memset_d8_async)(ptr, 0, size, stream)
        });
        if let Err(e) = zeroed {
            // SAFETY: just allocated, never used by queued work (the memset failed to queue).
            unsafe { (driver.mem_free)(ptr) };
            return Err(e);
        }
        let id = self.next;
        self.next += 1;
        self.map.insert(id, Buffer { ptr, size: bytes });
        Ok(BufferHandle(id))
    }

    pub fn get(&self, h: BufferHandle) -> Result<&Buffer, BackendError> {
        self.map.get(&h.0).ok_or(BackendError::UnknownBuffer(h))
    }

    /// Removes the buffer; the caller frees its memory once no queued work uses it.
    pub fn remove(&mut self, h: BufferHandle) -> Option<Buffer> {
        self.map.remove(&h.0)
    }

    /// Copies `data` to `dst` through the staging buffer without waiting for the copy, except
    /// where the staging buffer must be reused for the next piece.
    pub fn upload(
        &mut self,
        driver: &Driver,
        stream: CuStream,
        dst: CuDevicePtr,
        data: &[u8],
    ) -> Result<(), BackendError> {
        let mut at = dst;
        for piece in data.chunks(STAGING_MAX) {
            let staging = self.staging(driver, piece.len())?;
            staging.wait(driver)?;
            // SAFETY: the staging buffer holds at least `piece.len()` bytes (checked by
            // `staging`), no copy uses it now (waited above), and host and pinned memory do
            // not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(piece.as_ptr(), staging.ptr.as_ptr(), piece.len())
            };
            // SAFETY: `at..at+len` lies inside a live allocation (the caller checked the range);
            // the source is pinned memory that stays untouched until the event below completes.
            driver.check("cuMemcpyHtoDAsync", unsafe {
                (driver.memcpy_htod_async)(
                    at,
                    staging.ptr.as_ptr().cast::<c_void>(),
                    piece.len(),
                    stream,
                )
            })?;
            staging.record(driver, stream)?;
            at += piece.len() as u64;
        }
        Ok(())
    }

    /// Copies from `src` into `out` through the staging buffer, waiting for each piece.
    pub fn download(
        &mut self,
        driver: &Driver,
        stream: CuStream,
        src: CuDevicePtr,
        out: &mut [u8],
    ) -> Result<(), BackendError> {
        let mut at = src;
        for piece in out.chunks_mut(STAGING_MAX) {
            let staging = self.staging(driver, piece.len())?;
            staging.wait(driver)?;
            // SAFETY: as in `upload`, with source and destination swapped; the host reads the
            // staging memory only after the event below has completed.
            driver.check("cuMemcpyDtoHAsync", unsafe {
                (driver.memcpy_dtoh_async)(
                    staging.ptr.as_ptr().cast::<c_void>(),
                    at,
                    piece.len(),
                    stream,
                )
            })?;
            staging.record(driver, stream)?;
            staging.wait(driver)?;
            // SAFETY: the copy into the staging buffer has completed (waited above), which
            // holds at least `piece.len()` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(staging.ptr.as_ptr(), piece.as_mut_ptr(), piece.len())
            };
            at += piece.len() as u64;
        }
        Ok(())
    }

    /// A staging buffer of at least `min(bytes, STAGING_MAX)` bytes, replaced when too small
    /// once its last copy has completed.
    fn staging(&mut self, driver: &Driver, bytes: usize) -> Result<&mut Staging, BackendError> {
        let want = bytes.clamp(STAGING_MIN, STAGING_MAX);
        if let Some(mut old) = self.staging.take_if(|s| s.capacity < want) {
            if let Err(e) = old.wait(driver) {
                self.staging = Some(old);
                return Err(e);
            }
            // SAFETY: its last copy has completed.
            unsafe { old.destroy(driver) };
        }
        if self.staging.is_none() {
            self.staging = Some(Staging::new(driver, want)?);
        }
        self.staging.as_mut().ok_or(BackendError::OutOfMemory {
            bytes: want as u64,
            free: None,
        })
    }

    /// Frees every buffer and the staging buffer.
    ///
    /// # Safety
    /// No queued work uses any of them (the stream has been synchronised, or the context is
    /// lost); the context is current.
    pub unsafe fn destroy_all(&mut self, driver: &Driver) {
        for (_, b) in self.map.drain() {
            // SAFETY: the caller's contract.
            unsafe { (driver.mem_free)(b.ptr) };
        }
        if let Some(s) = self.staging.take() {
            // SAFETY: the caller's contract.
            unsafe { s.destroy(driver) };
        }
    }
}

impl Staging {
    fn new(driver: &Driver, capacity: usize) -> Result<Staging, BackendError> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is current.
        let code = unsafe { (driver.mem_alloc_host)(&mut ptr, capacity) };
        if code == CUDA_ERROR_OUT_OF_MEMORY {
            // Pinned host memory: the device's free memory says nothing about it.
            return Err(BackendError::OutOfMemory {
                bytes: capacity as u64,
                free: None,
            });
        }
        driver.check("cuMemAllocHost", code)?;
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or(BackendError::Driver {
            call: "cuMemAllocHost",
            code: "returned a null pointer".into(),
        })?;
        let mut event: CuEvent = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; timing is disabled since this event only orders copies.
        let created = driver.check("cuEventCreate", unsafe {
            (driver.event_create)(&mut event, EVENT_DISABLE_TIMING)
        });
        if let Err(e) = created {
            // SAFETY: just allocated, never used.
            unsafe { (driver.mem_free_host)(ptr.as_ptr().cast()) };
            return Err(e);
        }
        Ok(Staging {
            ptr,
            capacity,
            event,
            pending: false,
        })
    }

    fn record(&mut self, driver: &Driver, stream: CuStream) -> Result<(), BackendError> {
        // SAFETY: a live event and stream of the current context.
        driver.check("cuEventRecord", unsafe {
            (driver.event_record)(self.event, stream)
        })?;
        self.pending = true;
        Ok(())
    }

    /// Waits for the last copy through the buffer.
    fn wait(&mut self, driver: &Driver) -> Result<(), BackendError> {
        if self.pending {
            // SAFETY: a live event that has been recorded.
            driver.check("cuEventSynchronize", unsafe {
                (driver.event_synchronize)(self.event)
            })?;
            self.pending = false;
        }
        Ok(())
    }

    /// # Safety
    /// No queued copy uses the buffer; the context is current.
    unsafe fn destroy(self, driver: &Driver) {
        // SAFETY: the caller's contract; both were made by `new`.
        unsafe {
            (driver.event_destroy)(self.event);
            (driver.mem_free_host)(self.ptr.as_ptr().cast());
        }
    }
}

/// `CU_EVENT_DISABLE_TIMING`.
const EVENT_DISABLE_TIMING: std::ffi::c_uint = 2;

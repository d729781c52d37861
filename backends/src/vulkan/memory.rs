//! Buffers: one `VkBuffer` and one allocation each, host-mapped where the device shares memory
//! with the host, otherwise device-local and filled through a staging buffer.

use super::submit::Submitter;
use super::vk_error;
use crate::backend::BufferHandle;
use crate::checks::{check_range, SPIRV_BUFFER_GRANULE};
use crate::error::BackendError;
use ash::vk;
use std::collections::HashMap;
use std::ptr::NonNull;

/// Largest staging buffer; bigger transfers go through it in pieces.
pub const STAGING_MAX: u64 = 32 << 20;
/// Smallest staging buffer, so that a run of small transfers does not reallocate it.
const STAGING_MIN: u64 = 1 << 20;

/// Which memory types buffers and staging use, best first.
pub struct MemoryPlan {
    types: Vec<vk::MemoryType>,
    heap_sizes: Vec<u64>,
    buffer_types: Vec<u32>,
    staging_types: Vec<u32>,
    zero_copy: bool,
    max_allocation: u64,
}

impl MemoryPlan {
    /// `shared` says whether the device shares the host's memory (integrated GPU, CPU), so that
    /// buffers may live in host-mapped memory.
    pub fn new(
        props: &vk::PhysicalDeviceMemoryProperties,
        shared: bool,
        max_allocation: u64,
    ) -> Self {
        use vk::MemoryPropertyFlags as F;
        let types = props.memory_types_as_slice().to_vec();
        let heap_sizes: Vec<u64> = props
            .memory_heaps_as_slice()
            .iter()
            .map(|h| h.size)
            .collect();
        let heap = |t: &vk::MemoryType| heap_sizes.get(t.heap_index as usize).copied().unwrap_or(0);
        let indices = |keep: &dyn Fn(&vk::MemoryType) -> bool| -> Vec<u32> {
            (0u32..)
                .zip(&types)
                .filter(|(_, t)| keep(t))
                .map(|(i, _)| i)
                .collect()
        };
        let mapped = F::HOST_VISIBLE | F::HOST_COHERENT;
        let zero_copy = shared
            && types
                .iter()
                .any(|t| t.property_flags.contains(F::DEVICE_LOCAL | mapped));

        let mut buffer_types = if zero_copy {
            // On shared memory every host-visible heap is the device's memory: when the
            // device-local one (often a small carve-out on APUs) is full, the others still serve.
            indices(&|t| t.property_flags.contains(mapped))
        } else {
            // A host-visible device-local heap smaller than the largest device-local heap is a
            // PCIe BAR window (256 MiB on NVIDIA without resizable BAR): keep ordinary buffers
            // out of it.
            let largest = types
                .iter()
                .filter(|t| t.property_flags.contains(F::DEVICE_LOCAL))
                .map(heap)
                .max()
                .unwrap_or(0);
            let mut v = indices(&|t| {
                t.property_flags.contains(F::DEVICE_LOCAL)
                    && !(t.property_flags.contains(F::HOST_VISIBLE) && heap(t) < largest)
            });
            if v.is_empty() {
                v = indices(&|_| true);
            }
            v
        };
        buffer_types.sort_by_key(|&i| {
            let t = &types[i as usize];
            (
                !t.property_flags.contains(F::DEVICE_LOCAL),
                t.property_flags.contains(F::HOST_VISIBLE) && !zero_copy,
                std::cmp::Reverse(heap(t)),
            )
        });
        let mut staging_types = indices(&|t| t.property_flags.contains(mapped));
        staging_types.sort_by_key(|&i| {
            let t = &types[i as usize];
            (
                t.property_flags.contains(F::DEVICE_LOCAL),
                !t.property_flags.contains(F::HOST_CACHED),
                std::cmp::Reverse(heap(t)),
            )
        });
        MemoryPlan {
            types,
            heap_sizes,
            buffer_types,
            staging_types,
            zero_copy,
            max_allocation,
        }
    }

    /// Whether buffers are host-mapped (no staging copies).
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    fn is_host_visible(&self, index: u32) -> bool {
        self.types.get(index as usize).is_some_and(|t| {
            t.property_flags
                .contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
        })
    }
}

/// A host pointer into mapped device memory.
#[derive(Clone, Copy)]
struct Mapped(NonNull<u8>);

// SAFETY: the pointer is only dereferenced through `&mut`/`&` access to the buffer that owns
// the mapping (under the backend's lock), with the range checked, while the mapping lives.
unsafe impl Send for Mapped {}

/// One buffer of the backend.
pub struct Buffer {
    pub buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    /// Bytes the caller asked for: the range reads, writes and bindings may use.
    pub size: u64,
    /// Bytes allocated: `size` rounded up to [`SPIRV_BUFFER_GRANULE`].
    pub capacity: u64,
    mapped: Option<Mapped>,
    /// Submission serial of the last work that used it.
    pub last_use: u64,
}

impl Buffer {
    /// Copies `data` into the mapped memory at `offset`, once every queued use of the buffer
    /// has completed.
    pub fn write_mapped(
        &self,
        device: &ash::Device,
        submit: &mut Submitter,
        offset: u64,
        data: &[u8],
    ) -> Result<(), BackendError> {
        let (ptr, offset) = self.mapped_range(device, submit, offset, data.len())?;
        // SAFETY: `mapped_range` checked that the range lies inside the mapped allocation and
        // that no device work uses the buffer; `data` cannot overlap device memory.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.as_ptr().add(offset), data.len())
        };
        Ok(())
    }

    /// Zeroes the whole mapped allocation, once every queued use of the buffer has completed.
    pub fn zero_mapped(
        &self,
        device: &ash::Device,
        submit: &mut Submitter,
    ) -> Result<(), BackendError> {
        let (ptr, offset) = self.mapped_range(device, submit, 0, self.size as usize)?;
        // SAFETY: as in `write_mapped`, for the range `mapped_range` checked.
        unsafe { std::ptr::write_bytes(ptr.as_ptr().add(offset), 0, self.size as usize) };
        Ok(())
    }

    /// Copies from the mapped memory at `offset` into `out`, as `write_mapped`.
    pub fn read_mapped(
        &self,
        device: &ash::Device,
        submit: &mut Submitter,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), BackendError> {
        let (ptr, offset) = self.mapped_range(device, submit, offset, out.len())?;
        // SAFETY: as in `write_mapped`.
        unsafe {
            std::ptr::copy_nonoverlapping(ptr.as_ptr().add(offset), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    /// The mapping and `offset` as a host offset, after checking the range and waiting for
    /// the buffer's last use.
    fn mapped_range(
        &self,
        device: &ash::Device,
        submit: &mut Submitter,
        offset: u64,
        len: usize,
    ) -> Result<(NonNull<u8>, usize), BackendError> {
        let Some(Mapped(ptr)) = self.mapped else {
            return Err(BackendError::Driver {
                call: "mapped access",
                code: "buffer is not mapped".into(),
            });
        };
        check_range(offset, len as u64, self.size)?;
        submit.wait(device, self.last_use)?;
        let offset = usize::try_from(offset).map_err(|_| BackendError::OutOfRange {
            offset,
            len: len as u64,
            size: self.size,
        })?;
        Ok((ptr, offset))
    }

    pub fn is_mapped(&self) -> bool {
        self.mapped.is_some()
    }
}

/// The host-visible buffer that reads and writes of device-local buffers pass through.
pub struct Staging {
    pub buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    capacity: u64,
    mapped: Mapped,
    /// Submission serial of the last copy that used it.
    pub last_use: u64,
}

impl Staging {
    /// The first `len` bytes of the mapped staging memory, once the last copy through it has
    /// completed.
    pub fn bytes(
        &mut self,
        device: &ash::Device,
        submit: &mut Submitter,
        len: usize,
    ) -> Result<&mut [u8], BackendError> {
        if len as u64 > self.capacity {
            return Err(BackendError::OutOfRange {
                offset: 0,
                len: len as u64,
                size: self.capacity,
            });
        }
        submit.wait(device, self.last_use)?;
        // SAFETY: the mapping covers `capacity` ≥ `len` bytes of host-coherent memory that no
        // device work uses now (waited above); the `&mut self` borrow keeps the slice unique.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.mapped.0.as_ptr(), len) })
    }
}

/// Every buffer of the backend, by handle.
pub struct Buffers {
    plan: MemoryPlan,
    map: HashMap<u64, Buffer>,
    /// Freed buffers whose last use could not be waited for.
    orphans: Vec<Buffer>,
    next: u64,
    staging: Option<Staging>,
}

impl Buffers {
    pub fn new(plan: MemoryPlan) -> Self {
        Buffers {
            plan,
            map: HashMap::new(),
            orphans: vec![],
            next: 1,
            staging: None,
        }
    }

    pub fn alloc(
        &mut self,
        device: &ash::Device,
        bytes: u64,
    ) -> Result<BufferHandle, BackendError> {
        let oom = BackendError::OutOfMemory { bytes, free: None };
        let capacity = bytes
            .max(4)
            .checked_next_multiple_of(SPIRV_BUFFER_GRANULE)
            .ok_or(oom)?;
        let zero_copy = self.plan.zero_copy;
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;
        let (buffer, memory, memory_type) = allocate(
            device,
            &self.plan,
            capacity,
            usage,
            &self.plan.buffer_types,
            bytes,
        )?;
        let mapped = if zero_copy && self.plan.is_host_visible(memory_type) {
            match map(device, memory) {
                Ok(m) => Some(m),
                Err(e) => {
                    // SAFETY: just made, never used.
                    unsafe { destroy(device, buffer, memory) };
                    return Err(e);
                }
            }
        } else {
            None
        };
        let id = self.next;
        self.next += 1;
        self.map.insert(
            id,
            Buffer {
                buffer,
                memory,
                size: bytes,
                capacity,
                mapped,
                last_use: 0,
            },
        );
        Ok(BufferHandle(id))
    }

    pub fn get(&self, h: BufferHandle) -> Result<&Buffer, BackendError> {
        self.map.get(&h.0).ok_or(BackendError::UnknownBuffer(h))
    }

    pub fn get_mut(&mut self, h: BufferHandle) -> Result<&mut Buffer, BackendError> {
        self.map.get_mut(&h.0).ok_or(BackendError::UnknownBuffer(h))
    }

    /// Destroys a buffer once its last use has completed. If that cannot be waited for
    /// (a lost or broken device), it is destroyed with the device instead.
    pub fn free(&mut self, device: &ash::Device, submit: &mut Submitter, h: BufferHandle) {
        let Some(b) = self.map.remove(&h.0) else {
            return;
        };
        if submit.wait(device, b.last_use).is_ok() {
            // SAFETY: its last use has completed.
            unsafe { destroy(device, b.buffer, b.memory) };
        } else {
            self.orphans.push(b);
        }
    }

    /// A staging buffer of at least `min(bytes, STAGING_MAX)` bytes. The current one is
    /// replaced when it is too small, once the last copy through it has completed.
    pub fn staging(
        &mut self,
        device: &ash::Device,
        submit: &mut Submitter,
        bytes: u64,
    ) -> Result<&mut Staging, BackendError> {
        let want = bytes.clamp(STAGING_MIN, STAGING_MAX);
        if let Some(s) = self.staging.take_if(|s| s.capacity < want) {
            if let Err(e) = submit.wait(device, s.last_use) {
                self.staging = Some(s);
                return Err(e);
            }
            // SAFETY: the last copy through it has completed.
            unsafe { destroy(device, s.buffer, s.memory) };
        }
        if self.staging.is_none() {
            let usage = vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
            let (buffer, memory, _) = allocate(
                device,
                &self.plan,
                want,
                usage,
                &self.plan.staging_types,
                want,
            )?;
            let mapped = match map(device, memory) {
                Ok(m) => m,
                Err(e) => {
                    // SAFETY: just made, never used.
                    unsafe { destroy(device, buffer, memory) };
                    return Err(e);
                }
            };
            self.staging = Some(Staging {
                buffer,
                memory,
                capacity: want,
                mapped,
                last_use: 0,
            });
        }
        self.staging.as_mut().ok_or(BackendError::OutOfMemory {
            bytes: want,
            free: None,
        })
    }

    /// Destroys every buffer.
    ///
    /// # Safety
    /// The device is idle (or lost).
    pub unsafe fn destroy_all(&mut self, device: &ash::Device) {
        // SAFETY: the caller's contract.
        unsafe {
            for b in self
                .map
                .drain()
                .map(|(_, b)| b)
                .chain(self.orphans.drain(..))
            {
                destroy(device, b.buffer, b.memory);
            }
            if let Some(s) = self.staging.take() {
                destroy(device, s.buffer, s.memory);
            }
        }
    }
}

/// A buffer of `size` bytes bound to fresh memory of the first type in `types` that can hold
/// it. `bytes` is what the caller asked for, for the error.
fn allocate(
    device: &ash::Device,
    plan: &MemoryPlan,
    size: u64,
    usage: vk::BufferUsageFlags,
    types: &[u32],
    bytes: u64,
) -> Result<(vk::Buffer, vk::DeviceMemory, u32), BackendError> {
    let oom = || BackendError::OutOfMemory { bytes, free: None };
    if size > plan.max_allocation {
        return Err(oom());
    }
    let info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(usage)
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    // SAFETY: a valid create info with a non-zero size; the buffer is destroyed on every
    // failure path below or owned by the caller.
    let buffer = unsafe { device.create_buffer(&info, None) }.map_err(|e| match e {
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => oom(),
        e => vk_error("vkCreateBuffer", e),
    })?;
    // SAFETY: `buffer` is a live buffer of this device.
    let req = unsafe { device.get_buffer_memory_requirements(buffer) };
    for &t in types {
        let fits_heap = plan
            .types
            .get(t as usize)
            .and_then(|ty| plan.heap_sizes.get(ty.heap_index as usize))
            .is_some_and(|&heap| heap >= req.size);
        if req.memory_type_bits & (1 << t) == 0 || !fits_heap {
            continue;
        }
        let alloc = vk::MemoryAllocateInfo::default()
            .allocation_size(req.size)
            .memory_type_index(t);
        // SAFETY: the type index is one the buffer accepts; the memory is bound below and freed
        // with the buffer.
        match unsafe { device.allocate_memory(&alloc, None) } {
            Ok(memory) => {
                // SAFETY: fresh memory of a type the buffer accepts, at offset 0, large enough.
                return match unsafe { device.bind_buffer_memory(buffer, memory, 0) } {
                    Ok(()) => Ok((buffer, memory, t)),
                    Err(e) => {
                        // SAFETY: just made, never used.
                        unsafe { destroy(device, buffer, memory) };
                        Err(vk_error("vkBindBufferMemory", e))
                    }
                };
            }
            Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY) => {}
            Err(e) => {
                // SAFETY: just made, never used.
                unsafe { destroy(device, buffer, vk::DeviceMemory::null()) };
                return Err(vk_error("vkAllocateMemory", e));
            }
        }
    }
    // SAFETY: just made, never used.
    unsafe { destroy(device, buffer, vk::DeviceMemory::null()) };
    Err(oom())
}

fn map(device: &ash::Device, memory: vk::DeviceMemory) -> Result<Mapped, BackendError> {
    // SAFETY: `memory` is a live, unmapped, host-visible allocation; it stays mapped until
    // it is freed.
    let ptr = unsafe { device.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }
        .map_err(|e| vk_error("vkMapMemory", e))?;
    NonNull::new(ptr.cast::<u8>())
        .map(Mapped)
        .ok_or_else(|| vk_error("vkMapMemory", vk::Result::ERROR_MEMORY_MAP_FAILED))
}

/// # Safety
/// Both handles are null or objects of `device` that no pending work uses.
unsafe fn destroy(device: &ash::Device, buffer: vk::Buffer, memory: vk::DeviceMemory) {
    // SAFETY: the caller's contract; null handles are ignored, and freeing memory unmaps it.
    unsafe {
        device.destroy_buffer(buffer, None);
        device.free_memory(memory, None);
    }
}

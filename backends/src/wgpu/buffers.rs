//! Buffers: trine's handles for wgpu buffers (its own, or a host application's), and copies
//! between them and the host.
//!
//! wgpu copies whole 4-byte words at 4-byte offsets. Buffers are allocated in whole quads
//! ([`SPIRV_BUFFER_GRANULE`]), so whole words too: a read widens to whole words and keeps the bytes asked for; a write that starts or ends inside
//! a word first reads that word back and writes it whole.

use super::scope::{catch, scoped, Caught};
use crate::backend::BufferHandle;
use crate::checks::SPIRV_BUFFER_GRANULE;
use crate::error::BackendError;
use std::collections::HashMap;
use std::sync::mpsc;

/// Largest piece read through the staging buffer at once.
const STAGING_MAX: u64 = 64 << 20;
const WORD: u64 = wgpu::COPY_BUFFER_ALIGNMENT;

pub struct Entry {
    pub buffer: wgpu::Buffer,
    /// Bytes the user asked for (the wgpu buffer is this, quad-rounded, or larger).
    pub size: u64,
    /// A host application's buffer: forgotten, not destroyed, when freed.
    pub imported: bool,
}

pub struct Buffers {
    entries: HashMap<u64, Entry>,
    next: u64,
    /// Mapped for reading; grown to the largest piece read so far.
    staging: Option<wgpu::Buffer>,
}

impl Buffers {
    pub fn new() -> Buffers {
        Buffers {
            entries: HashMap::new(),
            next: 1,
            staging: None,
        }
    }

    pub fn get(&self, h: BufferHandle) -> Result<&Entry, BackendError> {
        self.entries.get(&h.0).ok_or(BackendError::UnknownBuffer(h))
    }

    fn insert(&mut self, entry: Entry) -> BufferHandle {
        let h = self.next;
        self.next += 1;
        self.entries.insert(h, entry);
        BufferHandle(h)
    }

    pub fn alloc(
        &mut self,
        device: &wgpu::Device,
        bytes: u64,
        max: u64,
    ) -> Result<BufferHandle, BackendError> {
        let size = match bytes
            .max(WORD)
            .checked_next_multiple_of(SPIRV_BUFFER_GRANULE)
        {
            Some(size) if size <= max => size,
            _ => return Err(BackendError::OutOfMemory { bytes, free: None }),
        };
        let buffer = catch(device, || {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })
        .map_err(|c| match c {
            Caught::OutOfMemory => BackendError::OutOfMemory { bytes, free: None },
            c => c.during("wgpu::Device::create_buffer"),
        })?;
        Ok(self.insert(Entry {
            buffer,
            size: bytes,
            imported: false,
        }))
    }

    /// Takes a host application's buffer. Kernels bind it as storage; trine's reads and writes
    /// need `COPY_SRC` and `COPY_DST`.
    pub fn import(&mut self, buffer: wgpu::Buffer) -> Result<BufferHandle, BackendError> {
        if !buffer.usage().contains(wgpu::BufferUsages::STORAGE) {
            return Err(BackendError::ImportedBuffer(format!(
                "its usage {:?} lacks STORAGE, which binding it to a kernel needs",
                buffer.usage()
            )));
        }
        let size = buffer.size();
        Ok(self.insert(Entry {
            buffer,
            size,
            imported: true,
        }))
    }

    /// Forgets `h`; trine's own buffers are destroyed once pending work no longer uses them
    /// (wgpu keeps them alive until then).
    pub fn free(&mut self, h: BufferHandle) {
        if let Some(e) = self.entries.remove(&h.0) {
            if !e.imported {
                e.buffer.destroy();
            }
        }
    }

    /// Copies `out.len()` bytes at `offset` of `h` into `out`. Work recorded before must have
    /// been submitted.
    pub fn read(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        h: BufferHandle,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), BackendError> {
        let src = self.get(h)?.buffer.clone();
        needs_usage(&src, wgpu::BufferUsages::COPY_SRC)?;
        let mut at = 0usize;
        while at < out.len() {
            let start = offset + at as u64;
            let word_start = start - start % WORD;
            let want = (out.len() - at) as u64;
            let span = (start - word_start + want)
                .next_multiple_of(WORD)
                .min(STAGING_MAX);
            let staging = self.staging(device, span)?;
            let mut encoder = device.create_command_encoder(&Default::default());
            encoder.copy_buffer_to_buffer(&src, word_start, &staging, 0, span);
            scoped(device, "wgpu::Queue::submit (read)", || {
                queue.submit([encoder.finish()])
            })?;
            map_read(device, &staging, span)?;
            let take = (span - (start - word_start)).min(want) as usize;
            {
                let view = staging
                    .get_mapped_range(0..span)
                    .map_err(|e| driver("wgpu::Buffer::get_mapped_range", e))?;
                let skip = (start - word_start) as usize;
                out[at..at + take].copy_from_slice(&view[skip..skip + take]);
            }
            staging.unmap();
            at += take;
        }
        Ok(())
    }

    /// Writes `data` at `offset` of `h`, widening to whole words by reading the edge words
    /// first. Work recorded before must have been submitted.
    pub fn write(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        h: BufferHandle,
        offset: u64,
        data: &[u8],
    ) -> Result<(), BackendError> {
        let dst = self.get(h)?.buffer.clone();
        needs_usage(&dst, wgpu::BufferUsages::COPY_DST)?;
        let end = offset + data.len() as u64;
        let (word_start, word_end) = (offset - offset % WORD, end.next_multiple_of(WORD));
        let call = "wgpu::Queue::write_buffer";
        if word_start == offset && word_end == end {
            return scoped(device, call, || queue.write_buffer(&dst, offset, data));
        }
        let mut words = vec![0u8; (word_end - word_start) as usize];
        self.read(device, queue, h, word_start, &mut words[..WORD as usize])?;
        let last = words.len() - WORD as usize;
        if last > 0 {
            self.read(device, queue, h, word_end - WORD, &mut words[last..])?;
        }
        let skip = (offset - word_start) as usize;
        words[skip..skip + data.len()].copy_from_slice(data);
        scoped(device, call, || {
            queue.write_buffer(&dst, word_start, &words)
        })
    }

    /// The staging buffer, at least `bytes` long.
    fn staging(&mut self, device: &wgpu::Device, bytes: u64) -> Result<wgpu::Buffer, BackendError> {
        if let Some(s) = self.staging.as_ref().filter(|s| s.size() >= bytes) {
            return Ok(s.clone());
        }
        let s = scoped(device, "wgpu::Device::create_buffer (staging)", || {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("trine staging"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })?;
        if let Some(old) = self.staging.replace(s.clone()) {
            old.destroy();
        }
        Ok(s)
    }

    /// Destroys trine's own buffers (a host application's stay its own).
    pub fn destroy_all(&mut self) {
        for (_, e) in self.entries.drain() {
            if !e.imported {
                e.buffer.destroy();
            }
        }
        if let Some(s) = self.staging.take() {
            s.destroy();
        }
    }
}

/// Maps the first `bytes` of `buffer` for reading and waits until it is.
pub fn map_read(
    device: &wgpu::Device,
    buffer: &wgpu::Buffer,
    bytes: u64,
) -> Result<(), BackendError> {
    let (tx, rx) = mpsc::channel();
    buffer.map_async(wgpu::MapMode::Read, 0..bytes, move |r| {
        let _ = tx.send(r);
    });
    wait(device)?;
    match rx.recv() {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(driver("wgpu::Buffer::map_async", e)),
        Err(_) => Err(driver(
            "wgpu::Buffer::map_async",
            "the mapping callback never ran",
        )),
    }
}

/// Waits until every submission on `device` has completed.
pub fn wait(device: &wgpu::Device) -> Result<(), BackendError> {
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .map(|_| ())
        .map_err(|e| driver("wgpu::Device::poll", e))
}

fn needs_usage(buffer: &wgpu::Buffer, usage: wgpu::BufferUsages) -> Result<(), BackendError> {
    if buffer.usage().contains(usage) {
        return Ok(());
    }
    Err(BackendError::ImportedBuffer(format!(
        "its usage {:?} lacks {usage:?}, which copying it to or from the host needs",
        buffer.usage()
    )))
}

pub fn driver(call: &'static str, e: impl std::fmt::Display) -> BackendError {
    BackendError::Driver {
        call,
        code: e.to_string(),
    }
}

//! Recording and submission. Dispatches go into one open compute pass (a batch), which is
//! submitted when someone needs its results or when it grows long; wgpu orders the dispatches
//! of a pass by their buffers' uses, as the Vulkan backend's barriers do. Bind groups are kept
//! per (kernel, bindings), so a decode loop that binds the same buffers every token creates
//! each of them once.

use super::buffers::{driver, map_read};
use super::scope::scoped;
use crate::backend::BufferHandle;
use crate::error::BackendError;
use std::collections::HashMap;
use std::time::Duration;

/// Dispatches recorded before a batch is submitted without being asked: long enough to
/// amortise a submission, short enough to keep the device fed while the host records.
const BATCH_DISPATCHES: u32 = 256;
/// Bind groups kept before the cache starts again from empty.
const BIND_GROUPS_MAX: usize = 4096;

/// One dispatch, checked and resolved to wgpu objects.
pub struct Prepared {
    pub pipeline: wgpu::ComputePipeline,
    pub bind_group: Option<wgpu::BindGroup>,
    pub immediates: Vec<u8>,
    pub groups: [u32; 3],
}

impl Prepared {
    fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        pass.set_pipeline(&self.pipeline);
        if let Some(group) = &self.bind_group {
            pass.set_bind_group(0, group, &[]);
        }
        if !self.immediates.is_empty() {
            pass.set_immediates(0, &self.immediates);
        }
        let [x, y, z] = self.groups;
        pass.dispatch_workgroups(x, y, z);
    }
}

/// A buffer range bound to one kernel slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bound {
    pub handle: u64,
    pub offset: u64,
    pub size: u64,
}

struct Open {
    // Declared first: a pass must end before its encoder finishes.
    pass: wgpu::ComputePass<'static>,
    encoder: wgpu::CommandEncoder,
}

#[derive(Default)]
pub struct Batch {
    open: Option<Open>,
    recorded: u32,
    bind_groups: HashMap<(u64, Vec<Bound>), wgpu::BindGroup>,
}

impl Batch {
    /// The bind group of `program` (by hash) over `bound`, made on first use.
    pub fn bind_group(
        &mut self,
        device: &wgpu::Device,
        program: u64,
        layout: &wgpu::BindGroupLayout,
        bound: Vec<Bound>,
        buffer: impl Fn(u64) -> wgpu::Buffer,
    ) -> Result<wgpu::BindGroup, BackendError> {
        let key = (program, bound);
        if let Some(g) = self.bind_groups.get(&key) {
            return Ok(g.clone());
        }
        let buffers: Vec<wgpu::Buffer> = key.1.iter().map(|b| buffer(b.handle)).collect();
        let entries: Vec<_> = (0u32..)
            .zip(key.1.iter().zip(&buffers))
            .map(|(binding, (b, buffer))| wgpu::BindGroupEntry {
                binding,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer,
                    offset: b.offset,
                    size: std::num::NonZeroU64::new(b.size),
                }),
            })
            .collect();
        let group = scoped(device, "wgpu::Device::create_bind_group", || {
            device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout,
                entries: &entries,
            })
        })?;
        if self.bind_groups.len() >= BIND_GROUPS_MAX {
            self.bind_groups.clear();
        }
        self.bind_groups.insert(key, group.clone());
        Ok(group)
    }

    /// Drops the bind groups that bind `h`, which is being freed.
    pub fn forget(&mut self, h: BufferHandle) {
        self.bind_groups
            .retain(|(_, bound), _| !bound.iter().any(|b| b.handle == h.0));
    }

    /// Records `p` into the open batch, submitting the batch when it is long.
    pub fn push(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        p: &Prepared,
    ) -> Result<(), BackendError> {
        let open = self.open.get_or_insert_with(|| {
            let mut encoder = device.create_command_encoder(&Default::default());
            let pass = encoder
                .begin_compute_pass(&Default::default())
                .forget_lifetime();
            Open { pass, encoder }
        });
        p.record(&mut open.pass);
        self.recorded += 1;
        if self.recorded >= BATCH_DISPATCHES {
            self.flush(device, queue)?;
        }
        Ok(())
    }

    /// Submits the open batch, if any, without waiting for it.
    pub fn flush(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
    ) -> Result<(), BackendError> {
        self.recorded = 0;
        let Some(Open { pass, encoder }) = self.open.take() else {
            return Ok(());
        };
        drop(pass);
        // A dispatch wgpu rejects surfaces here, when its pass is finished and submitted.
        scoped(device, "wgpu::Queue::submit", || {
            queue.submit([encoder.finish()]);
        })
    }
}

/// Times one dispatch with timestamps written at the start and end of its own pass.
pub struct Timer {
    queries: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    readback: wgpu::Buffer,
    /// Nanoseconds per tick.
    period: f32,
}

/// Bytes of the two resolved timestamps.
const STAMPS: u64 = 2 * wgpu::QUERY_SIZE as u64;

impl Timer {
    pub fn new(device: &wgpu::Device, queue: &wgpu::Queue) -> Result<Timer, BackendError> {
        scoped(device, "wgpu::Device::create_query_set", || {
            let buffer = |usage| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("trine timestamps"),
                    size: STAMPS,
                    usage,
                    mapped_at_creation: false,
                })
            };
            Timer {
                queries: device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("trine timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count: 2,
                }),
                resolved: buffer(wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC),
                readback: buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST),
                period: queue.get_timestamp_period(),
            }
        })
    }

    /// Runs `p` alone and returns the device time between its pass's two timestamps.
    pub fn time(
        &self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        p: &Prepared,
    ) -> Result<Duration, BackendError> {
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                    query_set: &self.queries,
                    beginning_of_pass_write_index: Some(0),
                    end_of_pass_write_index: Some(1),
                }),
            });
            p.record(&mut pass);
        }
        encoder.resolve_query_set(&self.queries, 0..2, &self.resolved, 0);
        encoder.copy_buffer_to_buffer(&self.resolved, 0, &self.readback, 0, STAMPS);
        scoped(device, "wgpu::Queue::submit (timed)", || {
            queue.submit([encoder.finish()]);
        })?;
        map_read(device, &self.readback, STAMPS)?;
        let ticks = {
            let view = self
                .readback
                .get_mapped_range(0..STAMPS)
                .map_err(|e| driver("wgpu::Buffer::get_mapped_range", e))?;
            let stamp = |i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&view[i * 8..i * 8 + 8]);
                u64::from_le_bytes(b)
            };
            stamp(1).wrapping_sub(stamp(0))
        };
        self.readback.unmap();
        Ok(Duration::from_nanos(
            (ticks as f64 * f64::from(self.period)) as u64,
        ))
    }
}

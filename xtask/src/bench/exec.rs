//! Timing one kernel on one backend: buffers uploaded once, compiled outside the timing, then
//! `dispatch_timed` under the measurement policy, and every buffer freed whatever happened.

use super::measure::{measure, Policy, Stats};
use trine_backends::{Backend, BackendError, Binding, BufferHandle, Dispatch};
use trine_ir::{Kernel, ParamValue};

/// Why a measurement did not happen.
#[derive(Debug, thiserror::Error)]
pub enum Skip {
    #[error("buffer {name} of {bytes} bytes exceeds the device's binding limit of {limit}")]
    TooLarge {
        name: String,
        bytes: u64,
        limit: u64,
    },
    #[error("no kernel variant runs here: {0}")]
    NoKernel(String),
    #[error("buffer {0} is bound as slot {1}, which does not come before it")]
    Alias(String, usize),
    #[error("failed: {0}")]
    Failed(#[from] BackendError),
}

/// What a kernel buffer slot is bound to.
pub enum Slot<'a> {
    /// A buffer of its own with these initial contents.
    Data(&'a [u8]),
    /// The buffer of an earlier slot: a second typed view of the same memory, as the executor
    /// binds a matvec's weights once as bytes and once as f16 scales.
    SameAs(usize),
}

/// One dispatch to time: its kernel, grid, parameters and what each buffer slot holds.
pub struct Work<'a> {
    pub kernel: &'a Kernel,
    pub grid: [u32; 3],
    pub params: &'a [ParamValue],
    pub buffers: Vec<(&'a str, Slot<'a>)>,
}

/// Frees what it holds when dropped, so an error mid-way leaks nothing on the device.
struct Buffers<'b> {
    backend: &'b dyn Backend,
    handles: Vec<BufferHandle>,
}

impl Drop for Buffers<'_> {
    fn drop(&mut self) {
        for &h in &self.handles {
            self.backend.free(h);
        }
    }
}

pub fn time(backend: &dyn Backend, work: &Work<'_>, policy: &Policy) -> Result<Stats, Skip> {
    let limit = backend.info().max_binding_bytes;
    for (name, slot) in &work.buffers {
        if let Slot::Data(d) = slot {
            if d.len() as u64 > limit {
                return Err(Skip::TooLarge {
                    name: name.to_string(),
                    bytes: d.len() as u64,
                    limit,
                });
            }
        }
    }
    let program = backend.compile(work.kernel)?;
    let mut held = Buffers {
        backend,
        handles: vec![],
    };
    let mut bindings: Vec<Binding> = vec![];
    for (name, slot) in &work.buffers {
        let binding = match *slot {
            Slot::Data(data) => {
                let h = backend.alloc(data.len() as u64)?;
                held.handles.push(h);
                backend.write(h, 0, data)?;
                Binding {
                    buffer: h,
                    offset: 0,
                    size: data.len() as u64,
                }
            }
            Slot::SameAs(i) => *bindings
                .get(i)
                .ok_or_else(|| Skip::Alias(name.to_string(), i))?,
        };
        bindings.push(binding);
    }
    let d = Dispatch {
        program,
        grid: work.grid,
        bindings: &bindings,
        params: work.params,
    };
    Ok(measure(policy, || backend.dispatch_timed(&d))?)
}

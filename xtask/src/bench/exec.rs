//! Timing one kernel on one backend, or the runtime's own buffer copy, for the copy roof:
//! buffers uploaded once, compiled outside the timing, then `dispatch_timed` (`copy_timed`)
//! under the measurement policy, and every buffer freed whatever happened.

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
    #[error("failed: {0}")]
    Failed(#[from] BackendError),
}

/// One dispatch to time: its kernel, grid, parameters and each buffer's initial contents.
pub struct Work<'a> {
    pub kernel: &'a Kernel,
    pub grid: [u32; 3],
    pub params: &'a [ParamValue],
    pub buffers: Vec<(&'a str, &'a [u8])>,
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
    for (name, d) in &work.buffers {
        if d.len() as u64 > limit {
            return Err(Skip::TooLarge {
                name: name.to_string(),
                bytes: d.len() as u64,
                limit,
            });
        }
    }
    let program = backend.compile(work.kernel)?;
    let mut held = Buffers {
        backend,
        handles: vec![],
    };
    let mut bindings = vec![];
    for (_, data) in &work.buffers {
        let h = backend.alloc(data.len() as u64)?;
        held.handles.push(h);
        backend.write(h, 0, data)?;
        bindings.push(Binding {
            buffer: h,
            offset: 0,
            size: data.len() as u64,
        });
    }
    let d = Dispatch {
        program,
        grid: work.grid,
        bindings: &bindings,
        params: work.params,
    };
    Ok(measure(policy, || backend.dispatch_timed(&d))?)
}

/// The runtime's own copy of `bytes` between two buffers of the device, timed under `policy`.
pub fn time_copy(backend: &dyn Backend, bytes: u64, policy: &Policy) -> Result<Stats, Skip> {
    let mut held = Buffers {
        backend,
        handles: vec![],
    };
    for fill in [0x3fu8, 0] {
        let h = backend.alloc(bytes)?;
        held.handles.push(h);
        backend.write(h, 0, &vec![fill; bytes as usize])?;
    }
    let (src, dst) = (held.handles[0], held.handles[1]);
    Ok(measure(policy, || backend.copy_timed(src, dst, bytes))?)
}

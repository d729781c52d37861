//! Timing one kernel on one backend: buffers uploaded once (the rotated ones in several
//! copies), compiled outside the timing, then `dispatch_timed` under the measurement policy,
//! and every buffer freed whatever happened.

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
    /// As `Data`, uploaded in [`Work::copies`] copies, each run binding the next: a working
    /// set larger than the caches, so that what a real run reads once from memory (a GEMV's
    /// weights) is not served from the cache by the previous repetition.
    Rotated(&'a [u8]),
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
    /// Copies of each [`Slot::Rotated`] buffer (1: the same buffers every run).
    pub copies: usize,
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
        if let Slot::Data(d) | Slot::Rotated(d) = slot {
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
    let mut upload = |data: &[u8]| -> Result<Binding, Skip> {
        let h = backend.alloc(data.len() as u64)?;
        held.handles.push(h);
        backend.write(h, 0, data)?;
        Ok(Binding {
            buffer: h,
            offset: 0,
            size: data.len() as u64,
        })
    };
    // One set of bindings per copy; `Data` buffers are shared by all of them.
    let mut sets: Vec<Vec<Binding>> = vec![];
    for copy in 0..work.copies.max(1) {
        let mut bindings: Vec<Binding> = vec![];
        for (i, (name, slot)) in work.buffers.iter().enumerate() {
            let binding = match *slot {
                Slot::Data(_) if copy > 0 => sets[0][i],
                Slot::Data(data) | Slot::Rotated(data) => upload(data)?,
                Slot::SameAs(i) => *bindings
                    .get(i)
                    .ok_or_else(|| Skip::Alias(name.to_string(), i))?,
            };
            bindings.push(binding);
        }
        sets.push(bindings);
    }
    let mut runs = 0;
    Ok(measure(policy, || {
        let d = Dispatch {
            program,
            grid: work.grid,
            bindings: &sets[runs % sets.len()],
            params: work.params,
        };
        runs += 1;
        backend.dispatch_timed(&d)
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;
    use trine_backends::cpu::CpuBackend;
    use trine_backends::DeviceInfo;
    use trine_ir::{Access, KernelBuilder, Scalar};
    use trine_ops::case::f32_bytes;

    /// The interpreter, noting the buffers each dispatch binds.
    struct Watched {
        inner: CpuBackend,
        bound: Mutex<Vec<Vec<BufferHandle>>>,
    }

    impl Backend for Watched {
        fn name(&self) -> &'static str {
            "watched"
        }
        fn info(&self) -> &DeviceInfo {
            self.inner.info()
        }
        fn alloc(&self, bytes: u64) -> Result<BufferHandle, BackendError> {
            self.inner.alloc(bytes)
        }
        fn free(&self, buffer: BufferHandle) {
            self.inner.free(buffer)
        }
        fn write(&self, b: BufferHandle, offset: u64, data: &[u8]) -> Result<(), BackendError> {
            self.inner.write(b, offset, data)
        }
        fn read(&self, b: BufferHandle, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
            self.inner.read(b, offset, out)
        }
        fn compile(&self, kernel: &Kernel) -> Result<trine_backends::ProgramId, BackendError> {
            self.inner.compile(kernel)
        }
        fn dispatch(&self, d: &Dispatch<'_>) -> Result<(), BackendError> {
            let handles = d.bindings.iter().map(|b| b.buffer).collect();
            self.bound.lock().unwrap().push(handles);
            self.inner.dispatch(d)
        }
        fn synchronize(&self) -> Result<(), BackendError> {
            self.inner.synchronize()
        }
    }

    /// Rotated buffers take the next copy at every run, warm-up included, a view of one
    /// (`SameAs`) follows it, and `Data` buffers stay the same.
    #[test]
    fn rotated_buffers_take_turns() {
        let k = KernelBuilder::new("sum", [4, 1, 1]);
        let w = k.buffer("w", Scalar::F32, Access::Read);
        let v = k.buffer("v", Scalar::F32, Access::Read);
        let y = k.buffer("y", Scalar::F32, Access::Write);
        let i = k.global_id(0);
        k.store(y, i, k.load(w, i) + k.load(v, i));
        let kernel = k.finish();
        let data = f32_bytes(&[1.0; 4]);
        let work = Work {
            kernel: &kernel,
            grid: [1, 1, 1],
            params: &[],
            buffers: vec![
                ("w", Slot::Rotated(&data)),
                ("v", Slot::SameAs(0)),
                ("y", Slot::Data(&data)),
            ],
            copies: 3,
        };
        let backend = Watched {
            inner: CpuBackend::interpreter(),
            bound: Mutex::new(vec![]),
        };
        let policy = Policy {
            warmup: 1,
            min_reps: 6,
            min_time: Duration::ZERO,
            max_reps: 6,
            max_time: Duration::from_secs(60),
        };
        assert_eq!(time(&backend, &work, &policy).unwrap().reps, 6);
        let bound = backend.bound.into_inner().unwrap();
        assert_eq!(bound.len(), 7);
        let copies: Vec<BufferHandle> = bound[..3].iter().map(|b| b[0]).collect();
        assert!(copies[0] != copies[1] && copies[1] != copies[2] && copies[0] != copies[2]);
        for (run, b) in bound.iter().enumerate() {
            assert_eq!(b[0], copies[run % 3], "run {run}");
            assert_eq!(b[1], b[0], "run {run}");
            assert_eq!(b[2], bound[0][2], "run {run}");
        }
    }
}

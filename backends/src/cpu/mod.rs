//! The CPU backend: kernels run by the reference interpreter, workgroups spread over all cores.
//!
//! It is the backend that always works. A compiled CPU lowering replaces the interpreter for
//! speed later; the interpreter stays the reference either way.

mod sysinfo;

use crate::backend::{Backend, Binding, BufferHandle, Dispatch, ProgramId};
use crate::error::BackendError;
use crate::info::{DeviceInfo, DeviceType, MemoryInfo};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use trine_ir::interp::{Launch, View, Words};
use trine_ir::Kernel;

/// Subgroup width the CPU backend reports: the f32 lane count of an AVX2 register, which a
/// compiled lowering will use too. Any power of two is valid for the interpreter.
pub const CPU_SUBGROUP_SIZE: u32 = 8;

pub struct CpuBackend {
    info: DeviceInfo,
    buffers: Mutex<HashMap<u64, Arc<Words>>>,
    programs: Mutex<HashMap<u64, Arc<Kernel>>>,
    next: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in another thread cannot leave these maps half-updated (every update is one
    // insert or remove), so a poisoned lock is still consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl CpuBackend {
    pub fn new() -> CpuBackend {
        let threads = rayon::current_num_threads();
        let ram = sysinfo::total_memory().unwrap_or(0);
        let info = DeviceInfo {
            backend: "cpu".into(),
            name: format!("{} ({threads} threads, interpreter)", sysinfo::cpu_name()),
            vendor: sysinfo::cpu_vendor(),
            device_type: DeviceType::Cpu,
            arch: Some(std::env::consts::ARCH.into()),
            memory: MemoryInfo {
                device_local: ram,
                host_visible: ram,
                unified: true,
                zero_copy: true,
            },
            subgroup_sizes: vec![CPU_SUBGROUP_SIZE],
            subgroup_ops: true,
            f16: true,
            int8: true,
            max_shared_bytes: 64 * 1024,
            max_invocations: 1024,
            max_workgroups: [u32::MAX; 3],
            max_binding_bytes: u64::MAX,
            min_binding_alignment: 4,
            timestamps: false,
            driver: "trine reference interpreter".into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            notes: vec!["kernels are interpreted; a compiled CPU lowering is not built yet".into()],
        };
        CpuBackend {
            info,
            buffers: Mutex::new(HashMap::new()),
            programs: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }

    fn buffer(&self, h: BufferHandle) -> Result<Arc<Words>, BackendError> {
        lock(&self.buffers)
            .get(&h.0)
            .cloned()
            .ok_or(BackendError::UnknownBuffer(h))
    }

    fn check_range(words: &Words, offset: u64, len: u64) -> Result<(), BackendError> {
        match offset.checked_add(len) {
            Some(end) if end <= words.len() => Ok(()),
            _ => Err(BackendError::OutOfRange {
                offset,
                len,
                size: words.len(),
            }),
        }
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend::new()
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn alloc(&self, bytes: u64) -> Result<BufferHandle, BackendError> {
        if bytes > self.info.memory.device_local && self.info.memory.device_local > 0 {
            return Err(BackendError::OutOfMemory { bytes });
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.buffers).insert(id, Arc::new(Words::zeroed(bytes)));
        Ok(BufferHandle(id))
    }

    fn free(&self, buffer: BufferHandle) {
        lock(&self.buffers).remove(&buffer.0);
    }

    fn write(&self, buffer: BufferHandle, offset: u64, data: &[u8]) -> Result<(), BackendError> {
        let w = self.buffer(buffer)?;
        Self::check_range(&w, offset, data.len() as u64)?;
        w.write(offset, data);
        Ok(())
    }

    fn read(&self, buffer: BufferHandle, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        let w = self.buffer(buffer)?;
        Self::check_range(&w, offset, out.len() as u64)?;
        w.read(offset, out);
        Ok(())
    }

    fn compile(&self, kernel: &Kernel) -> Result<ProgramId, BackendError> {
        trine_ir::validate(kernel, &self.info.limits()).map_err(|source| {
            BackendError::Invalid {
                kernel: kernel.name.clone(),
                source,
            }
        })?;
        let hash = trine_ir::kernel_hash(kernel);
        lock(&self.programs)
            .entry(hash)
            .or_insert_with(|| Arc::new(kernel.clone()));
        Ok(ProgramId(hash))
    }

    fn dispatch(&self, d: &Dispatch<'_>) -> Result<(), BackendError> {
        let kernel = lock(&self.programs)
            .get(&d.program.0)
            .cloned()
            .ok_or(BackendError::UnknownProgram(d.program))?;
        let words = d
            .bindings
            .iter()
            .map(|b| {
                let w = self.buffer(b.buffer)?;
                Self::check_range(&w, b.offset, b.size)?;
                Ok(w)
            })
            .collect::<Result<Vec<_>, BackendError>>()?;
        let views: Vec<View> = words
            .iter()
            .zip(d.bindings)
            .map(|(w, b): (&Arc<Words>, &Binding)| View {
                words: w,
                offset: b.offset,
                len: b.size,
            })
            .collect();
        let fault = |source| BackendError::Fault {
            kernel: kernel.name.clone(),
            source,
        };
        let launch = Launch::new(
            &kernel,
            &self.info.limits(),
            d.grid,
            &views,
            d.params,
            CPU_SUBGROUP_SIZE,
        )
        .map_err(|e| BackendError::BadDispatch(e.to_string()))?;
        (0..launch.workgroups())
            .into_par_iter()
            .try_for_each(|n| launch.run_workgroup(launch.workgroup_id(n)))
            .map_err(fault)
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

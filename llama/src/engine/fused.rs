//! A recorded decode step with fewer dispatches: runs of consecutive dispatches that share a
//! workgroup size become one kernel each ([`trine_ir::fuse`]), its phases separated by grid
//! barriers, dispatched over the workgroups the device keeps resident.
//!
//! A decode step on a big GPU is a chain of small dependent kernels, each waiting for the one
//! before: what it costs is mostly each dispatch's launch and drain (about 5 µs in a CUDA
//! graph on an H100, 9 µs in a Vulkan command buffer), not the work. A grid barrier costs the
//! resident workgroups one round of atomics instead.

use super::{Bound, Engine};
use crate::error::ModelError;
use crate::graph::Tensor;
use trine_backends::{Binding, ProgramId};
use trine_ir::fuse::{fuse, FuseStep};
use trine_ir::{Access, BufferDecl, Kernel};

/// Fewest resident workgroups worth fusing for: below this (a device that reports 1, or
/// none) the phases would run on too few workgroups.
pub const FUSE_MIN_RESIDENT: u32 = 16;

impl Engine {
    /// `bound` (on device 0) with each run of two or more consecutive dispatches of one
    /// workgroup size fused into one dispatch over the device's resident workgroups.
    pub(super) fn fuse_runs(&mut self, bound: Vec<Bound>) -> Result<Vec<Bound>, ModelError> {
        let workgroups = self.dev(0).info().resident_workgroups;
        // A kernel with atomic adds stays a dispatch of its own (`trine_ir::fuse` refuses it).
        let size = |b: &Bound| {
            self.placement
                .kernels
                .get(&b.program)
                .filter(|k| k.atomic_buffers().is_empty())
                .map(|k| k.workgroup_size)
        };
        let mut runs: Vec<Vec<Bound>> = vec![];
        for b in bound {
            match runs.last_mut() {
                Some(run) if size(&run[0]).is_some() && size(&run[0]) == size(&b) => run.push(b),
                _ => runs.push(vec![b]),
            }
        }
        let mut out = Vec::with_capacity(runs.len());
        for run in runs {
            if run.len() < 2 {
                out.extend(run);
                continue;
            }
            out.push(self.fuse_run(&run, workgroups)?);
        }
        Ok(out)
    }

    fn fuse_run(&mut self, run: &[Bound], workgroups: u32) -> Result<Bound, ModelError> {
        let kernels: Vec<&Kernel> = run
            .iter()
            .map(|b| &self.placement.kernels[&b.program])
            .collect();
        // One fused buffer per distinct binding (the executor binds whole tensors, so equal
        // handles are equal ranges), read-write where any step writes it or the steps view it
        // as different types.
        let mut bindings: Vec<Binding> = vec![];
        let mut decls: Vec<BufferDecl> = vec![];
        let mut slots: Vec<Vec<u32>> = vec![];
        for (b, k) in run.iter().zip(&kernels) {
            let mut step_slots = vec![];
            for (binding, decl) in b.bindings.iter().zip(&k.buffers) {
                let found = bindings
                    .iter()
                    .zip(&decls)
                    .position(|(x, d)| x.buffer == binding.buffer && d.elem == decl.elem);
                let slot = match found {
                    Some(i) => {
                        if decls[i].access != decl.access {
                            decls[i].access = Access::ReadWrite;
                        }
                        i
                    }
                    None => {
                        bindings.push(*binding);
                        decls.push(BufferDecl {
                            name: format!("b{}", decls.len()),
                            elem: decl.elem,
                            access: decl.access,
                        });
                        decls.len() - 1
                    }
                };
                step_slots.push(slot as u32);
            }
            slots.push(step_slots);
        }
        // A buffer viewed as two element types gets two slots: both must then be read-write
        // or read-only, or a write through one would be hidden from `restrict` reads of the
        // other. The decode graph has none; refuse rather than miscompile.
        for (i, a) in bindings.iter().enumerate() {
            for (j, b) in bindings.iter().enumerate().skip(i + 1) {
                let written = decls[i].access != Access::Read || decls[j].access != Access::Read;
                if a.buffer == b.buffer && written {
                    return Err(ModelError::Fuse(format!(
                        "buffer {:?} is bound as {} and {} in one run",
                        a.buffer, decls[i].elem, decls[j].elem
                    )));
                }
            }
        }
        let steps: Vec<FuseStep> = run
            .iter()
            .zip(&kernels)
            .zip(&slots)
            .map(|((b, k), s)| FuseStep {
                kernel: k,
                grid: b.grid,
                params: &b.params,
                slots: s,
            })
            .collect();
        let build = |workgroups| -> Result<(Kernel, ProgramId, u32), ModelError> {
            let name = format!("fused_{}x{}_g{workgroups}", kernels[0].name, run.len());
            let kernel = fuse(&name, &decls, &steps, workgroups)
                .map_err(|e| ModelError::Fuse(e.to_string()))?;
            let dev = self.dev(0);
            let program = dev.compile(&kernel).map_err(|e| self.err(0, e))?;
            let resident = dev
                .resident_workgroups(program)
                .map_err(|e| self.err(0, e))?;
            Ok((kernel, program, resident))
        };
        // The device's count holds for any kernel; where the backend knows better for the
        // compiled one (CUDA's occupancy), more resident workgroups share each phase's work,
        // if the kernel built for them is as resident (its grid count is only a constant).
        let (mut kernel, mut program, resident) = build(workgroups)?;
        let mut workgroups = workgroups;
        if resident > workgroups {
            let wider = build(resident)?;
            if wider.2 >= resident {
                (kernel, program, _) = wider;
                workgroups = resident;
            }
        }
        bindings.push(self.binding(Tensor::GridSync, 0)?);
        self.placement.kernels.insert(program, kernel);
        Ok(Bound {
            device: 0,
            program,
            grid: [workgroups, 1, 1],
            bindings,
            params: vec![],
        })
    }
}

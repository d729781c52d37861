//! Fusing a sequence of dependent dispatches into one kernel whose phases are separated by
//! grid barriers ([`Stmt::GridBarrier`]).
//!
//! Where a chain of small kernels is bound by launch latency (a decode step on a big GPU:
//! each dispatch waits for the previous one, and each costs microseconds to start and drain),
//! one dispatch of a fixed number of resident workgroups runs them all: each step's grid
//! becomes *virtual* workgroups that the resident ones take in turn (`v = workgroup_id;
//! v < total; v += workgroups`), and a grid barrier stands where a dispatch boundary was.
//!
//! Each step keeps its own declarations, renamed `s{i}_…`; its builtins are rewritten to the
//! virtual workgroup (`WorkgroupId`, `GlobalId`, `NumWorkgroups`), and its parameters become
//! literals, since a recorded dispatch freezes them anyway. The fused kernel means exactly what
//! the dispatches in sequence mean; the interpreter checks that for every fused kernel in the
//! tests.

use crate::kernel::*;
use crate::types::{Access, Literal, ParamValue, Scalar};
use thiserror::Error;

/// One dispatch to fuse: a kernel, the grid it was dispatched over, its parameter values, and
/// for each of its buffers the index of the fused kernel's buffer that binds the same memory.
#[derive(Clone, Debug)]
pub struct FuseStep<'a> {
    pub kernel: &'a Kernel,
    pub grid: [u32; 3],
    pub params: &'a [ParamValue],
    pub slots: &'a [u32],
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FuseError {
    #[error("nothing to fuse")]
    Empty,
    #[error("workgroups must be at least 1")]
    NoWorkgroups,
    #[error("step {step} ({kernel}) has workgroup size {found:?}, the first step {expected:?}")]
    WorkgroupSize {
        step: usize,
        kernel: String,
        expected: [u32; 3],
        found: [u32; 3],
    },
    #[error("step {step} ({kernel}) already has grid barriers")]
    AlreadyFused { step: usize, kernel: String },
    #[error("step {step} ({kernel}) maps {found} buffers, it declares {expected}")]
    SlotCount {
        step: usize,
        kernel: String,
        expected: usize,
        found: usize,
    },
    #[error(
        "step {step} ({kernel}) buffer {name:?} ({elem} {access}) does not fit fused buffer {slot}"
    )]
    Slot {
        step: usize,
        kernel: String,
        name: String,
        elem: Scalar,
        access: &'static str,
        slot: u32,
    },
    #[error("step {step} ({kernel}) takes parameters {expected:?}, given {found:?}")]
    Params {
        step: usize,
        kernel: String,
        expected: Vec<Scalar>,
        found: Vec<Scalar>,
    },
    #[error("step {step} ({kernel}) uses matrix tiles, which a fused kernel does not carry")]
    Tiles { step: usize, kernel: String },
    #[error(
        "step {step} ({kernel}) adds atomically to a buffer, which a later phase could not read"
    )]
    Atomics { step: usize, kernel: String },
    #[error("step {step} ({kernel}) copies asynchronously, which a fused kernel does not carry")]
    AsyncCopy { step: usize, kernel: String },
    #[error("step {step} ({kernel}) has an empty grid {grid:?}")]
    EmptyGrid {
        step: usize,
        kernel: String,
        grid: [u32; 3],
    },
}

/// Fuses `steps`, in order, into one kernel `name` for a dispatch of exactly `workgroups`
/// workgroups. Its buffers are `buffers` followed by the grid barriers' sync buffer (two
/// zeroed words at dispatch), bound by the caller.
pub fn fuse(
    name: &str,
    buffers: &[BufferDecl],
    steps: &[FuseStep<'_>],
    workgroups: u32,
) -> Result<Kernel, FuseError> {
    let first = steps.first().ok_or(FuseError::Empty)?;
    if workgroups == 0 {
        return Err(FuseError::NoWorkgroups);
    }
    let size = first.kernel.workgroup_size;
    let mut out = Kernel {
        name: name.to_string(),
        workgroup_size: size,
        capabilities: Capabilities {
            subgroup: false,
            grid_sync: true,
            tiles: false,
            subgroup_width: None,
            async_copy: false,
            group_mma: false,
            float_atomics: false,
        },
        buffers: buffers.to_vec(),
        params: vec![],
        shared: vec![],
        vars: vec![],
        tiles: vec![],
        group_accs: vec![],
        exprs: vec![],
        body: vec![],
        // A fused kernel has grid barriers and never starts early.
        settled: vec![],
    };
    let sync = BufferId(buffers.len() as u32);
    out.buffers.push(BufferDecl {
        name: "grid_sync".into(),
        elem: Scalar::U32,
        access: Access::ReadWrite,
    });
    for (i, step) in steps.iter().enumerate() {
        check(i, step, size, buffers)?;
        if i > 0 {
            out.body.push(Stmt::GridBarrier { sync, workgroups });
        }
        let phase = Phase::emit(&mut out, i, step, workgroups);
        out.body.extend(phase);
    }
    Ok(out)
}

fn check(
    i: usize,
    step: &FuseStep<'_>,
    size: [u32; 3],
    buffers: &[BufferDecl],
) -> Result<(), FuseError> {
    let k = step.kernel;
    let kernel = || k.name.clone();
    if k.workgroup_size != size {
        return Err(FuseError::WorkgroupSize {
            step: i,
            kernel: kernel(),
            expected: size,
            found: k.workgroup_size,
        });
    }
    if !k.tiles.is_empty() || !k.group_accs.is_empty() {
        return Err(FuseError::Tiles {
            step: i,
            kernel: kernel(),
        });
    }
    if !k.atomic_buffers().is_empty() {
        return Err(FuseError::Atomics {
            step: i,
            kernel: kernel(),
        });
    }
    if k.capabilities.async_copy {
        return Err(FuseError::AsyncCopy {
            step: i,
            kernel: kernel(),
        });
    }
    if k.grid_sync().is_some() {
        return Err(FuseError::AlreadyFused {
            step: i,
            kernel: kernel(),
        });
    }
    if step.grid.contains(&0) {
        return Err(FuseError::EmptyGrid {
            step: i,
            kernel: kernel(),
            grid: step.grid,
        });
    }
    if step.slots.len() != k.buffers.len() {
        return Err(FuseError::SlotCount {
            step: i,
            kernel: kernel(),
            expected: k.buffers.len(),
            found: step.slots.len(),
        });
    }
    for (decl, &slot) in k.buffers.iter().zip(step.slots) {
        let fits = buffers.get(slot as usize).is_some_and(|b| {
            b.elem == decl.elem && (b.access == decl.access || b.access == Access::ReadWrite)
        });
        if !fits {
            return Err(FuseError::Slot {
                step: i,
                kernel: kernel(),
                name: decl.name.clone(),
                elem: decl.elem,
                access: decl.access.name(),
                slot,
            });
        }
    }
    let expected: Vec<Scalar> = k.params.iter().map(|p| p.ty).collect();
    let found: Vec<Scalar> = step.params.iter().map(|p| p.ty()).collect();
    if expected != found {
        return Err(FuseError::Params {
            step: i,
            kernel: kernel(),
            expected,
            found,
        });
    }
    Ok(())
}

/// One step's code moved into the fused kernel.
struct Phase<'o, 's> {
    out: &'o mut Kernel,
    step: &'s FuseStep<'s>,
    /// The step's expression ids in the fused kernel.
    exprs: Vec<ExprId>,
    /// Expressions of the step that the phase computes once at the top of each virtual
    /// workgroup (rewritten builtins): their own `Let`s are dropped.
    hoisted: Vec<bool>,
    var_base: u32,
    shared_base: u32,
}

impl<'o, 's> Phase<'o, 's> {
    /// The loop over virtual workgroups that runs `step`'s body (the `Let`s of its bounds,
    /// then the loop).
    fn emit(out: &'o mut Kernel, i: usize, step: &'s FuseStep<'s>, workgroups: u32) -> Block {
        let k = step.kernel;
        out.capabilities.subgroup |= k.capabilities.subgroup;
        let var_base = out.vars.len() as u32;
        out.vars.extend(k.vars.iter().map(|v| VarDecl {
            name: format!("s{i}_{}", v.name),
            ty: v.ty,
        }));
        let shared_base = out.shared.len() as u32;
        out.shared.extend(k.shared.iter().map(|s| SharedDecl {
            name: format!("s{i}_{}", s.name),
            ..s.clone()
        }));
        let virtual_wg = VarId(out.vars.len() as u32);
        out.vars.push(VarDecl {
            name: format!("s{i}_workgroup"),
            ty: Scalar::U32,
        });
        let mut phase = Phase {
            out,
            step,
            exprs: vec![],
            hoisted: vec![false; k.exprs.len()],
            var_base,
            shared_base,
        };
        let mut body = phase.virtual_ids(virtual_wg);
        body.extend(phase.zero_vars());
        phase.translate_exprs();
        body.extend(phase.block(&k.body));
        if !k.shared.is_empty() {
            // The next virtual workgroup reuses the shared arrays.
            body.push(Stmt::Barrier);
        }
        let total = step.grid.iter().product::<u32>();
        let start = phase.push(Expr::Builtin(Builtin::WorkgroupId(0)));
        let end = phase.push(Expr::Literal(Literal::U32(total)));
        vec![
            Stmt::Let(start),
            Stmt::Let(end),
            Stmt::Loop {
                var: virtual_wg,
                start,
                end,
                step: workgroups,
                body,
            },
        ]
    }

    fn push(&mut self, e: Expr) -> ExprId {
        self.out.exprs.push(e);
        ExprId(self.out.exprs.len() as u32 - 1)
    }

    /// `e`, evaluated by a `Let` appended to `lets`.
    fn let_(&mut self, lets: &mut Block, e: Expr) -> ExprId {
        let id = self.push(e);
        lets.push(Stmt::Let(id));
        id
    }

    fn u32_(&mut self, lets: &mut Block, x: u32) -> ExprId {
        self.let_(lets, Expr::Literal(Literal::U32(x)))
    }

    fn binary(&mut self, lets: &mut Block, op: BinaryOp, lhs: ExprId, rhs: ExprId) -> ExprId {
        self.let_(lets, Expr::Binary { op, lhs, rhs })
    }

    /// Computes the virtual workgroup's ids at the top of its iteration and maps the step's
    /// builtins that depend on it; returns the `Let`s that compute them.
    fn virtual_ids(&mut self, v: VarId) -> Block {
        let k = self.step.kernel;
        let [gx, gy, _] = self.step.grid;
        let mut lets = vec![];
        let linear = self.let_(&mut lets, Expr::Var(v));
        let gx_l = self.u32_(&mut lets, gx);
        let gy_l = self.u32_(&mut lets, gy);
        let gxy_l = self.u32_(&mut lets, gx * gy);
        let x = self.binary(&mut lets, BinaryOp::Rem, linear, gx_l);
        let xy = self.binary(&mut lets, BinaryOp::Div, linear, gx_l);
        let y = self.binary(&mut lets, BinaryOp::Rem, xy, gy_l);
        let z = self.binary(&mut lets, BinaryOp::Div, linear, gxy_l);
        let ids = [x, y, z];
        let mut mapped = vec![None; k.exprs.len()];
        for (slot, e) in mapped.iter_mut().zip(&k.exprs) {
            *slot = match *e {
                Expr::Builtin(Builtin::WorkgroupId(a)) => Some(ids[a as usize]),
                Expr::Builtin(Builtin::NumWorkgroups(a)) => {
                    Some(self.u32_(&mut lets, self.step.grid[a as usize]))
                }
                Expr::Builtin(Builtin::GlobalId(a)) => {
                    let local = self.let_(&mut lets, Expr::Builtin(Builtin::LocalId(a)));
                    let size = self.u32_(&mut lets, k.workgroup_size[a as usize]);
                    let base = self.binary(&mut lets, BinaryOp::Mul, ids[a as usize], size);
                    Some(self.binary(&mut lets, BinaryOp::Add, base, local))
                }
                _ => None,
            };
        }
        self.hoisted = mapped.iter().map(Option::is_some).collect();
        self.exprs = mapped
            .into_iter()
            .map(|m| m.unwrap_or(ExprId(u32::MAX)))
            .collect();
        lets
    }

    /// Private variables start at zero in every workgroup; a resident workgroup taking its
    /// next virtual one must reset them.
    fn zero_vars(&mut self) -> Block {
        let mut stmts = vec![];
        for (n, v) in self.step.kernel.vars.iter().enumerate() {
            let zero = match v.ty {
                Scalar::F32 => Literal::F32(0),
                Scalar::F16 => Literal::F16(0),
                Scalar::I32 => Literal::I32(0),
                Scalar::Bool => Literal::Bool(false),
                _ => Literal::U32(0),
            };
            let value = self.let_(&mut stmts, Expr::Literal(zero));
            stmts.push(Stmt::Assign {
                var: VarId(n as u32 + self.var_base),
                value,
            });
        }
        stmts
    }

    /// Copies the step's expressions that are not hoisted, with their operands renumbered.
    fn translate_exprs(&mut self) {
        let k = self.step.kernel;
        let base = self.out.exprs.len() as u32;
        let mut next = base;
        for (n, h) in self.hoisted.iter().enumerate() {
            if !h {
                self.exprs[n] = ExprId(next);
                next += 1;
            }
        }
        for (n, e) in k.exprs.iter().enumerate() {
            if !self.hoisted[n] {
                let t = self.expr(e);
                self.out.exprs.push(t);
            }
        }
    }

    fn id(&self, e: ExprId) -> ExprId {
        self.exprs[e.0 as usize]
    }

    fn slot(&self, b: BufferId) -> BufferId {
        BufferId(self.step.slots[b.0 as usize])
    }

    fn expr(&self, e: &Expr) -> Expr {
        let id = |e: ExprId| self.id(e);
        match *e {
            Expr::Param(p) => Expr::Literal(match self.step.params[p.0 as usize] {
                ParamValue::F32(v) => Literal::F32(v.to_bits()),
                ParamValue::I32(v) => Literal::I32(v),
                ParamValue::U32(v) => Literal::U32(v),
            }),
            Expr::Literal(_) | Expr::Builtin(_) => e.clone(),
            Expr::Var(v) => Expr::Var(VarId(v.0 + self.var_base)),
            Expr::Load { buffer, index } => Expr::Load {
                buffer: self.slot(buffer),
                index: id(index),
            },
            Expr::LoadShared { array, index } => Expr::LoadShared {
                array: SharedId(array.0 + self.shared_base),
                index: id(index),
            },
            Expr::Unary { op, arg } => Expr::Unary { op, arg: id(arg) },
            Expr::Binary { op, lhs, rhs } => Expr::Binary {
                op,
                lhs: id(lhs),
                rhs: id(rhs),
            },
            Expr::Fma { a, b, c } => Expr::Fma {
                a: id(a),
                b: id(b),
                c: id(c),
            },
            Expr::Select {
                cond,
                accept,
                reject,
            } => Expr::Select {
                cond: id(cond),
                accept: id(accept),
                reject: id(reject),
            },
            Expr::Cast { arg, to } => Expr::Cast { arg: id(arg), to },
            Expr::Bitcast { arg, to } => Expr::Bitcast { arg: id(arg), to },
            Expr::Subgroup { op, arg } => Expr::Subgroup {
                op: match op {
                    SubgroupOp::ShuffleXor(m) => SubgroupOp::ShuffleXor(id(m)),
                    other => other,
                },
                arg: id(arg),
            },
        }
    }

    fn var(&self, v: VarId) -> VarId {
        VarId(v.0 + self.var_base)
    }

    fn block(&self, block: &[Stmt]) -> Block {
        block
            .iter()
            .filter(|s| !matches!(s, Stmt::Let(e) if self.hoisted[e.0 as usize]))
            .map(|s| match s {
                Stmt::Let(e) => Stmt::Let(self.id(*e)),
                Stmt::Assign { var, value } => Stmt::Assign {
                    var: self.var(*var),
                    value: self.id(*value),
                },
                Stmt::Store {
                    buffer,
                    index,
                    value,
                } => Stmt::Store {
                    buffer: self.slot(*buffer),
                    index: self.id(*index),
                    value: self.id(*value),
                },
                Stmt::AtomicAdd {
                    buffer,
                    index,
                    value,
                } => Stmt::AtomicAdd {
                    buffer: self.slot(*buffer),
                    index: self.id(*index),
                    value: self.id(*value),
                },
                Stmt::Prefetch { buffer, index } => Stmt::Prefetch {
                    buffer: self.slot(*buffer),
                    index: self.id(*index),
                },
                Stmt::StoreShared {
                    array,
                    index,
                    value,
                } => Stmt::StoreShared {
                    array: SharedId(array.0 + self.shared_base),
                    index: self.id(*index),
                    value: self.id(*value),
                },
                Stmt::If {
                    cond,
                    then,
                    otherwise,
                } => Stmt::If {
                    cond: self.id(*cond),
                    then: self.block(then),
                    otherwise: self.block(otherwise),
                },
                Stmt::Loop {
                    var,
                    start,
                    end,
                    step,
                    body,
                } => Stmt::Loop {
                    var: self.var(*var),
                    start: self.id(*start),
                    end: self.id(*end),
                    step: *step,
                    body: self.block(body),
                },
                // A step has no grid barrier, no tiles and no copies (checked), so this
                // is a workgroup barrier.
                Stmt::Barrier
                | Stmt::GridBarrier { .. }
                | Stmt::Tile(_)
                | Stmt::Copy(_)
                | Stmt::Group(_) => s.clone(),
            })
            .collect()
    }
}

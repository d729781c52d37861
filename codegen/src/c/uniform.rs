//! Which values are the same for every invocation of a workgroup (workgroup-uniform).
//!
//! Fission runs an `If` or `Loop` that contains a barrier or a subgroup operation once per
//! workgroup rather than once per invocation. When its condition or bounds are uniform it takes
//! invocation 0's values and runs plain C control flow; otherwise it tracks which invocations
//! are active in a mask, as the interpreter does. This pass decides which case applies.
//!
//! The analysis is conservative: a value counts as uniform only when every invocation computes
//! it from the same inputs in uniform control flow. Two assumptions, both of kernels that are
//! valid by the interpreter's rules:
//! - a shared-memory load at a uniform index is uniform: a store to that element between two
//!   invocations' loads, with no barrier between, is a race the interpreter reports;
//! - a load from a read-only buffer at a uniform index is uniform (no dispatch writes it).

use trine_ir::{Builtin, Expr, ExprId, Kernel, Stmt};

/// The result: per expression and per private variable, whether it is workgroup-uniform.
pub(super) struct Uniformity {
    exprs: Vec<bool>,
    vars: Vec<bool>,
}

impl Uniformity {
    pub(super) fn of(kernel: &Kernel) -> Uniformity {
        // Start from "everything uniform" and demote until nothing changes: a variable's
        // assignments may come after its reads (loop-carried), so one pass is not enough. Each
        // round only demotes, so the loop ends within (variables + 1) rounds.
        let mut u = Uniformity {
            exprs: vec![false; kernel.exprs.len()],
            vars: vec![true; kernel.vars.len()],
        };
        while u.round(kernel, &kernel.body, true) {}
        u
    }

    pub(super) fn expr(&self, e: ExprId) -> bool {
        self.exprs[e.0 as usize]
    }

    /// One pass over `block`; whether any variable was demoted.
    fn round(&mut self, k: &Kernel, block: &[Stmt], control: bool) -> bool {
        let mut changed = false;
        for s in block {
            match s {
                Stmt::Let(id) => self.exprs[id.0 as usize] = self.compute(k, *id),
                Stmt::Assign { var, value } => {
                    if !(control && self.expr(*value)) {
                        changed |= std::mem::replace(&mut self.vars[var.0 as usize], false);
                    }
                }
                Stmt::If {
                    cond,
                    then,
                    otherwise,
                } => {
                    let c = control && self.expr(*cond);
                    changed |= self.round(k, then, c);
                    changed |= self.round(k, otherwise, c);
                }
                Stmt::Loop {
                    var,
                    start,
                    end,
                    body,
                    ..
                } => {
                    let c = control && self.expr(*start) && self.expr(*end);
                    if !c {
                        changed |= std::mem::replace(&mut self.vars[var.0 as usize], false);
                    }
                    changed |= self.round(k, body, c);
                }
                Stmt::Store { .. }
                | Stmt::StoreShared { .. }
                | Stmt::StoreSharedPair { .. }
                | Stmt::Prefetch { .. }
                | Stmt::Barrier
                | Stmt::Tile(_)
                | Stmt::Copy(_)
                | Stmt::Group(_) => {}
            }
        }
        changed
    }

    /// Whether expression `id` is uniform, given its operands (evaluated at earlier Lets).
    fn compute(&self, k: &Kernel, id: ExprId) -> bool {
        let u = |e: ExprId| self.expr(e);
        match *k.expr(id) {
            Expr::Literal(_) | Expr::Param(_) => true,
            Expr::Builtin(b) => matches!(
                b,
                Builtin::WorkgroupId(_) | Builtin::NumWorkgroups(_) | Builtin::SubgroupSize
            ),
            Expr::Var(v) => self.vars[v.0 as usize],
            Expr::Load { buffer, index } => {
                !k.buffers[buffer.0 as usize].access.can_write() && u(index)
            }
            Expr::LoadLane { buffer, quad, .. } => {
                !k.buffers[buffer.0 as usize].access.can_write() && u(quad)
            }
            Expr::LoadShared { index, .. } => u(index),
            Expr::Unary { arg, .. } | Expr::Cast { arg, .. } | Expr::Bitcast { arg, .. } => u(arg),
            Expr::Binary { lhs, rhs, .. } => u(lhs) && u(rhs),
            Expr::Fma { a, b, c } => u(a) && u(b) && u(c),
            Expr::Select {
                cond,
                accept,
                reject,
            } => u(cond) && u(accept) && u(reject),
            // Reductions are uniform per subgroup, not per workgroup.
            Expr::Subgroup { .. } => false,
        }
    }
}

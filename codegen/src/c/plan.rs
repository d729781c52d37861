//! Loop fission: the kernel body as a tree of workgroup-level steps.
//!
//! A run of statements with no synchronisation inside becomes a [`Region`], which the C code
//! runs as one loop over the workgroup's invocations. Synchronisation points split runs: a
//! barrier (nothing to emit: the next region starts after every invocation finished this
//! one), a subgroup operation (it reads other invocations' values, so it runs between regions
//! over all of them), and an `If` or `Loop` with either inside, which runs once per workgroup
//! with its body planned the same way. A sum of packed dot products ([`super::dots`]) splits
//! runs too where every invocation reaches it, to run over all of them at once.
//!
//! A `Loop` whose bounds are workgroup-uniform (outside masked control flow) also runs once per
//! workgroup, synchronising or not: the loops over the invocations then sit inside it, with
//! bodies of straight-line code that GCC vectorises across invocations. Left inside a region,
//! each invocation would run the whole loop in turn in scalar code (a quantized matvec's loop
//! over a row's blocks, an attention's loop over positions). So does an `If` with a uniform
//! condition: the code after it gets a region of its own, and a branch not taken costs
//! nothing, where inside a region every invocation would test it and the region could not
//! be vectorised. A `Prefetch` of a uniform element runs once per workgroup too: inside a
//! region, GCC vectorises no loop that calls `__builtin_prefetch`.

use super::dots::DotSum;
use super::uniform::Uniformity;
use std::collections::HashMap;
use trine_ir::{BufferId, Expr, ExprId, Kernel, Stmt, SubgroupOp, VarId};

/// A run of statements without synchronisation, run for every active invocation in turn.
pub(super) struct Region<'k> {
    /// Index in [`Plan::regions`].
    pub id: usize,
    pub stmts: &'k [Stmt],
    /// Whether a workgroup-level loop encloses it (it then runs more than once per workgroup).
    pub in_loop: bool,
}

/// One workgroup-level step.
pub(super) enum Node {
    /// Runs region `.0`.
    Region(usize),
    /// `let id = op(arg)` across each subgroup.
    Subgroup {
        id: ExprId,
        op: SubgroupOp,
        arg: ExprId,
    },
    /// `let id = ` the sum of packed dot products `sums[id]`, over every invocation.
    Dots { id: ExprId },
    /// An `If` with synchronisation inside. `uniform`: its condition is workgroup-uniform and
    /// every invocation is active here, so invocation 0's condition decides; otherwise each
    /// branch runs under a mask of the invocations that take it.
    If {
        cond: ExprId,
        uniform: bool,
        then: Vec<Node>,
        otherwise: Vec<Node>,
    },
    /// A hint that element `index` (workgroup-uniform) of `buffer` is read soon.
    Prefetch { buffer: BufferId, index: ExprId },
    /// A `Loop` with synchronisation inside; `uniform` as for `If`. A masked loop runs while
    /// any invocation is still iterating.
    Loop {
        var: VarId,
        start: ExprId,
        end: ExprId,
        step: u32,
        uniform: bool,
        body: Vec<Node>,
    },
}

pub(super) struct Plan<'k> {
    pub regions: Vec<Region<'k>>,
    pub body: Vec<Node>,
    /// The sums of packed dot products that may run between regions, by expression.
    pub sums: HashMap<ExprId, DotSum>,
}

impl<'k> Plan<'k> {
    pub(super) fn of(
        kernel: &'k Kernel,
        uniform: &Uniformity,
        sums: HashMap<ExprId, DotSum>,
    ) -> Plan<'k> {
        let mut p = Planner {
            k: kernel,
            u: uniform,
            sums: &sums,
            regions: vec![],
        };
        let body = p.block(&kernel.body, false, false);
        Plan {
            regions: p.regions,
            body,
            sums,
        }
    }
}

/// Whether `s` holds a barrier or a subgroup operation (tile operations are collective over
/// a subgroup; the C lowering refuses them, and asynchronous copies).
pub(super) fn synchronises(k: &Kernel, s: &Stmt) -> bool {
    match s {
        Stmt::Barrier | Stmt::Tile(_) | Stmt::Copy(_) | Stmt::Group(_) => true,
        Stmt::Let(e) => matches!(k.expr(*e), Expr::Subgroup { .. }),
        Stmt::If {
            then, otherwise, ..
        } => then.iter().chain(otherwise).any(|s| synchronises(k, s)),
        Stmt::Loop { body, .. } => body.iter().any(|s| synchronises(k, s)),
        Stmt::Assign { .. }
        | Stmt::Store { .. }
        | Stmt::StoreShared { .. }
        | Stmt::StoreSharedPair { .. }
        | Stmt::Prefetch { .. } => false,
    }
}

struct Planner<'k, 'u> {
    k: &'k Kernel,
    u: &'u Uniformity,
    sums: &'u HashMap<ExprId, DotSum>,
    regions: Vec<Region<'k>>,
}

impl<'k> Planner<'k, '_> {
    /// Plans `block`; `masked` says whether only some invocations may be active here.
    fn block(&mut self, block: &'k [Stmt], in_loop: bool, masked: bool) -> Vec<Node> {
        let mut nodes = vec![];
        let mut start = 0;
        for (i, s) in block.iter().enumerate() {
            if !synchronises(self.k, s) && !self.hoisted(s, masked) {
                continue;
            }
            self.region(&block[start..i], in_loop, &mut nodes);
            start = i + 1;
            match s {
                Stmt::Let(id) => match *self.k.expr(*id) {
                    Expr::Subgroup { op, arg } => nodes.push(Node::Subgroup { id: *id, op, arg }),
                    _ => nodes.push(Node::Dots { id: *id }),
                },
                Stmt::If {
                    cond,
                    then,
                    otherwise,
                } => {
                    let uniform = !masked && self.u.expr(*cond);
                    nodes.push(Node::If {
                        cond: *cond,
                        uniform,
                        then: self.block(then, in_loop, !uniform),
                        otherwise: self.block(otherwise, in_loop, !uniform),
                    });
                }
                Stmt::Prefetch { buffer, index } => nodes.push(Node::Prefetch {
                    buffer: *buffer,
                    index: *index,
                }),
                Stmt::Loop {
                    var,
                    start: from,
                    end,
                    step,
                    body,
                } => {
                    let uniform = !masked && self.u.expr(*from) && self.u.expr(*end);
                    nodes.push(Node::Loop {
                        var: *var,
                        start: *from,
                        end: *end,
                        step: *step,
                        uniform,
                        body: self.block(body, true, !uniform),
                    });
                }
                // A barrier only ends the region before it.
                _ => {}
            }
        }
        self.region(&block[start..], in_loop, &mut nodes);
        nodes
    }

    /// Whether `s` is a loop with workgroup-uniform bounds, an `If` with a uniform condition,
    /// a prefetch of a uniform element or a sum of dot products, in unmasked control flow.
    fn hoisted(&self, s: &Stmt, masked: bool) -> bool {
        match s {
            Stmt::Let(id) => !masked && self.sums.contains_key(id),
            Stmt::Prefetch { index, .. } => !masked && self.u.expr(*index),
            Stmt::Loop { start, end, .. } => !masked && self.u.expr(*start) && self.u.expr(*end),
            Stmt::If { cond, .. } => !masked && self.u.expr(*cond),
            _ => false,
        }
    }

    fn region(&mut self, stmts: &'k [Stmt], in_loop: bool, nodes: &mut Vec<Node>) {
        if stmts.is_empty() {
            return;
        }
        let id = self.regions.len();
        self.regions.push(Region { id, stmts, in_loop });
        nodes.push(Node::Region(id));
    }
}

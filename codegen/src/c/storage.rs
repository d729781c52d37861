//! Where each value lives in the C code, decided from where fission put its definition and
//! its uses.
//!
//! - An expression used only in the region that evaluates it is a `const` local of that
//!   region's loop body, as in the HIP text. One used in another region, or by the
//!   workgroup-level steps between regions, lives across a synchronisation point: it gets a
//!   per-invocation array `w_eN[WG]`, which its region fills and later regions read. Cheap
//!   pure expressions of literals, parameters and builtins (`lid`, `wg_x * 64u + lid`) are
//!   computed again in each region that uses them instead: an array would cost a store and a
//!   load, and would hide from the compiler that an index is contiguous in `lid`. A
//!   workgroup-uniform value that is not cheap (a row's base from a division, a scale loaded
//!   at a uniform index) is one scalar `u_eN` per workgroup instead of an array: every
//!   invocation writes the same value, and a loop over invocations that reads it sees a
//!   loop-invariant scalar, so that GCC vectorises its loads as contiguous, not as gathers.
//! - A private variable is a local of one region when that is the only place it is used and
//!   its value cannot flow from one run of the region to the next (the region runs once per
//!   workgroup, or writes the variable before anything reads it). A variable that only
//!   workgroup-level uniform loops write is one scalar per workgroup. Every other variable is a
//!   per-invocation array `w_v_NAME[WG]`, zeroed for each workgroup as the IR requires.

use super::plan::{Node, Plan, Region};
use super::uniform::Uniformity;
use std::collections::BTreeSet;
use trine_ir::{BinaryOp, CopyOp, Expr, ExprId, Kernel, Stmt, SubgroupOp, TileOp, UnaryOp, VarId};

/// Where a value is defined or used: inside a region, or in the workgroup-level steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Site {
    Region(usize),
    Workgroup,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum VarClass {
    /// Never read or written: not declared.
    Unused,
    /// A local of the one region that uses it.
    Local,
    /// One scalar per workgroup, written only by uniform workgroup-level loops.
    Uniform,
    /// A per-invocation array.
    Array,
}

/// Where an expression's value lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Place {
    /// A `const` local of the region that defines it (or recomputed where used).
    Local,
    /// A per-invocation array `w_eN[WG]`.
    Array,
    /// One scalar `u_eN` per workgroup: a workgroup-uniform value.
    Scalar,
}

/// How a region gets a value that another part of the kernel defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Import {
    /// Read from its per-invocation array or its scalar.
    Load(ExprId),
    /// Computed again (its operands come first).
    Recompute(ExprId),
}

/// What a region's loop body must bring in from the arrays and write back to them.
#[derive(Default)]
pub(super) struct RegionIo {
    /// Expressions the region uses but does not define, operands before their users.
    pub imports: Vec<Import>,
    /// Array variables the region reads or writes, in order.
    pub vars: Vec<VarId>,
    /// Array variables the region writes, in order.
    pub writes: Vec<VarId>,
    /// Local variables of the region, in order.
    pub locals: Vec<VarId>,
}

pub(super) struct Storage {
    places: Vec<Place>,
    vars: Vec<VarClass>,
    pub regions: Vec<RegionIo>,
}

impl Storage {
    pub(super) fn place(&self, e: ExprId) -> Place {
        self.places[e.0 as usize]
    }

    pub(super) fn var(&self, v: VarId) -> VarClass {
        self.vars[v.0 as usize]
    }

    /// The expressions that live in `place`, in order.
    pub(super) fn exprs_in(&self, place: Place) -> impl Iterator<Item = ExprId> + '_ {
        (0..self.places.len() as u32)
            .map(ExprId)
            .filter(move |&e| self.place(e) == place)
    }

    pub(super) fn of(k: &Kernel, plan: &Plan<'_>, uniform: &Uniformity) -> Storage {
        let mut c = Collector {
            k,
            def: vec![Site::Workgroup; k.exprs.len()],
            uses: vec![vec![]; k.exprs.len()],
            var_sites: vec![vec![]; k.vars.len()],
            uniform_loop_write: vec![false; k.vars.len()],
            other_write: vec![false; k.vars.len()],
        };
        for r in &plan.regions {
            c.region_block(r.id, r.stmts);
        }
        c.nodes(&plan.body, plan);

        let vars: Vec<VarClass> = (0..k.vars.len())
            .map(|i| c.class(VarId(i as u32), &plan.regions))
            .collect();
        let mut cheap = vec![None; k.exprs.len()];
        // Subgroup results and dot sums are written by the workgroup-level steps, so always to
        // an array, and the workgroup-level steps read everything they use from arrays.
        let places: Vec<Place> = (0..k.exprs.len())
            .map(|i| {
                let e = ExprId(i as u32);
                let elsewhere = c.uses[i].iter().any(|&u| u != c.def[i]);
                let shared = c.def[i] == Site::Workgroup
                    || c.uses[i].contains(&Site::Workgroup)
                    || (elsewhere && !recomputable(k, &vars, e, &mut cheap));
                match shared {
                    false => Place::Local,
                    true if uniform.expr(e) => Place::Scalar,
                    true => Place::Array,
                }
            })
            .collect();

        let mut regions: Vec<RegionIo> = plan.regions.iter().map(|_| RegionIo::default()).collect();
        let mut external: Vec<BTreeSet<ExprId>> = vec![BTreeSet::new(); regions.len()];
        for (i, uses) in c.uses.iter().enumerate() {
            for &u in uses {
                if let Site::Region(r) = u {
                    if c.def[i] != u {
                        external[r].insert(ExprId(i as u32));
                    }
                }
            }
        }
        for (io, wanted) in regions.iter_mut().zip(&external) {
            let mut seen = BTreeSet::new();
            for &e in wanted {
                import(k, e, &places, &mut seen, &mut io.imports);
            }
        }
        for (i, sites) in c.var_sites.iter().enumerate() {
            let v = VarId(i as u32);
            for &(site, write) in sites {
                let Site::Region(r) = site else { continue };
                // Variables are visited in order, so each list stays sorted and a repeat can
                // only be its last entry.
                let add = |list: &mut Vec<VarId>| {
                    if list.last() != Some(&v) {
                        list.push(v);
                    }
                };
                let io = &mut regions[r];
                match vars[i] {
                    VarClass::Array => {
                        add(&mut io.vars);
                        if write {
                            add(&mut io.writes);
                        }
                    }
                    VarClass::Local => add(&mut io.locals),
                    VarClass::Uniform | VarClass::Unused => {}
                }
            }
        }
        Storage {
            places,
            vars,
            regions,
        }
    }
}

/// Appends how to get `e` (and first its operands, where it is recomputed) to `out`.
fn import(
    k: &Kernel,
    e: ExprId,
    places: &[Place],
    seen: &mut BTreeSet<ExprId>,
    out: &mut Vec<Import>,
) {
    if !seen.insert(e) {
        return;
    }
    if places[e.0 as usize] != Place::Local {
        out.push(Import::Load(e));
        return;
    }
    // Not stored although used outside its region: recomputable, and so are its
    // operands, which are defined outside this region too (they come before `e`).
    for o in k.expr(e).operands() {
        import(k, o, places, seen, out);
    }
    out.push(Import::Recompute(e));
}

/// Whether `e` is cheap and pure enough to compute again wherever it is used: literals,
/// parameters and builtins, through arithmetic other than division and transcendentals.
/// `memo` holds the answers so far.
fn recomputable(k: &Kernel, vars: &[VarClass], e: ExprId, memo: &mut Vec<Option<bool>>) -> bool {
    if let Some(r) = memo[e.0 as usize] {
        return r;
    }
    let expr = k.expr(e);
    let own = match *expr {
        Expr::Literal(_) | Expr::Param(_) | Expr::Builtin(_) => true,
        Expr::Unary { op, .. } => matches!(
            op,
            UnaryOp::Neg
                | UnaryOp::Not
                | UnaryOp::Abs
                | UnaryOp::Floor
                | UnaryOp::CountOnes
                | UnaryOp::HalfFromBits
        ),
        Expr::Binary { op, .. } => !matches!(op, BinaryOp::Div | BinaryOp::Rem | BinaryOp::Pow),
        Expr::Fma { .. } | Expr::Select { .. } | Expr::Cast { .. } | Expr::Bitcast { .. } => true,
        // The counter of a workgroup-level uniform loop is one scalar that nothing but the
        // loop writes, and a value read from it is used only inside the loop's body, where it
        // does not change: `first + lid` is then computed again where used, and GCC sees an
        // index contiguous in `lid` instead of loading it from an array (a gather).
        Expr::Var(v) => vars[v.0 as usize] == VarClass::Uniform,
        Expr::Load { .. }
        | Expr::LoadLane { .. }
        | Expr::LoadShared { .. }
        | Expr::Subgroup { .. } => false,
    };
    let r = own
        && expr
            .operands()
            .into_iter()
            .all(|o| recomputable(k, vars, o, memo));
    memo[e.0 as usize] = Some(r);
    r
}

struct Collector<'k> {
    k: &'k Kernel,
    def: Vec<Site>,
    uses: Vec<Vec<Site>>,
    /// Per variable: each site that reads (false) or writes (true) it.
    var_sites: Vec<Vec<(Site, bool)>>,
    uniform_loop_write: Vec<bool>,
    other_write: Vec<bool>,
}

impl Collector<'_> {
    fn use_(&mut self, e: ExprId, at: Site) {
        self.uses[e.0 as usize].push(at);
    }

    fn var(&mut self, v: VarId, at: Site, write: bool) {
        self.var_sites[v.0 as usize].push((at, write));
    }

    fn region_block(&mut self, r: usize, block: &[Stmt]) {
        let at = Site::Region(r);
        for s in block {
            match s {
                Stmt::Let(id) => {
                    self.def[id.0 as usize] = at;
                    let e = self.k.expr(*id);
                    if let Expr::Var(v) = e {
                        self.var(*v, at, false);
                    }
                    for o in e.operands() {
                        self.use_(o, at);
                    }
                }
                Stmt::Assign { var, value } => {
                    self.use_(*value, at);
                    self.var(*var, at, true);
                    self.other_write[var.0 as usize] = true;
                }
                Stmt::Store { index, value, .. }
                | Stmt::StoreShared { index, value, .. }
                | Stmt::StoreSharedPair { index, value, .. } => {
                    self.use_(*index, at);
                    self.use_(*value, at);
                }
                Stmt::Prefetch { index, .. } => self.use_(*index, at),
                Stmt::If {
                    cond,
                    then,
                    otherwise,
                } => {
                    self.use_(*cond, at);
                    self.region_block(r, then);
                    self.region_block(r, otherwise);
                }
                Stmt::Loop {
                    var,
                    start,
                    end,
                    body,
                    ..
                } => {
                    self.use_(*start, at);
                    self.use_(*end, at);
                    self.var(*var, at, true);
                    self.other_write[var.0 as usize] = true;
                    self.region_block(r, body);
                }
                Stmt::Tile(
                    TileOp::Load { offset, stride, .. } | TileOp::Store { offset, stride, .. },
                ) => {
                    self.use_(*offset, at);
                    self.use_(*stride, at);
                }
                Stmt::Copy(CopyOp::Start { index, at: to, .. }) => {
                    self.use_(*index, at);
                    self.use_(*to, at);
                }
                Stmt::Barrier
                | Stmt::Tile(TileOp::Zero { .. } | TileOp::Mma { .. })
                | Stmt::Copy(_)
                | Stmt::Group(_) => {}
            }
        }
    }

    fn nodes(&mut self, nodes: &[Node], plan: &Plan<'_>) {
        let at = Site::Workgroup;
        for n in nodes {
            match n {
                Node::Region(_) => {}
                // The sum reads the products' operands, not the partial sums the region
                // computes on the way (those stay in the region, unused).
                Node::Dots { id } => {
                    self.def[id.0 as usize] = at;
                    for &(a, b) in &plan.sums[id].pairs {
                        self.use_(a, at);
                        self.use_(b, at);
                    }
                }
                Node::Prefetch { index, .. } => self.use_(*index, at),
                Node::Subgroup { id, op, arg } => {
                    self.def[id.0 as usize] = at;
                    self.use_(*arg, at);
                    if let SubgroupOp::ShuffleXor(m) = op {
                        self.use_(*m, at);
                    }
                }
                Node::If {
                    cond,
                    then,
                    otherwise,
                    ..
                } => {
                    self.use_(*cond, at);
                    self.nodes(then, plan);
                    self.nodes(otherwise, plan);
                }
                Node::Loop {
                    var,
                    start,
                    end,
                    uniform,
                    body,
                    ..
                } => {
                    self.use_(*start, at);
                    self.use_(*end, at);
                    self.var(*var, at, true);
                    if *uniform {
                        self.uniform_loop_write[var.0 as usize] = true;
                    } else {
                        self.other_write[var.0 as usize] = true;
                    }
                    self.nodes(body, plan);
                }
            }
        }
    }

    fn class(&self, v: VarId, regions: &[Region<'_>]) -> VarClass {
        let i = v.0 as usize;
        let sites = &self.var_sites[i];
        let Some(&(first, _)) = sites.first() else {
            return VarClass::Unused;
        };
        if self.uniform_loop_write[i] && !self.other_write[i] {
            return VarClass::Uniform;
        }
        match first {
            Site::Region(r) if sites.iter().all(|&(s, _)| s == first) => {
                let region = &regions[r];
                if !region.in_loop || first_mention_writes(self.k, region.stmts, v) {
                    VarClass::Local
                } else {
                    VarClass::Array
                }
            }
            _ => VarClass::Array,
        }
    }
}

/// Whether the first top-level statement of `block` that mentions `v` sets it, so that no
/// value of `v` from before the block is ever read.
fn first_mention_writes(k: &Kernel, block: &[Stmt], v: VarId) -> bool {
    for s in block {
        match s {
            Stmt::Assign { var, .. } | Stmt::Loop { var, .. } if *var == v => return true,
            _ if mentions(k, s, v) => return false,
            _ => {}
        }
    }
    false
}

fn mentions(k: &Kernel, s: &Stmt, v: VarId) -> bool {
    let any = |b: &[Stmt]| b.iter().any(|s| mentions(k, s, v));
    match s {
        Stmt::Let(e) => matches!(k.expr(*e), Expr::Var(x) if *x == v),
        Stmt::Assign { var, .. } => *var == v,
        Stmt::If {
            then, otherwise, ..
        } => any(then) || any(otherwise),
        Stmt::Loop { var, body, .. } => *var == v || any(body),
        Stmt::Store { .. }
        | Stmt::StoreShared { .. }
        | Stmt::StoreSharedPair { .. }
        | Stmt::Prefetch { .. }
        | Stmt::Barrier
        | Stmt::Tile(_)
        | Stmt::Copy(_)
        | Stmt::Group(_) => false,
    }
}

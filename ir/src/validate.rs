//! Validation: every rule a lowering relies on, checked once, with typed errors.

use crate::kernel::*;
use crate::types::Scalar;
use thiserror::Error;

/// Device limits a kernel is checked against. The defaults are the smallest a supported device
/// has (lavapipe's 32 KiB of shared memory; 1024 invocations everywhere).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_shared_bytes: u64,
    pub max_invocations: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_shared_bytes: 32 * 1024,
            max_invocations: 1024,
        }
    }
}

/// Most scalar parameters a kernel may take: they must fit a 128-byte push-constant block next
/// to the backend's own words (Vulkan guarantees 128 bytes).
pub const MAX_PARAMS: usize = 24;

/// What validation learned: the type of every expression.
#[derive(Clone, Debug)]
pub struct Info {
    pub types: Vec<Scalar>,
}

impl Info {
    pub fn ty(&self, e: ExprId) -> Scalar {
        self.types[e.0 as usize]
    }

    /// Whether any value, buffer, shared array or variable of `kernel` (the kernel this is
    /// the information of) is f16.
    pub fn holds_f16(&self, kernel: &Kernel) -> bool {
        self.types.contains(&Scalar::F16)
            || kernel.buffers.iter().any(|b| b.elem == Scalar::F16)
            || kernel.shared.iter().any(|s| s.elem == Scalar::F16)
            || kernel.vars.iter().any(|v| v.ty == Scalar::F16)
    }
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ValidationError {
    #[error("kernel name {0:?} is not an identifier")]
    BadName(String),
    #[error("{what} name {name:?} is not an identifier or is used twice")]
    BadDeclName { what: &'static str, name: String },
    #[error("workgroup size {size:?} is empty or has more than {max} invocations")]
    WorkgroupSize { size: [u32; 3], max: u32 },
    #[error("shared memory of {bytes} bytes exceeds the limit of {limit} bytes")]
    SharedMemory { bytes: u64, limit: u64 },
    #[error("a kernel asks for 0 workgroups resident at least")]
    NoneResident,
    #[error("shared array {name:?} has length 0")]
    EmptyShared { name: String },
    #[error("shared array {name:?} overlays {over}, which is not an earlier array of at least its bytes that overlays none")]
    BadOverlay { name: String, over: String },
    #[error("{count} parameters exceed the limit of {max}")]
    TooManyParams { count: usize, max: usize },
    #[error("{what} {name:?} cannot have type {ty}")]
    BadDeclType {
        what: &'static str,
        name: String,
        ty: Scalar,
    },
    #[error("buffer {name:?} is marked settled but the kernel may write it")]
    SettledWritable { name: String },
    #[error("expression {expr:?} does not exist")]
    UnknownExpr { expr: ExprId },
    #[error("{what} {index} does not exist")]
    UnknownDecl { what: &'static str, index: u32 },
    #[error("expression {expr:?} is used before its Let (or outside the block that evaluates it)")]
    NotInScope { expr: ExprId },
    #[error("expression {expr:?} has more than one Let")]
    LetTwice { expr: ExprId },
    #[error("expression {expr:?}: {op} expects {expected}, found {found}")]
    TypeMismatch {
        expr: ExprId,
        op: String,
        expected: String,
        found: String,
    },
    #[error("expression {expr:?}: builtin axis {axis} is not 0, 1 or 2")]
    BadAxis { expr: ExprId, axis: u8 },
    #[error("{what} needs the {capability} capability, which the kernel does not declare")]
    CapabilityNotDeclared {
        what: String,
        capability: &'static str,
    },
    #[error("buffer {name:?} is {access} and cannot be {verb}")]
    BufferAccess {
        name: String,
        access: &'static str,
        verb: &'static str,
    },
    #[error("buffer {name:?} holds storage-only {ty} and cannot be stored to")]
    StorageOnlyStore { name: String, ty: Scalar },
    #[error("loop variable {var:?} is assigned inside its loop")]
    LoopVarAssigned { var: VarId },
    #[error("loop over variable {var:?} has step 0")]
    ZeroStep { var: VarId },
    #[error("{op}: tile {name:?} is {found:?}, {expected:?} expected")]
    TileRole {
        op: &'static str,
        name: String,
        expected: TileRole,
        found: TileRole,
    },
    #[error("copy from buffer {buffer:?} ({from}) to shared {array:?} ({to}): both must hold one type of 2 or 4 bytes")]
    CopyTypes {
        buffer: String,
        array: String,
        from: Scalar,
        to: Scalar,
    },
    #[error("a copy or warpgroup wait leaves {pending} batches or products in flight, more than {max}", max = MAX_PENDING)]
    CopyPending { pending: u32 },
    #[error("warpgroup accumulator {name:?} has {cols} columns: a multiple of 8 from 8 to {max} is needed", max = GROUP_MAX_COLS)]
    GroupCols { name: String, cols: u32 },
    #[error("shared array {name:?} of {elem:?} takes pairs of halves: only an F16 array does")]
    PairArray { name: String, elem: Scalar },
    #[error("warpgroup products need workgroups of whole warpgroups of {per} invocations on subgroups of 32; the kernel has {invocations} invocations and subgroup width {width:?}", per = GROUP_INVOCATIONS)]
    GroupShape {
        invocations: u32,
        width: Option<u32>,
    },
    #[error("{op}: shared {name:?} holds {found}, f16 is needed")]
    GroupOperand {
        op: &'static str,
        name: String,
        found: Scalar,
    },
    #[error("{op}: {what} {name:?} holds {found}, a {role:?} tile needs {expected}")]
    TileMemory {
        op: &'static str,
        what: &'static str,
        name: String,
        role: TileRole,
        expected: Scalar,
        found: Scalar,
    },
}

type Result<T> = std::result::Result<T, ValidationError>;

/// Checks `kernel` against `limits` and returns the type of every expression.
pub fn validate(kernel: &Kernel, limits: &Limits) -> Result<Info> {
    check_decls(kernel, limits)?;
    let mut v = Validator {
        k: kernel,
        types: vec![None; kernel.exprs.len()],
        in_scope: vec![false; kernel.exprs.len()],
        loop_vars: vec![],
    };
    v.block(&kernel.body)?;
    let types = v
        .types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.ok_or(ValidationError::NotInScope {
                expr: ExprId(i as u32),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Info { types })
}

/// Warpgroup accumulators' widths, and a workgroup of whole warpgroups of 32-wide subgroups
/// wherever the kernel has them.
fn check_groups(k: &Kernel) -> Result<()> {
    if k.group_accs.is_empty() && !k.capabilities.group_mma {
        return Ok(());
    }
    let invocations = k.invocations();
    let width = k.capabilities.subgroup_width;
    if width != Some(32) || !invocations.is_multiple_of(GROUP_INVOCATIONS) {
        return Err(ValidationError::GroupShape { invocations, width });
    }
    for g in &k.group_accs {
        if g.cols == 0 || !g.cols.is_multiple_of(8) || g.cols > GROUP_MAX_COLS {
            return Err(ValidationError::GroupCols {
                name: g.name.clone(),
                cols: g.cols,
            });
        }
    }
    Ok(())
}

/// Buffer `b`'s declaration, or an error naming it as `what`.
fn buffer_decl<'k>(k: &'k Kernel, b: BufferId, what: &'static str) -> Result<&'k BufferDecl> {
    k.buffers
        .get(b.0 as usize)
        .ok_or(ValidationError::UnknownDecl { what, index: b.0 })
}

/// `Ok` where the kernel declares `capability` (`declared`), else the error naming what needs it.
fn need(declared: bool, capability: &'static str, what: impl FnOnce() -> String) -> Result<()> {
    if declared {
        Ok(())
    } else {
        Err(ValidationError::CapabilityNotDeclared {
            what: what(),
            capability,
        })
    }
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

fn check_decls(k: &Kernel, limits: &Limits) -> Result<()> {
    if !is_ident(&k.name) {
        return Err(ValidationError::BadName(k.name.clone()));
    }
    check_groups(k)?;
    let inv = k.workgroup_size.iter().map(|&s| s as u64).product::<u64>();
    if inv == 0 || inv > limits.max_invocations as u64 {
        return Err(ValidationError::WorkgroupSize {
            size: k.workgroup_size,
            max: limits.max_invocations,
        });
    }
    for &b in &k.settled {
        let decl = buffer_decl(k, b, "settled buffer")?;
        if decl.access.can_write() {
            return Err(ValidationError::SettledWritable {
                name: decl.name.clone(),
            });
        }
    }
    let mut names = std::collections::HashSet::new();
    let decls = k
        .buffers
        .iter()
        .map(|b| ("buffer", &b.name, b.elem))
        .chain(k.params.iter().map(|p| ("param", &p.name, p.ty)))
        .chain(k.shared.iter().map(|s| ("shared array", &s.name, s.elem)))
        .chain(k.vars.iter().map(|v| ("variable", &v.name, v.ty)))
        .chain(k.tiles.iter().map(|t| ("tile", &t.name, t.role.elem())))
        .chain(
            k.group_accs
                .iter()
                .map(|g| ("warpgroup accumulator", &g.name, Scalar::F32)),
        );
    for (what, name, ty) in decls {
        if !is_ident(name) || !names.insert(name.as_str()) {
            return Err(ValidationError::BadDeclName {
                what,
                name: name.clone(),
            });
        }
        let ok = match what {
            "buffer" => ty != Scalar::Bool,
            "param" => matches!(ty, Scalar::F32 | Scalar::I32 | Scalar::U32),
            "tile" => true,
            _ => !ty.is_storage_only() && ty != Scalar::Bool,
        };
        if !ok {
            return Err(ValidationError::BadDeclType {
                what,
                name: name.clone(),
                ty,
            });
        }
    }
    if k.min_resident == Some(0) {
        return Err(ValidationError::NoneResident);
    }
    if k.params.len() > MAX_PARAMS {
        return Err(ValidationError::TooManyParams {
            count: k.params.len(),
            max: MAX_PARAMS,
        });
    }
    if let Some(s) = k.shared.iter().find(|s| s.len == 0) {
        return Err(ValidationError::EmptyShared {
            name: s.name.clone(),
        });
    }
    for (i, s) in k.shared.iter().enumerate() {
        let Some(o) = s.over else { continue };
        let base = k
            .shared
            .get(o.0 as usize)
            .filter(|b| (o.0 as usize) < i && b.over.is_none() && b.bytes() >= s.bytes());
        if base.is_none() {
            return Err(ValidationError::BadOverlay {
                name: s.name.clone(),
                over: k
                    .shared
                    .get(o.0 as usize)
                    .map_or(format!("array {}", o.0), |b| format!("{:?}", b.name)),
            });
        }
    }
    let bytes = k.shared_bytes();
    if bytes > limits.max_shared_bytes {
        return Err(ValidationError::SharedMemory {
            bytes,
            limit: limits.max_shared_bytes,
        });
    }
    Ok(())
}

struct Validator<'k> {
    k: &'k Kernel,
    types: Vec<Option<Scalar>>,
    in_scope: Vec<bool>,
    loop_vars: Vec<VarId>,
}

fn mismatch(expr: ExprId, op: impl Into<String>, expected: &str, found: Scalar) -> ValidationError {
    ValidationError::TypeMismatch {
        expr,
        op: op.into(),
        expected: expected.into(),
        found: found.name().into(),
    }
}

impl Validator<'_> {
    fn block(&mut self, block: &Block) -> Result<()> {
        let mut opened = vec![];
        let r = self.block_inner(block, &mut opened);
        for e in opened {
            self.in_scope[e.0 as usize] = false;
        }
        r
    }

    fn block_inner(&mut self, block: &Block, opened: &mut Vec<ExprId>) -> Result<()> {
        for s in block {
            match s {
                Stmt::Let(e) => {
                    let slot = self
                        .types
                        .get(e.0 as usize)
                        .ok_or(ValidationError::UnknownExpr { expr: *e })?;
                    if slot.is_some() {
                        return Err(ValidationError::LetTwice { expr: *e });
                    }
                    let ty = self.expr(*e)?;
                    self.types[e.0 as usize] = Some(ty);
                    self.in_scope[e.0 as usize] = true;
                    opened.push(*e);
                }
                Stmt::Assign { var, value } => {
                    let decl = self.var(*var)?;
                    if self.loop_vars.contains(var) {
                        return Err(ValidationError::LoopVarAssigned { var: *var });
                    }
                    self.expect(*value, "assignment", decl.ty)?;
                }
                Stmt::Store {
                    buffer,
                    index,
                    value,
                } => {
                    let b = self.buffer_for(*buffer, true)?;
                    if b.elem.is_storage_only() {
                        return Err(ValidationError::StorageOnlyStore {
                            name: b.name.clone(),
                            ty: b.elem,
                        });
                    }
                    self.expect(*index, "store index", Scalar::U32)?;
                    self.expect(*value, "store value", b.elem)?;
                }
                Stmt::Prefetch { buffer, index } => {
                    self.buffer_for(*buffer, false)?;
                    self.expect(*index, "prefetch index", Scalar::U32)?;
                }
                Stmt::StoreShared {
                    array,
                    index,
                    value,
                } => {
                    let elem = self.shared(*array)?.elem;
                    self.expect(*index, "shared store index", Scalar::U32)?;
                    self.expect(*value, "shared store value", elem)?;
                }
                Stmt::StoreSharedPair {
                    array,
                    index,
                    value,
                } => {
                    let shared = self.shared(*array)?;
                    if shared.elem != Scalar::F16 {
                        return Err(ValidationError::PairArray {
                            name: shared.name.clone(),
                            elem: shared.elem,
                        });
                    }
                    self.expect(*index, "shared pair index", Scalar::U32)?;
                    self.expect(*value, "shared pair value", Scalar::U32)?;
                }
                Stmt::If {
                    cond,
                    then,
                    otherwise,
                } => {
                    self.expect(*cond, "if condition", Scalar::Bool)?;
                    self.block(then)?;
                    self.block(otherwise)?;
                }
                Stmt::Loop {
                    var,
                    start,
                    end,
                    step,
                    body,
                } => {
                    let decl = self.var(*var)?;
                    if decl.ty != Scalar::U32 {
                        return Err(ValidationError::BadDeclType {
                            what: "loop variable",
                            name: decl.name.clone(),
                            ty: decl.ty,
                        });
                    }
                    if *step == 0 {
                        return Err(ValidationError::ZeroStep { var: *var });
                    }
                    self.expect(*start, "loop start", Scalar::U32)?;
                    self.expect(*end, "loop end", Scalar::U32)?;
                    self.loop_vars.push(*var);
                    let r = self.block(body);
                    self.loop_vars.pop();
                    r?;
                }
                Stmt::Barrier => {}
                Stmt::Tile(op) => self.tile_op(op)?,
                Stmt::Copy(op) => self.copy_op(op)?,
                Stmt::Group(op) => self.group_op(op)?,
            }
        }
        Ok(())
    }

    /// The type of an operand, which must be in scope.
    fn operand(&self, e: ExprId) -> Result<Scalar> {
        match self.in_scope.get(e.0 as usize) {
            None => Err(ValidationError::UnknownExpr { expr: e }),
            Some(false) => Err(ValidationError::NotInScope { expr: e }),
            Some(true) => Ok(self.types[e.0 as usize].expect("in scope implies typed")),
        }
    }

    fn expect(&self, e: ExprId, op: &str, ty: Scalar) -> Result<()> {
        let found = self.operand(e)?;
        if found == ty {
            Ok(())
        } else {
            Err(mismatch(e, op, ty.name(), found))
        }
    }

    fn var(&self, v: VarId) -> Result<&VarDecl> {
        self.k
            .vars
            .get(v.0 as usize)
            .ok_or(ValidationError::UnknownDecl {
                what: "variable",
                index: v.0,
            })
    }

    fn buffer(&self, b: BufferId) -> Result<&BufferDecl> {
        buffer_decl(self.k, b, "buffer")
    }

    fn shared(&self, s: SharedId) -> Result<&SharedDecl> {
        self.k
            .shared
            .get(s.0 as usize)
            .ok_or(ValidationError::UnknownDecl {
                what: "shared array",
                index: s.0,
            })
    }

    fn tile(&self, t: TileId, op: &'static str, role: TileRole) -> Result<()> {
        let decl = self
            .k
            .tiles
            .get(t.0 as usize)
            .ok_or(ValidationError::UnknownDecl {
                what: "tile",
                index: t.0,
            })?;
        if decl.role != role {
            return Err(ValidationError::TileRole {
                op,
                name: decl.name.clone(),
                expected: role,
                found: decl.role,
            });
        }
        Ok(())
    }

    /// A tile load or store of a `role` tile at `mem[offset]` with `stride`.
    fn tile_access(
        &self,
        op: &'static str,
        role: TileRole,
        mem: TileMemory,
        offset: ExprId,
        stride: ExprId,
        store: bool,
    ) -> Result<()> {
        let (what, name, elem) = match mem {
            TileMemory::Buffer(b) => {
                let d = self.buffer_for(b, store)?;
                ("buffer", &d.name, d.elem)
            }
            TileMemory::Shared(s) => {
                let d = self.shared(s)?;
                ("shared array", &d.name, d.elem)
            }
        };
        if elem != role.elem() {
            return Err(ValidationError::TileMemory {
                op,
                what,
                name: name.clone(),
                role,
                expected: role.elem(),
                found: elem,
            });
        }
        self.expect(offset, op, Scalar::U32)?;
        self.expect(stride, op, Scalar::U32)
    }

    fn copy_op(&self, op: &CopyOp) -> Result<()> {
        need(self.k.capabilities.async_copy, "async_copy", || {
            "an asynchronous copy".into()
        })?;
        match *op {
            CopyOp::Start {
                from,
                index,
                to,
                at,
            } => {
                let b = self.buffer_for(from, false)?;
                if b.access.can_write() {
                    return Err(ValidationError::BufferAccess {
                        name: b.name.clone(),
                        access: "writable",
                        verb: "copied from asynchronously",
                    });
                }
                let shared = self.shared(to)?;
                if b.elem != shared.elem || !matches!(b.elem.size(), 2 | 4) {
                    return Err(ValidationError::CopyTypes {
                        buffer: b.name.clone(),
                        array: shared.name.clone(),
                        from: b.elem,
                        to: shared.elem,
                    });
                }
                self.expect(index, "copy index", Scalar::U32)?;
                self.expect(at, "copy destination", Scalar::U32)
            }
            CopyOp::Commit => Ok(()),
            CopyOp::Wait { pending } if pending > MAX_PENDING => {
                Err(ValidationError::CopyPending { pending })
            }
            CopyOp::Wait { .. } => Ok(()),
        }
    }

    fn tile_op(&self, op: &TileOp) -> Result<()> {
        need(self.k.capabilities.tiles, "tiles", || {
            "a tile operation".into()
        })?;
        let role = |t: TileId| {
            self.k
                .tiles
                .get(t.0 as usize)
                .map(|d| d.role)
                .ok_or(ValidationError::UnknownDecl {
                    what: "tile",
                    index: t.0,
                })
        };
        match *op {
            TileOp::Zero { tile } => role(tile).map(drop),
            TileOp::Load {
                tile,
                from,
                offset,
                stride,
                ..
            } => self.tile_access("tile load", role(tile)?, from, offset, stride, false),
            TileOp::Mma { acc, a, b } => {
                self.tile(acc, "tile mma", TileRole::Acc)?;
                self.tile(a, "tile mma", TileRole::A)?;
                self.tile(b, "tile mma", TileRole::B)
            }
            TileOp::Store {
                tile,
                to,
                offset,
                stride,
                ..
            } => {
                self.tile(tile, "tile store", TileRole::Acc)?;
                self.tile_access("tile store", TileRole::Acc, to, offset, stride, true)
            }
        }
    }

    fn group_op(&self, op: &GroupOp) -> Result<()> {
        need(self.k.capabilities.group_mma, "group_mma", || {
            "a warpgroup product".into()
        })?;
        let acc = |a: GroupAccId| {
            self.k
                .group_accs
                .get(a.0 as usize)
                .map(drop)
                .ok_or(ValidationError::UnknownDecl {
                    what: "warpgroup accumulator",
                    index: a.0,
                })
        };
        match *op {
            GroupOp::Zero { acc: a } => acc(a),
            GroupOp::Mma {
                acc: c,
                a,
                a_at,
                b,
                b_at,
            } => {
                acc(c)?;
                for (s, at) in [(a, a_at), (b, b_at)] {
                    let d = self.shared(s)?;
                    if d.elem != Scalar::F16 {
                        return Err(ValidationError::GroupOperand {
                            op: "group mma",
                            name: d.name.clone(),
                            found: d.elem,
                        });
                    }
                    self.expect(at, "group mma", Scalar::U32)?;
                }
                Ok(())
            }
            GroupOp::Wait { pending } if pending > MAX_PENDING => {
                Err(ValidationError::CopyPending { pending })
            }
            GroupOp::Wait { .. } => Ok(()),
            GroupOp::Store {
                acc: a,
                to,
                offset,
                stride,
            } => {
                acc(a)?;
                self.tile_access("group store", TileRole::Acc, to, offset, stride, true)
            }
        }
    }

    fn need_subgroup(&self, what: impl FnOnce() -> String) -> Result<()> {
        need(self.k.capabilities.subgroup, "subgroup", what)
    }

    /// Buffer `b`, which the kernel must be allowed to write (`write`) or read.
    fn buffer_for(&self, b: BufferId, write: bool) -> Result<&BufferDecl> {
        let d = self.buffer(b)?;
        let (allowed, verb) = if write {
            (d.access.can_write(), "written")
        } else {
            (d.access.can_read(), "read")
        };
        if !allowed {
            return Err(ValidationError::BufferAccess {
                name: d.name.clone(),
                access: d.access.name(),
                verb,
            });
        }
        Ok(d)
    }

    fn expr(&self, id: ExprId) -> Result<Scalar> {
        use Scalar::*;
        let e = self.k.expr(id);
        Ok(match *e {
            Expr::Literal(l) => l.ty(),
            Expr::Param(p) => {
                self.k
                    .params
                    .get(p.0 as usize)
                    .ok_or(ValidationError::UnknownDecl {
                        what: "param",
                        index: p.0,
                    })?
                    .ty
            }
            Expr::Builtin(b) => {
                match b {
                    Builtin::GlobalId(a)
                    | Builtin::LocalId(a)
                    | Builtin::WorkgroupId(a)
                    | Builtin::NumWorkgroups(a)
                        if a > 2 =>
                    {
                        return Err(ValidationError::BadAxis { expr: id, axis: a })
                    }
                    Builtin::SubgroupSize | Builtin::SubgroupInvocationId | Builtin::SubgroupId => {
                        self.need_subgroup(|| format!("builtin {b:?}"))?
                    }
                    _ => {}
                }
                U32
            }
            Expr::Var(v) => self.var(v)?.ty,
            Expr::Load { buffer, index } => {
                let b = self.buffer_for(buffer, false)?;
                self.expect(index, "load index", U32)?;
                b.elem.loaded()
            }
            Expr::LoadLane { buffer, quad, lane } => {
                let b = self.buffer_for(buffer, false)?;
                self.expect(quad, "quad index", U32)?;
                if b.elem != U32 {
                    return Err(mismatch(id, "LoadLane's buffer", "U32", b.elem));
                }
                if lane >= 4 {
                    return Err(ValidationError::UnknownDecl {
                        what: "quad lane",
                        index: u32::from(lane),
                    });
                }
                U32
            }
            Expr::LoadShared { array, index } => {
                let elem = self.shared(array)?.elem;
                self.expect(index, "shared load index", U32)?;
                elem
            }
            Expr::Unary { op, arg } => {
                let t = self.operand(arg)?;
                let ok = match op {
                    UnaryOp::Neg | UnaryOp::Abs => matches!(t, F32 | F16 | I32),
                    UnaryOp::Not => matches!(t, I32 | U32 | Bool),
                    UnaryOp::CountOnes => matches!(t, I32 | U32),
                    UnaryOp::HalfFromBits => t == U32,
                    _ => matches!(t, F32 | F16),
                };
                if !ok {
                    return Err(mismatch(id, format!("{op:?}"), "a supported type", t));
                }
                match op {
                    UnaryOp::CountOnes => U32,
                    UnaryOp::HalfFromBits => F32,
                    _ => t,
                }
            }
            Expr::Binary { op, lhs, rhs } => {
                let l = self.operand(lhs)?;
                let r = self.operand(rhs)?;
                let name = format!("{op:?}");
                if matches!(op, BinaryOp::Dot4I8 | BinaryOp::Dot4U8) {
                    for t in [l, r] {
                        if t != U32 {
                            return Err(mismatch(id, name, "u32 (four packed bytes)", t));
                        }
                    }
                    return Ok(if op == BinaryOp::Dot4I8 { I32 } else { U32 });
                }
                if op == BinaryOp::PackHalves {
                    for t in [l, r] {
                        if t != F32 {
                            return Err(mismatch(id, name, "f32", t));
                        }
                    }
                    return Ok(U32);
                }
                if matches!(op, BinaryOp::Shl | BinaryOp::Shr) {
                    if !matches!(l, I32 | U32) {
                        return Err(mismatch(id, name, "i32 or u32", l));
                    }
                    if r != U32 {
                        return Err(mismatch(id, name, "a u32 shift amount", r));
                    }
                    return Ok(l);
                }
                if l != r {
                    return Err(mismatch(id, name, l.name(), r));
                }
                let ok = match op {
                    BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => matches!(l, I32 | U32 | Bool),
                    BinaryOp::Pow => matches!(l, F32 | F16),
                    BinaryOp::Eq | BinaryOp::Ne => true,
                    _ => l != Bool,
                };
                if !ok {
                    return Err(mismatch(id, name, "a supported type", l));
                }
                if op.is_comparison() {
                    Bool
                } else {
                    l
                }
            }
            Expr::Fma { a, b, c } => {
                let t = self.operand(a)?;
                if !matches!(t, F32 | F16) {
                    return Err(mismatch(id, "fma", "f32 or f16", t));
                }
                self.expect(b, "fma", t)?;
                self.expect(c, "fma", t)?;
                t
            }
            Expr::Select {
                cond,
                accept,
                reject,
            } => {
                self.expect(cond, "select condition", Bool)?;
                let t = self.operand(accept)?;
                self.expect(reject, "select", t)?;
                t
            }
            Expr::Cast { arg, to } => {
                self.operand(arg)?;
                if to.is_storage_only() {
                    return Err(mismatch(id, "cast", "a value type", to));
                }
                to
            }
            Expr::Bitcast { arg, to } => {
                let t = self.operand(arg)?;
                if !matches!(t, F32 | I32 | U32) {
                    return Err(mismatch(id, "bitcast", "f32, i32 or u32", t));
                }
                if !matches!(to, F32 | I32 | U32) {
                    return Err(mismatch(id, "bitcast", "f32, i32 or u32", to));
                }
                to
            }
            Expr::Subgroup { op, arg } => {
                self.need_subgroup(|| format!("subgroup operation {op:?}"))?;
                let t = self.operand(arg)?;
                if !matches!(t, F32 | F16 | I32 | U32) {
                    return Err(mismatch(id, format!("{op:?}"), "a number", t));
                }
                if let SubgroupOp::ShuffleXor(mask) = op {
                    self.expect(mask, "shuffle mask", U32)?;
                }
                t
            }
        })
    }
}

//! A builder whose Rust reads like the kernel it builds.
//!
//! ```
//! use trine_ir::{Access, KernelBuilder, Scalar};
//! let k = KernelBuilder::new("saxpy", [64, 1, 1]);
//! let x = k.buffer("x", Scalar::F32, Access::Read);
//! let y = k.buffer("y", Scalar::F32, Access::ReadWrite);
//! let a = k.param("a", Scalar::F32);
//! let n = k.param("n", Scalar::U32);
//! let i = k.global_id(0);
//! k.if_(i.lt(n), || {
//!     k.store(y, i, a.fma(k.load(x, i), k.load(y, i)));
//! });
//! let kernel = k.finish();
//! trine_ir::validate(&kernel, &trine_ir::Limits::default()).unwrap();
//! ```
//!
//! Every expression is emitted (gets its [`Stmt::Let`]) where it is built, so the order of the
//! Rust code is the order of evaluation. Type errors are not caught here but by
//! [`crate::validate`], which names the offending expression.

use crate::kernel::*;
use crate::types::{Access, Literal, Scalar};
use std::cell::RefCell;
use std::ops;

/// Builds one [`Kernel`]. Methods take `&self` so that values and closures can share it.
pub struct KernelBuilder {
    kernel: RefCell<Kernel>,
    /// Blocks under construction; the last is where statements go.
    blocks: RefCell<Vec<Block>>,
}

/// An expression under construction, tied to its builder so that operators work on it.
#[derive(Clone, Copy)]
pub struct Val<'b> {
    b: &'b KernelBuilder,
    pub id: ExprId,
}

/// A matrix tile of the kernel under construction (see [`TileDecl`]).
#[derive(Clone, Copy)]
pub struct Tile<'b> {
    b: &'b KernelBuilder,
    pub id: TileId,
}

/// A warpgroup accumulator of the kernel under construction (see [`GroupAccDecl`]).
#[derive(Clone, Copy)]
pub struct GroupAcc<'b> {
    b: &'b KernelBuilder,
    pub id: GroupAccId,
}

/// A private variable under construction.
#[derive(Clone, Copy)]
pub struct Var<'b> {
    b: &'b KernelBuilder,
    pub id: VarId,
}

impl KernelBuilder {
    pub fn new(name: &str, workgroup_size: [u32; 3]) -> Self {
        KernelBuilder {
            kernel: RefCell::new(Kernel {
                name: name.to_string(),
                workgroup_size,
                capabilities: Capabilities::default(),
                buffers: vec![],
                params: vec![],
                shared: vec![],
                vars: vec![],
                tiles: vec![],
                group_accs: vec![],
                exprs: vec![],
                body: vec![],
                settled: vec![],
                min_resident: None,
            }),
            blocks: RefCell::new(vec![vec![]]),
        }
    }

    /// Asks for `n` workgroups a multiprocessor at once ([`Kernel::min_resident`]).
    pub fn min_resident(&self, n: u32) {
        self.kernel.borrow_mut().min_resident = Some(n);
    }

    /// Declares that the kernel uses subgroup operations.
    pub fn require_subgroups(&self) {
        self.kernel.borrow_mut().capabilities.subgroup = true;
    }

    /// Declares that the kernel runs only with subgroups `width` wide (see
    /// [`Capabilities::subgroup_width`]), and uses subgroup operations.
    pub fn require_subgroup_width(&self, width: u32) {
        let mut k = self.kernel.borrow_mut();
        k.capabilities.subgroup = true;
        k.capabilities.subgroup_width = Some(width);
    }

    pub fn workgroup_size(&self) -> [u32; 3] {
        self.kernel.borrow().workgroup_size
    }

    pub fn buffer(&self, name: &str, elem: Scalar, access: Access) -> BufferId {
        let mut k = self.kernel.borrow_mut();
        k.buffers.push(BufferDecl {
            name: name.into(),
            elem,
            access,
        });
        BufferId(k.buffers.len() as u32 - 1)
    }

    /// Marks `buffer` as written by no dispatch of the sequence the kernel runs in
    /// ([`crate::Kernel::settled`]).
    pub fn settled(&self, buffer: BufferId) {
        self.kernel.borrow_mut().settled.push(buffer);
    }

    pub fn param(&self, name: &str, ty: Scalar) -> Val<'_> {
        let id = {
            let mut k = self.kernel.borrow_mut();
            k.params.push(ParamDecl {
                name: name.into(),
                ty,
            });
            ParamId(k.params.len() as u32 - 1)
        };
        self.emit(Expr::Param(id))
    }

    pub fn shared(&self, name: &str, elem: Scalar, len: u32) -> SharedId {
        self.shared_decl(name, elem, len, None)
    }

    /// A shared array that may occupy the memory of array `over` ([`SharedDecl::over`]).
    pub fn shared_over(&self, name: &str, elem: Scalar, len: u32, over: SharedId) -> SharedId {
        self.shared_decl(name, elem, len, Some(over))
    }

    fn shared_decl(&self, name: &str, elem: Scalar, len: u32, over: Option<SharedId>) -> SharedId {
        let mut k = self.kernel.borrow_mut();
        k.shared.push(SharedDecl {
            name: name.into(),
            elem,
            len,
            over,
        });
        SharedId(k.shared.len() as u32 - 1)
    }

    /// A private variable, zero-initialised. A name already taken gets a numeric suffix, so
    /// Rust loops that build code can declare variables freely.
    pub fn var(&self, name: &str, ty: Scalar) -> Var<'_> {
        let mut k = self.kernel.borrow_mut();
        let taken = k.vars.iter().any(|v| v.name == name);
        let name = if taken {
            format!("{name}_{}", k.vars.len())
        } else {
            name.to_string()
        };
        k.vars.push(VarDecl { name, ty });
        Var {
            b: self,
            id: VarId(k.vars.len() as u32 - 1),
        }
    }

    /// Appends an expression and its `Let` to the current block.
    /// Declares a matrix tile; declares the tiles capability.
    pub fn tile(&self, name: &str, role: TileRole) -> Tile<'_> {
        let mut k = self.kernel.borrow_mut();
        k.capabilities.tiles = true;
        k.tiles.push(TileDecl {
            name: name.to_string(),
            role,
        });
        Tile {
            b: self,
            id: TileId(k.tiles.len() as u32 - 1),
        }
    }

    /// Declares a warpgroup accumulator of `cols` columns; declares the group-mma capability.
    pub fn group_acc(&self, name: &str, cols: u32) -> GroupAcc<'_> {
        let mut k = self.kernel.borrow_mut();
        k.capabilities.group_mma = true;
        k.group_accs.push(GroupAccDecl {
            name: name.to_string(),
            cols,
        });
        GroupAcc {
            b: self,
            id: GroupAccId(k.group_accs.len() as u32 - 1),
        }
    }

    /// [`GroupOp::Wait`]: waits until at most `pending` of the warpgroup's products are
    /// unfinished.
    pub fn group_wait(&self, pending: u32) {
        self.stmt(Stmt::Group(GroupOp::Wait { pending }));
    }

    pub fn emit(&self, e: Expr) -> Val<'_> {
        let id = {
            let mut k = self.kernel.borrow_mut();
            k.exprs.push(e);
            ExprId(k.exprs.len() as u32 - 1)
        };
        self.stmt(Stmt::Let(id));
        Val { b: self, id }
    }

    fn stmt(&self, s: Stmt) {
        self.blocks
            .borrow_mut()
            .last_mut()
            .expect("the builder always has an open block")
            .push(s);
    }

    fn block(&self, f: impl FnOnce()) -> Block {
        self.blocks.borrow_mut().push(vec![]);
        f();
        self.blocks.borrow_mut().pop().expect("pushed just above")
    }

    pub fn lit(&self, l: Literal) -> Val<'_> {
        self.emit(Expr::Literal(l))
    }
    pub fn f32(&self, v: f32) -> Val<'_> {
        self.lit(Literal::f32(v))
    }
    pub fn f16(&self, v: f32) -> Val<'_> {
        self.lit(Literal::f16(half::f16::from_f32(v)))
    }
    pub fn u32(&self, v: u32) -> Val<'_> {
        self.lit(Literal::U32(v))
    }
    pub fn i32(&self, v: i32) -> Val<'_> {
        self.lit(Literal::I32(v))
    }
    pub fn bool(&self, v: bool) -> Val<'_> {
        self.lit(Literal::Bool(v))
    }

    pub fn builtin(&self, b: Builtin) -> Val<'_> {
        self.emit(Expr::Builtin(b))
    }
    pub fn global_id(&self, axis: u8) -> Val<'_> {
        self.builtin(Builtin::GlobalId(axis))
    }
    pub fn local_id(&self, axis: u8) -> Val<'_> {
        self.builtin(Builtin::LocalId(axis))
    }
    pub fn local_index(&self) -> Val<'_> {
        self.builtin(Builtin::LocalIndex)
    }
    pub fn workgroup_id(&self, axis: u8) -> Val<'_> {
        self.builtin(Builtin::WorkgroupId(axis))
    }
    pub fn num_workgroups(&self, axis: u8) -> Val<'_> {
        self.builtin(Builtin::NumWorkgroups(axis))
    }
    pub fn subgroup_size(&self) -> Val<'_> {
        self.builtin(Builtin::SubgroupSize)
    }
    pub fn subgroup_invocation_id(&self) -> Val<'_> {
        self.builtin(Builtin::SubgroupInvocationId)
    }
    pub fn subgroup_id(&self) -> Val<'_> {
        self.builtin(Builtin::SubgroupId)
    }

    pub fn load(&self, buffer: BufferId, index: Val<'_>) -> Val<'_> {
        self.emit(Expr::Load {
            buffer,
            index: index.id,
        })
    }
    /// The four words of quad `quad` of a `U32` buffer ([`Expr::LoadLane`]).
    pub fn load_quad(&self, buffer: BufferId, quad: Val<'_>) -> [Val<'_>; 4] {
        std::array::from_fn(|lane| {
            self.emit(Expr::LoadLane {
                buffer,
                quad: quad.id,
                lane: lane as u8,
            })
        })
    }
    pub fn store(&self, buffer: BufferId, index: Val<'_>, value: Val<'_>) {
        self.stmt(Stmt::Store {
            buffer,
            index: index.id,
            value: value.id,
        });
    }
    /// [`Stmt::Prefetch`]: a hint that `buffer[index]` is read soon.
    pub fn prefetch(&self, buffer: BufferId, index: Val<'_>) {
        self.stmt(Stmt::Prefetch {
            buffer,
            index: index.id,
        });
    }
    pub fn load_shared(&self, array: SharedId, index: Val<'_>) -> Val<'_> {
        self.emit(Expr::LoadShared {
            array,
            index: index.id,
        })
    }
    pub fn store_shared(&self, array: SharedId, index: Val<'_>, value: Val<'_>) {
        self.stmt(Stmt::StoreShared {
            array,
            index: index.id,
            value: value.id,
        });
    }

    /// `shared[index]` and `shared[index + 1]` (F16, `index` even) = the halves of `value`
    /// (`U32`), low then high ([`Stmt::StoreSharedPair`]).
    pub fn store_shared_pair(&self, array: SharedId, index: Val<'_>, value: Val<'_>) {
        self.stmt(Stmt::StoreSharedPair {
            array,
            index: index.id,
            value: value.id,
        });
    }

    pub fn select(&self, cond: Val<'_>, accept: Val<'_>, reject: Val<'_>) -> Val<'_> {
        self.emit(Expr::Select {
            cond: cond.id,
            accept: accept.id,
            reject: reject.id,
        })
    }

    pub fn barrier(&self) {
        self.stmt(Stmt::Barrier);
    }

    /// [`CopyOp::Start`]: copies [`crate::COPY_BYTES`] from `from[index]` on to `to[at]` on,
    /// asynchronously; declares the async-copy capability.
    pub fn copy_async(&self, from: BufferId, index: Val<'_>, to: SharedId, at: Val<'_>) {
        self.kernel.borrow_mut().capabilities.async_copy = true;
        self.stmt(Stmt::Copy(CopyOp::Start {
            from,
            index: index.id,
            to,
            at: at.id,
        }));
    }

    /// [`CopyOp::Commit`]: the copies started since the last commit form a batch.
    pub fn copy_commit(&self) {
        self.stmt(Stmt::Copy(CopyOp::Commit));
    }

    /// [`CopyOp::Wait`]: waits until at most `pending` committed batches are in flight.
    pub fn copy_wait(&self, pending: u32) {
        self.stmt(Stmt::Copy(CopyOp::Wait { pending }));
    }

    pub fn if_(&self, cond: Val<'_>, then: impl FnOnce()) {
        let then = self.block(then);
        self.stmt(Stmt::If {
            cond: cond.id,
            then,
            otherwise: vec![],
        });
    }

    pub fn if_else(&self, cond: Val<'_>, then: impl FnOnce(), otherwise: impl FnOnce()) {
        let then = self.block(then);
        let otherwise = self.block(otherwise);
        self.stmt(Stmt::If {
            cond: cond.id,
            then,
            otherwise,
        });
    }

    /// `for (i = start; i < end; i += step) body(i)`; the validator rejects a zero `step`.
    pub fn for_range<'b>(
        &'b self,
        start: Val<'b>,
        end: Val<'b>,
        step: u32,
        body: impl FnOnce(Val<'b>),
    ) {
        let n = self.kernel.borrow().vars.len();
        let var = self.var(&format!("i{n}"), Scalar::U32);
        let body = self.block(|| body(var.get()));
        self.stmt(Stmt::Loop {
            var: var.id,
            start: start.id,
            end: end.id,
            step,
            body,
        });
    }

    /// The finished kernel. Open blocks are impossible here (closures close them).
    pub fn finish(self) -> Kernel {
        let mut k = self.kernel.into_inner();
        let mut blocks = self.blocks.into_inner();
        k.body = blocks.pop().expect("the outermost block");
        k
    }
}

impl Tile<'_> {
    pub fn zero(self) {
        self.b.stmt(Stmt::Tile(TileOp::Zero { tile: self.id }));
    }

    pub fn load(self, from: TileMemory, offset: Val<'_>, stride: Val<'_>, layout: TileLayout) {
        self.b.stmt(Stmt::Tile(TileOp::Load {
            tile: self.id,
            from,
            offset: offset.id,
            stride: stride.id,
            layout,
        }));
    }

    /// `self = a·b + self`.
    pub fn mma(self, a: Tile<'_>, b: Tile<'_>) {
        self.b.stmt(Stmt::Tile(TileOp::Mma {
            acc: self.id,
            a: a.id,
            b: b.id,
        }));
    }

    pub fn store(self, to: TileMemory, offset: Val<'_>, stride: Val<'_>, layout: TileLayout) {
        self.b.stmt(Stmt::Tile(TileOp::Store {
            tile: self.id,
            to,
            offset: offset.id,
            stride: stride.id,
            layout,
        }));
    }
}

impl GroupAcc<'_> {
    pub fn zero(self) {
        self.b.stmt(Stmt::Group(GroupOp::Zero { acc: self.id }));
    }

    /// Starts `self += a·bᵀ` over [`crate::GROUP_K`] columns ([`GroupOp::Mma`]).
    pub fn mma(self, (a, a_at): (SharedId, Val<'_>), (b, b_at): (SharedId, Val<'_>)) {
        self.b.stmt(Stmt::Group(GroupOp::Mma {
            acc: self.id,
            a,
            a_at: a_at.id,
            b,
            b_at: b_at.id,
        }));
    }

    pub fn store(self, to: TileMemory, offset: Val<'_>, stride: Val<'_>) {
        self.b.stmt(Stmt::Group(GroupOp::Store {
            acc: self.id,
            to,
            offset: offset.id,
            stride: stride.id,
        }));
    }
}

impl<'b> Var<'b> {
    pub fn get(self) -> Val<'b> {
        self.b.emit(Expr::Var(self.id))
    }
    pub fn set(self, value: Val<'_>) {
        self.b.stmt(Stmt::Assign {
            var: self.id,
            value: value.id,
        });
    }
}

impl<'b> Val<'b> {
    fn un(self, op: UnaryOp) -> Val<'b> {
        self.b.emit(Expr::Unary { op, arg: self.id })
    }
    fn bin(self, op: BinaryOp, rhs: Val<'_>) -> Val<'b> {
        self.b.emit(Expr::Binary {
            op,
            lhs: self.id,
            rhs: rhs.id,
        })
    }
    pub fn abs(self) -> Val<'b> {
        self.un(UnaryOp::Abs)
    }
    pub fn exp(self) -> Val<'b> {
        self.un(UnaryOp::Exp)
    }
    pub fn log(self) -> Val<'b> {
        self.un(UnaryOp::Log)
    }
    pub fn sqrt(self) -> Val<'b> {
        self.un(UnaryOp::Sqrt)
    }
    pub fn rsqrt(self) -> Val<'b> {
        self.un(UnaryOp::Rsqrt)
    }
    pub fn sin(self) -> Val<'b> {
        self.un(UnaryOp::Sin)
    }
    pub fn cos(self) -> Val<'b> {
        self.un(UnaryOp::Cos)
    }
    pub fn tanh(self) -> Val<'b> {
        self.un(UnaryOp::Tanh)
    }
    pub fn floor(self) -> Val<'b> {
        self.un(UnaryOp::Floor)
    }
    pub fn count_ones(self) -> Val<'b> {
        self.un(UnaryOp::CountOnes)
    }
    /// The f16 in this `U32`'s low 16 bits, as `F32` ([`UnaryOp::HalfFromBits`]).
    pub fn half_from_bits(self) -> Val<'b> {
        self.un(UnaryOp::HalfFromBits)
    }
    pub fn min(self, rhs: Val<'_>) -> Val<'b> {
        self.bin(BinaryOp::Min, rhs)
    }
    pub fn max(self, rhs: Val<'_>) -> Val<'b> {
        self.bin(BinaryOp::Max, rhs)
    }
    /// [`BinaryOp::Dot4I8`]: the signed bytes of two packed `U32` words, multiplied and
    /// summed into an `I32`.
    pub fn dot4_i8(self, rhs: Val<'_>) -> Val<'b> {
        self.bin(BinaryOp::Dot4I8, rhs)
    }
    /// [`BinaryOp::Dot4U8`]: as [`Val::dot4_i8`] with unsigned bytes and a `U32` result.
    pub fn dot4_u8(self, rhs: Val<'_>) -> Val<'b> {
        self.bin(BinaryOp::Dot4U8, rhs)
    }
    /// This `F32` and `high` rounded to f16, packed in a `U32`, this one in the low half
    /// ([`BinaryOp::PackHalves`]).
    pub fn pack_halves(self, high: Val<'_>) -> Val<'b> {
        self.bin(BinaryOp::PackHalves, high)
    }
    pub fn pow(self, rhs: Val<'_>) -> Val<'b> {
        self.bin(BinaryOp::Pow, rhs)
    }
    pub fn eq(self, rhs: Val<'_>) -> Val<'b> {
        self.bin(BinaryOp::Eq, rhs)
    }
    pub fn ne(self, rhs: Val<'_>) -> Val<'b> {
        self.bin(BinaryOp::Ne, rhs)
    }
    pub fn lt(self, rhs: Val<'_>) -> Val<'b> {
        self.bin(BinaryOp::Lt, rhs)
    }
    pub fn le(self, rhs: Val<'_>) -> Val<'b> {
        self.bin(BinaryOp::Le, rhs)
    }
    pub fn gt(self, rhs: Val<'_>) -> Val<'b> {
        self.bin(BinaryOp::Gt, rhs)
    }
    pub fn ge(self, rhs: Val<'_>) -> Val<'b> {
        self.bin(BinaryOp::Ge, rhs)
    }
    /// `self * b + c`.
    pub fn fma(self, b: Val<'_>, c: Val<'_>) -> Val<'b> {
        self.b.emit(Expr::Fma {
            a: self.id,
            b: b.id,
            c: c.id,
        })
    }
    pub fn cast(self, to: Scalar) -> Val<'b> {
        self.b.emit(Expr::Cast { arg: self.id, to })
    }
    pub fn bitcast(self, to: Scalar) -> Val<'b> {
        self.b.emit(Expr::Bitcast { arg: self.id, to })
    }
    pub fn subgroup(self, op: SubgroupOp) -> Val<'b> {
        self.b.emit(Expr::Subgroup { op, arg: self.id })
    }
    pub fn subgroup_sum(self) -> Val<'b> {
        self.subgroup(SubgroupOp::Sum)
    }
    pub fn subgroup_max(self) -> Val<'b> {
        self.subgroup(SubgroupOp::Max)
    }
    pub fn subgroup_min(self) -> Val<'b> {
        self.subgroup(SubgroupOp::Min)
    }
    pub fn shuffle_xor(self, mask: Val<'_>) -> Val<'b> {
        self.subgroup(SubgroupOp::ShuffleXor(mask.id))
    }
}

macro_rules! binop {
    ($trait:ident, $method:ident, $op:ident) => {
        impl<'b> ops::$trait for Val<'b> {
            type Output = Val<'b>;
            fn $method(self, rhs: Val<'b>) -> Val<'b> {
                self.bin(BinaryOp::$op, rhs)
            }
        }
    };
}
binop!(Add, add, Add);
binop!(Sub, sub, Sub);
binop!(Mul, mul, Mul);
binop!(Div, div, Div);
binop!(Rem, rem, Rem);
binop!(BitAnd, bitand, And);
binop!(BitOr, bitor, Or);
binop!(BitXor, bitxor, Xor);
binop!(Shl, shl, Shl);
binop!(Shr, shr, Shr);

impl<'b> ops::Neg for Val<'b> {
    type Output = Val<'b>;
    fn neg(self) -> Val<'b> {
        self.un(UnaryOp::Neg)
    }
}

impl<'b> ops::Not for Val<'b> {
    type Output = Val<'b>;
    fn not(self) -> Val<'b> {
        self.un(UnaryOp::Not)
    }
}

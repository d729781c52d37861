//! The kernel IR itself: declarations, expressions and statements.
//!
//! A [`Kernel`] is one compute entry point. It runs once per invocation of a grid of workgroups;
//! the workgroup size is fixed when the kernel is built (compile-time specialisation), the number
//! of workgroups is chosen at dispatch.
//!
//! Expressions live in one arena ([`Kernel::exprs`]) and are side-effect free. An expression is
//! evaluated where a [`Stmt::Let`] names it; its value may then be used by statements and
//! expressions that follow in the same block or in blocks nested inside it. Every expression is
//! named by exactly one `Let`. This gives loads a place in time (a load after a store sees the
//! store) without making expressions statements.
//!
//! Each variant's documentation says what it means in HIP/CUDA C++ and in SPIR-V terms; the
//! reference interpreter (`crate::interp`) is the definition where those two could disagree.

use crate::types::{Access, Literal, Scalar};

/// Index of an expression in [`Kernel::exprs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExprId(pub u32);

/// Index of a buffer in [`Kernel::buffers`]; also its binding number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BufferId(pub u32);

/// Index of a scalar parameter in [`Kernel::params`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParamId(pub u32);

/// Index of a workgroup-shared array in [`Kernel::shared`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SharedId(pub u32);

/// Index of a private variable in [`Kernel::vars`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VarId(pub u32);

/// Index of a warpgroup accumulator in [`Kernel::group_accs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupAccId(pub u32);

/// Index of a matrix tile in [`Kernel::tiles`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TileId(pub u32);

/// Optional features a kernel may use. Backends report which they have; a kernel that needs
/// one they lack is not dispatched there (the caller picks a variant without it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Capabilities {
    /// Subgroup builtins and [`SubgroupOp`]s. SPIR-V: `GroupNonUniform{Arithmetic,Shuffle}`
    /// (SPIR-V 1.3); HIP: wavefront shuffles; CUDA: warp `__shfl_*_sync`.
    pub subgroup: bool,
    /// Matrix tiles ([`TileDecl`], [`TileOp`]): a subgroup's 16×16×16 multiply-accumulate on
    /// the device's matrix units. SPIR-V `CooperativeMatrixKHR` (VK_KHR_cooperative_matrix);
    /// CUDA `mma.sync` (sm_80 and later). Devices without matrix units run a scalar variant.
    pub tiles: bool,
    /// The one subgroup width the kernel is written for, where its work is divided by
    /// subgroup (as tile kernels divide their output tiles: naga requires cooperative-matrix
    /// operations in uniform control flow, so no guard may depend on the width at run time).
    /// A device without that width does not run it; the interpreter runs it only at it.
    pub subgroup_width: Option<u32>,
    /// [`CopyOp`]s: copies from global to shared memory that complete while the invocation
    /// goes on. CUDA `cp.async` (sm_80 and later). Other devices run a variant that stages
    /// through registers.
    pub async_copy: bool,
    /// Warpgroup products ([`GroupAccDecl`], [`GroupOp`]): four subgroups of 32 together
    /// multiply operands the tensor cores read straight from shared memory, asynchronously.
    /// CUDA `wgmma.mma_async` (sm_90a: Hopper). Devices without it run the subgroup tiles.
    pub group_mma: bool,
}

/// A global buffer: a runtime-sized array of `elem`, bound at binding `index` of set 0
/// (SPIR-V `StorageBuffer`), or passed as the kernel argument of that position (HIP pointer).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BufferDecl {
    pub name: String,
    pub elem: Scalar,
    pub access: Access,
}

/// A scalar uniform parameter, the same for every invocation of a dispatch. SPIR-V: a member of
/// the push-constant block; HIP: a by-value kernel argument after the buffers. Only 4-byte
/// types (f32, i32, u32).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ParamDecl {
    pub name: String,
    pub ty: Scalar,
}

/// A workgroup-shared array of `len` elements. HIP `__shared__ T name[len]`; SPIR-V a
/// `Workgroup` storage-class variable. Its contents are undefined until written: the interpreter
/// reports a read of an element no invocation has written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SharedDecl {
    pub name: String,
    pub elem: Scalar,
    pub len: u32,
    /// An overlay: the array may occupy the memory of this earlier array (no overlay itself,
    /// at least as many bytes) from its first byte, so that a kernel's phases that never use
    /// both at once (a product's stages, then the block of y it writes) take the memory of
    /// one. CUDA and HIP give it that memory (a pointer to the array's first byte); SPIR-V
    /// and C a variable of its own (naga has no typed aliasing of workgroup memory; C's
    /// arrays are reached through restrict pointers). A kernel must be right either way: the
    /// interpreter holds it to shared memory, where writing an element of one destroys the
    /// elements of the other that share its bytes, and accessing it races with the other's
    /// accesses, copies and products as an access of that array's elements would.
    pub over: Option<SharedId>,
}

impl SharedDecl {
    /// Bytes of the array.
    pub fn bytes(&self) -> u64 {
        u64::from(self.len) * self.elem.size() as u64
    }
}

/// A private (per-invocation) mutable variable, zero-initialised. HIP a local variable; SPIR-V a
/// `Function` storage-class variable.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct VarDecl {
    pub name: String,
    pub ty: Scalar,
}

/// Rows and columns of every [`TileDecl`], and the depth of one [`TileOp::Mma`]: the shape
/// NVIDIA's tensor cores, AMD's WMMA (RDNA3) and every Vulkan driver with cooperative
/// matrices offer for f16 inputs with f32 accumulators.
pub const TILE: u32 = 16;

/// What a tile holds, as its part in `acc = a·b + acc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TileRole {
    /// The left operand: [`TILE`] rows (M) by [`TILE`] columns (K) of f16.
    A,
    /// The right operand: [`TILE`] rows (K) by [`TILE`] columns (N) of f16.
    B,
    /// The accumulator: [`TILE`] rows (M) by [`TILE`] columns (N) of f32.
    Acc,
}

impl TileRole {
    pub fn name(self) -> &'static str {
        match self {
            TileRole::A => "a",
            TileRole::B => "b",
            TileRole::Acc => "acc",
        }
    }

    /// The element type of the memory a tile of this role is loaded from or stored to.
    pub fn elem(self) -> Scalar {
        match self {
            TileRole::A | TileRole::B => Scalar::F16,
            TileRole::Acc => Scalar::F32,
        }
    }
}

/// A matrix tile (needs [`Capabilities::tiles`]): a [`TILE`]×[`TILE`] matrix held by a whole
/// subgroup, each subgroup of the workgroup its own. Its elements are spread over the lanes
/// in a way each target chooses, so kernels reach them only through [`TileOp`]s. SPIR-V: a
/// `Function` variable of `OpTypeCooperativeMatrixKHR` with `Subgroup` scope; CUDA: per-lane
/// registers in `mma.sync`'s fragment layout.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TileDecl {
    pub name: String,
    pub role: TileRole,
}

/// How a tile's elements sit in memory: element (r, c) of a tile at `offset` with `stride` is
/// `offset + r·stride + c` row-major, `offset + c·stride + r` column-major.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TileLayout {
    RowMajor,
    ColMajor,
}

/// Where a tile is loaded from or stored to: a global buffer or a shared array, whose element
/// type is the role's ([`TileRole::elem`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TileMemory {
    Buffer(BufferId),
    Shared(SharedId),
}

/// Operations on tiles. Each is collective over a subgroup: every lane of the subgroup must
/// reach it together (a subgroup is wholly active or wholly inactive), with the same `offset`
/// and `stride`, both multiples of 8 elements (16 bytes of f16, the alignment every target's
/// wide loads need), and the workgroup must be whole subgroups. The interpreter reports each
/// of these as an error; on GPUs they are undefined.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TileOp {
    /// Sets every element to zero. SPIR-V a `ConstantNull` of the type; CUDA zeroed registers.
    Zero { tile: TileId },
    /// Reads the tile's [`TILE`]² elements (f16 for A and B, f32 for Acc). SPIR-V
    /// `OpCooperativeMatrixLoadKHR`; CUDA each lane's fragment elements.
    Load {
        tile: TileId,
        from: TileMemory,
        offset: ExprId,
        stride: ExprId,
        layout: TileLayout,
    },
    /// `acc = a·b + acc` over the tiles' [`TILE`] columns of `a` and rows of `b`. The f16
    /// products are exact in f32; the order and precision in which a device sums them is its
    /// own (NVIDIA's tensor cores do not round like an f32 FMA chain), which the interpreter
    /// defines as f32 additions in order of k after the accumulator. SPIR-V
    /// `OpCooperativeMatrixMulAddKHR`; CUDA two `mma.sync.m16n8k16`.
    Mma { acc: TileId, a: TileId, b: TileId },
    /// Writes an accumulator's elements (f32). SPIR-V `OpCooperativeMatrixStoreKHR`.
    Store {
        tile: TileId,
        to: TileMemory,
        offset: ExprId,
        stride: ExprId,
        layout: TileLayout,
    },
}

/// Invocations of a warpgroup: the four subgroups of 32 that issue a [`GroupOp`] together.
pub const GROUP_INVOCATIONS: u32 = 128;
/// Rows (M) of a [`GroupAccDecl`] and of the A operand of a [`GroupOp::Mma`].
pub const GROUP_ROWS: u32 = 64;
/// Columns of K one [`GroupOp::Mma`] takes: one 128-byte row of f16 per operand row.
pub const GROUP_K: u32 = 64;
/// Elements of a [`GroupOp::Mma`] operand's swizzle atom: 8 rows of [`GROUP_K`], 1024 bytes,
/// the alignment of an operand's offset.
pub const GROUP_ATOM: u32 = 8 * GROUP_K;
/// The widest accumulator, in columns (N).
pub const GROUP_MAX_COLS: u32 = 256;

/// A warpgroup accumulator (needs [`Capabilities::group_mma`]): [`GROUP_ROWS`] × `cols` f32
/// (`cols` a multiple of 8 up to [`GROUP_MAX_COLS`]), held by the [`GROUP_INVOCATIONS`]
/// invocations of one warpgroup (invocations `128·g` to `128·g + 127` form warpgroup `g`),
/// each warpgroup its own. Its elements are spread over the invocations' registers, so
/// kernels reach them only through [`GroupOp`]s. CUDA: `cols / 2` floats per invocation in
/// `wgmma`'s accumulator layout.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupAccDecl {
    pub name: String,
    pub cols: u32,
}

/// The element of a [`GroupOp::Mma`] operand at row `r`, column `c` (K, below [`GROUP_K`]),
/// relative to the operand's offset: rows of [`GROUP_K`] f16 (128 bytes) whose 16-byte lines
/// are permuted by the row's place in its group of 8 (line `c / 8` at `(c / 8) ^ (r % 8)`), so
/// that the eight rows a tensor core reads at once fall in different shared-memory banks.
/// This is `wgmma`'s 128-byte swizzle of K-major operands, which the hardware applies to
/// address bits, hence the [`GROUP_ATOM`] alignment of offsets.
pub const fn group_swizzle(r: u32, c: u32) -> u32 {
    r * GROUP_K + (((c / 8) ^ (r % 8)) * 8) + c % 8
}

/// Warpgroup operations. Each is collective over a warpgroup: all its invocations reach it
/// together with the same offsets, and the workgroup is whole warpgroups of subgroups of 32.
/// The interpreter reports each of these as an error; on GPUs they are undefined.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum GroupOp {
    /// Sets every element to zero.
    Zero { acc: GroupAccId },
    /// `acc[r][n] += Σ_c a[r][c]·b[n][c]` for `r` < [`GROUP_ROWS`], `n` < the accumulator's
    /// columns, `c` < [`GROUP_K`], where `a` and `b` are f16 shared arrays laid out as
    /// [`group_swizzle`] says from `a_at` and `b_at` (multiples of [`GROUP_ATOM`]): both
    /// operands K-major, as x and a weight's rows are. The f16 products are exact in f32; the
    /// interpreter sums them in order of `c` after the accumulator (tensor cores sum
    /// otherwise). It starts the product, which reads its operands and updates the
    /// accumulator until a [`GroupOp::Wait`] retires it: until then no invocation may write
    /// the operands' elements, and the warpgroup may not read, zero or store the accumulator
    /// (another product into it may follow). The lowering makes shared-memory writes before
    /// a workgroup barrier visible to the products after it. CUDA: `wgmma.fence`, four
    /// `wgmma.mma_async.m64nNk16` (one per 16 columns of K), `wgmma.commit_group`.
    Mma {
        acc: GroupAccId,
        a: SharedId,
        a_at: ExprId,
        b: SharedId,
        b_at: ExprId,
    },
    /// Waits until at most `pending` of the warpgroup's products are unfinished (products
    /// finish in the order they start). CUDA `wgmma.wait_group`.
    Wait { pending: u32 },
    /// Writes the accumulator's elements (f32), element (r, n) at `offset + r·stride + n`.
    Store {
        acc: GroupAccId,
        to: TileMemory,
        offset: ExprId,
        stride: ExprId,
    },
}

/// Bytes one [`CopyOp::Start`] moves: a 16-byte line, the widest single copy of every target
/// (CUDA `cp.async` of 16 bytes, a `uint4`).
pub const COPY_BYTES: u32 = 16;

/// Asynchronous copies from global to shared memory (needs [`Capabilities::async_copy`]), so
/// that a block of the next step moves while the invocation computes on the current one,
/// without passing through its registers. Each invocation's copies form *batches*: those
/// started since its last [`CopyOp::Commit`] join the next one, and [`CopyOp::Wait`]
/// waits for its own batches only; a [`Stmt::Barrier`] after the wait makes the copied
/// elements visible to the workgroup.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CopyOp {
    /// Copies [`COPY_BYTES`] of consecutive elements from `from[index]` on to `to[at]` on.
    /// The buffer (readable, not written by the kernel) and the shared array have the same
    /// element type of 2 or 4 bytes, and both byte addresses are multiples of
    /// [`COPY_BYTES`] (the buffer's binding offset included). Until the wait that retires its
    /// batch, the destination is undefined and no invocation may read or write it. CUDA
    /// `cp.async.cg.shared.global` of 16 bytes.
    Start {
        from: BufferId,
        index: ExprId,
        to: SharedId,
        at: ExprId,
    },
    /// Closes the batch of copies started since the last commit. CUDA
    /// `cp.async.commit_group`.
    Commit,
    /// Waits until at most `pending` of the invocation's committed batches, the latest ones,
    /// are still in flight (copies not yet committed are not waited for). CUDA
    /// `cp.async.wait_group pending`; at most [`MAX_PENDING`].
    Wait { pending: u32 },
}

/// The most batches a [`CopyOp::Wait`] may leave in flight.
pub const MAX_PENDING: u32 = 7;

/// Builtin values. Axes are 0 = x, 1 = y, 2 = z. All are `U32` except where noted.
///
/// Workgroup ids and counts are *logical*: a backend may fold a grid wider than its
/// per-dimension limit (65535 workgroups on Vulkan) into more dimensions, and its lowering maps
/// the physical ids back, so kernels never see the fold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// `workgroup_id * workgroup_size + local_id` on one axis. HIP
    /// `blockIdx*blockDim+threadIdx`; SPIR-V computed from `WorkgroupId` (see above).
    GlobalId(u8),
    /// Invocation index within the workgroup on one axis. HIP `threadIdx`; SPIR-V
    /// `LocalInvocationId`.
    LocalId(u8),
    /// Linear index within the workgroup, `x + y*sx + z*sx*sy`. SPIR-V
    /// `LocalInvocationIndex`.
    LocalIndex,
    /// The workgroup's id on one axis. HIP `blockIdx`; SPIR-V `WorkgroupId` (unfolded).
    WorkgroupId(u8),
    /// Number of workgroups in the dispatch on one axis. HIP `gridDim`; SPIR-V a push constant
    /// written by the backend.
    NumWorkgroups(u8),
    /// Width of a subgroup (needs [`Capabilities::subgroup`]). HIP `warpSize`; SPIR-V
    /// `SubgroupSize`. Never assume a value: 8 on lavapipe, 32 on NVIDIA, 32 or 64 on AMD.
    SubgroupSize,
    /// Lane within the subgroup (needs the capability). SPIR-V `SubgroupLocalInvocationId`.
    SubgroupInvocationId,
    /// Which subgroup of the workgroup this invocation is in (needs the capability). SPIR-V
    /// `SubgroupId`; HIP `LocalIndex / warpSize`.
    SubgroupId,
}

/// Unary operations. Float ops act on F32 and F16; integer ops on I32 and U32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// Arithmetic negation (floats, I32 wrapping). SPIR-V `OpFNegate`/`OpSNegate`.
    Neg,
    /// Bitwise complement on integers, logical not on Bool. SPIR-V `OpNot`/`OpLogicalNot`.
    Not,
    /// Absolute value (floats, I32 wrapping at `i32::MIN`).
    Abs,
    /// e^x. HIP `expf`; SPIR-V GLSL.std.450 `Exp`; the interpreter and C as [`crate::exp`]
    /// spells it out.
    Exp,
    /// Natural logarithm.
    Log,
    Sqrt,
    /// 1/sqrt(x). HIP `rsqrtf`; SPIR-V `InverseSqrt`.
    Rsqrt,
    Sin,
    Cos,
    Tanh,
    Floor,
    /// Number of set bits (integers). HIP `__popc`; SPIR-V `OpBitCount`.
    CountOnes,
    /// The f16 whose bits are the low 16 bits of a `U32` (the high ones ignored), as `F32`:
    /// exact for every half, subnormals, infinities and NaNs included. A block's f16 scales
    /// come out of a word already loaded, where assembling one costs some twenty integer
    /// operations. CUDA and HIP `__half2float(__ushort_as_half(x))`; SPIR-V GLSL.std.450
    /// `UnpackHalf2x16`'s first component; C through `_Float16`.
    HalfFromBits,
}

/// Binary operations. Both operands have the same type, except shifts, whose right operand is
/// always `U32`; the result has it too, except comparisons (`Bool`) and `Dot4I8` (`I32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// Floats: IEEE division. Integers: truncating; division by zero is an error in the
    /// interpreter (undefined on GPUs).
    Div,
    /// Integers: remainder with the sign of the dividend (C `%`); zero divisor is an error.
    /// Floats: `a - b * trunc(a / b)` (C `fmodf`).
    Rem,
    /// Minimum. Floats: with a NaN operand the result is unspecified (SPIR-V `FMin` leaves it
    /// so); the interpreter returns the other operand, as C `fminf` does.
    Min,
    /// Maximum; NaN as for `Min`.
    Max,
    /// x^y for floats (`powf`); x must be non-negative for a defined result.
    Pow,
    /// Bitwise and on integers, logical and on Bool (both sides evaluated).
    And,
    Or,
    Xor,
    /// Shift left; the amount is taken modulo 32 (as WGSL and x86 do), so no shift is undefined.
    Shl,
    /// Shift right: arithmetic for I32, logical for U32; amount modulo 32.
    Shr,
    /// Packed 8-bit dot product: both operands `U32`, each four two's-complement bytes;
    /// the `I32` result is `Σ a.byte[k] · b.byte[k]`, exact (at most 4·128² in magnitude).
    /// SPIR-V: `OpSDot` (naga's `Dot4I8Packed`) where the device has
    /// `shaderIntegerDotProduct`, else the bytes extracted and multiplied. CUDA: `__dp4a`.
    /// HIP: `v_dot4_i32_i8` where the arch has it (gfx906, CDNA, gfx1011/1012, gfx103x),
    /// `v_dot4_i32_iu8` on gfx11 and gfx12, else the four byte products, as in C.
    Dot4I8,
    /// As `Dot4I8` with unsigned bytes and a `U32` result (at most 4·255²).
    Dot4U8,
    /// Both `F32` operands rounded to f16 (to nearest, ties to even), the left one's bits in
    /// the low half of the `U32` result and the right one's in the high half: two halves a
    /// word, which a kernel stores with one store where each half took one of its own. A NaN
    /// gives some NaN's bits. SPIR-V GLSL.std.450 `PackHalf2x16`; CUDA `__float2half_rn` and
    /// `__half_as_ushort` of each; HIP and C through `_Float16`.
    PackHalves,
    /// Comparisons yield Bool. Float comparisons with a NaN are false except `Ne`.
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl BinaryOp {
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }
}

/// Subgroup collective operations (need [`Capabilities::subgroup`]). Every invocation of the
/// subgroup that is active at this point takes part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubgroupOp {
    /// Sum over the active lanes. SPIR-V `OpGroupNonUniformFAdd/IAdd Reduce`; HIP/CUDA a
    /// butterfly of `__shfl_xor`. The interpreter, and the C backend bit for bit, fold Sum,
    /// Min and Max in a tree: lane `i` takes lane `i + h`, `h` halving from the largest power
    /// of two below the subgroup's width, and lane 0 holds the result.
    Sum,
    Min,
    Max,
    /// The value of lane `self ^ mask`, where `mask` is the expression given (U32, uniform
    /// across the subgroup and less than the subgroup size). SPIR-V
    /// `OpGroupNonUniformShuffleXor`; HIP `__shfl_xor`.
    ShuffleXor(ExprId),
}

impl SubgroupOp {
    /// The folds of a reduction's tree over `width` lanes, in order: `(h, n)` folds lane
    /// `i + h` into lane `i` for every `i < n`, `h` the largest power of two below the lanes
    /// still holding values, until lane 0 holds the result.
    pub fn folds(width: usize) -> Vec<(usize, usize)> {
        let mut folds = vec![];
        let mut n = width;
        while n > 1 {
            let h = 1 << (n - 1).ilog2();
            folds.push((h, n - h));
            n = h;
        }
        folds
    }
}

/// An expression: pure, evaluated where its [`Stmt::Let`] stands.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Expr {
    Literal(Literal),
    Param(ParamId),
    Builtin(Builtin),
    /// Current value of a private variable.
    Var(VarId),
    /// `buffer[index]`, index U32 in elements; storage-only types widen (see [`Scalar`]).
    /// Out of bounds is an error in the interpreter and undefined on GPUs.
    Load {
        buffer: BufferId,
        index: ExprId,
    },
    /// `buffer[4·quad + lane]` of a `U32` buffer: word `lane` (0..4) of its `quad`-th group of
    /// four words, which starts 16 bytes into the binding times `quad`; the binding's offset
    /// must be a multiple of [`COPY_BYTES`] ([`Kernel::line_sources`], which CUDA and HIP check
    /// at dispatch). CUDA/HIP read a quad with one 16-byte load however many of its
    /// lanes are used (`((const uint4*)buffer)[quad].x`…, which the compilers merge), where
    /// four `Load`s of the words would each be a load of its own: a product that streams
    /// weights issues a quarter of the loads. SPIR-V and C load the word.
    LoadLane {
        buffer: BufferId,
        quad: ExprId,
        lane: u8,
    },
    /// `shared[index]`, index U32.
    LoadShared {
        array: SharedId,
        index: ExprId,
    },
    Unary {
        op: UnaryOp,
        arg: ExprId,
    },
    Binary {
        op: BinaryOp,
        lhs: ExprId,
        rhs: ExprId,
    },
    /// `a * b + c` for floats, fused where the target has it (HIP `fmaf`, SPIR-V `Fma`).
    Fma {
        a: ExprId,
        b: ExprId,
        c: ExprId,
    },
    /// `cond ? accept : reject`; both sides are evaluated. SPIR-V `OpSelect`.
    Select {
        cond: ExprId,
        accept: ExprId,
        reject: ExprId,
    },
    /// Value conversion: float↔float rounds to nearest even; float→int truncates toward zero
    /// (out of range or NaN is an error in the interpreter); int→float rounds to nearest; int↔int
    /// reinterprets the two's-complement bits; Bool→number gives 0 or 1; number→Bool is `!= 0`.
    Cast {
        arg: ExprId,
        to: Scalar,
    },
    /// Reinterpret the bits of a 4-byte value as another 4-byte type (F32, I32, U32).
    Bitcast {
        arg: ExprId,
        to: Scalar,
    },
    Subgroup {
        op: SubgroupOp,
        arg: ExprId,
    },
}

impl Expr {
    /// The expressions this one reads, in order.
    pub fn operands(&self) -> Vec<ExprId> {
        match *self {
            Expr::Literal(_) | Expr::Param(_) | Expr::Builtin(_) | Expr::Var(_) => vec![],
            Expr::Load { index, .. } | Expr::LoadShared { index, .. } => vec![index],
            Expr::LoadLane { quad, .. } => vec![quad],
            Expr::Unary { arg, .. } | Expr::Cast { arg, .. } | Expr::Bitcast { arg, .. } => {
                vec![arg]
            }
            Expr::Binary { lhs, rhs, .. } => vec![lhs, rhs],
            Expr::Fma { a, b, c } => vec![a, b, c],
            Expr::Select {
                cond,
                accept,
                reject,
            } => vec![cond, accept, reject],
            Expr::Subgroup { op, arg } => match op {
                SubgroupOp::ShuffleXor(m) => vec![arg, m],
                _ => vec![arg],
            },
        }
    }
}

/// A block of statements, run in order.
pub type Block = Vec<Stmt>;

/// A statement.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Stmt {
    /// Evaluate an expression here (see the module documentation).
    Let(ExprId),
    /// Set a private variable.
    Assign { var: VarId, value: ExprId },
    /// `buffer[index] = value`; the buffer must be writable and not storage-only.
    Store {
        buffer: BufferId,
        index: ExprId,
        value: ExprId,
    },
    /// A hint that the invocation will soon read `buffer[index]` (U32 index, in bounds, as a
    /// load's; the buffer readable): the memory holding it is brought nearer. It changes no
    /// result. CUDA: `prefetch.L2`, into the L2 cache every SM shares, which writes reach too,
    /// so a later load never sees a stale value. Its use is before the kernel waits for the
    /// dispatch ahead of it: the CUDA lowering runs the body's leading prefetches, with the
    /// memory-free `Let`s and loops they need ([`Kernel::prefetch_prologue`]), before
    /// `griddepcontrol.wait`, so that a kernel launched while the one before it still runs
    /// starts fetching its weights. C: `__builtin_prefetch` once per workgroup where the
    /// index is workgroup-uniform outside masked control flow (a CPU's weights streamed ahead
    /// of a product), else nothing. HIP and SPIR-V: nothing (the interpreter checks the
    /// index).
    Prefetch { buffer: BufferId, index: ExprId },
    /// `shared[index] = value`.
    StoreShared {
        array: SharedId,
        index: ExprId,
        value: ExprId,
    },
    /// `shared[index]` and `shared[index + 1]` of an F16 array set to the halves of a `U32`
    /// `value`, its low 16 bits then its high 16 bits, as f16 bits: two halves rounded or
    /// loaded together reach shared memory in one store. `index` must be even, and a barrier
    /// must come between the store and any access to the two elements, the storing
    /// invocation's own included (the interpreter reports both). CUDA and HIP: one 32-bit
    /// store (the arrays are aligned to 4 bytes at least); SPIR-V: `UnpackHalf2x16`'s
    /// components, converted exactly, in two stores; C: two stores of the halves' bits.
    StoreSharedPair {
        array: SharedId,
        index: ExprId,
        value: ExprId,
    },
    If {
        cond: ExprId,
        then: Block,
        otherwise: Block,
    },
    /// `for (var = start; var < end; var += step) body`, with `var` a U32 private variable that
    /// the body reads through [`Expr::Var`] and must not assign. `start` and `end` are evaluated
    /// once, before the first iteration; `step` is a non-zero constant (the validator checks).
    /// `end + step` must not overflow u32 (the interpreter reports it).
    Loop {
        var: VarId,
        start: ExprId,
        end: ExprId,
        step: u32,
        body: Block,
    },
    /// Workgroup barrier: every invocation of the workgroup waits here, and its earlier writes to
    /// shared and global memory become visible to the others. HIP `__syncthreads()`; SPIR-V
    /// `OpControlBarrier Workgroup Workgroup AcquireRelease|WorkgroupMemory|UniformMemory`.
    /// Must be reached by all invocations of the workgroup together (uniform control flow);
    /// the interpreter reports a barrier reached by only some of them.
    Barrier,
    /// An operation on matrix tiles (needs [`Capabilities::tiles`]); see [`TileOp`].
    Tile(TileOp),
    /// An asynchronous copy (needs [`Capabilities::async_copy`]); see [`CopyOp`].
    Copy(CopyOp),
    /// A warpgroup product (needs [`Capabilities::group_mma`]); see [`GroupOp`].
    Group(GroupOp),
}

/// One compute kernel. Build it with [`crate::KernelBuilder`], check it with
/// [`crate::validate`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    /// Entry point name: `[A-Za-z_][A-Za-z0-9_]*`.
    pub name: String,
    pub workgroup_size: [u32; 3],
    pub capabilities: Capabilities,
    pub buffers: Vec<BufferDecl>,
    pub params: Vec<ParamDecl>,
    pub shared: Vec<SharedDecl>,
    pub vars: Vec<VarDecl>,
    pub tiles: Vec<TileDecl>,
    pub group_accs: Vec<GroupAccDecl>,
    pub exprs: Vec<Expr>,
    pub body: Block,
    /// Buffers no dispatch of the sequence the kernel runs in writes: the host writes them
    /// between sequences, as the executor writes a decode step's position before replaying the
    /// step. Read-only in the kernel. A backend that starts a kernel while the one before it
    /// still runs may read them before it waits for that one ([`Kernel::prefetch_prologue`]);
    /// every other target ignores the mark.
    pub settled: Vec<BufferId>,
    /// Workgroups a multiprocessor should hold at once: the CUDA lowering's minimum in
    /// `__launch_bounds__`, so that the compiler keeps each invocation's registers within
    /// that share of the register file (spilling if it must). Where shared memory allows that
    /// many, a kernel a few registers over the share would otherwise run one workgroup fewer.
    /// Every other target ignores it (HIP's second bound counts waves per SIMD instead).
    pub min_resident: Option<u32>,
}

impl Kernel {
    pub fn expr(&self, id: ExprId) -> &Expr {
        &self.exprs[id.0 as usize]
    }

    /// Whether any expression of the kernel is the unary operation `op` (a lowering that
    /// needs a helper or a capability for it asks).
    pub fn uses_unary(&self, op: UnaryOp) -> bool {
        self.exprs
            .iter()
            .any(|e| matches!(*e, Expr::Unary { op: o, .. } if o == op))
    }

    /// Whether the kernel stores pairs of halves into shared memory ([`Stmt::StoreSharedPair`]).
    pub fn stores_shared_pairs(&self) -> bool {
        let pair = |s: &Stmt| matches!(s, Stmt::StoreSharedPair { .. });
        self.body.iter().any(|s| holds(s, &pair))
    }

    /// Whether any expression of the kernel is the binary operation `op`.
    pub fn uses_binary(&self, op: BinaryOp) -> bool {
        self.exprs
            .iter()
            .any(|e| matches!(*e, Expr::Binary { op: o, .. } if o == op))
    }

    /// Invocations per workgroup.
    pub fn invocations(&self) -> u32 {
        self.workgroup_size.iter().product()
    }

    /// Bytes of workgroup-shared memory the kernel declares, each overlay
    /// ([`SharedDecl::over`]) apart from the array it may share: the most a lowering takes.
    pub fn shared_bytes(&self) -> u64 {
        self.shared.iter().map(SharedDecl::bytes).sum()
    }

    /// Bytes of workgroup-shared memory where each overlay ([`SharedDecl::over`]) lies in
    /// the array it shares, as CUDA and HIP lay them out.
    pub fn overlaid_shared_bytes(&self) -> u64 {
        self.shared
            .iter()
            .filter(|s| s.over.is_none())
            .map(SharedDecl::bytes)
            .sum()
    }

    /// The arrays that share memory with array `a`: the one it overlays and those overlaying
    /// it ([`SharedDecl::over`]).
    pub fn shared_partners(&self, a: SharedId) -> Vec<SharedId> {
        let own = self.shared.get(a.0 as usize).and_then(|s| s.over);
        own.into_iter()
            .chain(
                (0..self.shared.len() as u32)
                    .map(SharedId)
                    .filter(|&b| self.shared[b.0 as usize].over == Some(a)),
            )
            .collect()
    }

    /// How many of the body's first statements only prefetch ([`Stmt::Prefetch`]): prefetches,
    /// `Let`s of expressions that read no memory but [`Kernel::settled`] buffers, and loops and
    /// ifs made of these. A backend that overlaps a kernel with the one before it may run these
    /// before waiting for it.
    pub fn prefetch_prologue(&self) -> usize {
        let n = self
            .body
            .iter()
            .take_while(|s| self.only_prefetches(s))
            .count();
        // Without a prefetch among them there is nothing to run early.
        if self.body[..n].iter().any(prefetches) {
            n
        } else {
            0
        }
    }

    /// Whether the kernel has a [`Stmt::Prefetch`] anywhere.
    pub fn has_prefetch(&self) -> bool {
        self.body.iter().any(prefetches)
    }

    fn only_prefetches(&self, s: &Stmt) -> bool {
        match s {
            Stmt::Prefetch { .. } => true,
            Stmt::Let(e) => !self.reads_memory(*e),
            Stmt::Loop {
                start, end, body, ..
            } => {
                !self.reads_memory(*start)
                    && !self.reads_memory(*end)
                    && body.iter().all(|s| self.only_prefetches(s))
            }
            Stmt::If {
                cond,
                then,
                otherwise,
            } => {
                !self.reads_memory(*cond)
                    && then
                        .iter()
                        .chain(otherwise)
                        .all(|s| self.only_prefetches(s))
            }
            _ => false,
        }
    }

    /// Whether evaluating `e` reads a buffer that is not [`Kernel::settled`], shared memory or
    /// another invocation's value.
    fn reads_memory(&self, e: ExprId) -> bool {
        let expr = self.expr(e);
        let reads = match expr {
            Expr::Load { buffer, .. } | Expr::LoadLane { buffer, .. } => {
                !self.settled.contains(buffer)
            }
            Expr::LoadShared { .. } | Expr::Subgroup { .. } => true,
            _ => false,
        };
        reads || expr.operands().into_iter().any(|o| self.reads_memory(o))
    }

    /// The buffers the kernel reads [`COPY_BYTES`] at a time, whose binding offsets must be
    /// multiples of it: those its [`CopyOp::Start`]s copy from and those it loads as quads
    /// ([`Expr::LoadLane`]).
    pub fn line_sources(&self) -> Vec<BufferId> {
        fn walk(block: &[Stmt], out: &mut Vec<BufferId>) {
            for s in block {
                match s {
                    Stmt::Copy(CopyOp::Start { from, .. }) if !out.contains(from) => {
                        out.push(*from)
                    }
                    Stmt::Loop { body, .. } => walk(body, out),
                    Stmt::If {
                        then, otherwise, ..
                    } => {
                        walk(then, out);
                        walk(otherwise, out);
                    }
                    _ => {}
                }
            }
        }
        let mut out = vec![];
        walk(&self.body, &mut out);
        for e in &self.exprs {
            if let Expr::LoadLane { buffer, .. } = *e {
                if !out.contains(&buffer) {
                    out.push(buffer);
                }
            }
        }
        out
    }
}

/// Whether `s` is or holds a [`Stmt::Prefetch`].
fn prefetches(s: &Stmt) -> bool {
    holds(s, &|s| matches!(s, Stmt::Prefetch { .. }))
}

/// Whether `s`, or a statement in a loop or branch it is, is one that `is` picks.
fn holds(s: &Stmt, is: &impl Fn(&Stmt) -> bool) -> bool {
    is(s)
        || match s {
            Stmt::Loop { body, .. } => body.iter().any(|s| holds(s, is)),
            Stmt::If {
                then, otherwise, ..
            } => then.iter().chain(otherwise).any(|s| holds(s, is)),
            _ => false,
        }
}

//! A printer of trine statements and expressions as C-family source, shared by every lowering
//! to a C dialect: HIP and CUDA C++ in [`crate::hip`], plain C for the CPU in [`crate::c`].
//!
//! Every expression becomes one `const T eN = ...;` at its `Let`, so operands are always plain
//! names and no operator precedence can leak between expressions. Where dialects spell a thing
//! differently (builtins, barriers, bit casts, a few intrinsics) the printer asks a
//! [`Spelling`]; everything else is C99 plus the `trine_*` helpers each dialect's prelude
//! defines:
//! - `trine_f16`, `trine_h2f`, `trine_f2h`, `trine_h_bits`: the f16 type, its exact widening to
//!   float, its round-to-nearest-even narrowing, and a value from its bit pattern;
//! - `trine_shfl_xor_T`, `trine_sg_{sum,min,max}_T` for T in f32, f16, i32, u32 (see
//!   [`subgroup_fn`]).

use std::collections::HashSet;
use std::fmt::Write;
use trine_ir::{
    BinaryOp, Builtin, CopyOp, Expr, ExprId, GroupOp, Info, Kernel, Literal, Scalar, Stmt,
    SubgroupOp, TileLayout, TileMemory, TileOp, UnaryOp,
};

/// Functions every C dialect has, under names that differ between dialects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Intrinsic {
    /// `float f(float)`: 1/sqrt(x).
    Rsqrt,
    /// `int f(unsigned int)`: number of set bits.
    PopCount,
    /// `unsigned int f(float)`: the bits of a float.
    FloatAsUint,
    /// `float f(unsigned int)`: a float from its bits.
    UintAsFloat,
    /// `int f(float)`.
    FloatAsInt,
    /// `float f(int)`.
    IntAsFloat,
    /// `float f(float, float)`: the smaller operand; with one NaN operand, the other (C `fminf`).
    FMin,
    /// `float f(float, float)`: the larger operand; NaN as for [`Intrinsic::FMin`].
    FMax,
    /// `float f(float)` transcendentals and `float f(float, float)` power.
    Exp,
    Log,
    Sin,
    Cos,
    Tanh,
    Pow,
}

/// How a packed dot product reads the bytes of its two words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ByteSigns {
    /// Both signed ([`BinaryOp::Dot4I8`]).
    Signed,
    /// Both unsigned ([`BinaryOp::Dot4U8`]).
    Unsigned,
    /// The first unsigned, the second signed: a signed product whose first word's bytes are
    /// known to be below 128 (see [`Spelling::mixed_dot4`]).
    UnsignedBySigned,
}

/// Whether every byte of expression `id` is below 128 for certain: a mask by a literal
/// without any byte's top bit (a Q4 block's nibbles, `codes & 0x0f0f0f0f`), so that its
/// bytes read as signed or unsigned are the same.
fn small_bytes(k: &Kernel, id: ExprId) -> bool {
    let literal = |e: ExprId| match *k.expr(e) {
        Expr::Literal(Literal::U32(c)) => c & 0x8080_8080 == 0,
        _ => false,
    };
    match *k.expr(id) {
        Expr::Binary {
            op: BinaryOp::And,
            lhs,
            rhs,
        } => literal(lhs) || literal(rhs),
        _ => false,
    }
}

/// The operands of a signed packed dot product, the one with bytes below 128 for certain
/// first, where one has them ([`small_bytes`]); the product is symmetric.
fn unsigned_first(k: &Kernel, lhs: ExprId, rhs: ExprId) -> Option<(ExprId, ExprId)> {
    if small_bytes(k, lhs) {
        Some((lhs, rhs))
    } else if small_bytes(k, rhs) {
        Some((rhs, lhs))
    } else {
        None
    }
}

/// The packed dots summed by the I32 additions rooted at `id`, where every term is a
/// [`BinaryOp::Dot4I8`] and either all have one operand of small bytes (see
/// [`unsigned_first`]; `true`, their unsigned and signed operands) or none does (`false`).
/// The regrouping is exact, the sums being wrapping integer ones: a dialect with
/// [`Spelling::mixed_dot4`] takes four at a time as one call, `trine_dot16u8i8` or
/// `trine_dot16i8` (x86's `vpdpbusd` accumulates, where four calls of the 16-lane product GCC
/// does not inline cost four calls), and the C lowering takes a whole sum over every
/// invocation at once between regions (`c::dots`).
pub(crate) fn dot_sum(
    k: &Kernel,
    info: &Info,
    id: ExprId,
) -> Option<(Vec<(ExprId, ExprId)>, bool)> {
    match *k.expr(id) {
        Expr::Binary {
            op: BinaryOp::Add,
            lhs,
            rhs,
        } if info.ty(lhs) == Scalar::I32 => {
            let (mut dots, small) = dot_sum(k, info, lhs)?;
            let (more, also) = dot_sum(k, info, rhs)?;
            (small == also).then(|| {
                dots.extend(more);
                (dots, small)
            })
        }
        Expr::Binary {
            op: BinaryOp::Dot4I8,
            lhs,
            rhs,
        } => Some(match unsigned_first(k, lhs, rhs) {
            Some(d) => (vec![d], true),
            None => (vec![(lhs, rhs)], false),
        }),
        _ => None,
    }
}

/// A packed dot product of two `unsigned int` expressions as the four byte products, which GCC
/// and clang keep exact (a conversion to `signed char` wraps on both).
pub(crate) fn dot4_bytes(signs: ByteSigns, a: &str, b: &str) -> String {
    let term = |k: u32| {
        let s = 8 * k;
        match signs {
            ByteSigns::Signed => {
                format!("(int)(signed char)({a} >> {s}u) * (int)(signed char)({b} >> {s}u)")
            }
            ByteSigns::Unsigned => format!("(({a} >> {s}u) & 255u) * (({b} >> {s}u) & 255u)"),
            ByteSigns::UnsignedBySigned => {
                format!("(int)(({a} >> {s}u) & 255u) * (int)(signed char)({b} >> {s}u)")
            }
        }
    };
    let terms: Vec<String> = (0..4).map(term).collect();
    format!("({})", terms.join(" + "))
}

/// Whether the kernel has packed dot products, whose helpers a prelude then defines.
pub(crate) fn uses_dot4(k: &Kernel) -> bool {
    k.exprs.iter().any(|e| {
        matches!(
            e,
            Expr::Binary {
                op: BinaryOp::Dot4I8 | BinaryOp::Dot4U8,
                ..
            }
        )
    })
}

/// Whether the kernel computes or stores f16 anywhere, or converts f16 bits, so that a
/// prelude defines its type and conversions.
pub(crate) fn uses_f16(k: &Kernel, info: &Info) -> bool {
    info.holds_f16(k)
        || k.uses_unary(UnaryOp::HalfFromBits)
        || k.uses_binary(BinaryOp::PackHalves)
        || k.stores_shared_pairs()
}

/// What a C dialect spells its own way.
pub(crate) trait Spelling {
    /// A `U32` expression for the builtin, for a kernel of the given workgroup size.
    fn builtin(&self, b: Builtin, workgroup_size: [u32; 3]) -> String;
    /// The statement (without `;`) of a workgroup barrier.
    fn barrier(&self) -> &'static str;
    fn intrinsic(&self, f: Intrinsic) -> &'static str;
    /// The statement (without `;`) of [`Stmt::Prefetch`] of the element at `pointer`, or
    /// nothing where the dialect has no use for the hint.
    fn prefetch(&self, _pointer: &str) -> Option<String> {
        None
    }
    /// [`Stmt::StoreSharedPair`]: elements `index` and `index + 1` of the f16 array `array`
    /// set to the halves of the `unsigned int` expression `value`; by default each as its
    /// bits, in two stores.
    fn store_pair(&self, array: &str, index: &str, value: &str) -> String {
        format!(
            "{array}[{index}] = trine_h_bits((unsigned short)({value})); \
             {array}[({index}) + 1u] = trine_h_bits((unsigned short)(({value}) >> 16));"
        )
    }
    /// [`Expr::LoadLane`]: word `lane` of quad `quad` of the `unsigned int` buffer `buffer`,
    /// where the dialect reads a quad at once; `None` to load the word on its own.
    fn quad_lane(&self, _buffer: &str, _quad: &str, _lane: u8) -> Option<String> {
        None
    }
    /// [`BinaryOp::Dot4I8`] (`signed`) or [`BinaryOp::Dot4U8`] of two `unsigned int`
    /// expressions: a call of the prelude's `trine_dot4i8` or `trine_dot4u8`, which each
    /// dialect defines its own way (on [`dot4_bytes`] where it has nothing better).
    fn dot4(&self, signed: bool, a: &str, b: &str) -> String {
        let f = if signed {
            "trine_dot4i8"
        } else {
            "trine_dot4u8"
        };
        format!("{f}({a}, {b})")
    }
    /// The I32 or U32 (`to`) value of the float expression `x`, truncated toward zero. Out of
    /// range is an error in the interpreter; by default it is left to the dialect (undefined in
    /// C and C++), which a dialect may define instead.
    fn float_to_int(&self, to: Scalar, x: &str) -> String {
        format!("({}){x}", value_type(to))
    }
    /// The bound a `for` loop stepping by `step` compares its variable with, given the loop's
    /// `end`. By default `end` itself; a dialect may clamp it so the variable cannot wrap.
    fn loop_end(&self, end: &str, _step: u32) -> String {
        end.to_string()
    }
    /// Whether memory indices are computed in 64 bits through their additions, subtractions
    /// and multiplications (see [`Printer`]): for C, whose vectoriser sees an index that may
    /// wrap at 2^32 as a gather; GPU dialects keep 32-bit indices.
    fn wide_indices(&self) -> bool {
        false
    }
    /// Whether [`BinaryOp::Dot4I8`] with one operand known to hold non-negative bytes calls
    /// `trine_dot4u8i8(that operand, the other)`: the same value, which a dialect may compute
    /// with fewer instructions (x86's `vpdpbusd` multiplies unsigned bytes by signed ones).
    fn mixed_dot4(&self) -> bool {
        false
    }
    /// With [`Spelling::wide_indices`], the 64-bit value of a builtin that is itself a sum
    /// (the global id), for its shadow; `None` for the others.
    fn wide_builtin(&self, _b: Builtin, _workgroup_size: [u32; 3]) -> Option<String> {
        None
    }
}

/// C type of a value of type `ty`.
pub(crate) fn value_type(ty: Scalar) -> &'static str {
    match ty {
        Scalar::F32 => "float",
        Scalar::F16 => "trine_f16",
        Scalar::I32 => "int",
        Scalar::U32 => "unsigned int",
        Scalar::Bool => "bool",
        Scalar::BF16 | Scalar::U8 | Scalar::I8 => elem_type(ty),
    }
}

/// C type of an element of a buffer or shared array of type `ty`. bf16 has no arithmetic type
/// in the common subset of the dialects: it is kept as its bits and widened at the load.
pub(crate) fn elem_type(ty: Scalar) -> &'static str {
    match ty {
        Scalar::BF16 => "unsigned short",
        Scalar::U8 => "unsigned char",
        Scalar::I8 => "signed char",
        _ => value_type(ty),
    }
}

pub(crate) fn buffer_name(k: &Kernel, b: trine_ir::BufferId) -> String {
    format!("b_{}", k.buffers[b.0 as usize].name)
}

pub(crate) fn param_name(k: &Kernel, p: trine_ir::ParamId) -> String {
    format!("p_{}", k.params[p.0 as usize].name)
}

pub(crate) fn shared_name(k: &Kernel, s: trine_ir::SharedId) -> String {
    format!("s_{}", k.shared[s.0 as usize].name)
}

pub(crate) fn var_name(k: &Kernel, v: trine_ir::VarId) -> String {
    format!("v_{}", k.vars[v.0 as usize].name)
}

pub(crate) fn tile_name(k: &Kernel, t: trine_ir::TileId) -> String {
    format!("t_{}", k.tiles[t.0 as usize].name)
}

pub(crate) fn group_acc_name(k: &Kernel, g: trine_ir::GroupAccId) -> String {
    format!("g_{}", k.group_accs[g.0 as usize].name)
}

pub(crate) fn expr_name(e: ExprId) -> String {
    format!("e{}", e.0)
}

/// The literal zero of `ty`, what private variables start as.
pub(crate) fn zero(ty: Scalar) -> Literal {
    match ty {
        Scalar::F32 => Literal::F32(0),
        Scalar::F16 => Literal::F16(0),
        Scalar::I32 => Literal::I32(0),
        Scalar::Bool => Literal::Bool(false),
        _ => Literal::U32(0),
    }
}

/// An exact literal: decimal where the shortest round-trip form parses back to the same bits,
/// bits otherwise (NaN payloads, infinities, and subnormals, which some compilers flush).
pub(crate) fn literal(s: &impl Spelling, l: Literal) -> String {
    match l {
        Literal::F32(bits) => {
            let v = f32::from_bits(bits);
            if v == 0.0 || v.is_normal() {
                format!("{v:?}f")
            } else {
                format!("{}(0x{bits:08x}u)", s.intrinsic(Intrinsic::UintAsFloat))
            }
        }
        Literal::F16(bits) => format!("trine_h_bits(0x{bits:04x})"),
        // `-2147483648` is the negation of a constant too wide for int.
        Literal::I32(i32::MIN) => "(-2147483647 - 1)".to_string(),
        Literal::I32(v) => v.to_string(),
        Literal::U32(v) => format!("{v}u"),
        Literal::Bool(v) => v.to_string(),
    }
}

/// f16 arithmetic happens in float: an operand's text in the type the operation computes in.
fn widen(ty: Scalar, x: &str) -> String {
    if ty == Scalar::F16 {
        format!("trine_h2f({x})")
    } else {
        x.to_string()
    }
}

/// ... and the result rounded back to f16 after every operation, as the interpreter does.
fn narrow(ty: Scalar, text: String) -> String {
    if ty == Scalar::F16 {
        format!("trine_f2h({text})")
    } else {
        text
    }
}

/// The C operator of `op`; operations that C spells as calls map to their names.
fn symbol(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Mul => "*",
        BinaryOp::Div => "/",
        BinaryOp::Rem => "%",
        BinaryOp::And => "&",
        BinaryOp::Or => "|",
        BinaryOp::Xor => "^",
        BinaryOp::Shl => "<<",
        BinaryOp::Shr => ">>",
        BinaryOp::Eq => "==",
        BinaryOp::Ne => "!=",
        BinaryOp::Lt => "<",
        BinaryOp::Le => "<=",
        BinaryOp::Gt => ">",
        BinaryOp::Ge => ">=",
        BinaryOp::Min => "min",
        BinaryOp::Max => "max",
        BinaryOp::Pow => "pow",
        BinaryOp::Dot4I8 => "dot4i8",
        BinaryOp::Dot4U8 => "dot4u8",
        BinaryOp::PackHalves => "pack_halves",
    }
}

/// `a op b` for operands of type `ty` (the left one for shifts), as the right-hand side of an
/// initialisation. Signed arithmetic goes through unsigned so that overflow wraps instead of
/// being undefined.
pub(crate) fn binary(s: &impl Spelling, op: BinaryOp, ty: Scalar, a: &str, b: &str) -> String {
    use BinaryOp::*;
    let float = matches!(ty, Scalar::F32 | Scalar::F16);
    let signed = ty == Scalar::I32;
    let (x, y) = (widen(ty, a), widen(ty, b));
    let sym = symbol(op);
    let text = match op {
        Rem if float => format!("fmodf({x}, {y})"),
        Min if float => format!("{}({x}, {y})", s.intrinsic(Intrinsic::FMin)),
        Max if float => format!("{}({x}, {y})", s.intrinsic(Intrinsic::FMax)),
        Pow => format!("{}({x}, {y})", s.intrinsic(Intrinsic::Pow)),
        Dot4I8 | Dot4U8 => s.dot4(op == Dot4I8, a, b),
        PackHalves => format!("trine_pack_halves({a}, {b})"),
        Min => format!("{a} < {b} ? {a} : {b}"),
        Max => format!("{a} > {b} ? {a} : {b}"),
        Add | Sub | Mul if signed => format!("(int)((unsigned int){a} {sym} (unsigned int){b})"),
        // INT_MIN / -1 traps or is undefined in C; the IR wraps.
        Div if signed => format!("{b} == -1 ? (int)(0u - (unsigned int){a}) : {a} / {b}"),
        Rem if signed => format!("{b} == -1 ? 0 : {a} % {b}"),
        Shl if signed => format!("(int)((unsigned int){a} << ({b} & 31u))"),
        Shl | Shr => format!("{a} {sym} ({b} & 31u)"),
        And if ty == Scalar::Bool => format!("{a} && {b}"),
        Or if ty == Scalar::Bool => format!("{a} || {b}"),
        Xor if ty == Scalar::Bool => format!("{a} != {b}"),
        _ => format!("{x} {sym} {y}"),
    };
    if float && !op.is_comparison() {
        narrow(ty, text)
    } else {
        text
    }
}

fn unary(s: &impl Spelling, op: UnaryOp, ty: Scalar, a: &str) -> String {
    let x = widen(ty, a);
    let call = |f: &str| narrow(ty, format!("{f}({x})"));
    match op {
        UnaryOp::Neg if ty == Scalar::I32 => format!("(int)(0u - (unsigned int){a})"),
        UnaryOp::Neg => narrow(ty, format!("-{x}")),
        UnaryOp::Not if ty == Scalar::Bool => format!("!{a}"),
        UnaryOp::Not => format!("~{a}"),
        UnaryOp::Abs if ty == Scalar::I32 => {
            format!("{a} < 0 ? (int)(0u - (unsigned int){a}) : {a}")
        }
        UnaryOp::Abs => call("fabsf"),
        UnaryOp::Exp => call(s.intrinsic(Intrinsic::Exp)),
        UnaryOp::Log => call(s.intrinsic(Intrinsic::Log)),
        UnaryOp::Sqrt => call("sqrtf"),
        UnaryOp::Rsqrt => call(s.intrinsic(Intrinsic::Rsqrt)),
        UnaryOp::Sin => call(s.intrinsic(Intrinsic::Sin)),
        UnaryOp::Cos => call(s.intrinsic(Intrinsic::Cos)),
        UnaryOp::Tanh => call(s.intrinsic(Intrinsic::Tanh)),
        UnaryOp::Floor => call("floorf"),
        UnaryOp::CountOnes => {
            format!(
                "(unsigned int){}((unsigned int){a})",
                s.intrinsic(Intrinsic::PopCount)
            )
        }
        UnaryOp::HalfFromBits => format!("trine_h2f(trine_h_bits((unsigned short){a}))"),
    }
}

/// Value conversion with the IR's rules (see `Expr::Cast`); f16 converts through float, which
/// is exact for f16 → float and rounds once for float → f16.
fn cast(s: &impl Spelling, from: Scalar, to: Scalar, a: &str) -> String {
    use Scalar::*;
    match (from, to) {
        _ if from == to => a.to_string(),
        (Bool, F32) => format!("{a} ? 1.0f : 0.0f"),
        (Bool, F16) => format!("trine_f2h({a} ? 1.0f : 0.0f)"),
        (Bool, I32) => format!("{a} ? 1 : 0"),
        (Bool, _) => format!("{a} ? 1u : 0u"),
        (F32, Bool) => format!("{a} != 0.0f"),
        (F16, Bool) => format!("trine_h2f({a}) != 0.0f"),
        (_, Bool) => format!("{a} != 0"),
        (F16, _) => cast(s, F32, to, &format!("trine_h2f({a})")),
        (_, F16) => format!("trine_f2h({})", cast(s, from, F32, a)),
        (F32, I32 | U32) => s.float_to_int(to, a),
        _ => format!("({}){a}", value_type(to)),
    }
}

fn bitcast(s: &impl Spelling, from: Scalar, to: Scalar, a: &str) -> String {
    let f = match (from, to) {
        _ if from == to => return a.to_string(),
        (Scalar::F32, Scalar::U32) => Intrinsic::FloatAsUint,
        (Scalar::U32, Scalar::F32) => Intrinsic::UintAsFloat,
        (Scalar::F32, Scalar::I32) => Intrinsic::FloatAsInt,
        (Scalar::I32, Scalar::F32) => Intrinsic::IntAsFloat,
        _ => return format!("({}){a}", value_type(to)),
    };
    format!("{}({a})", s.intrinsic(f))
}

/// Name of the prelude helper that performs a subgroup operation on values of type `ty`.
pub(crate) fn subgroup_fn(op: SubgroupOp, ty: Scalar) -> String {
    let what = match op {
        SubgroupOp::Sum => "sg_sum",
        SubgroupOp::Min => "sg_min",
        SubgroupOp::Max => "sg_max",
        SubgroupOp::ShuffleXor(_) => return shuffle_fn(ty),
    };
    // One helper per type, named by suffix: C has no overloading.
    format!("trine_{what}_{}", ty.name())
}

/// Name of the prelude helper `T f(T v, unsigned int mask)` that reads lane `self ^ mask`.
pub(crate) fn shuffle_fn(ty: Scalar) -> String {
    format!("trine_shfl_xor_{}", ty.name())
}

/// Prints the statements of a kernel body.
///
/// With [`Spelling::wide_indices`], a `U32` addition, subtraction or multiplication also gets
/// a 64-bit shadow `x_eN` computed from its operands' shadows (or their zero-extended values),
/// and loads and stores index with the shadow. It differs from the 32-bit value only where
/// that one wrapped, for an index beyond every buffer; in exchange `base + lid` is affine in
/// `lid` for the C vectoriser, which treats a 32-bit sum that may wrap as a gather.
pub(crate) struct Printer<'a, S> {
    kernel: &'a Kernel,
    info: &'a Info,
    spelling: &'a S,
    out: String,
    /// Expressions with a 64-bit shadow in scope.
    shadows: HashSet<ExprId>,
}

impl<'a, S: Spelling> Printer<'a, S> {
    pub(crate) fn new(kernel: &'a Kernel, info: &'a Info, spelling: &'a S) -> Self {
        Printer {
            kernel,
            info,
            spelling,
            out: String::new(),
            shadows: HashSet::new(),
        }
    }

    /// Forgets the shadows: the code that follows is in a new scope (a fresh region).
    pub(crate) fn forget_shadows(&mut self) {
        self.shadows.clear();
    }

    /// An index expression's text: its shadow where it has one.
    fn index(&self, e: ExprId) -> String {
        if self.shadows.contains(&e) {
            format!("x_{}", expr_name(e))
        } else {
            expr_name(e)
        }
    }

    /// The 64-bit value of `e` for a shadow: its shadow, or its zero-extended value.
    fn wide(&self, e: ExprId) -> String {
        if self.shadows.contains(&e) {
            format!("x_{}", expr_name(e))
        } else {
            format!("(uint64_t){}", expr_name(e))
        }
    }
    pub(crate) fn finish(self) -> String {
        self.out
    }

    /// Appends one line at nesting `depth`.
    pub(crate) fn line(&mut self, depth: usize, text: &str) {
        let _ = writeln!(self.out, "{:w$}{text}", "", w = 4 * depth);
    }

    pub(crate) fn block(&mut self, block: &[Stmt], depth: usize) {
        for s in block {
            self.stmt(s, depth);
        }
    }

    pub(crate) fn stmt(&mut self, s: &Stmt, depth: usize) {
        let k = self.kernel;
        let e = expr_name;
        match s {
            Stmt::Let(id) => {
                let ty = value_type(self.info.ty(*id));
                let text = format!("const {ty} {} = {};", e(*id), self.expr(*id));
                self.line(depth, &text);
                if let Some(wide) = self.shadow(*id) {
                    self.line(depth, &format!("const uint64_t x_{} = {wide};", e(*id)));
                    self.shadows.insert(*id);
                }
            }
            Stmt::Assign { var, value } => {
                self.line(depth, &format!("{} = {};", var_name(k, *var), e(*value)));
            }
            Stmt::Store {
                buffer,
                index,
                value,
            } => {
                let b = buffer_name(k, *buffer);
                let i = self.index(*index);
                self.line(depth, &format!("{b}[{i}] = {};", e(*value)));
            }
            Stmt::Prefetch { buffer, index } => {
                let pointer = format!("&{}[{}]", buffer_name(k, *buffer), self.index(*index));
                if let Some(text) = self.spelling.prefetch(&pointer) {
                    self.line(depth, &format!("{text};"));
                }
            }
            Stmt::StoreShared {
                array,
                index,
                value,
            } => {
                let a = shared_name(k, *array);
                let i = self.index(*index);
                self.line(depth, &format!("{a}[{i}] = {};", e(*value)));
            }
            Stmt::StoreSharedPair {
                array,
                index,
                value,
            } => {
                let a = shared_name(k, *array);
                let i = self.index(*index);
                let text = self.spelling.store_pair(&a, &i, &e(*value));
                self.line(depth, &text);
            }
            Stmt::If {
                cond,
                then,
                otherwise,
            } => {
                self.line(depth, &format!("if ({}) {{", e(*cond)));
                self.block(then, depth + 1);
                if !otherwise.is_empty() {
                    self.line(depth, "} else {");
                    self.block(otherwise, depth + 1);
                }
                self.line(depth, "}");
            }
            Stmt::Loop {
                var,
                start,
                end,
                step,
                body,
            } => {
                // The loop runs on the declared variable, not a fresh one, so that it holds the
                // first value past `end` afterwards, as in the interpreter. `end` is a const
                // named before the loop, so it is evaluated once.
                let v = var_name(k, *var);
                let (s0, s1) = (e(*start), self.spelling.loop_end(&e(*end), *step));
                self.line(
                    depth,
                    &format!("for ({v} = {s0}; {v} < {s1}; {v} += {step}u) {{"),
                );
                self.block(body, depth + 1);
                self.line(depth, "}");
            }
            Stmt::Barrier => {
                let b = self.spelling.barrier();
                self.line(depth, &format!("{b};"));
            }
            Stmt::Tile(op) => {
                let text = self.tile_op(op);
                self.line(depth, &text);
            }
            // The GPU prelude's helpers (`trine_copy_*`); C refuses copies before printing.
            Stmt::Copy(CopyOp::Start {
                from,
                index,
                to,
                at,
            }) => {
                let (b, i) = (buffer_name(k, *from), self.index(*index));
                let (s, a) = (shared_name(k, *to), self.index(*at));
                self.line(depth, &format!("trine_copy_async(&{s}[{a}], &{b}[{i}]);"));
            }
            Stmt::Copy(CopyOp::Commit) => self.line(depth, "trine_copy_commit();"),
            Stmt::Copy(CopyOp::Wait { pending }) => {
                self.line(depth, &format!("trine_copy_wait<{pending}>();"))
            }
            Stmt::Group(op) => {
                let text = self.group_op(op);
                self.line(depth, &text);
            }
        }
    }

    /// A warpgroup operation as a call of the CUDA prelude's `trine_group_*` helpers; the
    /// other targets refuse these before printing.
    fn group_op(&self, op: &GroupOp) -> String {
        let k = self.kernel;
        let e = |id: ExprId| self.index(id);
        match *op {
            GroupOp::Zero { acc } => format!("trine_group_zero({});", group_acc_name(k, acc)),
            GroupOp::Mma {
                acc,
                a,
                a_at,
                b,
                b_at,
            } => format!(
                "trine_group_mma_n{}({}, &{}[{}], &{}[{}]);",
                k.group_accs[acc.0 as usize].cols,
                group_acc_name(k, acc),
                shared_name(k, a),
                e(a_at),
                shared_name(k, b),
                e(b_at)
            ),
            GroupOp::Wait { pending } => format!("trine_group_wait<{pending}>();"),
            GroupOp::Store {
                acc,
                to,
                offset,
                stride,
            } => {
                let lane = self.spelling.builtin(Builtin::LocalIndex, k.workgroup_size);
                let mem = match to {
                    TileMemory::Buffer(b) => buffer_name(k, b),
                    TileMemory::Shared(s) => shared_name(k, s),
                };
                format!(
                    "trine_group_store({}, {mem}, {}, {}, ({lane}) % 128u);",
                    group_acc_name(k, acc),
                    expr_name(offset),
                    expr_name(stride)
                )
            }
        }
    }

    /// A tile operation as a call of the prelude's `trine_tile_*` helpers (C++ overloads by
    /// role), which take the lane within the subgroup to find the elements it holds.
    fn tile_op(&self, op: &TileOp) -> String {
        let k = self.kernel;
        let e = expr_name;
        let lane = self
            .spelling
            .builtin(Builtin::SubgroupInvocationId, k.workgroup_size);
        let mem = |m: TileMemory| match m {
            TileMemory::Buffer(b) => buffer_name(k, b),
            TileMemory::Shared(s) => shared_name(k, s),
        };
        let row_major = |l: TileLayout| l == TileLayout::RowMajor;
        match *op {
            TileOp::Zero { tile } => format!("trine_tile_zero({});", tile_name(k, tile)),
            TileOp::Load {
                tile,
                from,
                offset,
                stride,
                layout,
            } => format!(
                "trine_tile_load{}({}, {}, {}, {}, {}, {lane});",
                match from {
                    TileMemory::Shared(_) => "_shared",
                    TileMemory::Buffer(_) => "",
                },
                tile_name(k, tile),
                mem(from),
                e(offset),
                e(stride),
                row_major(layout)
            ),
            TileOp::Mma { acc, a, b } => format!(
                "trine_tile_mma({}, {}, {});",
                tile_name(k, acc),
                tile_name(k, a),
                tile_name(k, b)
            ),
            TileOp::Store {
                tile,
                to,
                offset,
                stride,
                layout,
            } => format!(
                "trine_tile_store({}, {}, {}, {}, {}, {lane});",
                tile_name(k, tile),
                mem(to),
                e(offset),
                e(stride),
                row_major(layout)
            ),
        }
    }

    /// The 64-bit shadow of expression `id`, if it gets one (see [`Printer`]).
    fn shadow(&self, id: ExprId) -> Option<String> {
        if !self.spelling.wide_indices() || self.info.ty(id) != Scalar::U32 {
            return None;
        }
        let (op, lhs, rhs) = match *self.kernel.expr(id) {
            Expr::Binary { op, lhs, rhs } => (op, lhs, rhs),
            Expr::Builtin(b) => return self.spelling.wide_builtin(b, self.kernel.workgroup_size),
            _ => return None,
        };
        let op = match op {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            _ => return None,
        };
        Some(format!("{} {op} {}", self.wide(lhs), self.wide(rhs)))
    }

    /// The right-hand side that computes expression `id`.
    fn expr(&self, id: ExprId) -> String {
        let (k, s, info) = (self.kernel, self.spelling, self.info);
        let e = expr_name;
        match *k.expr(id) {
            Expr::Literal(l) => literal(s, l),
            Expr::Param(p) => param_name(k, p),
            Expr::Builtin(b) => s.builtin(b, k.workgroup_size),
            Expr::Var(v) => var_name(k, v),
            Expr::Load { buffer, index } => {
                let x = format!("{}[{}]", buffer_name(k, buffer), self.index(index));
                match k.buffers[buffer.0 as usize].elem {
                    Scalar::BF16 => {
                        let f = s.intrinsic(Intrinsic::UintAsFloat);
                        format!("{f}((unsigned int){x} << 16)")
                    }
                    Scalar::U8 => format!("(unsigned int){x}"),
                    Scalar::I8 => format!("(int){x}"),
                    _ => x,
                }
            }
            Expr::LoadLane { buffer, quad, lane } => {
                let (b, q) = (buffer_name(k, buffer), self.index(quad));
                s.quad_lane(&b, &q, lane)
                    .unwrap_or_else(|| format!("{b}[4u * {q} + {lane}u]"))
            }
            Expr::LoadShared { array, index } => {
                format!("{}[{}]", shared_name(k, array), self.index(index))
            }
            Expr::Unary { op, arg } => unary(s, op, info.ty(arg), &e(arg)),
            Expr::Binary { op, lhs, rhs } => {
                let mixed = (op == BinaryOp::Dot4I8 && s.mixed_dot4())
                    .then(|| unsigned_first(k, lhs, rhs))
                    .flatten();
                let dots = (op == BinaryOp::Add && s.mixed_dot4())
                    .then(|| dot_sum(k, info, id))
                    .flatten()
                    .filter(|(d, _)| d.len() >= 4);
                match (mixed, dots) {
                    (Some((u, v)), _) => format!("trine_dot4u8i8({}, {})", e(u), e(v)),
                    (None, Some((dots, small))) => {
                        let (four, one) = if small {
                            ("trine_dot16u8i8", "trine_dot4u8i8")
                        } else {
                            ("trine_dot16i8", "trine_dot4i8")
                        };
                        dots.chunks(4)
                            .map(|c| {
                                let args: Vec<String> = c
                                    .iter()
                                    .map(|&(u, v)| format!("{}, {}", e(u), e(v)))
                                    .collect();
                                match c.len() {
                                    4 => format!("{four}({})", args.join(", ")),
                                    _ => args
                                        .iter()
                                        .map(|a| format!("{one}({a})"))
                                        .collect::<Vec<_>>()
                                        .join(" + "),
                                }
                            })
                            .collect::<Vec<_>>()
                            .join(" + ")
                    }
                    (None, None) => binary(s, op, info.ty(lhs), &e(lhs), &e(rhs)),
                }
            }
            Expr::Fma { a, b, c } => {
                let ty = info.ty(a);
                let [x, y, z] = [a, b, c].map(|v| widen(ty, &e(v)));
                narrow(ty, format!("fmaf({x}, {y}, {z})"))
            }
            Expr::Select {
                cond,
                accept,
                reject,
            } => {
                format!("{} ? {} : {}", e(cond), e(accept), e(reject))
            }
            Expr::Cast { arg, to } => cast(s, info.ty(arg), to, &e(arg)),
            Expr::Bitcast { arg, to } => bitcast(s, info.ty(arg), to, &e(arg)),
            Expr::Subgroup { op, arg } => {
                let f = subgroup_fn(op, info.ty(arg));
                match op {
                    SubgroupOp::ShuffleXor(m) => format!("{f}({}, {})", e(arg), e(m)),
                    _ => format!("{f}({})", e(arg)),
                }
            }
        }
    }
}

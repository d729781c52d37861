//! The entry function under construction: naga's expression arena, the emit ranges over it,
//! and the values every statement can reach (pointers, builtins, the logical workgroup id).
//!
//! naga evaluates an expression where a `Statement::Emit` range covering it stands, except for
//! the kinds it considers evaluated at function entry (literals, arguments, variable
//! pointers), which no range may cover. [`Lowerer::emit`] appends into the open range;
//! [`Lowerer::unemitted`] and [`Lowerer::push`] close it into the current block first.

use super::interface::{self, Globals};
use super::types;
use crate::abi;
use naga::{
    BinaryOperator, Block, Expression, Function, Handle, Literal, LocalVariable, Span, Statement,
    Type, UniqueArena,
};
use trine_ir::{ExprId, Info, Kernel};

pub(super) struct Lowerer<'a> {
    pub kernel: &'a Kernel,
    pub info: &'a Info,
    pub types: &'a mut UniqueArena<Type>,
    fun: Function,
    emit_start: usize,
    /// The naga value of each IR expression, set at its `Let`.
    values: Vec<Option<Handle<Expression>>>,
    pub buffers: Vec<Handle<Expression>>,
    /// Whether each buffer is declared as quads ([`super::interface::Globals::quads`]).
    pub quads: Vec<bool>,
    pub shared: Vec<Handle<Expression>>,
    pub vars: Vec<Handle<Expression>>,
    /// Each tile's `Function` variable and its cooperative-matrix type.
    pub tiles: Vec<(Handle<Expression>, Handle<Type>)>,
    immediates: Handle<Expression>,
    /// Entry-point arguments, by the `interface::ARG_*` index.
    args: Vec<Handle<Expression>>,
    /// The logical workgroup id (see [`crate::abi`]), computed once at entry.
    pub workgroup: [Handle<Expression>; 3],
    /// Packed dot products as naga's own functions rather than byte products.
    pub native_dot4: bool,
}

impl<'a> Lowerer<'a> {
    /// Starts the function: pointers to every global and variable, the builtins, and the
    /// prologue that unfolds the workgroup id and returns from workgroups past the grid.
    pub fn new(
        kernel: &'a Kernel,
        info: &'a Info,
        types: &'a mut UniqueArena<Type>,
        globals: &Globals,
        body: &mut Block,
    ) -> Self {
        let mut fun = Function {
            name: Some(kernel.name.clone()),
            arguments: interface::entry_arguments(types, kernel),
            ..Function::default()
        };
        let mut global = |g| {
            fun.expressions
                .append(Expression::GlobalVariable(g), Span::UNDEFINED)
        };
        let buffers = globals.buffers.iter().map(|&g| global(g)).collect();
        let shared = globals.shared.iter().map(|&g| global(g)).collect();
        let immediates = global(globals.immediates);
        let args = (0..fun.arguments.len() as u32)
            .map(|i| {
                fun.expressions
                    .append(Expression::FunctionArgument(i), Span::UNDEFINED)
            })
            .collect();
        let vars = kernel
            .vars
            .iter()
            .map(|v| {
                let s = types::scalar(v.ty);
                let zero = Literal::zero(s).expect("every value type has a zero literal");
                let init = fun
                    .expressions
                    .append(Expression::Literal(zero), Span::UNDEFINED);
                let var = LocalVariable {
                    name: Some(v.name.clone()),
                    ty: types::scalar_ty(types, s),
                    init: Some(init),
                };
                let var = fun.local_variables.append(var, Span::UNDEFINED);
                fun.expressions
                    .append(Expression::LocalVariable(var), Span::UNDEFINED)
            })
            .collect();
        let tiles = kernel
            .tiles
            .iter()
            .map(|t| {
                let ty = types::tile(types, t.role);
                let var = LocalVariable {
                    name: Some(t.name.clone()),
                    ty,
                    init: None,
                };
                let var = fun.local_variables.append(var, Span::UNDEFINED);
                let pointer = fun
                    .expressions
                    .append(Expression::LocalVariable(var), Span::UNDEFINED);
                (pointer, ty)
            })
            .collect();
        let emit_start = fun.expressions.len();
        let mut l = Lowerer {
            kernel,
            info,
            types,
            fun,
            emit_start,
            values: vec![None; kernel.exprs.len()],
            buffers,
            quads: globals.quads.clone(),
            shared,
            vars,
            tiles,
            immediates,
            args,
            // A stand-in until the prologue computes it, before any IR statement runs.
            workgroup: [immediates; 3],
            native_dot4: false,
        };
        l.workgroup = l.prologue(body);
        l
    }

    pub fn finish(self) -> Function {
        self.fun
    }

    /// Appends an expression evaluated where it stands.
    pub fn emit(&mut self, e: Expression) -> Handle<Expression> {
        self.fun.expressions.append(e, Span::UNDEFINED)
    }

    /// Appends an expression that no emit range may cover: one naga evaluates at entry, or
    /// the result of a statement that follows.
    pub fn unemitted(&mut self, e: Expression, block: &mut Block) -> Handle<Expression> {
        self.flush(block);
        let h = self.emit(e);
        self.emit_start = self.fun.expressions.len();
        h
    }

    /// Closes the open emit range into `block`. Every block must end with it, and a nested
    /// block may only start after it.
    pub fn flush(&mut self, block: &mut Block) {
        let len = self.fun.expressions.len();
        if len > self.emit_start {
            let range = self.fun.expressions.range_from(self.emit_start);
            block.push(Statement::Emit(range), Span::UNDEFINED);
        }
        self.emit_start = len;
    }

    /// Appends a statement after the expressions emitted so far.
    pub fn push(&mut self, block: &mut Block, s: Statement) {
        self.flush(block);
        block.push(s, Span::UNDEFINED);
    }

    pub fn literal(&mut self, l: Literal, block: &mut Block) -> Handle<Expression> {
        self.unemitted(Expression::Literal(l), block)
    }

    pub fn binary(
        &mut self,
        op: BinaryOperator,
        left: Handle<Expression>,
        right: Handle<Expression>,
    ) -> Handle<Expression> {
        self.emit(Expression::Binary { op, left, right })
    }

    /// The value of an IR expression whose `Let` has been lowered.
    pub fn value(&self, e: ExprId) -> Handle<Expression> {
        self.values[e.0 as usize].expect("validation puts every operand's Let before its use")
    }

    pub fn set_value(&mut self, e: ExprId, h: Handle<Expression>) {
        self.values[e.0 as usize] = Some(h);
    }

    pub fn arg(&self, index: u32) -> Handle<Expression> {
        self.args[index as usize]
    }

    /// Loads push-constant word `word`.
    pub fn immediate(&mut self, word: u32) -> Handle<Expression> {
        let base = self.immediates;
        let pointer = self.emit(Expression::AccessIndex { base, index: word });
        self.emit(Expression::Load { pointer })
    }

    /// Component `axis` of a `vec3<u32>` argument.
    pub fn component(&mut self, arg: u32, axis: u8) -> Handle<Expression> {
        let base = self.arg(arg);
        self.emit(Expression::AccessIndex {
            base,
            index: u32::from(axis),
        })
    }

    fn prologue(&mut self, body: &mut Block) -> [Handle<Expression>; 3] {
        use BinaryOperator as Bo;
        let [px, py, pz] = [0, 1, 2].map(|a| self.component(interface::ARG_WORKGROUP_ID, a));
        let grid_x = self.immediate(abi::WORD_GRID_X);
        let phys_x = self.immediate(abi::WORD_PHYS_X);
        let fold = self.immediate(abi::WORD_FOLD);
        let row = self.binary(Bo::Modulo, py, fold);
        let offset = self.binary(Bo::Multiply, row, phys_x);
        let x = self.binary(Bo::Add, px, offset);
        let y = self.binary(Bo::Divide, py, fold);
        for (h, name) in [(x, "wg_x"), (y, "wg_y"), (pz, "wg_z")] {
            self.fun.named_expressions.insert(h, name.to_string());
        }
        let outside = self.binary(Bo::GreaterEqual, x, grid_x);
        let mut exit = Block::new();
        exit.push(Statement::Return { value: None }, Span::UNDEFINED);
        let skip = Statement::If {
            condition: outside,
            accept: exit,
            reject: Block::new(),
        };
        self.push(body, skip);
        [x, y, pz]
    }
}

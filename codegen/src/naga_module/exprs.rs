//! IR expressions, evaluated at their `Let`: leaves (builtins, parameters, variables) and
//! memory reads. Arithmetic is in [`super::ops`].

use super::func::Lowerer;
use super::interface as args;
use crate::abi;
use naga::{BinaryOperator as Bo, Block, Expression, Handle, Literal, MathFunction, ScalarKind};
use trine_ir::{BufferId, Builtin, Expr, ExprId, Scalar};

impl Lowerer<'_> {
    pub(super) fn expr(&mut self, id: ExprId, block: &mut Block) -> Handle<Expression> {
        match *self.kernel.expr(id) {
            Expr::Literal(l) => self.ir_literal(l, block),
            Expr::Param(p) => self.immediate(abi::GRID_WORDS + p.0),
            Expr::Builtin(b) => self.builtin(b, block),
            Expr::Var(v) => self.emit(Expression::Load {
                pointer: self.vars[v.0 as usize],
            }),
            Expr::Load { buffer, index } => self.load(buffer, self.value(index), block),
            Expr::LoadLane { buffer, quad, lane } => {
                // The whole quad, then its word: the driver merges the four lanes' identical
                // loads into one.
                let base = self.buffers[buffer.0 as usize];
                let pointer = self.emit(Expression::Access {
                    base,
                    index: self.value(quad),
                });
                let quad = self.emit(Expression::Load { pointer });
                self.emit(Expression::AccessIndex {
                    base: quad,
                    index: u32::from(lane),
                })
            }
            Expr::LoadShared { array, index } => {
                let base = self.shared[array.0 as usize];
                let pointer = self.emit(Expression::Access {
                    base,
                    index: self.value(index),
                });
                self.emit(Expression::Load { pointer })
            }
            Expr::Unary { op, arg } => self.unary(op, arg),
            Expr::Binary { op, lhs, rhs } => self.binary_op(op, lhs, rhs, block),
            Expr::Fma { a, b, c } => self.emit(Expression::Math {
                fun: MathFunction::Fma,
                arg: self.value(a),
                arg1: Some(self.value(b)),
                arg2: Some(self.value(c)),
                arg3: None,
            }),
            Expr::Select {
                cond,
                accept,
                reject,
            } => self.emit(Expression::Select {
                condition: self.value(cond),
                accept: self.value(accept),
                reject: self.value(reject),
            }),
            Expr::Cast { arg, to } => self.cast(arg, to),
            Expr::Bitcast { arg, to } => {
                let kind = super::types::scalar(to).kind;
                self.emit(Expression::As {
                    expr: self.value(arg),
                    kind,
                    convert: None,
                })
            }
            Expr::Subgroup { op, arg } => self.subgroup(op, arg, block),
        }
    }

    fn builtin(&mut self, b: Builtin, block: &mut Block) -> Handle<Expression> {
        match b {
            Builtin::GlobalId(axis) => {
                let size = self.kernel.workgroup_size[usize::from(axis)];
                let size = self.literal(Literal::U32(size), block);
                let local = self.component(args::ARG_LOCAL_ID, axis);
                let base = self.binary(Bo::Multiply, self.workgroup[usize::from(axis)], size);
                self.binary(Bo::Add, base, local)
            }
            Builtin::LocalId(axis) => self.component(args::ARG_LOCAL_ID, axis),
            Builtin::LocalIndex => self.arg(args::ARG_LOCAL_INDEX),
            Builtin::WorkgroupId(axis) => self.workgroup[usize::from(axis)],
            Builtin::NumWorkgroups(axis) => self.immediate(abi::WORD_GRID_X + u32::from(axis)),
            Builtin::SubgroupSize => self.arg(args::ARG_SUBGROUP_SIZE),
            Builtin::SubgroupInvocationId => self.arg(args::ARG_SUBGROUP_INVOCATION_ID),
            Builtin::SubgroupId => self.arg(args::ARG_SUBGROUP_ID),
        }
    }

    /// `buffer[index]`, unpacking storage-only types from their `u32` words.
    fn load(
        &mut self,
        buffer: BufferId,
        index: Handle<Expression>,
        block: &mut Block,
    ) -> Handle<Expression> {
        let elem = self.kernel.buffers[buffer.0 as usize].elem;
        let per_word_log2 = match elem {
            Scalar::U8 | Scalar::I8 => 2,
            Scalar::BF16 => 1,
            _ => return self.element(buffer, index, block),
        };
        // Element `index` is bits [lane * bits, (lane + 1) * bits) of word `index >> log2`.
        let bits_log2 = 5 - per_word_log2;
        let [log2, lane_mask, bits_log2] =
            [per_word_log2, (1 << per_word_log2) - 1, bits_log2].map(|v| self.u32(v, block));
        let word_index = self.binary(Bo::ShiftRight, index, log2);
        let word = self.element(buffer, word_index, block);
        let lane = self.binary(Bo::And, index, lane_mask);
        let shift = self.binary(Bo::ShiftLeft, lane, bits_log2);
        match elem {
            Scalar::U8 => {
                let byte = self.binary(Bo::ShiftRight, word, shift);
                let mask = self.u32(0xff, block);
                self.binary(Bo::And, byte, mask)
            }
            Scalar::I8 => {
                // Move the byte to the top, then shift it down arithmetically to sign-extend.
                let top = self.u32(24, block);
                let up = self.binary(Bo::Subtract, top, shift);
                let word = self.emit(Expression::As {
                    expr: word,
                    kind: ScalarKind::Sint,
                    convert: None,
                });
                let high = self.binary(Bo::ShiftLeft, word, up);
                self.binary(Bo::ShiftRight, high, top)
            }
            _ => {
                // bf16 is the high half of the f32 with the same leading bits.
                let half = self.binary(Bo::ShiftRight, word, shift);
                let sixteen = self.u32(16, block);
                let bits = self.binary(Bo::ShiftLeft, half, sixteen);
                self.emit(Expression::As {
                    expr: bits,
                    kind: ScalarKind::Float,
                    convert: None,
                })
            }
        }
    }

    /// Element `index` of `buffer`: of its words where it is declared as quads.
    fn element(
        &mut self,
        buffer: BufferId,
        index: Handle<Expression>,
        block: &mut Block,
    ) -> Handle<Expression> {
        let base = self.buffers[buffer.0 as usize];
        let pointer = if self.quads[buffer.0 as usize] {
            let [two, three] = [2, 3].map(|v| self.u32(v, block));
            let quad = self.binary(Bo::ShiftRight, index, two);
            let lane = self.binary(Bo::And, index, three);
            let quad = self.emit(Expression::Access { base, index: quad });
            self.emit(Expression::Access {
                base: quad,
                index: lane,
            })
        } else {
            self.emit(Expression::Access { base, index })
        };
        self.emit(Expression::Load { pointer })
    }

    pub(super) fn u32(&mut self, v: u32, block: &mut Block) -> Handle<Expression> {
        self.literal(Literal::U32(v), block)
    }
}

//! IR arithmetic: unary and binary operations, casts and subgroup operations.

use super::func::Lowerer;
use super::types;
use naga::{
    BinaryOperator as Bo, Block, CollectiveOperation, Expression, GatherMode, Handle,
    MathFunction as Mf, ScalarKind, Statement, SubgroupOperation, UnaryOperator,
};
use trine_ir::{BinaryOp, Expr, ExprId, Scalar, SubgroupOp, UnaryOp};

impl Lowerer<'_> {
    pub(super) fn math(
        &mut self,
        fun: Mf,
        arg: Handle<Expression>,
        arg1: Option<Handle<Expression>>,
    ) -> Handle<Expression> {
        self.emit(Expression::Math {
            fun,
            arg,
            arg1,
            arg2: None,
            arg3: None,
        })
    }

    pub(super) fn unary(&mut self, op: UnaryOp, arg: ExprId) -> Handle<Expression> {
        let ty = self.info.ty(arg);
        let expr = self.value(arg);
        let fun = match op {
            UnaryOp::Neg => {
                return self.emit(Expression::Unary {
                    op: UnaryOperator::Negate,
                    expr,
                })
            }
            UnaryOp::Not => {
                let op = if ty == Scalar::Bool {
                    UnaryOperator::LogicalNot
                } else {
                    UnaryOperator::BitwiseNot
                };
                return self.emit(Expression::Unary { op, expr });
            }
            UnaryOp::CountOnes => {
                let count = self.math(Mf::CountOneBits, expr, None);
                // naga counts in the argument's type; the IR's count is always u32.
                return if ty == Scalar::I32 {
                    self.emit(Expression::As {
                        expr: count,
                        kind: ScalarKind::Uint,
                        convert: None,
                    })
                } else {
                    count
                };
            }
            UnaryOp::HalfFromBits => {
                let pair = self.math(Mf::Unpack2x16float, expr, None);
                return self.emit(Expression::AccessIndex {
                    base: pair,
                    index: 0,
                });
            }
            UnaryOp::Abs => Mf::Abs,
            UnaryOp::Exp => Mf::Exp,
            UnaryOp::Log => Mf::Log,
            UnaryOp::Sqrt => Mf::Sqrt,
            UnaryOp::Rsqrt => Mf::InverseSqrt,
            UnaryOp::Sin => Mf::Sin,
            UnaryOp::Cos => Mf::Cos,
            UnaryOp::Tanh => Mf::Tanh,
            UnaryOp::Floor => Mf::Floor,
        };
        self.math(fun, expr, None)
    }

    pub(super) fn binary_op(
        &mut self,
        op: BinaryOp,
        lhs: ExprId,
        rhs: ExprId,
        block: &mut Block,
    ) -> Handle<Expression> {
        let ty = self.info.ty(lhs);
        let (l, r) = (self.value(lhs), self.value(rhs));
        let bo = match op {
            BinaryOp::Add => Bo::Add,
            BinaryOp::Sub => Bo::Subtract,
            BinaryOp::Mul => Bo::Multiply,
            BinaryOp::Div => Bo::Divide,
            BinaryOp::Rem => Bo::Modulo,
            BinaryOp::Min => return self.math(Mf::Min, l, Some(r)),
            BinaryOp::Max => return self.math(Mf::Max, l, Some(r)),
            BinaryOp::Pow => return self.math(Mf::Pow, l, Some(r)),
            BinaryOp::Dot4I8 if self.native_dot4 => return self.math(Mf::Dot4I8Packed, l, Some(r)),
            BinaryOp::Dot4U8 if self.native_dot4 => return self.math(Mf::Dot4U8Packed, l, Some(r)),
            BinaryOp::Dot4I8 | BinaryOp::Dot4U8 => {
                return self.dot4(op == BinaryOp::Dot4I8, l, r, block)
            }
            BinaryOp::PackHalves => {
                let ty = types::vec2_f32(self.types);
                let pair = self.emit(Expression::Compose {
                    ty,
                    components: vec![l, r],
                });
                return self.math(Mf::Pack2x16float, pair, None);
            }
            BinaryOp::And => Bo::And,
            BinaryOp::Or => Bo::InclusiveOr,
            BinaryOp::Xor if ty == Scalar::Bool => Bo::NotEqual,
            BinaryOp::Xor => Bo::ExclusiveOr,
            BinaryOp::Shl | BinaryOp::Shr => {
                let amount = self.shift_amount(rhs, block);
                let bo = if op == BinaryOp::Shl {
                    Bo::ShiftLeft
                } else {
                    Bo::ShiftRight
                };
                return self.binary(bo, l, amount);
            }
            BinaryOp::Eq => Bo::Equal,
            // naga's float `!=` is ordered (false with a NaN); the IR's is true with a NaN.
            BinaryOp::Ne if ty.is_float() => {
                let equal = self.binary(Bo::Equal, l, r);
                return self.emit(Expression::Unary {
                    op: UnaryOperator::LogicalNot,
                    expr: equal,
                });
            }
            BinaryOp::Ne => Bo::NotEqual,
            BinaryOp::Lt => Bo::Less,
            BinaryOp::Le => Bo::LessEqual,
            BinaryOp::Gt => Bo::Greater,
            BinaryOp::Ge => Bo::GreaterEqual,
        };
        self.binary(bo, l, r)
    }

    /// The four byte products of two packed words, summed: signed bytes are moved to the top
    /// of an `i32` and shifted down arithmetically, unsigned ones shifted and masked.
    fn dot4(
        &mut self,
        signed: bool,
        a: Handle<Expression>,
        b: Handle<Expression>,
        block: &mut Block,
    ) -> Handle<Expression> {
        let byte = |this: &mut Self, v: Handle<Expression>, k: u32, block: &mut Block| {
            if signed {
                let up = this.u32(24 - 8 * k, block);
                let down = this.u32(24, block);
                let v = this.emit(Expression::As {
                    expr: v,
                    kind: naga::ScalarKind::Sint,
                    convert: None,
                });
                let high = this.binary(Bo::ShiftLeft, v, up);
                this.binary(Bo::ShiftRight, high, down)
            } else {
                let shift = this.u32(8 * k, block);
                let mask = this.u32(255, block);
                let v = this.binary(Bo::ShiftRight, v, shift);
                this.binary(Bo::And, v, mask)
            }
        };
        let product = |this: &mut Self, k: u32, block: &mut Block| {
            let x = byte(this, a, k, block);
            let y = byte(this, b, k, block);
            this.binary(Bo::Multiply, x, y)
        };
        let first = product(self, 0, block);
        (1..4).fold(first, |sum, k| {
            let p = product(self, k, block);
            self.binary(Bo::Add, sum, p)
        })
    }

    /// The shift amount modulo 32, folded when it is a literal.
    fn shift_amount(&mut self, rhs: ExprId, block: &mut Block) -> Handle<Expression> {
        if let Expr::Literal(trine_ir::Literal::U32(v)) = *self.kernel.expr(rhs) {
            return self.u32(v & 31, block);
        }
        let mask = self.u32(31, block);
        self.binary(Bo::And, self.value(rhs), mask)
    }

    pub(super) fn cast(&mut self, arg: ExprId, to: Scalar) -> Handle<Expression> {
        let expr = self.value(arg);
        if self.info.ty(arg) == to {
            return expr;
        }
        let s = types::scalar(to);
        self.emit(Expression::As {
            expr,
            kind: s.kind,
            convert: Some(s.width),
        })
    }

    pub(super) fn subgroup(
        &mut self,
        op: SubgroupOp,
        arg: ExprId,
        block: &mut Block,
    ) -> Handle<Expression> {
        let ty = types::scalar_ty(self.types, types::scalar(self.info.ty(arg)));
        let argument = self.value(arg);
        let result = self.unemitted(Expression::SubgroupOperationResult { ty }, block);
        let reduce = |op| Statement::SubgroupCollectiveOperation {
            op,
            collective_op: CollectiveOperation::Reduce,
            argument,
            result,
        };
        let statement = match op {
            SubgroupOp::Sum => reduce(SubgroupOperation::Add),
            SubgroupOp::Min => reduce(SubgroupOperation::Min),
            SubgroupOp::Max => reduce(SubgroupOperation::Max),
            SubgroupOp::ShuffleXor(mask) => Statement::SubgroupGather {
                mode: GatherMode::ShuffleXor(self.value(mask)),
                argument,
                result,
            },
        };
        self.push(block, statement);
        result
    }
}

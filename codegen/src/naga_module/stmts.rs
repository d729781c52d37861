//! IR statements as naga statements.

use super::func::Lowerer;
use naga::{
    Barrier, BinaryOperator as Bo, Block, CooperativeData, Expression, Handle, Span, Statement,
};
use trine_ir::{Stmt, TileLayout, TileMemory, TileOp, VarId};

impl Lowerer<'_> {
    /// Lowers `stmts` onto the end of `block`, closing its last emit range.
    pub(super) fn lower_into(&mut self, stmts: &[Stmt], block: &mut Block) {
        for s in stmts {
            self.stmt(s, block);
        }
        self.flush(block);
    }

    fn block(&mut self, stmts: &[Stmt]) -> Block {
        let mut block = Block::new();
        self.lower_into(stmts, &mut block);
        block
    }

    fn stmt(&mut self, s: &Stmt, block: &mut Block) {
        match *s {
            Stmt::Let(e) => {
                let h = self.expr(e, block);
                self.set_value(e, h);
            }
            Stmt::Assign { var, value } => {
                let value = self.value(value);
                self.push(
                    block,
                    Statement::Store {
                        pointer: self.var(var),
                        value,
                    },
                );
            }
            Stmt::Store {
                buffer,
                index,
                value,
            } => {
                let base = self.buffers[buffer.0 as usize];
                self.store(base, index, value, block);
            }
            // SPIR-V has no prefetch; the hint is dropped.
            Stmt::Prefetch { .. } => {}
            Stmt::StoreShared {
                array,
                index,
                value,
            } => {
                let base = self.shared[array.0 as usize];
                self.store(base, index, value, block);
            }
            Stmt::StoreSharedPair {
                array,
                index,
                value,
            } => {
                let base = self.shared[array.0 as usize];
                self.store_pair(base, index, value, block);
            }
            Stmt::If {
                cond,
                ref then,
                ref otherwise,
            } => {
                self.flush(block);
                let accept = self.block(then);
                let reject = self.block(otherwise);
                self.push(
                    block,
                    Statement::If {
                        condition: self.value(cond),
                        accept,
                        reject,
                    },
                );
            }
            Stmt::Loop {
                var,
                start,
                end,
                step,
                ref body,
            } => self.counted_loop(var, self.value(start), self.value(end), step, body, block),
            // STORAGE widens the barrier's memory semantics to global memory, as the IR's
            // barrier covers both shared and global writes.
            Stmt::Barrier => self.push(
                block,
                Statement::ControlBarrier(Barrier::WORK_GROUP | Barrier::STORAGE),
            ),
            Stmt::Tile(ref op) => self.tile_op(op, block),
            Stmt::Copy(_) | Stmt::Group(_) => unreachable!("refused before lowering"),
        }
    }

    /// A tile operation on the tile's `Function` variable: cooperative-matrix loads, stores
    /// and multiply-adds (SPV_KHR_cooperative_matrix), the pointer an `Access` to the element
    /// at the offset, the stride in elements.
    fn tile_op(&mut self, op: &TileOp, block: &mut Block) {
        let data = |l: &mut Self, mem: TileMemory, offset, stride, layout| {
            let base = match mem {
                TileMemory::Buffer(b) => l.buffers[b.0 as usize],
                TileMemory::Shared(s) => l.shared[s.0 as usize],
            };
            let pointer = l.emit(Expression::Access {
                base,
                index: l.value(offset),
            });
            CooperativeData {
                pointer,
                stride: l.value(stride),
                row_major: layout == TileLayout::RowMajor,
            }
        };
        match *op {
            TileOp::Zero { tile } => {
                let (pointer, ty) = self.tiles[tile.0 as usize];
                let value = self.unemitted(Expression::ZeroValue(ty), block);
                self.push(block, Statement::Store { pointer, value });
            }
            TileOp::Load {
                tile,
                from,
                offset,
                stride,
                layout,
            } => {
                let (pointer, ty) = self.tiles[tile.0 as usize];
                let data = data(self, from, offset, stride, layout);
                let naga::TypeInner::CooperativeMatrix {
                    columns,
                    rows,
                    role,
                    ..
                } = self.types[ty].inner
                else {
                    unreachable!("a tile's type is a cooperative matrix")
                };
                let value = self.emit(Expression::CooperativeLoad {
                    columns,
                    rows,
                    role,
                    data,
                });
                self.push(block, Statement::Store { pointer, value });
            }
            TileOp::Mma { acc, a, b } => {
                let [pc, pa, pb] = [acc, a, b].map(|t| self.tiles[t.0 as usize].0);
                let [c, a, b] = [pc, pa, pb].map(|pointer| self.emit(Expression::Load { pointer }));
                let value = self.emit(Expression::CooperativeMultiplyAdd { a, b, c });
                self.push(block, Statement::Store { pointer: pc, value });
            }
            TileOp::Store {
                tile,
                to,
                offset,
                stride,
                layout,
            } => {
                let pointer = self.tiles[tile.0 as usize].0;
                let target = self.emit(Expression::Load { pointer });
                let data = data(self, to, offset, stride, layout);
                self.push(block, Statement::CooperativeStore { target, data });
            }
        }
    }

    fn var(&self, var: VarId) -> Handle<Expression> {
        self.vars[var.0 as usize]
    }

    fn store(
        &mut self,
        base: Handle<Expression>,
        index: trine_ir::ExprId,
        value: trine_ir::ExprId,
        block: &mut Block,
    ) {
        let pointer = self.emit(Expression::Access {
            base,
            index: self.value(index),
        });
        self.push(
            block,
            Statement::Store {
                pointer,
                value: self.value(value),
            },
        );
    }

    /// `base[index]` and `base[index + 1]` (f16) set to `value`'s halves: `unpack2x16float`'s
    /// components, each converted to f16 (exact).
    fn store_pair(
        &mut self,
        base: Handle<Expression>,
        index: trine_ir::ExprId,
        value: trine_ir::ExprId,
        block: &mut Block,
    ) {
        let pair = self.math(naga::MathFunction::Unpack2x16float, self.value(value), None);
        let first = self.value(index);
        let one = self.u32(1, block);
        let second = self.binary(Bo::Add, first, one);
        for (at, component) in [(first, 0), (second, 1)] {
            let half = self.emit(Expression::AccessIndex {
                base: pair,
                index: component,
            });
            let value = self.emit(Expression::As {
                expr: half,
                kind: naga::ScalarKind::Float,
                convert: Some(2),
            });
            let pointer = self.emit(Expression::Access { base, index: at });
            self.push(block, Statement::Store { pointer, value });
        }
    }

    /// `var = start; loop { if var >= end { break } body; continuing { var += step } }`.
    fn counted_loop(
        &mut self,
        var: VarId,
        start: Handle<Expression>,
        end: Handle<Expression>,
        step: u32,
        stmts: &[Stmt],
        block: &mut Block,
    ) {
        let pointer = self.var(var);
        self.push(
            block,
            Statement::Store {
                pointer,
                value: start,
            },
        );

        let mut body = Block::new();
        let i = self.emit(Expression::Load { pointer });
        let done = self.binary(Bo::GreaterEqual, i, end);
        let mut exit = Block::new();
        exit.push(Statement::Break, Span::UNDEFINED);
        self.push(
            &mut body,
            Statement::If {
                condition: done,
                accept: exit,
                reject: Block::new(),
            },
        );
        self.lower_into(stmts, &mut body);

        let mut continuing = Block::new();
        let i = self.emit(Expression::Load { pointer });
        let step = self.u32(step, &mut continuing);
        let next = self.binary(Bo::Add, i, step);
        self.push(
            &mut continuing,
            Statement::Store {
                pointer,
                value: next,
            },
        );

        self.push(
            block,
            Statement::Loop {
                body,
                continuing,
                break_if: None,
            },
        );
    }
}

//! The grid barrier ([`trine_ir::Stmt::GridBarrier`]) as naga statements: an arrival counter
//! and a generation word in an `array<atomic<u32>>`.
//!
//! ```text
//! controlBarrier(workgroup, device memory)
//! if local_index == 0 {
//!     let g = atomicLoad(&sync[1]);
//!     if atomicAdd(&sync[0], 1) == workgroups - 1 {
//!         atomicStore(&sync[0], 0);       // ready for the next barrier
//!         atomicAdd(&sync[1], 1);         // releases the others
//!     } else {
//!         loop { if atomicLoad(&sync[1]) != g { break; } }
//!     }
//!     memoryBarrier(device)
//! }
//! controlBarrier(workgroup, device memory)
//! ```
//!
//! naga writes storage-space atomics at device scope, and a barrier with `STORAGE` as
//! `AcquireRelease | UniformMemory` at device scope, so the first barrier publishes the
//! workgroup's writes before its leader arrives and the last makes the others' visible to all
//! of its invocations.

use super::func::Lowerer;
use naga::{
    AtomicFunction, Barrier, BinaryOperator as Bo, Block, Expression, Handle, Span, Statement,
    TypeInner,
};
use trine_ir::{BufferId, Builtin};

impl Lowerer<'_> {
    pub(super) fn grid_barrier(&mut self, sync: BufferId, workgroups: u32, block: &mut Block) {
        let both = Barrier::WORK_GROUP | Barrier::STORAGE;
        self.push(block, Statement::ControlBarrier(both));
        let local = self.builtin(Builtin::LocalIndex, block);
        let zero = self.u32(0, block);
        let leader = self.binary(Bo::Equal, local, zero);
        self.flush(block);

        let base = self.buffers[sync.0 as usize];
        let mut lead = Block::new();
        let count = self.emit(Expression::AccessIndex { base, index: 0 });
        let generation = self.emit(Expression::AccessIndex { base, index: 1 });
        let seen = self.emit(Expression::Load {
            pointer: generation,
        });
        let one = self.u32(1, &mut lead);
        let u32_ty = self.scalar_type(naga::Scalar::U32);
        let arrived = self.unemitted(
            Expression::AtomicResult {
                ty: u32_ty,
                comparison: false,
            },
            &mut lead,
        );
        self.push(
            &mut lead,
            Statement::Atomic {
                pointer: count,
                fun: AtomicFunction::Add,
                value: one,
                result: Some(arrived),
            },
        );
        let last = self.u32(workgroups - 1, &mut lead);
        let is_last = self.binary(Bo::Equal, arrived, last);
        self.flush(&mut lead);

        let mut release = Block::new();
        let zero = self.u32(0, &mut release);
        self.push(
            &mut release,
            Statement::Store {
                pointer: count,
                value: zero,
            },
        );
        let one = self.u32(1, &mut release);
        self.push(
            &mut release,
            Statement::Atomic {
                pointer: generation,
                fun: AtomicFunction::Add,
                value: one,
                result: None,
            },
        );

        let mut spin = Block::new();
        let now = self.emit(Expression::Load {
            pointer: generation,
        });
        let moved = self.binary(Bo::NotEqual, now, seen);
        let mut exit = Block::new();
        exit.push(Statement::Break, Span::UNDEFINED);
        self.push(
            &mut spin,
            Statement::If {
                condition: moved,
                accept: exit,
                reject: Block::new(),
            },
        );
        let mut wait = Block::new();
        self.push(
            &mut wait,
            Statement::Loop {
                body: spin,
                continuing: Block::new(),
                break_if: None,
            },
        );

        self.push(
            &mut lead,
            Statement::If {
                condition: is_last,
                accept: release,
                reject: wait,
            },
        );
        self.push(&mut lead, Statement::MemoryBarrier(Barrier::STORAGE));
        self.push(
            block,
            Statement::If {
                condition: leader,
                accept: lead,
                reject: Block::new(),
            },
        );
        self.push(block, Statement::ControlBarrier(both));
    }

    fn scalar_type(&mut self, s: naga::Scalar) -> Handle<naga::Type> {
        self.types.insert(
            naga::Type {
                name: None,
                inner: TypeInner::Scalar(s),
            },
            Span::UNDEFINED,
        )
    }
}

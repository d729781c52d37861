//! Asynchronous copies ([`CopyOp`]). A copy reads its source when it starts and writes its
//! destination when a wait retires its batch; in between, the destination is in flight, and
//! any access to it by any invocation is an error, as is a misaligned copy: on a GPU the
//! copy may land at any moment between the two, so a kernel that looks earlier or writes
//! there reads or leaves an undefined value.

use super::exec::{Workgroup, R};
use super::InterpError;
use crate::kernel::*;
use std::collections::VecDeque;

/// One started copy: its destination and the bits it read.
#[derive(Clone)]
struct Pending {
    array: SharedId,
    at: u32,
    bits: Vec<u32>,
}

/// An invocation's copies: those not yet committed, then its committed batches, oldest first.
#[derive(Clone, Default)]
pub(super) struct Copies {
    open: Vec<Pending>,
    batches: VecDeque<Vec<Pending>>,
}

impl Workgroup<'_, '_> {
    pub(super) fn copy_op(&mut self, op: &CopyOp, mask: &[bool]) -> R<()> {
        for lane in Self::active(mask) {
            match *op {
                CopyOp::Start {
                    from,
                    index,
                    to,
                    at,
                } => self.copy_start(
                    lane,
                    (from, self.val(index, lane)),
                    (to, self.val(at, lane)),
                )?,
                CopyOp::Commit => {
                    let open = std::mem::take(&mut self.copies[lane].open);
                    self.copies[lane].batches.push_back(open);
                }
                CopyOp::Wait { pending } => {
                    while self.copies[lane].batches.len() > pending as usize {
                        let batch = self.copies[lane].batches.pop_front().unwrap_or_default();
                        self.retire(lane, batch);
                    }
                }
            }
        }
        Ok(())
    }

    fn copy_start(
        &mut self,
        lane: usize,
        (from, index): (BufferId, u32),
        (to, at): (SharedId, u32),
    ) -> R<()> {
        let elem = self.l.kernel.buffers[from.0 as usize].elem;
        let size = elem.size() as u32;
        let n = COPY_BYTES / size;
        let first = self.address(from, index, lane, "copy")?;
        let misaligned = |what: String, byte: u64| InterpError::CopyMisaligned {
            at: self.site(lane),
            what,
            byte,
        };
        if !first.is_multiple_of(COPY_BYTES as u64) {
            let name = &self.l.kernel.buffers[from.0 as usize].name;
            return Err(misaligned(format!("buffer {name}"), first));
        }
        if !(at * size).is_multiple_of(COPY_BYTES) {
            let name = &self.l.kernel.shared[to.0 as usize].name;
            return Err(misaligned(format!("shared {name}"), (at * size) as u64));
        }
        let mut bits = Vec::with_capacity(n as usize);
        for i in 0..n {
            let addr = self.address(from, index + i, lane, "copy")?;
            let view = &self.l.buffers[from.0 as usize];
            bits.push(view.words.load_bits(addr, size as u64));
        }
        for i in 0..n {
            self.shared_write(to, at + i, lane, "copy destination")?
                .in_flight = true;
        }
        self.copies[lane].open.push(Pending {
            array: to,
            at,
            bits,
        });
        Ok(())
    }

    /// Writes a batch's copies into shared memory, as `lane`'s writes in this barrier interval.
    fn retire(&mut self, lane: usize, batch: Vec<Pending>) {
        let epoch = self.epoch;
        for p in batch {
            for (i, bits) in (0..).zip(p.bits) {
                let cell = &mut self.shared[p.array.0 as usize][(p.at + i) as usize];
                cell.bits = bits;
                cell.writer = Some((lane as u32, epoch));
                cell.paired = false;
                cell.in_flight = false;
            }
        }
    }
}

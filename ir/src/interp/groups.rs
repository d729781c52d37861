//! Warpgroup products ([`GroupOp`]): each warpgroup of a workgroup holds its own copy of
//! every accumulator, and each operation runs once per warpgroup that reaches it. A product
//! reads its operands and updates its accumulator when it starts; until a wait retires it,
//! writing those operands' elements or reading, zeroing or storing its accumulator is an
//! error, since a GPU reads and writes them at any moment in between. So is what the
//! collective rules leave undefined: a warpgroup only partly active, an offset that differs
//! across it or is not a multiple of [`GROUP_ATOM`], an accumulator read before it is zeroed.

use super::exec::{Workgroup, R};
use super::InterpError;
use crate::kernel::*;
use half::f16;
use std::collections::VecDeque;

/// One started product: its accumulator and the shared elements it reads.
#[derive(Clone)]
pub(super) struct Pending {
    acc: GroupAccId,
    reads: Vec<(SharedId, u32)>,
}

/// A warpgroup's products not yet retired, oldest first.
pub(super) type Started = VecDeque<Pending>;

impl Workgroup<'_, '_> {
    pub(super) fn group_op(&mut self, op: &GroupOp, mask: &[bool]) -> R<()> {
        let partial = |at| InterpError::GroupPartial { at };
        for (g, first) in self.whole_groups(mask, GROUP_INVOCATIONS as usize, partial)? {
            self.group_op_one(op, g, first)?;
        }
        Ok(())
    }

    fn group_op_one(&mut self, op: &GroupOp, g: usize, first: usize) -> R<()> {
        match *op {
            GroupOp::Zero { acc } => {
                self.idle(acc, g, first)?;
                let cols = self.l.kernel.group_accs[acc.0 as usize].cols as usize;
                self.groups[acc.0 as usize][g] = Some(vec![0.0; GROUP_ROWS as usize * cols]);
            }
            GroupOp::Mma {
                acc,
                a,
                a_at,
                b,
                b_at,
            } => {
                let a_at = self.atom(a_at, g, first)?;
                let b_at = self.atom(b_at, g, first)?;
                let cols = self.l.kernel.group_accs[acc.0 as usize].cols;
                let mut c = self.acc(acc, g, first)?;
                let mut reads = vec![];
                let mut operand = |w: &mut Self, s: SharedId, at: u32, rows: u32| -> R<Vec<f32>> {
                    let mut out = Vec::with_capacity((rows * GROUP_K) as usize);
                    for r in 0..rows {
                        for k in 0..GROUP_K {
                            let i = at + group_swizzle(r, k);
                            out.push(w.operand(s, i, first)?);
                            reads.push((s, i));
                        }
                    }
                    Ok(out)
                };
                let av = operand(self, a, a_at, GROUP_ROWS)?;
                let bv = operand(self, b, b_at, cols)?;
                let k = GROUP_K as usize;
                for (n, o) in c.iter_mut().enumerate() {
                    let (r, col) = (n / cols as usize, n % cols as usize);
                    // f16 × f16 is exact in f32; the sum is f32 additions in order of k.
                    *o = (0..k).fold(*o, |s, kk| s + av[r * k + kk] * bv[col * k + kk]);
                }
                for &(s, i) in &reads {
                    self.shared[s.0 as usize][i as usize].group_reads += 1;
                }
                self.groups[acc.0 as usize][g] = Some(c);
                self.started[g].push_back(Pending { acc, reads });
            }
            GroupOp::Wait { pending } => {
                while self.started[g].len() > pending as usize {
                    let done = self.started[g].pop_front().map(|p| p.reads);
                    for (s, i) in done.unwrap_or_default() {
                        self.shared[s.0 as usize][i as usize].group_reads -= 1;
                    }
                }
            }
            GroupOp::Store {
                acc,
                to,
                offset,
                stride,
            } => {
                self.idle(acc, g, first)?;
                let (offset, stride) = (self.val(offset, first), self.val(stride, first));
                let c = self.acc(acc, g, first)?;
                let cols = self.l.kernel.group_accs[acc.0 as usize].cols as u64;
                for (n, v) in c.iter().enumerate() {
                    let (r, col) = (n as u64 / cols, n as u64 % cols);
                    let i = offset as u64 + r * stride as u64 + col;
                    self.tile_write(to, i, v.to_bits(), first)?;
                }
            }
        }
        Ok(())
    }

    /// An error where a product into `acc` started by warpgroup `g` is not yet retired.
    fn idle(&self, acc: GroupAccId, g: usize, first: usize) -> R<()> {
        if self.started[g].iter().any(|p| p.acc == acc) {
            return Err(InterpError::GroupPending {
                at: self.site(first),
                acc: self.l.kernel.group_accs[acc.0 as usize].name.clone(),
            });
        }
        Ok(())
    }

    fn acc(&self, acc: GroupAccId, g: usize, first: usize) -> R<Vec<f32>> {
        self.groups[acc.0 as usize][g]
            .clone()
            .ok_or_else(|| InterpError::TileUnset {
                at: self.site(first),
                tile: self.l.kernel.group_accs[acc.0 as usize].name.clone(),
            })
    }

    /// An operand's offset: the same across the warpgroup, a multiple of [`GROUP_ATOM`].
    fn atom(&self, at: ExprId, g: usize, first: usize) -> R<u32> {
        let per = GROUP_INVOCATIONS as usize;
        let v = self.val(at, first);
        if let Some(lane) = (g * per..(g + 1) * per).find(|&l| self.val(at, l) != v) {
            return Err(InterpError::TileNotUniform {
                at: self.site(lane),
                what: "operand offset",
            });
        }
        if !v.is_multiple_of(GROUP_ATOM) {
            return Err(InterpError::GroupMisaligned {
                at: self.site(first),
                offset: v,
            });
        }
        Ok(v)
    }

    /// The f16 shared element `s[i]` as an operand read on behalf of lane `first`.
    fn operand(&mut self, s: SharedId, i: u32, first: usize) -> R<f32> {
        let bits = self.shared_read(s, i, (first, GROUP_INVOCATIONS), "group mma operand")?;
        Ok(f16::from_bits(bits as u16).to_f32())
    }
}

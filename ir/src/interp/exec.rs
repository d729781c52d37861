//! One workgroup executed as a masked SIMT group.

use super::copies::Copies;
use super::groups::Started;
use super::ops::{self, OpError};
use super::{InterpError, Launch, Site};
use crate::kernel::*;
use crate::types::Scalar;

/// Who last wrote a shared element, and in which barrier interval.
#[derive(Clone, Copy)]
pub(super) struct SharedCell {
    pub(super) bits: u32,
    /// `None` until first written.
    pub(super) writer: Option<(u32, u64)>,
    /// Whether an asynchronous copy to it has started and not been waited for.
    pub(super) in_flight: bool,
    /// How many warpgroup products that read it are not yet retired ([`GroupOp::Mma`]).
    pub(super) group_reads: u32,
    /// Whether its last write was half of a pair ([`Stmt::StoreSharedPair`]), which no access
    /// may follow before a barrier, the writer's own included: CUDA stores the pair as a word,
    /// a type the compiler may take for apart from the array's halves.
    pub(super) paired: bool,
    /// The invocations that last read it, `[first, first + count)` (a count of 0: several
    /// reads by different ones), and the barrier interval they read it in: writing an array
    /// sharing its bytes ([`SharedDecl::over`]) from another invocation in that interval is a
    /// race.
    pub(super) read: Option<(u32, u32, u64)>,
}

pub(crate) struct Workgroup<'l, 'a> {
    pub(super) l: &'l Launch<'a>,
    pub(super) wg: [u32; 3],
    pub(super) lanes: usize,
    /// Value of each expression per lane (only meaningful for lanes active at its Let).
    vals: Vec<Vec<u32>>,
    vars: Vec<Vec<u32>>,
    pub(super) shared: Vec<Vec<SharedCell>>,
    /// Number of barriers passed: shared accesses in different epochs are ordered.
    pub(super) epoch: u64,
    /// Each tile's elements per subgroup, row-major; `None` until zeroed or loaded.
    pub(super) tiles: Vec<Vec<Option<Vec<f32>>>>,
    /// Each invocation's asynchronous copies.
    pub(super) copies: Vec<Copies>,
    /// Each warpgroup accumulator's elements per warpgroup, row-major; `None` until zeroed.
    pub(super) groups: Vec<Vec<Option<Vec<f32>>>>,
    /// Each warpgroup's products not yet retired.
    pub(super) started: Vec<Started>,
}

pub(super) type R<T> = Result<T, InterpError>;

impl<'l, 'a> Workgroup<'l, 'a> {
    pub(crate) fn new(l: &'l Launch<'a>, wg: [u32; 3]) -> Self {
        let k = l.kernel;
        let lanes = k.invocations() as usize;
        let empty = SharedCell {
            bits: 0,
            writer: None,
            in_flight: false,
            group_reads: 0,
            paired: false,
            read: None,
        };
        Workgroup {
            l,
            wg,
            lanes,
            vals: vec![Vec::new(); k.exprs.len()],
            vars: vec![vec![0; lanes]; k.vars.len()],
            shared: k
                .shared
                .iter()
                .map(|s| vec![empty; s.len as usize])
                .collect(),
            epoch: 0,
            tiles: vec![vec![None; lanes.div_ceil(l.subgroup_size as usize)]; k.tiles.len()],
            copies: vec![Copies::default(); lanes],
            groups: vec![vec![None; lanes / GROUP_INVOCATIONS as usize]; k.group_accs.len()],
            started: vec![Started::new(); lanes / GROUP_INVOCATIONS as usize],
        }
    }

    pub(crate) fn run(mut self) -> R<()> {
        let mask = vec![true; self.lanes];
        let body = &self.l.kernel.body;
        self.block(body, &mask)
    }

    pub(super) fn site(&self, lane: usize) -> Site {
        Site {
            workgroup: self.wg,
            invocation: lane as u32,
        }
    }

    fn local_id(&self, lane: usize) -> [u32; 3] {
        let [sx, sy, _] = self.l.kernel.workgroup_size;
        let lane = lane as u32;
        [lane % sx, (lane / sx) % sy, lane / (sx * sy)]
    }

    pub(super) fn val(&self, e: ExprId, lane: usize) -> u32 {
        self.vals[e.0 as usize][lane]
    }

    pub(super) fn active(mask: &[bool]) -> impl Iterator<Item = usize> + '_ {
        mask.iter().enumerate().filter(|(_, &m)| m).map(|(i, _)| i)
    }

    fn block(&mut self, block: &'a [Stmt], mask: &[bool]) -> R<()> {
        for s in block {
            self.stmt(s, mask)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &'a Stmt, mask: &[bool]) -> R<()> {
        match s {
            Stmt::Let(e) => self.let_(*e, mask)?,
            Stmt::Assign { var, value } => {
                for lane in Self::active(mask) {
                    self.vars[var.0 as usize][lane] = self.val(*value, lane);
                }
            }
            Stmt::Store {
                buffer,
                index,
                value,
            } => {
                let elem = self.l.kernel.buffers[buffer.0 as usize].elem;
                let words = self.l.buffers[buffer.0 as usize].words;
                // Every address is checked before any lane writes.
                let writes = Self::active(mask)
                    .map(|lane| {
                        let addr = self.address(*buffer, self.val(*index, lane), lane, "store")?;
                        Ok((addr, self.val(*value, lane)))
                    })
                    .collect::<R<Vec<_>>>()?;
                for (addr, bits) in writes {
                    words.store_bits(addr, bits, elem.size() as u64);
                }
            }
            // A hint with no effect, but its index must be a load's.
            Stmt::Prefetch { buffer, index } => {
                for lane in Self::active(mask) {
                    self.address(*buffer, self.val(*index, lane), lane, "prefetch")?;
                }
            }
            Stmt::StoreShared {
                array,
                index,
                value,
            } => {
                for lane in Self::active(mask) {
                    let (i, bits) = (self.val(*index, lane), self.val(*value, lane));
                    self.store_cell((*array, i), lane, (bits, false), "shared store")?;
                }
            }
            Stmt::StoreSharedPair {
                array,
                index,
                value,
            } => {
                for lane in Self::active(mask) {
                    let i = self.val(*index, lane);
                    if i % 2 == 1 {
                        return Err(InterpError::PairOdd {
                            at: self.site(lane),
                            index: i,
                        });
                    }
                    let bits = self.val(*value, lane);
                    for (j, half) in [(i, bits & 0xffff), (i + 1, bits >> 16)] {
                        self.store_cell((*array, j), lane, (half, true), "shared pair store")?;
                    }
                }
            }
            Stmt::If {
                cond,
                then,
                otherwise,
            } => {
                let c: Vec<bool> = (0..self.lanes)
                    .map(|l| mask[l] && self.val(*cond, l) != 0)
                    .collect();
                let nc: Vec<bool> = (0..self.lanes).map(|l| mask[l] && !c[l]).collect();
                if c.iter().any(|&x| x) {
                    self.block(then, &c)?;
                }
                if nc.iter().any(|&x| x) {
                    self.block(otherwise, &nc)?;
                }
            }
            Stmt::Loop {
                var,
                start,
                end,
                step,
                body,
            } => {
                let v = var.0 as usize;
                for lane in Self::active(mask) {
                    self.vars[v][lane] = self.val(*start, lane);
                }
                let mut live: Vec<bool> = (0..self.lanes)
                    .map(|l| mask[l] && self.vars[v][l] < self.val(*end, l))
                    .collect();
                while live.iter().any(|&x| x) {
                    self.block(body, &live)?;
                    for (lane, alive) in live.iter_mut().enumerate() {
                        if !*alive {
                            continue;
                        }
                        let next = self.vars[v][lane].checked_add(*step);
                        let next = next.ok_or(InterpError::LoopOverflow {
                            at: self.site(lane),
                        })?;
                        self.vars[v][lane] = next;
                        *alive = next < self.val(*end, lane);
                    }
                }
            }
            Stmt::Barrier => {
                if let Some(lane) = mask.iter().position(|&m| !m) {
                    return Err(InterpError::DivergentBarrier {
                        at: self.site(lane),
                    });
                }
                self.epoch += 1;
            }
            Stmt::Tile(op) => self.tile_op(op, mask)?,
            Stmt::Copy(op) => self.copy_op(op, mask)?,
            Stmt::Group(op) => self.group_op(op, mask)?,
        }
        Ok(())
    }

    /// Byte address of element `index` of `buffer` for `lane`, checked against the view.
    pub(super) fn address(&self, buffer: BufferId, index: u32, lane: usize, what: &str) -> R<u64> {
        let decl = &self.l.kernel.buffers[buffer.0 as usize];
        let view = &self.l.buffers[buffer.0 as usize];
        let size = decl.elem.size() as u64;
        let len = view.len / size;
        if index as u64 >= len {
            return Err(InterpError::OutOfBounds {
                at: self.site(lane),
                what: format!("buffer {} {what}", decl.name),
                index: index as u64,
                len,
                expr: String::new(),
            });
        }
        Ok(view.offset + index as u64 * size)
    }

    /// The shared element `a[i]` for an access by `lane`: an error where it is out of
    /// bounds, in flight ([`CopyOp`]), or written by another invocation since the last
    /// barrier.
    pub(super) fn shared_cell(
        &mut self,
        a: SharedId,
        i: u32,
        lane: usize,
        what: &str,
    ) -> R<&mut SharedCell> {
        self.check_partners(a, i, lane, false)?;
        let decl = &self.l.kernel.shared[a.0 as usize];
        let at = self.site(lane);
        let epoch = self.epoch;
        let cell = self.shared[a.0 as usize]
            .get_mut(i as usize)
            .ok_or_else(|| InterpError::OutOfBounds {
                at,
                what: format!("{what} {}", decl.name),
                index: i as u64,
                len: decl.len as u64,
                expr: String::new(),
            })?;
        if cell.in_flight {
            return Err(InterpError::CopyInFlight {
                at,
                array: decl.name.clone(),
                index: i,
            });
        }
        if let Some((writer, e)) = cell.writer {
            if e == epoch && cell.paired {
                return Err(InterpError::PairNoBarrier {
                    at,
                    array: decl.name.clone(),
                    index: i,
                });
            }
            if e == epoch && writer != lane as u32 {
                return Err(InterpError::SharedRace {
                    at,
                    array: decl.name.clone(),
                    index: i,
                    writer,
                });
            }
        }
        Ok(cell)
    }

    /// The runs of `width` invocations (subgroups, warpgroups) that `mask` leaves active, as
    /// (index, first invocation): a collective operation runs once for each. A run only
    /// partly active is the error `partial` makes of its first inactive invocation's site.
    pub(super) fn whole_groups(
        &self,
        mask: &[bool],
        width: usize,
        partial: impl Fn(Site) -> InterpError,
    ) -> R<Vec<(usize, usize)>> {
        let mut out = vec![];
        for (g, run) in mask.chunks(width).enumerate() {
            let first = g * width;
            match run.iter().position(|&m| !m) {
                None => out.push((g, first)),
                Some(_) if !run.contains(&true) => {}
                Some(i) => return Err(partial(self.site(first + i))),
            }
        }
        Ok(out)
    }

    /// [`Workgroup::shared_cell`] for a write, which is also an error while a warpgroup
    /// product that reads the element is not retired.
    pub(super) fn shared_write(
        &mut self,
        a: SharedId,
        i: u32,
        lane: usize,
        what: &str,
    ) -> R<&mut SharedCell> {
        self.check_partners(a, i, lane, true)?;
        for (p, j) in self.partner_cells(a, i) {
            let cell = &mut self.shared[p.0 as usize][j as usize];
            cell.writer = None;
            cell.paired = false;
        }
        let at = self.site(lane);
        let name = &self.l.kernel.shared[a.0 as usize].name;
        let cell = self.shared_cell(a, i, lane, what)?;
        if cell.group_reads > 0 {
            return Err(InterpError::GroupOperandWritten {
                at,
                array: name.clone(),
                index: i,
            });
        }
        Ok(cell)
    }

    /// Stores `bits` into the shared element `a[i]` for `lane` ([`Workgroup::shared_write`]),
    /// `paired` where it is half of a pair.
    fn store_cell(
        &mut self,
        (a, i): (SharedId, u32),
        lane: usize,
        (bits, paired): (u32, bool),
        what: &str,
    ) -> R<()> {
        let epoch = self.epoch;
        let cell = self.shared_write(a, i, lane, what)?;
        cell.bits = bits;
        cell.writer = Some((lane as u32, epoch));
        cell.paired = paired;
        Ok(())
    }

    /// The bits of the shared element `a[i]`, read by invocations `first..first + count` (one
    /// for a load, a subgroup for a tile, a warpgroup for a product's operand): an error
    /// where [`Workgroup::shared_cell`] finds one or no invocation has written it.
    pub(super) fn shared_read(
        &mut self,
        a: SharedId,
        i: u32,
        (first, count): (usize, u32),
        what: &str,
    ) -> R<u32> {
        let epoch = self.epoch;
        let at = self.site(first);
        let cell = self.shared_cell(a, i, first, what)?;
        if cell.writer.is_none() {
            return Err(InterpError::UninitShared {
                at,
                array: self.l.kernel.shared[a.0 as usize].name.clone(),
                index: i,
            });
        }
        let readers = (first as u32, count);
        cell.read = match cell.read {
            Some((f, c, e)) if e == epoch && (f, c) != readers => Some((0, 0, epoch)),
            _ => Some((first as u32, count, epoch)),
        };
        Ok(cell.bits)
    }

    /// The elements of the arrays sharing memory with `a` ([`SharedDecl::over`]) that share
    /// bytes with `a[i]`.
    fn partner_cells(&self, a: SharedId, i: u32) -> Vec<(SharedId, u32)> {
        let k = self.l.kernel;
        let size = k.shared[a.0 as usize].elem.size() as u64;
        let (start, end) = (u64::from(i) * size, (u64::from(i) + 1) * size);
        let mut out = vec![];
        for &p in &self.l.partners[a.0 as usize] {
            let decl = &k.shared[p.0 as usize];
            let ps = decl.elem.size() as u64;
            out.extend(
                (start / ps..=(end - 1) / ps)
                    .filter(|&j| j < u64::from(decl.len))
                    .map(|j| (p, j as u32)),
            );
        }
        out
    }

    /// An access by `lane` to `a[i]` (a write where `write`) checked against the elements of
    /// other arrays sharing its bytes, as an access to them: an error while a copy to one is
    /// in flight, another invocation wrote one (or any invocation stored one as half of a
    /// pair) since the last barrier, or, for a write, a warpgroup product that reads one is
    /// not retired.
    fn check_partners(&self, a: SharedId, i: u32, lane: usize, write: bool) -> R<()> {
        for (p, j) in self.partner_cells(a, i) {
            let cell = &self.shared[p.0 as usize][j as usize];
            let array = || self.l.kernel.shared[p.0 as usize].name.clone();
            let at = self.site(lane);
            if cell.in_flight {
                return Err(InterpError::CopyInFlight {
                    at,
                    array: array(),
                    index: j,
                });
            }
            if write && cell.group_reads > 0 {
                return Err(InterpError::GroupOperandWritten {
                    at,
                    array: array(),
                    index: j,
                });
            }
            if let Some((first, count, e)) = cell.read {
                let lane = lane as u32;
                let only_own = count > 0 && (first..first + count).contains(&lane);
                if write && e == self.epoch && !only_own {
                    return Err(InterpError::OverlayRace {
                        at,
                        array: array(),
                        index: j,
                        reader: first,
                    });
                }
            }
            match cell.writer {
                Some((_, e)) if e == self.epoch && cell.paired => {
                    return Err(InterpError::PairNoBarrier {
                        at,
                        array: array(),
                        index: j,
                    })
                }
                Some((writer, e)) if e == self.epoch && writer != lane as u32 => {
                    return Err(InterpError::SharedRace {
                        at,
                        array: array(),
                        index: j,
                        writer,
                    })
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn let_(&mut self, id: ExprId, mask: &[bool]) -> R<()> {
        let mut out = std::mem::take(&mut self.vals[id.0 as usize]);
        out.resize(self.lanes, 0);
        let r = self.eval(id, mask, &mut out);
        self.vals[id.0 as usize] = out;
        r
    }

    fn op_err(&self, e: OpError, id: ExprId, lane: usize) -> InterpError {
        match e {
            OpError::DivideByZero => InterpError::DivideByZero {
                at: self.site(lane),
                expr: id,
            },
            OpError::FloatToInt(value) => InterpError::FloatToInt {
                at: self.site(lane),
                expr: id,
                value,
            },
        }
    }

    fn eval(&mut self, id: ExprId, mask: &[bool], out: &mut [u32]) -> R<()> {
        let k = self.l.kernel;
        let ty = |e: ExprId| self.l.info.ty(e);
        match *k.expr(id) {
            Expr::Literal(l) => {
                let bits = match l {
                    crate::Literal::F32(b) => b,
                    crate::Literal::F16(b) => b as u32,
                    crate::Literal::I32(v) => v as u32,
                    crate::Literal::U32(v) => v,
                    crate::Literal::Bool(v) => v as u32,
                };
                out.fill(bits);
            }
            Expr::Param(p) => out.fill(self.l.params[p.0 as usize]),
            Expr::Builtin(bi) => {
                for lane in Self::active(mask) {
                    out[lane] = self.builtin(bi, lane);
                }
            }
            Expr::Var(v) => {
                for lane in Self::active(mask) {
                    out[lane] = self.vars[v.0 as usize][lane];
                }
            }
            Expr::Load { buffer, index } => {
                let elem = k.buffers[buffer.0 as usize].elem;
                for lane in Self::active(mask) {
                    let addr = self.address(buffer, self.val(index, lane), lane, "load")?;
                    let view = &self.l.buffers[buffer.0 as usize];
                    let bits = view.words.load_bits(addr, elem.size() as u64);
                    out[lane] = ops::widen(elem, bits);
                }
            }
            Expr::LoadLane {
                buffer,
                quad,
                lane: word,
            } => {
                for lane in Self::active(mask) {
                    let index = self
                        .val(quad, lane)
                        .checked_mul(4)
                        .and_then(|i| i.checked_add(u32::from(word)))
                        .unwrap_or(u32::MAX);
                    let addr = self.address(buffer, index, lane, "load")?;
                    let view = &self.l.buffers[buffer.0 as usize];
                    out[lane] = view.words.load_bits(addr, 4);
                }
            }
            Expr::LoadShared { array, index } => {
                for lane in Self::active(mask) {
                    let i = self.val(index, lane);
                    out[lane] = self.shared_read(array, i, (lane, 1), "shared load")?;
                }
            }
            Expr::Unary { op, arg } => {
                let t = ty(arg);
                for lane in Self::active(mask) {
                    out[lane] = ops::unary(op, t, self.val(arg, lane));
                }
            }
            Expr::Binary { op, lhs, rhs } => {
                let t = ty(lhs);
                for lane in Self::active(mask) {
                    out[lane] = ops::binary(op, t, self.val(lhs, lane), self.val(rhs, lane))
                        .map_err(|e| self.op_err(e, id, lane))?;
                }
            }
            Expr::Fma { a, b, c } => {
                let t = ty(a);
                for lane in Self::active(mask) {
                    let (x, y, z) = (self.val(a, lane), self.val(b, lane), self.val(c, lane));
                    out[lane] = ops::fma(t, x, y, z);
                }
            }
            Expr::Select {
                cond,
                accept,
                reject,
            } => {
                for lane in Self::active(mask) {
                    let pick = if self.val(cond, lane) != 0 {
                        accept
                    } else {
                        reject
                    };
                    out[lane] = self.val(pick, lane);
                }
            }
            Expr::Cast { arg, to } => {
                let from = ty(arg);
                for lane in Self::active(mask) {
                    out[lane] = ops::cast(from, to, self.val(arg, lane))
                        .map_err(|e| self.op_err(e, id, lane))?;
                }
            }
            Expr::Bitcast { arg, .. } => {
                for lane in Self::active(mask) {
                    out[lane] = self.val(arg, lane);
                }
            }
            Expr::Subgroup { op, arg } => self.subgroup(id, op, arg, mask, out)?,
        }
        Ok(())
    }

    fn builtin(&self, b: Builtin, lane: usize) -> u32 {
        let k = self.l.kernel;
        let local = self.local_id(lane);
        let sg = self.l.subgroup_size;
        match b {
            Builtin::GlobalId(a) => {
                let a = a as usize;
                self.wg[a]
                    .wrapping_mul(k.workgroup_size[a])
                    .wrapping_add(local[a])
            }
            Builtin::LocalId(a) => local[a as usize],
            Builtin::LocalIndex => lane as u32,
            Builtin::WorkgroupId(a) => self.wg[a as usize],
            Builtin::NumWorkgroups(a) => self.l.grid[a as usize],
            Builtin::SubgroupSize => sg,
            Builtin::SubgroupInvocationId => lane as u32 % sg,
            Builtin::SubgroupId => lane as u32 / sg,
        }
    }

    fn subgroup(
        &self,
        id: ExprId,
        op: SubgroupOp,
        arg: ExprId,
        mask: &[bool],
        out: &mut [u32],
    ) -> R<()> {
        let t: Scalar = self.l.info.ty(arg);
        let sg = self.l.subgroup_size as usize;
        for first in (0..self.lanes).step_by(sg) {
            let group = first..(first + sg).min(self.lanes);
            let active: Vec<usize> = group.clone().filter(|&l| mask[l]).collect();
            let combine = match op {
                SubgroupOp::Sum => BinaryOp::Add,
                SubgroupOp::Min => BinaryOp::Min,
                SubgroupOp::Max => BinaryOp::Max,
                SubgroupOp::ShuffleXor(m) => {
                    for &lane in &active {
                        let src = ((lane - first) as u32 ^ self.val(m, lane)) as usize + first;
                        if !group.contains(&src) || !mask[src] {
                            return Err(InterpError::InactiveLane {
                                at: self.site(lane),
                                expr: id,
                                lane: (src - first) as u32,
                            });
                        }
                        out[lane] = self.val(arg, src);
                    }
                    continue;
                }
            };
            let values = (first..first + sg)
                .map(|l| (l < self.lanes && mask[l]).then(|| self.val(arg, l)))
                .collect();
            let Some(total) = tree(values, |a, b| ops::reduce(combine, t, a, b)) else {
                continue;
            };
            for &lane in &active {
                out[lane] = total;
            }
        }
        Ok(())
    }
}

/// A subgroup's reduction in the order every backend that runs it on the CPU takes, so that
/// it vectorises there: the upper lanes folded onto the lower ([`SubgroupOp::folds`]).
/// Inactive lanes (`None`) leave the other operand as it is; `None` when every lane is
/// inactive.
pub(crate) fn tree(mut values: Vec<Option<u32>>, op: impl Fn(u32, u32) -> u32) -> Option<u32> {
    for (h, n) in SubgroupOp::folds(values.len()) {
        for i in 0..n {
            values[i] = match (values[i], values[i + h]) {
                (Some(a), Some(b)) => Some(op(a, b)),
                (a, None) => a,
                (None, b) => b,
            };
        }
    }
    values.first().copied().flatten()
}

#[cfg(test)]
mod tests {
    use super::tree;

    fn sum(values: &[Option<f32>]) -> Option<f32> {
        let bits = values.iter().map(|v| v.map(f32::to_bits)).collect();
        tree(bits, |a, b| {
            (f32::from_bits(a) + f32::from_bits(b)).to_bits()
        })
        .map(f32::from_bits)
    }

    /// The tree adds 1e8 to −1e8 and 1 to 1 before it adds the two; left to right, the first
    /// 1 would be lost in 1e8 and the sum would be 1.
    #[test]
    fn reductions_fold_the_upper_lanes_onto_the_lower() {
        let v = [Some(1e8), Some(1.0), Some(-1e8), Some(1.0)];
        assert_eq!(sum(&v), Some(2.0));
        // Six lanes: lanes 4 and 5 fold onto 0 and 1 first, then 2 and 3 onto 0 and 1.
        let v = [1e8, 1.0, 0.5, 0.25, -1e8, 4.0].map(Some);
        assert_eq!(sum(&v), Some(((1e8 + -1e8) + 0.5) + ((1.0 + 4.0) + 0.25)));
    }

    /// An inactive lane leaves the other operand; a subgroup with none active has no result.
    #[test]
    fn inactive_lanes_take_no_part() {
        assert_eq!(sum(&[None, Some(3.0), Some(-1.5), None]), Some(1.5));
        assert_eq!(sum(&[None, None, None]), None);
        assert_eq!(sum(&[Some(7.0)]), Some(7.0));
    }
}

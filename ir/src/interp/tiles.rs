//! Matrix tiles ([`TileOp`]): each subgroup of a workgroup holds its own copy of every tile,
//! and each operation runs once per subgroup that reaches it, with the subgroup's common
//! offset and stride. What a GPU leaves undefined is an error here: a workgroup that is not
//! whole subgroups, a subgroup only partly active, an offset or stride that differs across
//! the subgroup or is not a multiple of 8, a tile read before it is set, and every memory
//! error a scalar access would report (bounds, shared memory read before written or raced).

use super::exec::Workgroup;
use super::exec::R;
use super::InterpError;
use crate::kernel::*;
use crate::types::Scalar;
use half::f16;

/// Elements of a tile.
const ELEMS: usize = (TILE * TILE) as usize;

/// Offsets and strides must be multiples of this many elements.
const ALIGN: u32 = 8;

impl Workgroup<'_, '_> {
    pub(super) fn tile_op(&mut self, op: &TileOp, mask: &[bool]) -> R<()> {
        let sg = self.l.subgroup_size as usize;
        if !self.lanes.is_multiple_of(sg) {
            return Err(InterpError::TileSubgroups {
                invocations: self.lanes as u32,
                subgroup_size: sg as u32,
            });
        }
        let partial = |at| InterpError::TilePartialSubgroup { at };
        for (g, first) in self.whole_groups(mask, sg, partial)? {
            self.tile_op_subgroup(op, g, first)?;
        }
        Ok(())
    }

    fn tile_op_subgroup(&mut self, op: &TileOp, g: usize, first: usize) -> R<()> {
        match *op {
            TileOp::Zero { tile } => self.tiles[tile.0 as usize][g] = Some(vec![0.0; ELEMS]),
            TileOp::Load {
                tile,
                from,
                offset,
                stride,
                layout,
            } => {
                let (offset, stride) = self.placement(offset, stride, g, first)?;
                let role = self.l.kernel.tiles[tile.0 as usize].role;
                let mut elems = vec![0.0; ELEMS];
                for (n, e) in elems.iter_mut().enumerate() {
                    let i = index(offset, stride, layout, n);
                    let bits = self.read(from, i, first)?;
                    *e = match role.elem() {
                        Scalar::F16 => f16::from_bits(bits as u16).to_f32(),
                        _ => f32::from_bits(bits),
                    };
                }
                self.tiles[tile.0 as usize][g] = Some(elems);
            }
            TileOp::Mma { acc, a, b } => {
                let av = self.get(a, g, first)?;
                let bv = self.get(b, g, first)?;
                let cv = self.get(acc, g, first)?;
                let t = TILE as usize;
                let mut out = vec![0.0; ELEMS];
                for (n, o) in out.iter_mut().enumerate() {
                    let (r, c) = (n / t, n % t);
                    // f16 × f16 is exact in f32; the sum is f32 additions in order of k.
                    *o = (0..t).fold(cv[n], |s, kk| s + av[r * t + kk] * bv[kk * t + c]);
                }
                self.tiles[acc.0 as usize][g] = Some(out);
            }
            TileOp::Store {
                tile,
                to,
                offset,
                stride,
                layout,
            } => {
                let (offset, stride) = self.placement(offset, stride, g, first)?;
                let elems = self.get(tile, g, first)?;
                for (n, v) in elems.iter().enumerate() {
                    let i = index(offset, stride, layout, n);
                    self.tile_write(to, i, v.to_bits(), first)?;
                }
            }
        }
        Ok(())
    }

    /// The subgroup's offset and stride: the same on every lane, multiples of [`ALIGN`].
    fn placement(&self, offset: ExprId, stride: ExprId, g: usize, first: usize) -> R<(u32, u32)> {
        let sg = self.l.subgroup_size as usize;
        let (o, s) = (self.val(offset, first), self.val(stride, first));
        for lane in g * sg..(g + 1) * sg {
            for (what, e, v) in [("offset", offset, o), ("stride", stride, s)] {
                if self.val(e, lane) != v {
                    return Err(InterpError::TileNotUniform {
                        at: self.site(lane),
                        what,
                    });
                }
            }
        }
        if !o.is_multiple_of(ALIGN) || !s.is_multiple_of(ALIGN) {
            return Err(InterpError::TileMisaligned {
                at: self.site(first),
                offset: o,
                stride: s,
            });
        }
        Ok((o, s))
    }

    fn get(&self, t: TileId, g: usize, first: usize) -> R<Vec<f32>> {
        self.tiles[t.0 as usize][g]
            .clone()
            .ok_or_else(|| InterpError::TileUnset {
                at: self.site(first),
                tile: self.l.kernel.tiles[t.0 as usize].name.clone(),
            })
    }

    /// Element `i` of `mem` as stored bits, read on behalf of lane `first`.
    fn read(&mut self, mem: TileMemory, i: u64, first: usize) -> R<u32> {
        let i = self.index_u32(mem, i, first)?;
        match mem {
            TileMemory::Buffer(b) => {
                let elem = self.l.kernel.buffers[b.0 as usize].elem;
                let addr = self.address(b, i, first, "tile load")?;
                let view = &self.l.buffers[b.0 as usize];
                Ok(view.words.load_bits(addr, elem.size() as u64))
            }
            TileMemory::Shared(s) => {
                let subgroup = self.l.subgroup_size;
                self.shared_read(s, i, (first, subgroup), "tile load")
            }
        }
    }

    /// Writes the bits of element `i` of `mem` on behalf of lane `first`.
    pub(super) fn tile_write(&mut self, mem: TileMemory, i: u64, bits: u32, first: usize) -> R<()> {
        let i = self.index_u32(mem, i, first)?;
        match mem {
            TileMemory::Buffer(b) => {
                let elem = self.l.kernel.buffers[b.0 as usize].elem;
                let addr = self.address(b, i, first, "tile store")?;
                let view = &self.l.buffers[b.0 as usize];
                view.words.store_bits(addr, bits, elem.size() as u64);
            }
            TileMemory::Shared(s) => {
                let epoch = self.epoch;
                let cell = self.shared_write(s, i, first, "tile store")?;
                cell.bits = bits;
                cell.writer = Some((first as u32, epoch));
                cell.paired = false;
            }
        }
        Ok(())
    }

    /// An element index past u32 is out of bounds of any memory.
    fn index_u32(&self, mem: TileMemory, i: u64, first: usize) -> R<u32> {
        u32::try_from(i).map_err(|_| {
            let k = self.l.kernel;
            let (what, len) = match mem {
                TileMemory::Buffer(b) => (
                    format!("buffer {}", k.buffers[b.0 as usize].name),
                    self.l.buffers[b.0 as usize].len / k.buffers[b.0 as usize].elem.size() as u64,
                ),
                TileMemory::Shared(s) => (
                    format!("shared {}", k.shared[s.0 as usize].name),
                    k.shared[s.0 as usize].len as u64,
                ),
            };
            InterpError::OutOfBounds {
                at: self.site(first),
                what,
                index: i,
                len,
                expr: "tile".into(),
            }
        })
    }
}

/// The memory index of the `n`th element (row-major over the tile) of a tile at `offset`.
fn index(offset: u32, stride: u32, layout: TileLayout, n: usize) -> u64 {
    let (r, c) = ((n / TILE as usize) as u64, (n % TILE as usize) as u64);
    let (o, s) = (offset as u64, stride as u64);
    match layout {
        TileLayout::RowMajor => o + r * s + c,
        TileLayout::ColMajor => o + c * s + r,
    }
}

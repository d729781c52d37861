//! What multiplies the staged blocks ([`Compute`]): a subgroup's matrix tiles, or each
//! invocation's scalar sums, and how each writes its sums out.

use super::io::Output;
use super::{BK, OP};
use crate::matmul_stage::stage;
use crate::shape::ShapeError;
use trine_ir::{
    KernelBuilder, Scalar, SharedId, Tile, TileLayout, TileMemory, TileRole, Val, Var, TILE,
};

/// What multiplies the staged blocks: a subgroup's tiles, or each invocation's sums.
pub(super) enum Compute<'b> {
    Tiles {
        /// The A tiles of the subgroup's rows of tiles, loaded once per column.
        a: Vec<Tile<'b>>,
        b: Tile<'b>,
        /// The subgroup's accumulators, a row of its rectangle of tiles at a time.
        accs: Vec<Tile<'b>>,
        /// Its rectangle's (tile row, tile column) in the block.
        origin: (Val<'b>, Val<'b>),
        /// Its rectangle's tile columns.
        columns: u32,
        /// The subgroup width.
        width: u32,
    },
    Scalar {
        sums: Vec<Var<'b>>,
        /// Invocations per token of the block, each summing every `lanes`th row.
        lanes: u32,
        /// Whether this invocation's token is one of the step's: the others skip their
        /// sums, which a short prompt's block is mostly made of.
        live: Val<'b>,
    },
}

/// Row stride, in f32 elements, of the shared tile each subgroup stores its sums through.
const OUTPUT_STRIDE: u32 = TILE + 8;

impl<'b> Compute<'b> {
    /// Bytes of the shared tile each subgroup of the tiled variant writes its sums through.
    pub(super) const OUTPUT_TILE_BYTES: u32 = TILE * OUTPUT_STRIDE * 4;

    /// Each subgroup takes a rectangle of the block's tiles, up to 4 wide: it loads an A
    /// tile per row of its rectangle and a B tile per column, where a row of 8 tiles would
    /// load 8 B tiles for the same products.
    pub(super) fn tiles(
        k: &'b KernelBuilder,
        width: u32,
        (bm, bn): (u32, u32),
        invocations: u32,
    ) -> Result<Self, ShapeError> {
        let per_row = bn / TILE;
        let tiles = (bm / TILE) * per_row;
        let subgroups = invocations / width.max(1);
        let refuse = || ShapeError::Unsupported {
            op: OP,
            what: format!("subgroups of {width} for {tiles} tiles over {invocations} invocations"),
        };
        if width == 0 || !invocations.is_multiple_of(width) || !tiles.is_multiple_of(subgroups) {
            return Err(refuse());
        }
        let owned = tiles / subgroups;
        let columns = owned.min(per_row).min(4);
        if !owned.is_multiple_of(columns) || !per_row.is_multiple_of(columns) {
            return Err(refuse());
        }
        let rows = owned / columns;
        k.require_subgroup_width(width);
        let accs: Vec<Tile> = (0..owned)
            .map(|i| k.tile(&format!("acc{i}"), TileRole::Acc))
            .collect();
        for acc in &accs {
            acc.zero();
        }
        let across = k.u32(per_row / columns);
        let s = k.subgroup_id();
        Ok(Compute::Tiles {
            a: (0..rows)
                .map(|i| k.tile(&format!("a{i}"), TileRole::A))
                .collect(),
            b: k.tile("b", TileRole::B),
            accs,
            origin: ((s / across) * k.u32(rows), (s % across) * k.u32(columns)),
            columns,
            width,
        })
    }

    /// Each invocation sums a token's share of the block's rows; `(t0, tokens)` are the
    /// block's first token and the step's tokens.
    pub(super) fn scalar(
        k: &'b KernelBuilder,
        (bm, bn): (u32, u32),
        invocations: u32,
        (t0, tokens): (Val<'b>, Val<'b>),
    ) -> Self {
        let lanes = invocations / bm;
        Compute::Scalar {
            sums: (0..bn / lanes)
                .map(|i| k.var(&format!("sum{i}"), Scalar::F32))
                .collect(),
            lanes,
            live: (t0 + k.local_index() / k.u32(lanes)).lt(tokens),
        }
    }

    /// The (tile row, tile column) in the block of each accumulator of this subgroup.
    fn owned(
        k: &'b KernelBuilder,
        accs: &[Tile<'b>],
        (tm, tn): (Val<'b>, Val<'b>),
        columns: u32,
    ) -> Vec<(Val<'b>, Val<'b>)> {
        (0..accs.len() as u32)
            .map(|j| (tm + k.u32(j / columns), tn + k.u32(j % columns)))
            .collect()
    }

    /// Multiplies the staged step of `depth` blocks, x's from `x0` of `xs` and W's from `w0`
    /// of `ws`, into the sums.
    pub(super) fn step(
        &self,
        k: &'b KernelBuilder,
        (xs, ws, x0, w0): (SharedId, SharedId, Val<'b>, Val<'b>),
        depth: u32,
    ) {
        let width = stage(depth);
        match self {
            Compute::Tiles {
                a,
                b,
                accs,
                origin: (tm, tn),
                columns,
                ..
            } => {
                for kk in (0..BK * depth).step_by(TILE as usize) {
                    let stride = k.u32(width);
                    let at = |t: Val<'b>| t * k.u32(TILE * width) + k.u32(kk);
                    for (i, a) in a.iter().enumerate() {
                        let row = x0 + at(*tm + k.u32(i as u32));
                        a.load(TileMemory::Shared(xs), row, stride, TileLayout::RowMajor);
                    }
                    for j in 0..*columns {
                        // W's rows are B's columns: B is W's block column-major.
                        let column = w0 + at(*tn + k.u32(j));
                        b.load(TileMemory::Shared(ws), column, stride, TileLayout::ColMajor);
                        for (i, a) in a.iter().enumerate() {
                            accs[i * *columns as usize + j as usize].mma(*a, *b);
                        }
                    }
                }
            }
            Compute::Scalar { sums, lanes, live } => {
                let lid = k.local_index();
                let (t, lane) = (lid / k.u32(*lanes), lid % k.u32(*lanes));
                k.if_(*live, || {
                    k.for_range(k.u32(0), k.u32(BK * depth), 1, |c| {
                        let xv = k.load_shared(xs, x0 + t * k.u32(width) + c);
                        let xv = xv.cast(Scalar::F32);
                        for (j, sum) in sums.iter().enumerate() {
                            let n = lane + k.u32(lanes * j as u32);
                            let wv = k.load_shared(ws, w0 + n * k.u32(width) + c);
                            let wv = wv.cast(Scalar::F32);
                            sum.set(xv.fma(wv, sum.get()));
                        }
                    });
                });
            }
        }
    }

    /// Writes the block's sums to y. Subgroups store each accumulator in turn to a tile of
    /// shared memory of their own and write it from there (guarded at y's edges), which
    /// needs far less shared memory than the whole block, left to the steps' staging; the
    /// scalar variant stages the whole block of `(bm, bn)`.
    pub(super) fn finish(
        &self,
        k: &'b KernelBuilder,
        out: &Output<'b>,
        (bm, bn): (u32, u32),
        invocations: u32,
    ) {
        let lid = k.local_index();
        match self {
            Compute::Tiles {
                accs,
                origin,
                columns,
                width,
                ..
            } => {
                let stride = OUTPUT_STRIDE;
                let region = k.shared("y_tiles", Scalar::F32, invocations / width * TILE * stride);
                let base = k.subgroup_id() * k.u32(TILE * stride);
                let lane = lid % k.u32(*width);
                for (&(tm, tn), acc) in Self::owned(k, accs, *origin, *columns).iter().zip(accs) {
                    let layout = TileLayout::RowMajor;
                    acc.store(TileMemory::Shared(region), base, k.u32(stride), layout);
                    k.barrier();
                    let at = |r: Val<'b>, c: Val<'b>| (tm * k.u32(TILE) + r, tn * k.u32(TILE) + c);
                    let read = |r: Val<'b>, c: Val<'b>| {
                        k.load_shared(region, base + r * k.u32(stride) + c)
                    };
                    if let Some(glu) = out.glu {
                        // A pair of rows per lane: a tile's columns start even.
                        let pairs = TILE / 2;
                        for i in 0..TILE * pairs / width {
                            let e = k.u32(i * width) + lane;
                            let (r, c) = (e / k.u32(pairs), e % k.u32(pairs) * k.u32(2));
                            let sums = (read(r, c), read(r, c + k.u32(1)));
                            out.write_pair(k, glu, at(r, c), sums);
                        }
                    } else {
                        // Consecutive lanes, consecutive rows of y.
                        for i in 0..TILE * TILE / width {
                            let e = k.u32(i * width) + lane;
                            let (r, c) = (e / k.u32(TILE), e % k.u32(TILE));
                            out.write(k, at(r, c), read(r, c));
                        }
                    }
                    // The next accumulator reuses the tile.
                    k.barrier();
                }
            }
            Compute::Scalar { sums, lanes, .. } => {
                let stride = bn + 8;
                let block = k.shared("y_block", Scalar::F32, bm * stride);
                let (t, lane) = (lid / k.u32(*lanes), lid % k.u32(*lanes));
                for (j, sum) in sums.iter().enumerate() {
                    let n = lane + k.u32(lanes * j as u32);
                    k.store_shared(block, t * k.u32(stride) + n, sum.get());
                }
                k.barrier();
                out.write_block(k, (block, stride), (bm, bn), invocations, 0);
            }
        }
    }
}

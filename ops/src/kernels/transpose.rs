//! Matrix transpose through a shared-memory tile, so that both the read and the write are
//! contiguous across a workgroup's rows. The tile has one padding column against bank
//! conflicts. A second kernel transposes twice in one tile's memory: through f16 halves, then
//! through the f32 tile that overlays them ([`trine_ir::SharedDecl::over`]).

use crate::case::*;
use half::f16;
use trine_ir::{Access, BufferId, Kernel, KernelBuilder, ParamValue, Scalar, Val};

const TILE: u32 = 16;

pub fn kernel() -> Kernel {
    let k = KernelBuilder::new("transpose", [TILE, TILE, 1]);
    let tile = k.shared("tile", Scalar::F32, TILE * (TILE + 1));
    let t = Tile::load(&k);
    k.store_shared(tile, t.own(&k), t.v);
    k.barrier();
    let v = k.load_shared(tile, t.mirror(&k));
    t.store(&k, v);
    k.finish()
}

/// `dst` = xᵀ + f16(x)ᵀ: x transposed through an f16 tile, then, in the same memory, through
/// the f32 tile overlaying it, barriers between the phases.
pub fn overlay_kernel() -> Kernel {
    let k = KernelBuilder::new("transpose_overlay", [TILE, TILE, 1]);
    let halves = k.shared("halves", Scalar::F16, 2 * TILE * (TILE + 1));
    let tile = k.shared_over("tile", Scalar::F32, TILE * (TILE + 1), halves);
    let t = Tile::load(&k);
    // Each half at the place of its own f32 element's second half, so that each invocation's
    // write of the f32 tile overwrites halves another one read.
    fn second<'b>(k: &'b KernelBuilder, at: Val<'b>) -> Val<'b> {
        at * k.u32(2) + k.u32(1)
    }
    k.store_shared(halves, second(&k, t.own(&k)), t.v.cast(Scalar::F16));
    k.barrier();
    let h = k.load_shared(halves, second(&k, t.mirror(&k)));
    k.barrier();
    k.store_shared(tile, t.own(&k), t.v);
    k.barrier();
    let v = k.load_shared(tile, t.mirror(&k));
    t.store(&k, v + h.cast(Scalar::F32));
    k.finish()
}

/// A workgroup's tile of the transpose: its buffers and sizes, its invocation's place and
/// the element it loaded (0 past the matrix).
struct Tile<'b> {
    dst: BufferId,
    rows: Val<'b>,
    cols: Val<'b>,
    tx: Val<'b>,
    ty: Val<'b>,
    v: Val<'b>,
}

impl<'b> Tile<'b> {
    fn load(k: &'b KernelBuilder) -> Self {
        let src = k.buffer("src", Scalar::F32, Access::Read);
        let dst = k.buffer("dst", Scalar::F32, Access::Write);
        let rows = k.param("rows", Scalar::U32);
        let cols = k.param("cols", Scalar::U32);
        let (tx, ty) = (k.local_id(0), k.local_id(1));
        let t = k.u32(TILE);
        let x = k.workgroup_id(0) * t + tx;
        let y = k.workgroup_id(1) * t + ty;
        let v = k.var("v", Scalar::F32);
        k.if_(y.lt(rows) & x.lt(cols), || v.set(k.load(src, y * cols + x)));
        Tile {
            dst,
            rows,
            cols,
            tx,
            ty,
            v: v.get(),
        }
    }

    /// The invocation's place in the padded tile.
    fn own(&self, k: &'b KernelBuilder) -> Val<'b> {
        self.ty * k.u32(TILE + 1) + self.tx
    }

    /// The place of the element it writes, across the tile's diagonal.
    fn mirror(&self, k: &'b KernelBuilder) -> Val<'b> {
        self.tx * k.u32(TILE + 1) + self.ty
    }

    /// Stores `value` at the invocation's place in xᵀ, where that is inside it.
    fn store(&self, k: &'b KernelBuilder, value: Val<'b>) {
        let t = k.u32(TILE);
        let ox = k.workgroup_id(1) * t + self.tx;
        let oy = k.workgroup_id(0) * t + self.ty;
        k.if_(oy.lt(self.cols) & ox.lt(self.rows), || {
            k.store(self.dst, oy * self.rows + ox, value);
        });
    }
}

pub fn cases() -> Vec<Case> {
    let plain = [(1u32, 1u32), (37, 53), (256, 128)]
        .map(|shape| case("f32", kernel(), shape, |v| v as f64));
    let over = case("f32 over f16", overlay_kernel(), (37, 53), |v| {
        (v + f16::from_f32(v).to_f32()) as f64
    });
    plain.into_iter().chain([over]).collect()
}

/// A case of `kernel` on a random `rows × cols` matrix, whose transposed element `v` the
/// kernel writes as `value(v)`.
fn case(what: &str, kernel: Kernel, (rows, cols): (u32, u32), value: fn(f32) -> f64) -> Case {
    let mut r = Rng::new((rows * 1000 + cols) as u64);
    let x = r.f32s((rows * cols) as usize, -10.0, 10.0);
    let want = (0..cols as usize)
        .flat_map(|c| (0..rows as usize).map(move |rw| (rw, c)))
        .map(|(rw, c)| value(x[rw * cols as usize + c]))
        .collect();
    Case::new(
        format!("transpose/{what}/{rows}x{cols}"),
        kernel,
        [cols.div_ceil(TILE), rows.div_ceil(TILE), 1],
    )
    .input("src", Scalar::F32, f32_bytes(&x))
    .output(
        "dst",
        Scalar::F32,
        vec![0; (rows * cols * 4) as usize],
        want,
    )
    .params(vec![ParamValue::U32(rows), ParamValue::U32(cols)])
    .bound(NMSE_EXACT)
}

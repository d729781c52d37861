//! Prompt products on matrix units: `y[t, r] = Σ_k x[t, k] · W[r, k]` (plus `add[t, r]`) for
//! the tokens of a prompt step, with W as its GGUF stores it (F32, F16, Q8_0, Q4_0, Q4_1; one
//! row per output feature) and x and y in f32.
//!
//! A workgroup computes a block of tokens by rows ([`BlockSize`]: 64 × 64; 32 × 32 for
//! products of fewer than [`SMALL_ROWS`] rows, whose bigger blocks would leave most of a GPU
//! idle, and for every product where the executor finds the device faster so; 128 × 128 for
//! the biggest products), stepping through K [`TilesSpec::depth`] quantized blocks of [`BK`] columns at a time
//! ([`TilesSpec::depth_for`]): it stages x's block rounded to f16 and W's block dequantised to
//! f16 in shared memory, then multiplies them as 16 × 16 matrix tiles ([`trine_ir::TileOp`]):
//! NVIDIA's tensor cores through `mma.sync` or Vulkan's cooperative matrices. The block's
//! output tiles are divided evenly among the workgroup's subgroups, whose width is therefore a
//! constant of the kernel ([`trine_ir::Capabilities::subgroup_width`]: naga wants
//! cooperative-matrix operations in uniform control flow, so no guard may depend on it). Each
//! subgroup keeps the accumulators of its rectangle of tiles through the K loop, loading an A
//! tile per row of it and a B tile per column, then stores them one at a time to a tile of shared memory
//! of its own, from where its lanes write y (adding the residual), guarded at the edges. Each
//! step's blocks are loaded from memory during the step before ([`super::matmul_stage`]), so
//! their latency overlaps that step's multiplications.
//!
//! Devices without matrix units run the scalar variant ([`TilesSpec::scalar`]): the same
//! staging in f16, a block of K at a time, each invocation summing 32 outputs in f32. Both
//! compute the product of x rounded to f16 with W's f16 values, whose products are exact in
//! f32: they differ only in the order and precision of the sums.
//!
//! Bound: [`NMSE`], against the f64 product of the f16-rounded x with the dequantised W.

use super::dequant;
use super::matmul_stage::{stage, weights_elem, Block, Fetch, Layout};
use super::shape::ShapeError;
use super::support::{elements, nonzero, Float};
use crate::case::*;
use half::f16;
use trine_gguf::quant::{dequantize, quantize, WeightType};
use trine_ir::{
    Access, BufferId, Kernel, KernelBuilder, ParamValue, Scalar, SharedId, Tile, TileLayout,
    TileMemory, TileRole, Val, Var, TILE,
};

pub(crate) const OP: &str = "matmul_tiles";

/// Columns of K per step: one quantized block.
pub use super::matmul_stage::BK;
/// Products with fewer rows take the small block.
pub const SMALL_ROWS: u32 = 2048;
/// Products with at least this many rows and [`LARGE_TOKENS`] tokens take the large block.
pub const LARGE_ROWS: u32 = 4096;
/// See [`LARGE_ROWS`].
pub const LARGE_TOKENS: u32 = 256;
/// The most blocks of K a step of the tiled kernel takes. On an H200 (2026-11-26), pp512 of
/// SmolLM2-135M's shapes went from 69,300–69,600 tokens/s on CUDA and 41,900–42,700 on
/// Vulkan at one block a step to 76,300–76,500 and 48,800–48,900 at two; four (the Fetch's
/// registers doubled again) gave 75,200–75,500 and 46,300–47,200.
pub const MAX_DEPTH: u32 = 2;

/// NMSE bound: products of f16 values are exact in f32, so only the f32 sums round, about
/// K·2⁻⁴⁸ relative for these inputs; 1e-9 leaves three orders of magnitude for devices that
/// sum in another order or, as NVIDIA's tensor cores do, with fewer bits between steps.
pub const NMSE: f64 = 1e-9;

/// The block of tokens by rows a workgroup computes ([`BlockSize::for_product`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockSize {
    /// 32 × 32 on 128 invocations: products of fewer than [`SMALL_ROWS`] rows, whose bigger
    /// blocks would leave most of a GPU idle, and every product where the executor finds the
    /// device faster so.
    Small,
    /// 64 × 64 on 128 invocations.
    Medium,
    /// 128 × 128 on 256 invocations, tiled only (its scalar variant takes the medium
    /// block): products of at least [`LARGE_ROWS`] rows and [`LARGE_TOKENS`] tokens, which
    /// fill a GPU with these blocks. Each element of x and W staged serves twice the products
    /// it serves in a medium block, so the step's loads from memory (x in f32 above all) are
    /// half as many for the same work.
    Large,
}

impl BlockSize {
    /// The block for a product of `rows` rows over `tokens` tokens; `small_always` where
    /// the device runs every product faster with small blocks.
    pub fn for_product(rows: u32, tokens: u32, small_always: bool) -> BlockSize {
        if small_always || rows < SMALL_ROWS {
            BlockSize::Small
        } else if rows >= LARGE_ROWS && tokens >= LARGE_TOKENS {
            BlockSize::Large
        } else {
            BlockSize::Medium
        }
    }

    /// Tokens and rows.
    pub fn dims(self) -> (u32, u32) {
        match self {
            BlockSize::Small => (32, 32),
            BlockSize::Medium => (64, 64),
            BlockSize::Large => (128, 128),
        }
    }

    /// Invocations per workgroup.
    pub fn invocations(self) -> u32 {
        match self {
            BlockSize::Large => 256,
            _ => 128,
        }
    }

    fn name(self) -> &'static str {
        match self {
            BlockSize::Small => "_small",
            BlockSize::Medium => "",
            BlockSize::Large => "_large",
        }
    }
}

/// Compile-time choices of the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TilesSpec {
    pub weights: WeightType,
    /// Adds `add[t, r]` to each output (a residual).
    pub add: bool,
    /// Matrix tiles for subgroups of this width (needs the device's matrix units); `None`,
    /// the scalar variant.
    pub tiles: Option<u32>,
    pub block: BlockSize,
    /// Blocks of K ([`BK`] columns) per step; K must be whole steps ([`TilesSpec::depth_for`]).
    pub depth: u32,
    /// F16 weights (and f16 x) copied into shared memory asynchronously
    /// ([`trine_ir::CopyOp`]) in [`COPY_STAGES`] stages, an f32 x put in two, so that the next
    /// steps' blocks move while the subgroups multiply the current ones, copied ones without
    /// passing through the invocations' registers, with one barrier a step
    /// ([`TilesSpec::copied`]).
    pub copies: bool,
    /// x stored as f16 (as cuBLAS's f16 products take it), copied as W is where W is; else
    /// f32, rounded to f16 as it is staged.
    pub half_x: bool,
    /// y is SwiGLU of each pair of rows `(2i, 2i + 1)`, `silu(y[2i])·y[2i + 1]`, `rows / 2`
    /// wide: gate and up interleaved, as the executor lays out an FFN's, with no pass of
    /// their own after the product. Not with [`TilesSpec::add`].
    pub swiglu: bool,
    /// Warpgroup products ([`super::matmul_group`]) instead of the subgroups' tiles, where
    /// the rest of the spec allows them ([`TilesSpec::grouped`]: the large block).
    pub group: bool,
}

impl TilesSpec {
    /// The blocks of K per step for a product of `cols` columns on tiles: the most, up to
    /// [`MAX_DEPTH`], that K is whole steps of.
    pub fn depth_for(cols: u32) -> u32 {
        let mut depth = MAX_DEPTH;
        while depth > 1 && !cols.is_multiple_of(BK * depth) {
            depth /= 2;
        }
        depth
    }

    /// This product with its f16 weights (and f16 x) copied asynchronously, where it has
    /// tiles and f16 weights.
    pub fn copied(self) -> Self {
        TilesSpec {
            copies: self.weights == WeightType::F16 && self.tiles.is_some(),
            ..self
        }
    }

    /// This product on warpgroup products, where it has a variant on them
    /// ([`super::matmul_group::eligible`]).
    pub fn grouped(self) -> Self {
        TilesSpec {
            group: super::matmul_group::eligible(&self),
            ..self
        }
    }

    /// The scalar variant of this product (no matrix units), which steps a block at a time,
    /// the large block as a medium one ([`TilesSpec::grid`] follows), its shared memory
    /// within the smallest device's 32 KiB.
    pub fn scalar(self) -> Self {
        TilesSpec {
            tiles: None,
            depth: 1,
            copies: false,
            group: false,
            block: match self.block {
                BlockSize::Large => BlockSize::Medium,
                b => b,
            },
            ..self
        }
    }

    /// The kernels to try for this product, best first: its own; on warpgroup products, the
    /// same on tiles (for a device without them); with copies, the same without them (for a
    /// device that has none); on tiles, the large block then the medium one (for a device
    /// with less than the large block's 48 KiB of shared memory); then the scalar variant.
    pub fn variants(self) -> Vec<TilesSpec> {
        let mut out = vec![];
        if self.group {
            out.push(self);
        }
        let on_tiles = TilesSpec {
            group: false,
            ..self
        };
        if self.copies {
            out.push(on_tiles);
        }
        let this = TilesSpec {
            copies: false,
            ..on_tiles
        };
        if this.tiles.is_some() {
            out.push(this);
            if self.block == BlockSize::Large {
                out.push(TilesSpec {
                    block: BlockSize::Medium,
                    ..this
                });
            }
        }
        out.push(self.scalar());
        out
    }

    /// The kernel's name: x (where f16) and weights, residual or SwiGLU, block, subgroup
    /// width (or scalar), copies and depth.
    pub fn name(&self) -> String {
        format!(
            "matmul_tiles_{}{}{}{}{}{}{}{}_d{}",
            if self.half_x { "f16x" } else { "" },
            self.weights.name(),
            if self.add { "_add" } else { "" },
            if self.swiglu { "_swiglu" } else { "" },
            self.block.name(),
            match self.tiles {
                Some(w) => format!("_sg{w}"),
                None => "_scalar".into(),
            },
            if self.copies { "_cp" } else { "" },
            if self.group { "_wg" } else { "" },
            self.depth
        )
    }

    /// Tokens and rows per workgroup.
    pub fn block(&self) -> (u32, u32) {
        self.block.dims()
    }

    /// `[row blocks, token blocks, 1]`.
    pub fn grid(&self, rows: u32, tokens: u32) -> [u32; 3] {
        let (bm, bn) = self.block();
        [rows.div_ceil(bn), tokens.div_ceil(bm), 1]
    }

    /// Parameters: rows, cols, tokens.
    pub fn params(&self, rows: u32, cols: u32, tokens: u32) -> Vec<ParamValue> {
        vec![
            ParamValue::U32(rows),
            ParamValue::U32(cols),
            ParamValue::U32(tokens),
        ]
    }
}

/// Checks a product's shape: K whole blocks of [`BK`], and every index within u32.
pub fn check(rows: u32, cols: u32, tokens: u32) -> Result<(), ShapeError> {
    nonzero(OP, "rows", rows)?;
    nonzero(OP, "cols", cols)?;
    nonzero(OP, "tokens", tokens)?;
    if !cols.is_multiple_of(BK) {
        return Err(ShapeError::NotMultiple {
            op: OP,
            what: "cols",
            value: cols as usize,
            multiple: BK as usize,
        });
    }
    elements(OP, "x", &[tokens, cols])?;
    elements(OP, "y", &[tokens, rows])?;
    // The staging walks float blocks by adding whole rows to an index, which may pass a
    // matrix's last row by up to a block (the large one's at most) before it is clamped.
    let (bm, bn) = BlockSize::Large.dims();
    let past = |n: u32| n.saturating_add(bm.max(bn));
    elements(OP, "x and a block", &[past(tokens), cols])?;
    elements(OP, "w and a block", &[past(rows), cols])?;
    // A quantized row's bytes: at most 34 per 32 elements.
    elements(OP, "w", &[rows, cols / BK, 34])?;
    Ok(())
}

/// The kernel for `spec`. Buffers: `w` (f32, f16, or a quantized type's bytes as `U32`
/// words), `x` f32, then `add` f32 with [`TilesSpec::add`], then `y` f32 (`rows / 2` wide
/// with [`TilesSpec::swiglu`]). Params: rows, cols, tokens. Grid [`TilesSpec::grid`]; K must
/// be whole steps of [`TilesSpec::depth`] blocks. Errors: a subgroup width that does not
/// divide the block's tiles evenly among the workgroup's subgroups; a depth other than 1, 2
/// or 4; a residual with SwiGLU.
pub fn kernel(spec: TilesSpec) -> Result<Kernel, ShapeError> {
    let (bm, bn) = spec.block();
    let depth = spec.depth;
    if !matches!(depth, 1 | 2 | 4) {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!("steps of {depth} blocks of K"),
        });
    }
    if spec.add && spec.swiglu {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: "a residual added to SwiGLU's output".into(),
        });
    }
    if spec.group {
        return super::matmul_group::kernel(spec);
    }
    let invocations = spec.block.invocations();
    let k = KernelBuilder::new(&spec.name(), [invocations, 1, 1]);
    let io = Io::declare(&k, &spec);
    let cols = io.cols;
    // Copied blocks have COPY_STAGES stages, a put x two (see `pipelined`): more than 48 KiB
    // for the large block, which CUDA, the one target of copies, takes as dynamic shared
    // memory.
    let (x_stage, w_stage) = (bm * stage(depth), bn * stage(depth));
    let (x_stages, w_stages) = match (spec.copies, spec.half_x) {
        (true, true) => (COPY_STAGES, COPY_STAGES),
        (true, false) => (2, COPY_STAGES),
        (false, _) => (1, 1),
    };
    let xs = k.shared("x_block", Scalar::F16, x_stages * x_stage);
    let ws = k.shared("w_block", Scalar::F16, w_stages * w_stage);

    if spec.tiles.is_none() && spec.block == BlockSize::Large {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: "the large block without tiles".into(),
        });
    }
    let compute = match spec.tiles {
        Some(width) => Compute::tiles(&k, width, (bm, bn), invocations)?,
        None => Compute::scalar(&k, (bm, bn), invocations),
    };
    let fetch = io.fetch(&k, &spec, Layout::Padded);
    let width = BK * depth;
    if spec.copies {
        pipelined(
            &k,
            (&fetch, &compute),
            (xs, ws),
            (x_stage, w_stage),
            (cols, depth),
        );
    } else {
        // Step k + 1's loads are issued before step k's products ([`super::matmul_stage`]).
        let zero = k.u32(0);
        fetch.load(&k, zero);
        k.for_range(zero, cols, width, |k0| {
            fetch.put(&k, (xs, zero), (ws, zero));
            k.barrier();
            let next = k0 + k.u32(width);
            k.if_(next.lt(cols), || fetch.load(&k, next));
            compute.step(&k, (xs, ws, zero, zero), depth);
            // The next step restages both blocks.
            k.barrier();
        });
    }
    compute.finish(&k, &io.output(&spec), (bm, bn), invocations);
    Ok(k.finish())
}

/// A product kernel's buffers and parameters, as [`kernel`] gives them, and its block's
/// first token and row.
pub(crate) struct Io<'b> {
    x: BufferId,
    w: BufferId,
    add: Option<BufferId>,
    y: BufferId,
    rows: Val<'b>,
    pub cols: Val<'b>,
    tokens: Val<'b>,
    t0: Val<'b>,
    r0: Val<'b>,
}

impl<'b> Io<'b> {
    pub(crate) fn declare(k: &'b KernelBuilder, spec: &TilesSpec) -> Self {
        let (bm, bn) = spec.block();
        let w = k.buffer("w", weights_elem(spec.weights), Access::Read);
        let x = k.buffer("x", Self::x_float(spec).scalar(), Access::Read);
        let add = spec.add.then(|| k.buffer("add", Scalar::F32, Access::Read));
        let y = k.buffer("y", Scalar::F32, Access::Write);
        Io {
            x,
            w,
            add,
            y,
            rows: k.param("rows", Scalar::U32),
            cols: k.param("cols", Scalar::U32),
            tokens: k.param("tokens", Scalar::U32),
            t0: k.workgroup_id(1) * k.u32(bm),
            r0: k.workgroup_id(0) * k.u32(bn),
        }
    }

    fn x_float(spec: &TilesSpec) -> Float {
        if spec.half_x {
            Float::F16
        } else {
            Float::F32
        }
    }

    /// The variables staging the block's x and W, in `layout`.
    pub(crate) fn fetch(
        &self,
        k: &'b KernelBuilder,
        spec: &TilesSpec,
        layout: Layout,
    ) -> Fetch<'b> {
        let (bm, bn) = spec.block();
        let block = |n, r0, rows| Block {
            n,
            r0,
            rows,
            cols: self.cols,
        };
        Fetch::declare(
            k,
            (spec.block.invocations(), spec.depth),
            (self.x, block(bm, self.t0, self.tokens), Self::x_float(spec)),
            (self.w, block(bn, self.r0, self.rows), spec.weights),
            (spec.copies, layout),
        )
    }

    /// Where the block's sums go.
    pub(crate) fn output(&self, spec: &TilesSpec) -> Output<'b> {
        Output {
            y: self.y,
            add: self.add,
            swiglu: spec.swiglu,
            origin: (self.t0, self.r0),
            ends: (self.tokens, self.rows),
        }
    }
}

/// Stages of copied blocks: each step's copies start two steps ahead of its products. On an
/// H100 (2026-11-26, the 512 × 4096 × 4096 f16 product), three stages took f16 x from
/// 74.7–75.9 µs (two) to 71.1–73.1, with f32 x the same (97.6–99.7 against 98.4–99.5); four
/// gained at most 2 µs more for half again the shared memory.
pub const COPY_STAGES: u32 = 3;

/// The K loop with copied weights: W's block of step i lands in stage i mod
/// [`COPY_STAGES`], started `COPY_STAGES - 1` steps ahead, and x's is copied alike (f16 x)
/// or, loaded a step ahead as without copies, put into stage i mod 2, so one barrier a step
/// suffices. When every invocation has passed step i's barrier, every subgroup has finished
/// step i − 1's products, so the stages those read may be written again: by the copies
/// started after that barrier, and by the next step's put.
fn pipelined<'b>(
    k: &'b KernelBuilder,
    (fetch, compute): (&Fetch<'b>, &Compute<'b>),
    (xs, ws): (SharedId, SharedId),
    (x_stage, w_stage): (u32, u32),
    (cols, depth): (Val<'b>, u32),
) {
    let width = BK * depth;
    let ahead = COPY_STAGES - 1;
    let stage_of =
        |k0: Val<'b>, stages: u32, size: u32| (k0 / k.u32(width)) % k.u32(stages) * k.u32(size);
    let x_stages = if fetch.copies_x() { COPY_STAGES } else { 2 };
    for s in 0..ahead {
        let k0 = k.u32(s * width);
        let (x0, w0) = (k.u32(s * x_stage), k.u32(s * w_stage));
        k.if_(k0.lt(cols), || fetch.copy(k, k0, (xs, x0), (ws, w0)));
        // Every step commits a batch, empty or not, so that the wait counts steps.
        k.copy_commit();
    }
    fetch.load(k, k.u32(0));
    k.for_range(k.u32(0), cols, width, |k0| {
        let x0 = stage_of(k0, x_stages, x_stage);
        fetch.put(k, (xs, x0), (ws, k.u32(0)));
        k.copy_wait(ahead - 1);
        k.barrier();
        let later = k0 + k.u32(ahead * width);
        k.if_(later.lt(cols), || {
            let x0 = stage_of(later, x_stages, x_stage);
            fetch.copy(
                k,
                later,
                (xs, x0),
                (ws, stage_of(later, COPY_STAGES, w_stage)),
            )
        });
        k.copy_commit();
        let next = k0 + k.u32(width);
        k.if_(next.lt(cols), || fetch.load(k, next));
        compute.step(k, (xs, ws, x0, stage_of(k0, COPY_STAGES, w_stage)), depth);
    });
}

/// Where the block's sums go: `y` (plus `add`) from (token, row) `origin`, within `ends`.
pub(crate) struct Output<'b> {
    y: BufferId,
    add: Option<BufferId>,
    /// Rows in pairs, each written as SwiGLU of the two ([`TilesSpec::swiglu`]).
    swiglu: bool,
    origin: (Val<'b>, Val<'b>),
    ends: (Val<'b>, Val<'b>),
}

impl<'b> Output<'b> {
    /// Writes SwiGLU of the sums `gate` and `up` of (token, row) `(t, n)` and `(t, n + 1)` of
    /// the block (`n` even), if both rows are inside y.
    fn write_pair(
        &self,
        k: &'b KernelBuilder,
        (t, n): (Val<'b>, Val<'b>),
        (gate, up): (Val<'b>, Val<'b>),
    ) {
        let (tok, row) = (self.origin.0 + t, self.origin.1 + n);
        k.if_(
            tok.lt(self.ends.0) & (row + k.u32(1)).lt(self.ends.1),
            || {
                let half = self.ends.1 / k.u32(2);
                let v = super::elementwise::silu_ir(k, gate) * up;
                k.store(self.y, tok * half + row / k.u32(2), v);
            },
        );
    }

    /// Writes the whole block's sums from `block`, f32 (token, row) `(t, n)` at
    /// `t·stride + n`: each invocation a column of it, consecutive invocations consecutive
    /// rows of y, or a pair of rows with SwiGLU.
    pub(crate) fn write_block(
        &self,
        k: &'b KernelBuilder,
        (block, stride): (SharedId, u32),
        (bm, bn): (u32, u32),
        invocations: u32,
    ) {
        let lid = k.local_index();
        let read = |t: Val<'b>, n: Val<'b>| k.load_shared(block, t * k.u32(stride) + n);
        if self.swiglu {
            let pairs = bn / 2;
            k.for_range(k.u32(0), k.u32(bm * pairs), invocations, |e| {
                let e = e + lid;
                let (t, n) = (e / k.u32(pairs), e % k.u32(pairs) * k.u32(2));
                self.write_pair(k, (t, n), (read(t, n), read(t, n + k.u32(1))));
            });
        } else {
            k.for_range(k.u32(0), k.u32(bm * bn), invocations, |e| {
                let e = e + lid;
                let (t, n) = (e / k.u32(bn), e % k.u32(bn));
                self.write(k, (t, n), read(t, n));
            });
        }
    }

    /// Writes the sum `v` of (token, row) `(t, n)` of the block, if inside y.
    fn write(&self, k: &'b KernelBuilder, (t, n): (Val<'b>, Val<'b>), v: Val<'b>) {
        let (tok, row) = (self.origin.0 + t, self.origin.1 + n);
        k.if_(tok.lt(self.ends.0) & row.lt(self.ends.1), || {
            let at = tok * self.ends.1 + row;
            let v = match self.add {
                Some(a) => v + k.load(a, at),
                None => v,
            };
            k.store(self.y, at, v);
        });
    }
}

/// What multiplies the staged blocks: a subgroup's tiles, or each invocation's sums.
enum Compute<'b> {
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
    },
}

impl<'b> Compute<'b> {
    /// Each subgroup takes a rectangle of the block's tiles, up to 4 wide: it loads an A
    /// tile per row of its rectangle and a B tile per column, where a row of 8 tiles would
    /// load 8 B tiles for the same products.
    fn tiles(
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

    fn scalar(k: &'b KernelBuilder, (bm, bn): (u32, u32), invocations: u32) -> Self {
        let lanes = invocations / bm;
        Compute::Scalar {
            sums: (0..bn / lanes)
                .map(|i| k.var(&format!("sum{i}"), Scalar::F32))
                .collect(),
            lanes,
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
    fn step(
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
            Compute::Scalar { sums, lanes } => {
                let lid = k.local_index();
                let (t, lane) = (lid / k.u32(*lanes), lid % k.u32(*lanes));
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
            }
        }
    }

    /// Writes the block's sums to y. Subgroups store each accumulator in turn to a tile of
    /// shared memory of their own and write it from there (guarded at y's edges), which
    /// needs far less shared memory than the whole block, left to the steps' staging; the
    /// scalar variant stages the whole block of `(bm, bn)`.
    fn finish(
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
                let stride = TILE + 8;
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
                    if out.swiglu {
                        // A pair of rows per lane: a tile's columns start even.
                        let pairs = TILE / 2;
                        for i in 0..TILE * pairs / width {
                            let e = k.u32(i * width) + lane;
                            let (r, c) = (e / k.u32(pairs), e % k.u32(pairs) * k.u32(2));
                            let sums = (read(r, c), read(r, c + k.u32(1)));
                            out.write_pair(k, at(r, c), sums);
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
            Compute::Scalar { sums, lanes } => {
                let stride = bn + 8;
                let block = k.shared("y_block", Scalar::F32, bm * stride);
                let (t, lane) = (lid / k.u32(*lanes), lid % k.u32(*lanes));
                for (j, sum) in sums.iter().enumerate() {
                    let n = lane + k.u32(lanes * j as u32);
                    k.store_shared(block, t * k.u32(stride) + n, sum.get());
                }
                k.barrier();
                out.write_block(k, (block, stride), (bm, bn), invocations);
            }
        }
    }
}

/// `y` in f64 from x and W's dequantised values, each rounded to f16 as the kernel stages
/// them, plus `add`.
pub fn reference(
    ty: WeightType,
    w: &[u8],
    x: &[f32],
    add: Option<&[f32]>,
    (rows, cols, tokens): (u32, u32, u32),
) -> Result<Vec<f64>, ShapeError> {
    check(rows, cols, tokens)?;
    let (r, c, t) = (rows as usize, cols as usize, tokens as usize);
    let wd: Vec<f64> = dequantize(ty, w, r * c)?
        .into_iter()
        .map(|v| f16::from_f64(v).to_f64())
        .collect();
    let xd: Vec<f64> = x.iter().map(|&v| f16::from_f32(v).to_f64()).collect();
    let mut y = vec![0f64; t * r];
    // Tokens spread over the host's threads: the bench's products reach 4096 × 4096 × 512.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = t.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (chunk, ys) in y.chunks_mut(per * r).enumerate() {
            let (xd, wd) = (&xd, &wd);
            s.spawn(move || {
                for (i, out) in ys.iter_mut().enumerate() {
                    let (tok, row) = (chunk * per + i / r, i % r);
                    let xs = &xd[tok * c..][..c];
                    let sum: f64 = xs.iter().zip(&wd[row * c..][..c]).map(|(a, b)| a * b).sum();
                    *out = sum + add.map_or(0.0, |a| a[tok * r + row] as f64);
                }
            });
        }
    });
    Ok(y)
}

/// The subgroup width of the cases' tiled kernels: NVIDIA's, the only matrix units measured.
/// A device of another width runs their scalar fallback.
const CASE_SUBGROUP: u32 = 32;

/// A conformance case: W of `ty` with values in [-1, 1), x in [-1, 1), a residual in [-2, 2)
/// with `add`; the tiled kernel with the block the executor would pick, with the scalar
/// variant as its fallback.
pub fn case(
    ty: WeightType,
    (rows, cols, tokens): (u32, u32, u32),
    add: bool,
) -> Result<Case, ShapeError> {
    let block = BlockSize::for_product(rows, tokens, false);
    case_in(
        ty,
        (rows, cols, tokens),
        add,
        (block, Staging::Put, Float::F32),
    )
}

/// How a case's kernel stages its blocks and multiplies them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Staging {
    /// Loaded and put by the invocations; the scalar variant is the fallback.
    Put,
    /// f16 blocks copied asynchronously ([`TilesSpec::copied`]); the fallback is the tiled
    /// kernel without copies, where a device lacks them (a device without tiles skips the
    /// case).
    Copies,
    /// Multiplied by warpgroup products ([`TilesSpec::grouped`]), f16 weights (and f16 x)
    /// copied; the fallback is the tiled kernel without copies. Only where the spec has such
    /// a variant.
    Group,
}

impl Staging {
    /// How the executor would stage a product of W of `ty`, `cols` wide, on `block` with x
    /// stored as `xf`, on a device with every feature: on warpgroup products where the block
    /// allows, else copying f16 weights, else putting.
    pub fn best(ty: WeightType, cols: u32, block: BlockSize, xf: Float) -> Staging {
        let spec = case_spec(ty, cols, (false, false), (block, xf));
        if spec.copied().grouped().group {
            Staging::Group
        } else if spec.copied().copies {
            Staging::Copies
        } else {
            Staging::Put
        }
    }
}

/// The tiled kernel a case of W of `ty`, `cols` wide, runs before its staging is chosen.
fn case_spec(
    ty: WeightType,
    cols: u32,
    (add, swiglu): (bool, bool),
    (block, xf): (BlockSize, Float),
) -> TilesSpec {
    TilesSpec {
        weights: ty,
        add,
        tiles: Some(CASE_SUBGROUP),
        block,
        depth: TilesSpec::depth_for(cols),
        copies: false,
        half_x: xf == Float::F16,
        group: false,
        swiglu,
    }
}

/// [`case`] with the tiled kernel on `block`, whatever the shape, staged as `staging` says,
/// and x stored as `xf`.
pub fn case_in(
    ty: WeightType,
    (rows, cols, tokens): (u32, u32, u32),
    add: bool,
    (block, staging, xf): (BlockSize, Staging, Float),
) -> Result<Case, ShapeError> {
    build_case(ty, (rows, cols, tokens), (add, false), (block, staging, xf))
}

/// [`case`] with SwiGLU of the row pairs as the output ([`TilesSpec::swiglu`]), against
/// [`reference`] followed by SwiGLU in f64.
pub fn swiglu_case(
    ty: WeightType,
    (rows, cols, tokens): (u32, u32, u32),
) -> Result<Case, ShapeError> {
    let block = BlockSize::for_product(rows, tokens, false);
    build_case(
        ty,
        (rows, cols, tokens),
        (false, true),
        (block, Staging::Put, Float::F32),
    )
}

fn build_case(
    ty: WeightType,
    (rows, cols, tokens): (u32, u32, u32),
    (add, swiglu): (bool, bool),
    (block, staging, xf): (BlockSize, Staging, Float),
) -> Result<Case, ShapeError> {
    check(rows, cols, tokens)?;
    if swiglu && !rows.is_multiple_of(2) {
        return Err(ShapeError::NotMultiple {
            op: OP,
            what: "rows of gate and up",
            value: rows as usize,
            multiple: 2,
        });
    }
    let name = format!(
        "{OP}/{}{}/{rows}x{cols}/t{tokens}{}{}{}{}",
        if xf == Float::F16 { "f16x" } else { "" },
        ty.name(),
        if add { "+add" } else { "" },
        if swiglu { "+swiglu" } else { "" },
        if block == BlockSize::Large {
            "/large"
        } else {
            ""
        },
        match staging {
            Staging::Put => "",
            Staging::Copies => "/copies",
            Staging::Group => "/group",
        }
    );
    let mut rng = Rng::new(super::support::seed(&name));
    let (r, c, t) = (rows as usize, cols as usize, tokens as usize);
    let w = quantize(ty, &rng.f32s(r * c, -1.0, 1.0))?;
    let x = rng.f32s(t * c, -1.0, 1.0);
    let residual = add.then(|| rng.f32s(t * r, -2.0, 2.0));
    let mut want = reference(ty, &w, &x, residual.as_deref(), (rows, cols, tokens))?;
    if swiglu {
        want = want
            .chunks(2)
            .map(|p| super::elementwise::silu(p[0]) * p[1])
            .collect();
    }
    let spec = case_spec(ty, cols, (add, swiglu), (block, xf));
    let x_bytes = match xf {
        Float::F32 => f32_bytes(&x),
        Float::F16 => f16_bytes(&x.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>()),
    };
    let (fallback, spec) = match staging {
        Staging::Put => (spec.scalar(), spec),
        Staging::Copies => (spec, spec.copied()),
        Staging::Group => {
            let grouped = spec.copied().grouped();
            if !grouped.group {
                return Err(ShapeError::Unsupported {
                    op: OP,
                    what: format!("warpgroup products for {}", spec.name()),
                });
            }
            (spec, grouped)
        }
    };
    let mut case = Case::new(name, kernel(spec)?, spec.grid(rows, tokens))
        .input("w", weights_elem(ty), dequant::pad_to_words(w))
        .input("x", xf.scalar(), x_bytes);
    if let Some(res) = &residual {
        case = case.input("add", Scalar::F32, f32_bytes(res));
    }
    let y_rows = if swiglu { r / 2 } else { r };
    Ok(case
        .output("y", Scalar::F32, vec![0; t * y_rows * 4], want)
        .params(spec.params(rows, cols, tokens))
        .bound(NMSE)
        .fallback_on(kernel(fallback)?, fallback.grid(rows, tokens)))
}

/// Every weight type at a shape of one block and a partial one (tokens and rows past a
/// block), with and without the residual, in steps of one block of K and of two; SmolLM2's
/// QKV product over a 70-token prompt; SwiGLU of the row pairs.
pub fn cases() -> Vec<Case> {
    let mut out = vec![];
    for ty in WeightType::ALL {
        out.push(case(ty, (64, 64, 20), false));
        out.push(case(ty, (72, 96, 70), ty == WeightType::Q4_1));
    }
    out.push(case(WeightType::Q4_1, (960, 576, 70), false));
    // SwiGLU of the row pairs: rows and tokens past a block, and SmolLM2's gate/up (the
    // medium block).
    out.push(swiglu_case(WeightType::Q4_1, (72, 96, 70)));
    out.push(swiglu_case(WeightType::F16, (64, 64, 20)));
    out.push(swiglu_case(WeightType::Q4_1, (3072, 576, 40)));
    // Steps of two blocks, two of them, rows past a block.
    out.push(case(WeightType::F16, (80, 128, 24), false));
    out.push(case(WeightType::Q8_0, (576, 1536, 33), true));
    // The medium block.
    out.push(case(WeightType::Q4_0, (2048, 64, 65), true));
    let (large, medium) = (BlockSize::Large, BlockSize::Medium);
    let (half, single) = (Float::F16, Float::F32);
    for (ty, shape, add, how) in [
        // The large block, with rows and tokens past one.
        (
            WeightType::F16,
            (136, 64, 140),
            false,
            (large, Staging::Put, single),
        ),
        (
            WeightType::Q4_1,
            (256, 128, 128),
            true,
            (large, Staging::Put, single),
        ),
        // f16 weights copied asynchronously: the large block (steps of one block of K, rows
        // and tokens past one) and the medium one (steps of two, three of them).
        (
            WeightType::F16,
            (136, 96, 140),
            true,
            (large, Staging::Copies, single),
        ),
        (
            WeightType::F16,
            (72, 192, 40),
            false,
            (medium, Staging::Copies, single),
        ),
        // x in f16 too: copied with W, and put where copies are not.
        (
            WeightType::F16,
            (136, 128, 140),
            true,
            (large, Staging::Copies, half),
        ),
        (
            WeightType::F16,
            (72, 96, 40),
            false,
            (medium, Staging::Put, half),
        ),
        // Warpgroup products: f16 x and W copied, with rows and tokens past a block, the
        // residual and three steps (more than the copies run ahead), and in one step; f32 x
        // put while W is copied; quantized and f32 W put.
        (
            WeightType::F16,
            (136, 192, 140),
            true,
            (large, Staging::Group, half),
        ),
        (
            WeightType::F16,
            (128, 64, 128),
            false,
            (large, Staging::Group, half),
        ),
        (
            WeightType::F16,
            (136, 128, 140),
            true,
            (large, Staging::Group, single),
        ),
        (
            WeightType::Q8_0,
            (136, 192, 140),
            true,
            (large, Staging::Group, single),
        ),
        (
            WeightType::Q4_0,
            (136, 64, 140),
            false,
            (large, Staging::Group, single),
        ),
        (
            WeightType::F32,
            (128, 128, 130),
            false,
            (large, Staging::Group, single),
        ),
    ] {
        out.push(case_in(ty, shape, add, how));
    }
    // SwiGLU on warpgroup products, rows and tokens past a block.
    out.push(build_case(
        WeightType::Q4_1,
        (272, 192, 140),
        (false, true),
        (large, Staging::Group, single),
    ));
    out.into_iter()
        .collect::<Result<_, _>>()
        .expect("the fixed shapes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_checked() {
        assert!(matches!(
            check(64, 48, 1),
            Err(ShapeError::NotMultiple { what: "cols", .. })
        ));
        assert!(matches!(check(0, 32, 1), Err(ShapeError::Zero { .. })));
        assert!(matches!(
            check(u32::MAX, 64, 2),
            Err(ShapeError::TooLarge { .. })
        ));
    }

    /// Every variant the executor picks (steps up to [`MAX_DEPTH`] blocks) fits the smallest
    /// device's 32 KiB of shared memory (lavapipe's), but the large block, which only
    /// devices with tiles run, 48 KiB (NVIDIA's); steps of four blocks of the others, 48 KiB.
    #[test]
    fn blocks_fit_shared_memory() {
        for block in [BlockSize::Small, BlockSize::Medium, BlockSize::Large] {
            let spec = TilesSpec {
                weights: WeightType::Q4_1,
                add: true,
                tiles: None,
                block,
                depth: MAX_DEPTH,
                copies: false,
                half_x: false,
                group: false,
                swiglu: false,
            };
            let k = kernel(spec.scalar()).unwrap();
            assert!(k.shared_bytes() <= 32 * 1024, "{}", k.shared_bytes());
            let limits: &[(u32, u64)] = if block == BlockSize::Large {
                &[(1, 48), (MAX_DEPTH, 48)]
            } else {
                &[(1, 32), (MAX_DEPTH, 32), (4, 48)]
            };
            for width in [32, 64] {
                for &(depth, limit) in limits {
                    let spec = TilesSpec {
                        tiles: Some(width),
                        depth,
                        copies: false,
                        half_x: false,
                        group: false,
                        ..spec
                    };
                    let k = kernel(spec).unwrap();
                    assert!(
                        k.shared_bytes() <= limit * 1024,
                        "{block:?} {}",
                        k.shared_bytes()
                    );
                }
            }
        }
    }

    /// The large block falls back to the medium one on tiles, then to the scalar variant,
    /// each with the grid of its own block.
    #[test]
    fn large_blocks_fall_back_to_medium_ones() {
        let spec = TilesSpec {
            weights: WeightType::Q4_1,
            add: true,
            tiles: Some(32),
            block: BlockSize::Large,
            depth: 2,
            copies: false,
            half_x: false,
            group: false,
            swiglu: false,
        };
        let variants = spec.variants();
        let blocks: Vec<_> = variants.iter().map(|v| (v.block, v.tiles)).collect();
        assert_eq!(
            blocks,
            [
                (BlockSize::Large, Some(32)),
                (BlockSize::Medium, Some(32)),
                (BlockSize::Medium, None)
            ]
        );
        let grids: Vec<_> = variants.iter().map(|v| v.grid(4096, 512)).collect();
        assert_eq!(grids, [[32, 4, 1], [64, 8, 1], [64, 8, 1]]);
        for v in &variants {
            assert_eq!(kernel(*v).unwrap().name, v.name());
        }
        let untiled = TilesSpec {
            tiles: None,
            ..spec
        };
        assert_eq!(untiled.variants(), [spec.scalar()]);
    }

    /// Big products take the large block, small ones the small block, and devices that want
    /// small blocks always get them.
    #[test]
    fn blocks_follow_the_product() {
        assert_eq!(BlockSize::for_product(576, 512, false), BlockSize::Small);
        assert_eq!(BlockSize::for_product(3072, 512, false), BlockSize::Medium);
        assert_eq!(BlockSize::for_product(4096, 512, false), BlockSize::Large);
        assert_eq!(BlockSize::for_product(4096, 100, false), BlockSize::Medium);
        assert_eq!(BlockSize::for_product(4096, 512, true), BlockSize::Small);
        let spec = TilesSpec {
            weights: WeightType::F16,
            add: false,
            tiles: None,
            block: BlockSize::Large,
            depth: 1,
            copies: false,
            half_x: false,
            group: false,
            swiglu: false,
        };
        assert!(matches!(kernel(spec), Err(ShapeError::Unsupported { .. })));
        assert_eq!(spec.scalar().grid(4096, 512), [64, 8, 1]);
        let tiled = TilesSpec {
            tiles: Some(32),
            ..spec
        };
        assert_eq!(tiled.grid(4096, 512), [32, 4, 1]);
    }

    /// Steps are as deep as K allows, and a depth the kernel has no staging for is refused.
    #[test]
    fn depth_divides_k() {
        assert_eq!(TilesSpec::depth_for(576), 2);
        assert_eq!(TilesSpec::depth_for(1536), MAX_DEPTH);
        assert_eq!(TilesSpec::depth_for(96), 1);
        assert_eq!(TilesSpec::depth_for(32), 1);
        let spec = TilesSpec {
            weights: WeightType::F16,
            add: false,
            tiles: Some(32),
            block: BlockSize::Medium,
            depth: 3,
            copies: false,
            half_x: false,
            group: false,
            swiglu: false,
        };
        assert!(matches!(kernel(spec), Err(ShapeError::Unsupported { .. })));
    }

    /// A width that cannot divide the block's tiles evenly is refused, not miscomputed.
    #[test]
    fn widths_that_do_not_divide_the_tiles_are_refused() {
        let spec = TilesSpec {
            weights: WeightType::F16,
            add: false,
            tiles: Some(8),
            block: BlockSize::Small,
            depth: 1,
            copies: false,
            half_x: false,
            group: false,
            swiglu: false,
        };
        assert!(matches!(kernel(spec), Err(ShapeError::Unsupported { .. })));
        assert!(kernel(TilesSpec {
            block: BlockSize::Medium,
            ..spec
        })
        .is_ok());
    }
}

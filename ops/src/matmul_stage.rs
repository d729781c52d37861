//! How [`super::matmul_tiles`] stages its blocks of x and W in shared memory, in two halves
//! a K step apart. A step covers `depth` quantized blocks of K ([`BK`] columns each): each
//! step waits out about one memory latency, so products of few workgroups, which cannot hide
//! it behind other workgroups, take time in proportion to their steps. [`Fetch::load`] reads
//! an invocation's share of the next step's blocks from memory into private variables,
//! untouched, and [`Fetch::put`] converts them (x and plain weights rounded to f16, quantized
//! weights dequantised to f16) into shared memory at the start of that step. The kernel loads step k+1 before it multiplies step k, so the loads are
//! in flight while the subgroups multiply: a GPU waits for a load only where its value is
//! first used, and nothing uses these values before the next step's `put`. Staged at once,
//! every step waited out a memory latency before its multiplications could start.
//!
//! Every value is the one the kernel staged before, computed the same way, so results do not
//! change.

use super::blocks::{
    f16_bits_to_f32, signed_byte, BlockFormat, Bytes, Codes, Flat, HeaderScales, Offset, Packed,
    Scales, UnitQuads, UNIT,
};
use super::support::Float;
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Scalar, SharedId, Val, Var};

/// The K columns of one step: one quantized block.
pub const BK: u32 = 32;

/// Row stride of the staged blocks of a step of `depth` blocks, in elements: padded by 8 (16
/// bytes, keeping tile loads aligned) so that the rows a tile load reads fall in different
/// shared-memory banks.
pub const fn stage(depth: u32) -> u32 {
    BK * depth + 8
}

/// How a step's staged block sits in shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Rows of [`stage`]`(depth)` elements, for the subgroups' tiles.
    Padded,
    /// Rows of [`trine_ir::GROUP_K`] elements with their 16-byte lines permuted
    /// ([`trine_ir::group_swizzle`]), for warpgroup products: steps of two blocks of K.
    Swizzled,
}

/// The element type W's buffer is bound as: its floats, or a quantized type's bytes as
/// words, padded to whole words ([`crate::blocks::pad_to_words`]).
pub fn weights_elem(ty: WeightType) -> Scalar {
    match ty {
        WeightType::F32 => Scalar::F32,
        WeightType::F16 => Scalar::F16,
        _ => Scalar::U32,
    }
}

/// One matrix's block `[n × BK·depth]` at (r0, k0), `n` rows from `r0` of a matrix with
/// `rows` rows and `cols` columns; with `gather`, those rows are entries of a list that names
/// the matrix rows they read.
#[derive(Clone, Copy)]
pub struct Block<'b> {
    pub n: u32,
    pub r0: Val<'b>,
    pub rows: Val<'b>,
    pub cols: Val<'b>,
    pub gather: Option<Gather<'b>>,
}

/// Rows read through a list: the block's row `r` reads the matrix's row `list[at + r] / per`
/// (a list of (token, slot) pairs names its token's row with `per` the slots a token has, a
/// pair's own row with 1). Float blocks gather; quantized ones do not.
#[derive(Clone, Copy)]
pub struct Gather<'b> {
    pub list: BufferId,
    pub at: Val<'b>,
    pub per: Val<'b>,
}

/// An invocation's share of one step's block of a matrix: its values as loaded.
enum Share<'b> {
    /// Elements `j·invocations + lid` of a row-major float block, each as its buffer holds it.
    Rows {
        float: Float,
        values: Vec<Var<'b>>,
        walk: RowWalk<'b>,
    },
    /// Halves of quantized blocks (16 elements each), half `h` of the invocation's being
    /// half `e = h·invocations + lid` of the block: consecutive invocations, consecutive
    /// halves along a row ([`Fetch::half_at`]).
    Halves { f: Flat, halves: Vec<Half<'b>> },
    /// Halves of a step's blocks of a packed format, as [`Share::Halves`] divides them: each
    /// a run of 16 elements of one sub-block, decoded through the format's decoder when it is
    /// put. The load only finds each run: its block's first byte and its first element.
    Runs {
        p: Packed,
        runs: Vec<(Var<'b>, Var<'b>)>,
    },
    /// Units of a packed format whose units lie in whole quads of their block, with its scales
    /// in the block's first 16 bytes ([`unit_quads`]), in steps of one chunk of [`CHUNK`]
    /// columns (two units a row): each unit's quads and its block's header are loaded a step
    /// ahead as words, and decoded when they are put, where a run's decoder loaded its bytes
    /// as it decoded them.
    Units {
        p: Packed,
        quads: UnitQuads,
        header: HeaderScales,
        units: Vec<UnitShare<'b>>,
    },
    /// 16-byte lines of an f16 block, `lines` per invocation, copied straight into shared
    /// memory ([`Fetch::copy`]) without passing through the invocation's registers: the
    /// walk's items are lines of [`LINE`] elements.
    Lines { walk: RowWalk<'b>, lines: usize },
    /// 16-byte lines of an f16 block bound as `U32` words, each loaded as one quad into four
    /// variables and put half by half: where nothing copies them, a line a load instead of
    /// a load per element, with the walk's index work once a line.
    Quads {
        walk: RowWalk<'b>,
        words: Vec<[Var<'b>; 4]>,
    },
}

/// An invocation's unit of a step ([`Share::Units`]): its block's header, its quads, and the
/// unit's index in its block.
struct UnitShare<'b> {
    header: [Var<'b>; 4],
    quads: Vec<[Var<'b>; 4]>,
    unit: Var<'b>,
}

/// Columns of a step staged by units: a unit's two runs lie in one chunk of 64 elements of
/// every format that has [`unit_quads`].
pub const CHUNK: u32 = 2 * UNIT;

/// The quads and header of `p`'s units where a step of `depth` blocks of K stages them by
/// units ([`Share::Units`]): steps of one [`CHUNK`], blocks of whole chunks on 16 bytes.
pub fn unit_quads(p: Packed, depth: u32) -> Option<(UnitQuads, HeaderScales)> {
    let units = p.units?;
    let fits = BK * depth == CHUNK && p.elems.is_multiple_of(CHUNK) && p.bytes.is_multiple_of(16);
    fits.then_some((units.quads?, units.header?))
}

/// f16 elements in a line of an asynchronous copy ([`trine_ir::COPY_BYTES`]).
pub const LINE: u32 = trine_ir::COPY_BYTES / 2;

/// Where an invocation's items (elements, or lines of them) of a float block sit, worked out
/// once before the K loop: a step is a whole number of rows of `invocations` items, so the
/// invocation's items share one column and run down the block `apart` rows from each other.
/// Each item then costs its step an add and a clamp to load, and a compare to stage, where
/// working out its row and column every step took most of the kernel's integer work.
struct RowWalk<'b> {
    /// The matrix row of the first element.
    first: Val<'b>,
    /// Its index in the matrix at the step's first column.
    base: Val<'b>,
    /// The index of the same column in the matrix's last row, which rows past it read.
    last: Val<'b>,
    /// Index distance between consecutive elements: `apart` rows.
    step: Val<'b>,
    /// With a [`Gather`], each element's index at the step's first column, its row read
    /// through the list once before the K loop; empty otherwise.
    gathered: Vec<Val<'b>>,
    /// Where element `j` goes in the staged block, less `j·staged_apart`: entry
    /// `(j·apart) % 8`, as the swizzled layout permutes a row's lines by its place in its
    /// group of 8 rows (the padded layout's entries are all the first element's).
    staged: [Option<Val<'b>>; 8],
    /// Rows between consecutive elements.
    apart: u32,
    /// Staged elements between consecutive elements.
    staged_apart: u32,
}

impl<'b> RowWalk<'b> {
    /// The walk of a block in steps of `depth` blocks of K over `invocations`, in items of
    /// `item` elements, `items` an invocation: `invocations` must be a multiple of the items
    /// of a step's row, and the swizzled layout needs steps of [`trine_ir::GROUP_K`] columns.
    fn new(
        k: &'b KernelBuilder,
        block: &Block<'b>,
        (invocations, depth): (u32, u32),
        (item, items, layout): (u32, u32, Layout),
    ) -> Self {
        let per_row = BK * depth / item;
        let lid = k.local_index();
        let (row, column) = (lid / k.u32(per_row), lid % k.u32(per_row) * k.u32(item));
        let first = block.r0 + row;
        let apart = invocations / per_row;
        let mut staged = [None; 8];
        let row_len = match layout {
            Layout::Padded => {
                staged = [Some(row * k.u32(stage(depth)) + column); 8];
                stage(depth)
            }
            Layout::Swizzled => {
                let len = trine_ir::GROUP_K;
                // Worked out once for each place in a group of 8 that the items' rows take.
                for j in 0..8 {
                    let m = (j * apart % 8) as usize;
                    if staged[m].is_none() {
                        let line = (column / k.u32(8)) ^ ((row + k.u32(m as u32)) % k.u32(8));
                        staged[m] = Some(row * k.u32(len) + line * k.u32(8) + column % k.u32(8));
                    }
                }
                len
            }
        };
        // Entries past the list's read its last (an empty list's first, which the kernel
        // never loads through).
        let gathered = match block.gather {
            Some(g) => {
                let last = block.rows.max(k.u32(1)) - k.u32(1);
                (0..items)
                    .map(|j| {
                        let entry = (first + k.u32(j * apart)).min(last);
                        k.load(g.list, g.at + entry) / g.per * block.cols + column
                    })
                    .collect()
            }
            None => vec![],
        };
        RowWalk {
            first,
            gathered,
            base: first.min(block.rows - k.u32(1)) * block.cols + column,
            last: (block.rows - k.u32(1)) * block.cols + column,
            step: k.u32(apart) * block.cols,
            staged,
            apart,
            staged_apart: apart * row_len,
        }
    }

    /// The matrix index of element `j` at the step from column `k0`: rows past the matrix
    /// read its last row.
    fn index(&self, k: &'b KernelBuilder, j: usize, k0: Val<'b>) -> Val<'b> {
        match self.gathered.get(j) {
            Some(&at) => at + k0,
            None => (self.base + k.u32(j as u32) * self.step).min(self.last) + k0,
        }
    }

    /// Whether element `j`'s row is inside the matrix.
    fn inside(&self, k: &'b KernelBuilder, j: usize, rows: Val<'b>) -> Val<'b> {
        (self.first + k.u32(j as u32 * self.apart)).lt(rows)
    }

    /// Where element `j` goes in the staged block.
    fn staged(&self, k: &'b KernelBuilder, j: usize) -> Val<'b> {
        let first = self.staged[j * self.apart as usize % 8].expect("worked out in `new`");
        first + k.u32(j as u32 * self.staged_apart)
    }
}

/// How a step's f16 blocks move into shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lines {
    /// Copied asynchronously, 16-byte lines ([`Fetch::copy`]).
    Copied,
    /// Loaded 16-byte lines at a time from a buffer bound as `U32` ([`f16_elem`]), then put.
    Quads,
    /// Loaded an element at a time, then put.
    Elements,
}

/// What an f16 matrix's buffer is bound as where its blocks move as `lines` say: `U32`
/// words, two halves each, for quads ([`trine_ir::Expr::LoadLane`] reads `U32` buffers).
pub fn f16_elem(lines: Lines) -> Scalar {
    match lines {
        Lines::Quads => Scalar::U32,
        _ => Scalar::F16,
    }
}

/// One half of a quantized block as loaded, in whole words of the weights (bound as `U32`):
/// one load moves four bytes, where loading a byte at a time took four times the loads on
/// CUDA and, on Vulkan, a word load and a shift for every byte.
struct Half<'b> {
    /// The words from the one holding the half's first code byte (nibbles: the bytes holding
    /// its nibbles, shared with the other half): four, and a fifth where the codes may start
    /// in the middle of a word (blocks not a whole number of words long).
    words: Vec<Var<'b>>,
    /// The word holding the block's d (word-aligned blocks: d in the low half, a minimum in
    /// the high half).
    scale: Var<'b>,
    /// The block's first byte modulo 4 (0 or 2), where blocks are not all word-aligned.
    skew: Option<Var<'b>>,
}

/// Where half `e` of a step's block of `n` rows sits: its row within the block, its block
/// along the step's K, and which half of that block.
struct HalfAt<'b> {
    row: Val<'b>,
    block: Val<'b>,
    half: Val<'b>,
}

/// The private variables of an invocation's share of one step: x's block and W's.
pub struct Fetch<'b> {
    x: (Block<'b>, BufferId, Share<'b>),
    w: (Block<'b>, BufferId, Share<'b>),
    invocations: u32,
    depth: u32,
    layout: Layout,
}

impl<'b> Fetch<'b> {
    /// Declares the variables for x's block (stored as `xf`) and W's (stored as `ty`), steps
    /// of `depth` blocks. Each block's rows times its step's columns are a multiple of
    /// `invocations` (the kernel's blocks and widths are). f16 blocks move as `lines` says:
    /// copied to shared memory asynchronously ([`Fetch::copy`]), loaded in quads from
    /// buffers bound as `U32` ([`Lines::Quads`]), or an element at a time. Every block is
    /// staged as `layout` says.
    pub fn declare(
        k: &'b KernelBuilder,
        (invocations, depth): (u32, u32),
        (x, xb, xf): (BufferId, Block<'b>, Float),
        (w, wb, ty): (BufferId, Block<'b>, WeightType),
        (lines, layout): (Lines, Layout),
    ) -> Fetch<'b> {
        let width = BK * depth;
        let rows = |name: &str, float: Float, block: &Block<'b>| {
            let items = block.n * width / invocations;
            Share::Rows {
                float,
                values: (0..items)
                    .map(|i| k.var(&format!("{name}{i}"), float.scalar()))
                    .collect(),
                walk: RowWalk::new(k, block, (invocations, depth), (1, items, layout)),
            }
        };
        let line_walk = |block: &Block<'b>| {
            let lines = block.n * width / LINE / invocations;
            let walk = RowWalk::new(k, block, (invocations, depth), (LINE, lines, layout));
            (walk, lines as usize)
        };
        let half_share = |name: &str, block: &Block<'b>| match lines {
            Lines::Copied => {
                let (walk, lines) = line_walk(block);
                Share::Lines { walk, lines }
            }
            Lines::Quads => {
                let (walk, lines) = line_walk(block);
                let words = (0..lines)
                    .map(|j| std::array::from_fn(|i| k.var(&format!("{name}{j}_{i}"), Scalar::U32)))
                    .collect();
                Share::Quads { walk, words }
            }
            Lines::Elements => rows(name, Float::F16, block),
        };
        let w_share = match (ty, BlockFormat::of(ty)) {
            (_, Some(BlockFormat::Packed(p))) => match unit_quads(p, depth) {
                Some((quads, header)) => Share::Units {
                    p,
                    quads,
                    header,
                    units: (0..(2 * wb.n).div_ceil(invocations))
                        .map(|h| UnitShare {
                            header: std::array::from_fn(|i| {
                                k.var(&format!("unit_header{h}_{i}"), Scalar::U32)
                            }),
                            quads: (0..quads.count)
                                .map(|q| {
                                    std::array::from_fn(|i| {
                                        k.var(&format!("unit_quad{h}_{q}_{i}"), Scalar::U32)
                                    })
                                })
                                .collect(),
                            unit: k.var(&format!("unit{h}"), Scalar::U32),
                        })
                        .collect(),
                },
                None => Share::Runs {
                    p,
                    runs: (0..(2 * wb.n * depth).div_ceil(invocations))
                        .map(|h| {
                            let base = k.var(&format!("run_block{h}"), Scalar::U32);
                            (base, k.var(&format!("run_first{h}"), Scalar::U32))
                        })
                        .collect(),
                },
            },
            (_, Some(BlockFormat::Flat(f))) => {
                let aligned = word_aligned(f);
                let words = if aligned { 4 } else { 5 };
                let halves = (2 * wb.n * depth).div_ceil(invocations);
                Share::Halves {
                    f,
                    halves: (0..halves)
                        .map(|h| Half {
                            words: (0..words)
                                .map(|i| k.var(&format!("code_word{h}_{i}"), Scalar::U32))
                                .collect(),
                            scale: k.var(&format!("scale_word{h}"), Scalar::U32),
                            skew: (!aligned).then(|| k.var(&format!("skew{h}"), Scalar::U32)),
                        })
                        .collect(),
                }
            }
            (WeightType::F16, None) => half_share("w", &wb),
            _ => rows("w", Float::F32, &wb),
        };
        let x_share = match xf {
            Float::F16 => half_share("x", &xb),
            _ => rows("x", xf, &xb),
        };
        Fetch {
            x: (xb, x, x_share),
            w: (wb, w, w_share),
            invocations,
            depth,
            layout,
        }
    }

    /// Starts the copies of the copied blocks' lines of the step at column `k0`, x's into `xs`
    /// and W's into `ws`, each from the element its pair names on (the caller commits them).
    pub fn copy(
        &self,
        k: &'b KernelBuilder,
        k0: Val<'b>,
        xs: (SharedId, Val<'b>),
        ws: (SharedId, Val<'b>),
    ) {
        for ((_, buf, share), (dst, base)) in [(&self.x, xs), (&self.w, ws)] {
            if let Share::Lines { walk, lines } = share {
                for j in 0..*lines {
                    k.copy_async(*buf, walk.index(k, j, k0), dst, base + walk.staged(k, j));
                }
            }
        }
    }

    /// Whether x's block is copied ([`Fetch::copy`]) rather than loaded and put.
    pub fn copies_x(&self) -> bool {
        matches!(self.x.2, Share::Lines { .. })
    }

    /// Loads the share of the step at column `k0` into the variables.
    pub fn load(&self, k: &'b KernelBuilder, k0: Val<'b>) {
        for (block, buf, share) in [&self.x, &self.w] {
            match share {
                Share::Lines { .. } => {}
                Share::Rows { values, walk, .. } => {
                    for (j, v) in values.iter().enumerate() {
                        v.set(k.load(*buf, walk.index(k, j, k0)));
                    }
                }
                Share::Quads { walk, words } => {
                    for (j, quad) in words.iter().enumerate() {
                        let loaded = k.load_quad(*buf, walk.index(k, j, k0) / k.u32(LINE));
                        for (v, word) in quad.iter().zip(loaded) {
                            v.set(word);
                        }
                    }
                }
                Share::Units {
                    p, quads, units, ..
                } => {
                    for (h, share) in units.iter().enumerate() {
                        // Where a step has fewer units than invocations take, the rest load
                        // its last unit again and stage nothing.
                        let e = self.half_index(k, h).min(k.u32(2 * block.n - 1));
                        let row = (block.r0 + e / k.u32(2)).min(block.rows - k.u32(1));
                        let elems = k.u32(p.elems);
                        let base = (row * (block.cols / elems) + k0 / elems) * k.u32(p.bytes);
                        let unit = k0 % elems / k.u32(UNIT) + e % k.u32(2);
                        share.unit.set(unit);
                        let header = k.load_quad(*buf, base / k.u32(16));
                        for (v, word) in share.header.iter().zip(header) {
                            v.set(word);
                        }
                        for (vars, at) in share.quads.iter().zip((quads.at)(k, base, unit)) {
                            for (v, word) in vars.iter().zip(k.load_quad(*buf, at / k.u32(16))) {
                                v.set(word);
                            }
                        }
                    }
                }
                Share::Runs { p, runs } => {
                    for (h, (base, first)) in runs.iter().enumerate() {
                        let e = self.half_index(k, h);
                        let e = e.min(k.u32(2 * block.n * self.depth - 1));
                        let at = self.half_at(k, e);
                        let row = (block.r0 + at.row).min(block.rows - k.u32(1));
                        let column = k0 + at.block * k.u32(BK) + at.half * k.u32(BK / 2);
                        let (elems, bytes) = (k.u32(p.elems), k.u32(p.bytes));
                        base.set((row * (block.cols / elems) + column / elems) * bytes);
                        first.set(column % elems);
                    }
                }
                Share::Halves { f, halves } => {
                    let bytes = k.u32(f.bytes);
                    // The buffer's last word: a fifth word past a block's codes may lie
                    // beyond it, where the codes start on a word (and it goes unused).
                    let blocks = block.rows * (block.cols / k.u32(BK));
                    let last = (blocks * bytes + k.u32(3)) / k.u32(4) - k.u32(1);
                    for (h, half) in halves.iter().enumerate() {
                        // Where a block has fewer halves than invocations take, the rest
                        // load its last half again and stage nothing.
                        let e = self.half_index(k, h);
                        let e = e.min(k.u32(2 * block.n * self.depth - 1));
                        let at = self.half_at(k, e);
                        let start = self.half_block(k, block, &at, k0) * bytes;
                        half.scale.set(k.load(*buf, start / k.u32(4)));
                        // A half of one code a byte is its own 16 bytes; a half of nibbles
                        // shares the block's 16 bytes with the other half.
                        let first = if f.nibbles() {
                            start + k.u32(f.codes_at)
                        } else {
                            start + k.u32(f.codes_at) + at.half * k.u32(BK / 2)
                        } / k.u32(4);
                        for (i, word) in half.words.iter().enumerate() {
                            word.set(k.load(*buf, (first + k.u32(i as u32)).min(last)));
                        }
                        if let Some(skew) = &half.skew {
                            skew.set(start % k.u32(4));
                        }
                    }
                }
            }
        }
    }

    /// Stores the loaded share into `xs` and `ws` as f16, each block from the element its
    /// array's pair names on: rows past a matrix's as zeros. Copied blocks are not touched.
    pub fn put(&self, k: &'b KernelBuilder, xs: (SharedId, Val<'b>), ws: (SharedId, Val<'b>)) {
        for ((block, _, share), (dst, base)) in [(&self.x, xs), (&self.w, ws)] {
            match share {
                Share::Lines { .. } => {}
                Share::Rows {
                    float,
                    values,
                    walk,
                } => {
                    for (j, v) in values.iter().enumerate() {
                        let value = match float {
                            Float::F32 => v.get(),
                            _ => v.get().cast(Scalar::F32),
                        };
                        let value = k.select(walk.inside(k, j, block.rows), value, k.f32(0.0));
                        let at = base + walk.staged(k, j);
                        k.store_shared(dst, at, value.cast(Scalar::F16));
                    }
                }
                Share::Quads { walk, words } => {
                    for (j, quad) in words.iter().enumerate() {
                        let inside = walk.inside(k, j, block.rows);
                        let at = base + walk.staged(k, j);
                        for (i, word) in quad.iter().enumerate() {
                            // Rows past the matrix stage zeros; a word's halves go in as their
                            // bits in one store, where widening each to f32 and back took two
                            // conversions and a store each.
                            let word = k.select(inside, word.get(), k.u32(0));
                            k.store_shared_pair(dst, at + k.u32(2 * i as u32), word);
                        }
                    }
                }
                Share::Halves { f, halves } => {
                    for (h, half) in halves.iter().enumerate() {
                        let e = self.half_index(k, h);
                        k.if_(e.lt(k.u32(2 * block.n * self.depth)), || {
                            let at = self.half_at(k, e);
                            let inside = (block.r0 + at.row).lt(block.rows);
                            let (s, codes) = half.decode(k, *f);
                            let lines = self.half_lines(k, base, &at);
                            for (i, byte) in codes.iter().enumerate() {
                                let code = code_of(k, *f, *byte, at.half);
                                let v = k.select(inside, s.value(code), k.f32(0.0));
                                let j = lines[i / 8] + k.u32(i as u32 % 8);
                                k.store_shared(dst, j, v.cast(Scalar::F16));
                            }
                        });
                    }
                }
                Share::Units {
                    p,
                    quads,
                    header,
                    units,
                } => {
                    let centre = p.units.map_or(0, |u| u.centre);
                    for (h, share) in units.iter().enumerate() {
                        let e = self.half_index(k, h);
                        k.if_(e.lt(k.u32(2 * block.n)), || {
                            let row = e / k.u32(2);
                            let inside = (block.r0 + row).lt(block.rows);
                            let words: Vec<[Val<'b>; 4]> = share
                                .quads
                                .iter()
                                .map(|q| q.each_ref().map(|v| v.get()))
                                .collect();
                            let head = share.header.each_ref().map(|v| v.get());
                            let unit = share.unit.get();
                            for (first, codes) in (quads.decode)(k, &words, unit).runs {
                                let s = header(k, &head, first / k.u32(p.sub));
                                let column = first % k.u32(CHUNK);
                                let at = HalfAt {
                                    row,
                                    block: column / k.u32(BK),
                                    half: column / k.u32(BK / 2) % k.u32(2),
                                };
                                let lines = self.half_lines(k, base, &at);
                                let codes: Vec<Val<'b>> = codes
                                    .iter()
                                    .flat_map(|word| {
                                        (0..4u32).map(move |b| {
                                            let code = (*word >> k.u32(8 * b)) & k.u32(0xff);
                                            code_to_float(k, code, centre)
                                        })
                                    })
                                    .collect();
                                put_run(k, (dst, lines), zeroed(k, s, inside), &codes);
                            }
                        });
                    }
                }
                Share::Runs { p, runs } => {
                    let (_, buf, _) = &self.w;
                    let src = Bytes::Words(*buf);
                    for (h, (at_block, first)) in runs.iter().enumerate() {
                        let e = self.half_index(k, h);
                        k.if_(e.lt(k.u32(2 * block.n * self.depth)), || {
                            let at = self.half_at(k, e);
                            let inside = (block.r0 + at.row).lt(block.rows);
                            let (blk, first) = (at_block.get(), first.get());
                            let s = (p.scales)(k, (src, None), blk, first / k.u32(p.sub));
                            let codes = (p.codes)(k, src, blk, first, BK / 2);
                            let lines = self.half_lines(k, base, &at);
                            put_run(k, (dst, lines), zeroed(k, s, inside), &codes);
                        });
                    }
                }
            }
        }
    }

    /// Where half `at`'s two lines of 8 elements go in the staged block at `base`.
    fn half_lines(&self, k: &'b KernelBuilder, base: Val<'b>, at: &HalfAt<'b>) -> [Val<'b>; 2] {
        let column = at.block * k.u32(BK) + at.half * k.u32(BK / 2);
        [0, 1].map(|l| match self.layout {
            Layout::Padded => base + at.row * k.u32(stage(self.depth)) + column + k.u32(8 * l),
            Layout::Swizzled => {
                let line = (column / k.u32(8) + k.u32(l)) ^ (at.row % k.u32(8));
                base + at.row * k.u32(trine_ir::GROUP_K) + line * k.u32(8)
            }
        })
    }

    /// The index within the step of this invocation's half `h`.
    fn half_index(&self, k: &'b KernelBuilder, h: usize) -> Val<'b> {
        k.u32(h as u32 * self.invocations) + k.local_index()
    }

    /// Where half `e` of the step sits: a row's `2·depth` halves in a run, so consecutive
    /// invocations read consecutive bytes of a row.
    fn half_at(&self, k: &'b KernelBuilder, e: Val<'b>) -> HalfAt<'b> {
        let per_row = k.u32(2 * self.depth);
        let within = e % per_row;
        HalfAt {
            row: e / per_row,
            block: within / k.u32(2),
            half: within % k.u32(2),
        }
    }

    /// Index in the matrix of the quantized block that half `at` of the step at column `k0`
    /// is part of (rows past the matrix's read its last row).
    fn half_block(
        &self,
        k: &'b KernelBuilder,
        block: &Block<'b>,
        at: &HalfAt<'b>,
        k0: Val<'b>,
    ) -> Val<'b> {
        let row = (block.r0 + at.row).min(block.rows - k.u32(1));
        let blocks = block.cols / k.u32(BK);
        row * blocks + k0 / k.u32(BK) + at.block
    }
}

impl<'b> Half<'b> {
    /// The block's scales and the half's 16 code bytes (each a `U32`), from the words.
    fn decode(&self, k: &'b KernelBuilder, f: Flat) -> (Scales<'b>, Vec<Val<'b>>) {
        let low = |w: Val<'b>| w & k.u32(0xffff);
        let scale = self.scale.get();
        let words: Vec<Val<'b>> = self.words.iter().map(|w| w.get()).collect();
        let (scales, codes) = match &self.skew {
            // Word-aligned blocks: d and a minimum share the block's first word, the codes the
            // next four.
            None => (
                Scales {
                    d: f16_bits_to_f32(k, low(scale)),
                    m: f.has_min().then(|| f16_bits_to_f32(k, scale >> k.u32(16))),
                },
                words,
            ),
            // d's two bytes start at the skew; the codes two bytes after it, so a block on a
            // word has its codes from the middle of the first word on.
            Some(skew) => {
                let skew = skew.get();
                let d = low(scale >> (skew * k.u32(8)));
                let mid = skew.eq(k.u32(0));
                let codes = (0..4)
                    .map(|i| {
                        let joined = (words[i] >> k.u32(16)) | (words[i + 1] << k.u32(16));
                        k.select(mid, joined, words[i])
                    })
                    .collect();
                (
                    Scales {
                        d: f16_bits_to_f32(k, d),
                        m: None,
                    },
                    codes,
                )
            }
        };
        let bytes = (0..BK / 2)
            .map(|i| (codes[(i / 4) as usize] >> k.u32(8 * (i % 4))) & k.u32(0xff))
            .collect();
        (scales, bytes)
    }
}

/// `s`, or zeros where the row is not `inside` the matrix: rows past it stage zeros, their
/// scales zeroed once a run, where a select per element cost an instruction each.
fn zeroed<'b>(k: &'b KernelBuilder, s: Scales<'b>, inside: Val<'b>) -> Scales<'b> {
    let zero = |v: Val<'b>| k.select(inside, v, k.f32(0.0));
    Scales {
        d: zero(s.d),
        m: s.m.map(zero),
    }
}

/// Stores a run of decoded `codes` (`F32`, [`BK`]` / 2` of them, one sub-block's, scales
/// `s`) into its two staged lines of 8: two values rounded to f16 by one conversion, as a
/// word's halves, stored in one.
fn put_run<'b>(
    k: &'b KernelBuilder,
    (dst, lines): (SharedId, [Val<'b>; 2]),
    s: Scales<'b>,
    codes: &[Val<'b>],
) {
    for (i, pair) in codes.chunks(2).enumerate() {
        let word = s.value(pair[0]).pack_halves(s.value(pair[1]));
        let j = 2 * i as u32;
        k.store_shared_pair(dst, lines[(j / 8) as usize] + k.u32(j % 8), word);
    }
}

/// A byte code (`U32`, below 256) less `centre`, as `F32`: the code as the mantissa of 2^23,
/// less 2^23 and the centre, which is exact. Converting it as an integer took an instruction
/// that GPUs issue at a quarter of the rate of the or and the subtraction.
fn code_to_float<'b>(k: &'b KernelBuilder, code: Val<'b>, centre: i32) -> Val<'b> {
    const TWO_23: u32 = 0x4b00_0000;
    (code | k.u32(TWO_23)).bitcast(Scalar::F32) - k.f32(8_388_608.0 + centre as f32)
}

/// Whether `f`'s blocks and codes start on words (then d and any minimum share the first
/// word), rather than on even bytes.
fn word_aligned(f: Flat) -> bool {
    f.bytes.is_multiple_of(4) && f.codes_at.is_multiple_of(4)
}

/// Whether the staging decodes `f`'s blocks: blocks of a step's columns, codes in halves of
/// 16 bytes (one a byte) or in 16 bytes of nibbles a half apart, d at byte 0 and a minimum,
/// where the format has one, in the same word.
pub fn stages(f: Flat) -> bool {
    let halves = match f.codes {
        Codes::Bytes => f.code_bytes() == BK,
        Codes::Nibbles { span } => span == BK / 2 && f.code_bytes() == BK / 2,
    };
    let min = match f.offset {
        Offset::Min { at } => word_aligned(f) && at == 2,
        _ => true,
    };
    let even = f.codes_at.is_multiple_of(2) && f.bytes.is_multiple_of(2);
    f.elems == BK && even && halves && min
}

/// The code, as `F32`, of element `i` of `half` from its byte: a signed byte, or a byte's
/// low nibble (half 0) or high nibble (half 1), as [`Flat`] decodes them.
fn code_of<'b>(k: &'b KernelBuilder, f: Flat, byte: Val<'b>, half: Val<'b>) -> Val<'b> {
    if f.nibbles() {
        let (lo, hi) = f.nibble_codes(k, byte);
        k.select(half.eq(k.u32(0)), lo, hi)
    } else {
        signed_byte(k, byte)
    }
}

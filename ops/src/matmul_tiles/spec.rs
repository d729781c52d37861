//! The tiled product's compile-time choices: the block a workgroup computes ([`BlockSize`]),
//! the kernel's spec ([`TilesSpec`]) with its variants, name, grid and parameters, and the
//! shape rules of a product.

use super::{BK, LARGE_ROWS, LARGE_ROWS_GROUPED, LARGE_TOKENS, MAX_DEPTH, OP, SMALL_ROWS};
use crate::elementwise::Glu;
use crate::matmul_stage::{f16_elem, weights_elem, Lines};
use crate::shape::ShapeError;
use crate::support::{elements, multiple_of, nonzero};
use trine_gguf::quant::WeightType;
use trine_ir::{ParamValue, Scalar};

/// The block of tokens by rows a workgroup computes ([`BlockSize::for_product`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockSize {
    /// 32 × 32 on 128 invocations: products of fewer than [`SMALL_ROWS`] rows, whose bigger
    /// blocks would leave most of a GPU idle.
    Small,
    /// 64 × 64 on 128 invocations.
    Medium,
    /// 128 × 128 on 256 invocations, tiled only (its scalar variant takes the medium
    /// block): products of at least [`LARGE_ROWS`] rows ([`LARGE_ROWS_GROUPED`] on a device
    /// with warpgroup products) and [`LARGE_TOKENS`] tokens, which fill a GPU with these
    /// blocks. Each element of x and W staged serves twice the products it serves in a medium
    /// block, so the step's loads from memory (x in f32 above all) are half as many for the
    /// same work.
    Large,
}

impl BlockSize {
    /// The block for a product of `rows` rows over `tokens` tokens, on a device with
    /// warpgroup products ([`crate::matmul_group`]) where `warpgroups`.
    pub fn for_product(rows: u32, tokens: u32, warpgroups: bool) -> BlockSize {
        let large = if warpgroups {
            LARGE_ROWS_GROUPED
        } else {
            LARGE_ROWS
        };
        if rows < SMALL_ROWS {
            BlockSize::Small
        } else if rows >= large && tokens >= LARGE_TOKENS {
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
    ///
    /// [`COPY_STAGES`]: super::COPY_STAGES
    pub copies: bool,
    /// x stored as f16 (as cuBLAS's f16 products take it), copied as W is where W is; else
    /// f32, rounded to f16 as it is staged.
    pub half_x: bool,
    /// y is the gated unit of each pair of rows `(2i, 2i + 1)`, `act(y[2i])·y[2i + 1]`
    /// (SwiGLU or GeGLU), `rows / 2` wide: gate and up interleaved, as the executor lays out
    /// an FFN's, with no pass of their own after the product. Not with [`TilesSpec::add`].
    pub glu: Option<Glu>,
    /// Warpgroup products ([`crate::matmul_group`]) instead of the subgroups' tiles, where
    /// the rest of the spec allows them ([`TilesSpec::grouped`]: the large block).
    pub group: bool,
    /// The product is a part of a taller one: its rows are y's rows from parameter `first` on,
    /// of `y_rows` (before SwiGLU halves them), so that a large matrix runs a part at a time
    /// (the executor widens its largest weight in halves). Parameters after tokens: y_rows,
    /// first ([`TilesSpec::part_params`]).
    pub part: bool,
    /// A mixture of experts' product over a prompt's (token, slot) pairs, by expert: W holds
    /// every expert's `rows` rows in turn, the grid's third axis is the expert, and a
    /// workgroup's tokens are the pairs [`crate::moe_sort`] listed for its expert (buffers
    /// `counts`, `lists` after `add`). x's rows are read through the list (a pair's token's
    /// row, or its own: parameter `per_x`, the pairs an x row serves, last), and each sum
    /// goes to its pair's row of y. Workgroups past their expert's pairs do nothing. Not with
    /// [`TilesSpec::add`].
    pub experts: bool,
    /// K split over the grid's third axis ([`TilesSpec::split_grid`]): workgroup z sums the
    /// columns from `z·k_chunk` to `(z + 1)·k_chunk` (parameter `k_chunk`, last; whole steps,
    /// [`TilesSpec::k_chunk`]) and stores its block's sums to y's slice z, `[splits × tokens ×
    /// rows]`, which [`crate::split_sum`] adds up. A product of few blocks of rows and tokens
    /// then fills a GPU that its blocks alone would leave idle. Not with [`TilesSpec::add`], a
    /// gated unit, a part or experts.
    pub split: bool,
    /// y stored as f16 (with [`TilesSpec::glu`] only): the gated unit rounded as it is
    /// written, for a product on f16 tiles after it, which reads its x so.
    pub half_y: bool,
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
    /// ([`crate::matmul_group::eligible`]).
    pub fn grouped(self) -> Self {
        TilesSpec {
            group: crate::matmul_group::eligible(&self),
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
            "matmul_tiles_{}{}{}{}{}{}{}{}{}{}{}{}_d{}",
            if self.half_x { "f16x" } else { "" },
            self.weights.name(),
            if self.add { "_add" } else { "" },
            self.glu.map_or(String::new(), |g| format!("_{}", g.name())),
            if self.half_y { "_f16y" } else { "" },
            if self.part { "_part" } else { "" },
            if self.experts { "_experts" } else { "" },
            if self.split { "_splitk" } else { "" },
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

    /// How the f16 blocks (W's, and x's with [`TilesSpec::half_x`]) move into shared
    /// memory: copied where the spec copies; on tiles otherwise in quads, whose loads are
    /// an eighth as many as the element loads the scalar variant keeps (where the C lowering
    /// vectorises the element loads across invocations).
    pub fn lines(&self) -> Lines {
        if self.copies {
            Lines::Copied
        } else if self.tiles.is_some() {
            Lines::Quads
        } else {
            Lines::Elements
        }
    }

    /// What W's buffer is bound as.
    pub fn w_elem(&self) -> Scalar {
        match self.weights {
            WeightType::F16 => f16_elem(self.lines()),
            ty => weights_elem(ty),
        }
    }

    /// What y's buffer is bound as.
    pub fn y_elem(&self) -> Scalar {
        if self.half_y {
            Scalar::F16
        } else {
            Scalar::F32
        }
    }

    /// What x's buffer is bound as.
    pub fn x_elem(&self) -> Scalar {
        if self.half_x {
            f16_elem(self.lines())
        } else {
            Scalar::F32
        }
    }

    /// Tokens and rows per workgroup.
    pub fn block(&self) -> (u32, u32) {
        self.block.dims()
    }

    /// `[token blocks, row blocks, 1]`: the workgroups that read one block of W's rows are
    /// consecutive, so they run side by side and W streams from memory about once, where
    /// rows first had each block of W read again by every wave of a prompt's token blocks
    /// (x, a prompt's few megabytes, stays in L2 either way).
    pub fn grid(&self, rows: u32, tokens: u32) -> [u32; 3] {
        let (bm, bn) = self.block();
        [tokens.div_ceil(bm), rows.div_ceil(bn), 1]
    }

    /// `[token blocks, row blocks, experts]` of an experts' product: an expert may have
    /// every token's pair.
    pub fn experts_grid(&self, rows: u32, tokens: u32, experts: u32) -> [u32; 3] {
        let [t, r, _] = self.grid(rows, tokens);
        [t, r, experts]
    }

    /// `[token blocks, row blocks, splits]` of a [`TilesSpec::split`] product.
    pub fn split_grid(&self, rows: u32, tokens: u32, splits: u32) -> [u32; 3] {
        let [t, r, _] = self.grid(rows, tokens);
        [t, r, splits]
    }

    /// Columns each of `splits` workgroups of a [`TilesSpec::split`] product over `cols`
    /// sums: an even share rounded up to whole steps of the deepest kernel, so that every
    /// variant of the product takes the same parameters. The last share may be shorter.
    pub fn k_chunk(cols: u32, splits: u32) -> u32 {
        let step = BK * MAX_DEPTH;
        cols.div_ceil(splits.max(1)).div_ceil(step) * step
    }

    /// Parameters of a [`TilesSpec::split`] product in `splits` slices: rows, cols, tokens,
    /// k_chunk.
    pub fn split_params(
        &self,
        (rows, cols, tokens): (u32, u32, u32),
        splits: u32,
    ) -> Vec<ParamValue> {
        let mut p = self.params(rows, cols, tokens);
        p.push(ParamValue::U32(Self::k_chunk(cols, splits)));
        p
    }

    /// Parameters: rows, cols, tokens.
    pub fn params(&self, rows: u32, cols: u32, tokens: u32) -> Vec<ParamValue> {
        vec![
            ParamValue::U32(rows),
            ParamValue::U32(cols),
            ParamValue::U32(tokens),
        ]
    }

    /// Parameters of a [`TilesSpec::part`] product of `rows` rows from y's row `first` of
    /// `y_rows`: rows, cols, tokens, y_rows, first.
    pub fn part_params(
        &self,
        (rows, cols, tokens): (u32, u32, u32),
        (y_rows, first): (u32, u32),
    ) -> Vec<ParamValue> {
        let mut p = self.params(rows, cols, tokens);
        p.extend([ParamValue::U32(y_rows), ParamValue::U32(first)]);
        p
    }
}

/// Checks an experts' product's shape: `rows` per expert, every expert's rows and the
/// lists (`[experts × tokens]`) within u32, and x's rows (`tokens·used / per_x`) whole.
pub fn check_experts(
    (rows, cols, tokens): (u32, u32, u32),
    (experts, used, per_x): (u32, u32, u32),
) -> Result<(), ShapeError> {
    nonzero(OP, "experts", experts)?;
    nonzero(OP, "experts used", used)?;
    nonzero(OP, "pairs per x row", per_x)?;
    multiple_of(OP, "experts used", used, per_x)?;
    elements(OP, "lists", &[experts, tokens])?;
    elements(OP, "pairs", &[tokens, used])?;
    elements(OP, "every expert's rows", &[rows, experts])?;
    check(rows * experts, cols, tokens * used)
}

/// Checks a product's shape: K whole blocks of [`BK`], and every index within u32.
pub fn check(rows: u32, cols: u32, tokens: u32) -> Result<(), ShapeError> {
    nonzero(OP, "rows", rows)?;
    nonzero(OP, "cols", cols)?;
    nonzero(OP, "tokens", tokens)?;
    multiple_of(OP, "cols", cols, BK)?;
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

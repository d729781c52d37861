//! [`matvec_q8`](crate::matvec_q8)'s product for CPUs: one row per invocation, 16 rows per
//! workgroup, the weights interleaved at upload so that the 16 rows' code words for one block
//! lie side by side. The C lowering turns the workgroup's invocations into the lanes of one
//! loop, so each load of codes is one vector load across 16 rows, x's words (the same for
//! every row) are scalars, and a block's (or a run's) sum of packed dot products runs over the
//! 16 rows at once between the lowering's regions (`vpdpbusd` where the CPU has AVX512-VNNI),
//! with no reduction across invocations at all. A prompt's tokens share each step's loads and
//! unpacking of codes and scales.
//! This is the layout llama.cpp's CPU backend repacks quantized weights into for the same
//! reason.
//!
//! [`interleave`] lays out a matrix of GGUF blocks for it: for each group of 16 rows and each
//! block column, the code words of the 16 rows (word `j` of every row, then word `j + 1`,
//! …), then the rows' f16 scales: for a format with a minimum (Q4_1) one word per row, the
//! scale in its low half and the minimum in its high one; for the others 16 halves, row `2i`
//! in the low half of word `i` and row `2i + 1` in its high one, so that every flat format
//! keeps the file's size (Q4_0 18 bytes a block, Q8_0 34): a decode step streams its
//! weights, and a word a row made Q4_0's a ninth larger.
//!
//! The packed formats (the K-quants, IQ4, the 5-bit ones) are laid out by their runs of
//! elements that share a scale ([`trine_gguf::quant::runs`]): for each block of x (32
//! elements), the 16 rows' codes (8 words of signed bytes; 4 words of nibbles where the codes
//! are 0..=15, element j in the low nibble of byte j and element 16 + j in its high one; for
//! Q5_K's and Q6_K's five and six bits those nibbles and one or two words of the bits above
//! them, [`high_word`]), then the rows' scales. Where a format's runs share its super-block's
//! f16 factors ([`trine_gguf::quant::run_bases`]: Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS), each
//! super-block of 16 rows starts with the rows' factors as f32 words (`d`, then the minimum's
//! where the format has one), and a step's scales are each row's integers of its runs as two
//! bytes (the run's scale and minimum, or two runs' scales), two rows to a word; the kernel
//! multiplies them back, exactly the runs' values. The others (Q2_K's four integers a step,
//! and the formats of one run a block of 32) keep per run an f32 scale word per row and, with
//! a minimum, an f32 minimum word. Every run's integer dot with x's codes is exact, as a flat block's is; the
//! trade for decoding nothing per token is size: bits a weight in the file and here, Q4_K 4.5
//! and 4.75, Q6_K 6.6 and 6.6, Q5_K 5.5 and 5.75, IQ4_XS 4.25 and 8.6, Q3_K 3.4 and 8.6, Q2_K
//! 2.6 and 8.
//!
//! Bound: as [`matvec_q8`](crate::matvec_q8)'s, f32 rounding over exact integer dots.

use crate::blocks::{f16_finite_bits_to_f32, signed_byte, BlockFormat, Flat, Offset};
use crate::case::*;
use crate::matvec_q8::{
    block_dot, block_sum, code_sum, needs_x_sum, quantize_x, reference, weight_format,
    Q8Activations, XBlocks, OP, X_BLOCK,
};
use crate::shape::ShapeError;
use trine_gguf::quant::{has_run_bases, quantize, run_bases, runs as quant_runs, WeightType};
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar, Val};

/// Rows per workgroup, one per invocation.
pub const LANES: u32 = 16;

/// How far ahead of the block being multiplied its weights are prefetched, in bytes. On
/// SmolLM2's output head (49152 × 576 Q8_0, 32 MB, read from memory at every token), the C
/// function alone on one core of an AVX2 CPU was faster with a prefetch than without, and
/// fastest at 2304 of the 1152, 2304 and 4608 bytes ahead tried (docs/bench/cpu.md records
/// the build that took 2 KiB).
const PREFETCH_BYTES: u32 = 2048;

/// How the product holds a format's weights.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// A flat format's blocks as long as x's: its code words and a word of f16 scales.
    Flat(Flat),
    /// A packed format by runs of `run` elements, with a minimum per run where `min`, its
    /// codes as nibbles where they fit ([`crate::blocks::Packed::nibbles`]), as nibbles and
    /// `high_bits` planes of the bits above them where the codes are five or six bits (each
    /// code held plus `centre`), else bytes; its scales `factored` into each super-block's
    /// factors and a step's integers, or f32 words.
    Runs {
        run: u32,
        min: bool,
        block: u32,
        nibbles: bool,
        high_bits: u32,
        centre: i32,
        factored: bool,
    },
}

impl Layout {
    fn of(ty: WeightType) -> Result<Layout, ShapeError> {
        match BlockFormat::of(ty) {
            Some(BlockFormat::Packed(p)) if X_BLOCK.is_multiple_of(p.sub) => {
                // Two bytes of integers a row and step: one run with its minimum, or two runs.
                let bytes = X_BLOCK / p.sub * (1 + u32::from(p.min));
                let (high_bits, centre) = high_bits(ty).unwrap_or((0, 0));
                Ok(Layout::Runs {
                    run: p.sub,
                    min: p.min,
                    block: p.elems,
                    nibbles: p.nibbles,
                    high_bits,
                    centre,
                    factored: bytes <= 2 && has_run_bases(ty),
                })
            }
            _ => weight_format(ty).map(Layout::Flat).map_err(|_| {
                let names: Vec<&str> = BlockFormat::ALL
                    .iter()
                    .map(|f| f.ty())
                    .filter(|&t| Layout::of(t).is_ok())
                    .map(|t| t.name())
                    .collect();
                ShapeError::Unsupported {
                    op: OP,
                    what: format!("{ty} weights (it takes {})", names.join(", ")),
                }
            }),
        }
    }

    /// Elements of a row that one step of the walk takes: a flat block, or x's block.
    fn elems(self) -> u32 {
        match self {
            Layout::Flat(f) => f.elems,
            Layout::Runs { .. } => X_BLOCK,
        }
    }

    /// Elements of the format's own block, which the row must hold whole.
    fn block(self) -> u32 {
        match self {
            Layout::Flat(f) => f.elems,
            Layout::Runs { block, .. } => block,
        }
    }

    fn code_words(self) -> u32 {
        match self {
            Layout::Flat(f) => f.code_words(),
            Layout::Runs { nibbles: true, .. } => X_BLOCK / 8,
            Layout::Runs { high_bits: 0, .. } => X_BLOCK / 4,
            Layout::Runs { high_bits, .. } => X_BLOCK / 8 + high_bits,
        }
    }

    /// Runs in a step, and words of scales per run.
    fn runs(self) -> (u32, u32) {
        match self {
            Layout::Flat(_) => (1, 1),
            Layout::Runs { run, min, .. } => (X_BLOCK / run, 1 + u32::from(min)),
        }
    }

    /// Words a row takes per step: its codes' and its scales'.
    fn words(self) -> u32 {
        let (runs, per) = self.runs();
        self.code_words() + runs * per
    }

    /// Whether the rows' scales are halves after their codes, two to a word: a flat format's
    /// f16 scale without a minimum, or a factored format's two integers.
    fn halves(self) -> bool {
        matches!(self, Layout::Flat(f) if !f.has_min())
            || matches!(self, Layout::Runs { factored: true, .. })
    }

    /// Words a step of the walk takes for a group of [`LANES`] rows.
    fn step_words(self) -> u32 {
        if self.halves() {
            LANES * self.code_words() + LANES / 2
        } else {
            LANES * self.words()
        }
    }

    /// Steps a super-block of a factored format takes, and the words of its rows' factors
    /// before them; one step and none for the others.
    fn super_block(self) -> (u32, u32) {
        match self {
            Layout::Runs {
                factored: true,
                block,
                min,
                ..
            } => (block / X_BLOCK, LANES * (1 + u32::from(min))),
            _ => (1, 0),
        }
    }

    /// Words a group of [`LANES`] rows of `cols` columns takes.
    fn group_words(self, cols: u32) -> u32 {
        let (steps, factors) = self.super_block();
        let step_count = cols / self.elems();
        step_count * self.step_words() + step_count / steps * factors
    }
}

/// The formats whose runs' codes are five or six bits, held as nibbles and planes of the bits
/// above them: those bits, and the value every code is less (its code plus that is 0..64).
fn high_bits(ty: WeightType) -> Option<(u32, i32)> {
    match ty {
        WeightType::Q5_K => Some((1, 0)),
        WeightType::Q6_K => Some((2, 32)),
        _ => None,
    }
}

/// Whether [`interleave`]'s layout of `ty` is one of runs: the packed formats, whose codes it
/// holds as bytes but for 4-bit ones, and whose runs' scales it holds apart (a third more than
/// the file's bytes or more but for Q4_K).
pub fn widens(ty: WeightType) -> bool {
    matches!(Layout::of(ty), Ok(Layout::Runs { .. }))
}

/// Bytes of `rows` × `cols` weights of `ty` in [`interleave`]'s layout; 0 for a type it does
/// not take.
pub fn interleaved_bytes(ty: WeightType, rows: usize, cols: usize) -> usize {
    Layout::of(ty).map_or(0, |l| {
        rows / LANES as usize * 4 * l.group_words(cols as u32) as usize
    })
}

fn check_shape(ty: WeightType, rows: usize, cols: usize) -> Result<Layout, ShapeError> {
    let f = Layout::of(ty)?;
    let multiple = |what, value: usize, multiple: usize| {
        if value == 0 || !value.is_multiple_of(multiple) {
            Err(ShapeError::NotMultiple {
                op: OP,
                what,
                value,
                multiple,
            })
        } else {
            Ok(())
        }
    };
    multiple("rows of the interleaved product", rows, LANES as usize)?;
    multiple("cols", cols, f.block() as usize)?;
    Ok(f)
}

/// Whether the product takes `rows` × `cols` weights of `ty`: a flat format whose blocks are
/// as long as x's or a packed one whose runs divide x's blocks, whole groups of rows and
/// whole blocks.
pub fn takes(ty: WeightType, rows: usize, cols: usize) -> bool {
    check_shape(ty, rows, cols).is_ok()
}

/// `w` (`rows` × `cols` weights of `ty` as GGUF blocks) in the kernel's interleaved layout.
pub fn interleave(
    ty: WeightType,
    w: &[u8],
    rows: usize,
    cols: usize,
) -> Result<Vec<u8>, ShapeError> {
    let layout = check_shape(ty, rows, cols)?;
    let expected = rows * ty.bytes("interleave", "cols", cols).unwrap_or(0);
    if w.len() != expected {
        return Err(ShapeError::Mismatch {
            op: OP,
            what: "bytes of weights",
            expected,
            found: w.len(),
        });
    }
    let f = match layout {
        Layout::Flat(f) => f,
        Layout::Runs { .. } => return Ok(interleave_runs(ty, layout, w, (rows, cols))),
    };
    let (block_bytes, codes_at) = (f.bytes as usize, f.codes_at as usize);
    let blocks = cols / f.elems as usize;
    let lanes = LANES as usize;
    let words = f.code_words() as usize;
    let mut out = Vec::with_capacity(interleaved_bytes(ty, rows, cols));
    for group in 0..rows / lanes {
        for b in 0..blocks {
            let block = |l: usize| {
                let at = ((group * lanes + l) * blocks + b) * block_bytes;
                &w[at..at + block_bytes]
            };
            for j in 0..words {
                for l in 0..lanes {
                    let at = codes_at + 4 * j;
                    out.extend_from_slice(&block(l)[at..at + 4]);
                }
            }
            for l in 0..lanes {
                let bl = block(l);
                out.extend_from_slice(&bl[0..2]);
                if let Offset::Min { at } = f.offset {
                    out.extend_from_slice(&bl[at as usize..at as usize + 2]);
                }
            }
        }
    }
    Ok(out)
}

/// [`interleave`] for a packed format: each row's runs, then per group of rows and block of x
/// the codes' words and the runs' scale (and minimum) words, lane by lane. Groups of rows are
/// laid out apart, on every core: a model's upload spent seconds here.
fn interleave_runs(
    ty: WeightType,
    layout: Layout,
    w: &[u8],
    (rows, cols): (usize, usize),
) -> Vec<u8> {
    let lanes = LANES as usize;
    let groups = rows / lanes;
    let group_in = w.len() / groups;
    let group_out = interleaved_bytes(ty, rows, cols) / groups;
    let mut out = vec![0u8; group_out * groups];
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_thread = groups.div_ceil(threads.clamp(1, groups.max(1)));
    std::thread::scope(|s| {
        for (t, chunk) in out.chunks_mut(per_thread * group_out).enumerate() {
            let first = t * per_thread;
            s.spawn(move || {
                for (g, dst) in chunk.chunks_mut(group_out).enumerate() {
                    let src = &w[(first + g) * group_in..][..group_in];
                    interleave_group(ty, layout, src, cols, dst);
                }
            });
        }
    });
    out
}

/// One group of [`LANES`] rows (`src`, the file's blocks) into `dst`, its part of
/// [`interleave_runs`]' layout.
fn interleave_group(ty: WeightType, layout: Layout, src: &[u8], cols: usize, dst: &mut [u8]) {
    let (runs, per) = layout.runs();
    let (runs, lanes) = (runs as usize, LANES as usize);
    let run_len = X_BLOCK as usize / runs;
    let row_runs = cols / run_len;
    // Each lane's codes as bytes, and its runs' scales and minimums, in element order.
    let mut codes = vec![0u8; lanes * cols];
    let (centre, factored) = match layout {
        Layout::Runs {
            centre, factored, ..
        } => (centre, factored),
        Layout::Flat(_) => (0, false),
    };
    let mut scales = vec![0f32; lanes * row_runs];
    let mut mins = vec![0f32; lanes * row_runs];
    // Each lane's super-blocks' factors, where the layout has them.
    let row_blocks = cols / layout.block() as usize;
    let mut bases = vec![(0f32, 0f32); lanes * row_blocks];
    let block_runs = row_runs / row_blocks;
    for (l, row) in src.chunks(src.len() / lanes).enumerate() {
        for (b, block) in row.chunks(ty.block_bytes()).enumerate() {
            if factored {
                bases[l * row_blocks + b] = run_bases(ty, block).unwrap_or_default();
            }
            let decoded = quant_runs(ty, block).unwrap_or_default();
            for (r, run) in decoded.iter().enumerate() {
                let i = b * block_runs + r;
                let at = l * cols + i * run_len;
                for (c, &q) in codes[at..at + run_len].iter_mut().zip(&run.codes) {
                    *c = (i32::from(q) + centre) as u8;
                }
                scales[l * row_runs + i] = run.scale;
                mins[l * row_runs + i] = run.min;
            }
        }
    }
    let mut out = dst.chunks_exact_mut(4);
    let mut put = |word: [u8; 4]| {
        out.next()
            .expect("a group's layout holds its words")
            .copy_from_slice(&word)
    };
    let block = X_BLOCK as usize;
    let (block_steps, factor_words) = layout.super_block();
    let block_steps = block_steps as usize;
    // A run's integer: its scale (or minimum) over the block's factor, exact where the factor
    // is finite and not zero (a zero factor's runs are all zero).
    let int = |v: f32, base: f32| -> u8 {
        let q = v / base;
        if base != 0.0 && q.is_finite() {
            q as i8 as u8
        } else {
            0
        }
    };
    for step in 0..cols / block {
        if factor_words > 0 && step.is_multiple_of(block_steps) {
            let at = |l: usize| bases[l * row_blocks + step / block_steps];
            for l in 0..lanes {
                put(at(l).0.to_le_bytes());
            }
            if factor_words as usize > lanes {
                for l in 0..lanes {
                    put(at(l).1.to_le_bytes());
                }
            }
        }
        for j in 0..layout.code_words() as usize {
            for l in 0..lanes {
                let c = &codes[l * cols + step * block..][..block];
                put(match layout {
                    Layout::Runs {
                        nibbles, high_bits, ..
                    } if nibbles || high_bits > 0 => high_word(c, high_bits as usize, j),
                    _ => [c[4 * j], c[4 * j + 1], c[4 * j + 2], c[4 * j + 3]],
                });
            }
        }
        if factor_words > 0 {
            // Two bytes a row, two rows a word: the run's scale and minimum, or two runs'
            // scales.
            let ints = |l: usize| -> [u8; 2] {
                let (d, m) = bases[l * row_blocks + step / block_steps];
                let at = l * row_runs + step * runs;
                if per == 2 {
                    [int(scales[at], d), int(mins[at], m)]
                } else {
                    std::array::from_fn(|r| if r < runs { int(scales[at + r], d) } else { 0 })
                }
            };
            for l in (0..lanes).step_by(2) {
                let (a, b) = (ints(l), ints(l + 1));
                put([a[0], a[1], b[0], b[1]]);
            }
            continue;
        }
        for r in 0..runs {
            let at = |l: usize| l * row_runs + step * runs + r;
            for l in 0..lanes {
                put(scales[at(l)].to_le_bytes());
            }
            if per == 2 {
                for l in 0..lanes {
                    put(mins[at(l)].to_le_bytes());
                }
            }
        }
    }
}

/// Word `j` of a step's codes `c` (32, each below 64) held as nibbles and `bits` planes above
/// them (none for codes below 16): words 0..4 hold the nibbles, element `4j + i` in the low
/// half of byte `i` of word `j` and element `16 + 4j + i` in its high half; then with two
/// bits, a word for elements 0..16 and one for 16..32, each byte `i` holding the bits of
/// element `4j + i` (of its half) at bit `2j`; with one bit, one word, element `4j + i`'s at
/// bit `j` of byte `i` and element `16 + 4j + i`'s at bit `4 + j`.
fn high_word(c: &[u8], bits: usize, j: usize) -> [u8; 4] {
    let above = |e: usize| c[e] >> 4;
    match j {
        0..4 => std::array::from_fn(|i| (c[4 * j + i] & 15) | ((c[16 + 4 * j + i] & 15) << 4)),
        _ if bits == 2 => {
            let half = 16 * (j - 4);
            std::array::from_fn(|i| {
                (0..4).fold(0, |b, w| b | ((above(half + 4 * w + i) & 3) << (2 * w)))
            })
        }
        _ => std::array::from_fn(|i| {
            (0..4).fold(0, |b, w| {
                b | ((above(4 * w + i) & 1) << w) | ((above(16 + 4 * w + i) & 1) << (4 + w))
            })
        }),
    }
}

/// The product for `ty` weights in [`interleave`]'s layout, for `tokens_per_workgroup` tokens
/// of x (a prompt's), each step of K taking every token's sum, so that a block's codes are
/// loaded once for all of them. Buffers `w` (U32), `xq`, `xd`, `xs` (as
/// [`quantize_x`] makes them for `ty`, token after token), with `add` also `r` (F32 `[tokens ×
/// rows]`, added to the product: a residual connection), then `y` (F32 `[tokens × rows]`);
/// parameters `rows`, `cols`, `tokens`; grid [`grid`].
pub fn kernel(ty: WeightType, add: bool, tokens_per_workgroup: u32) -> Result<Kernel, ShapeError> {
    build(ty, add, tokens_per_workgroup, false)
}

/// The product for a mixture of experts' pairs ([`crate::matvec_ids_rows`]): `w` holds every
/// expert's `rows` rows in turn, interleaved; a workgroup takes 16 rows of one (token, slot)
/// pair's expert, named by `ids` (U32 `[pairs]`, after `xs`), against x's row `pair / per_x`
/// (the pair's token's, or its own), into the pair's row of y from `first` of `y_rows`.
/// Parameters `rows`, `cols`, `tokens` (the pairs), `per_x`, `y_rows`, `first`; grid
/// [`grid`] of the pairs, a workgroup a pair.
pub fn experts_kernel(ty: WeightType) -> Result<Kernel, ShapeError> {
    build(ty, false, 1, true)
}

fn build(
    ty: WeightType,
    add: bool,
    tokens_per_workgroup: u32,
    experts: bool,
) -> Result<Kernel, ShapeError> {
    let layout = Layout::of(ty)?;
    let tpw = tokens_per_workgroup;
    crate::support::nonzero(OP, "tokens per workgroup", tpw)?;
    let (words, step_words) = (layout.code_words(), layout.step_words());
    let mut name = format!("matvec_q8_{ty}_rows{LANES}");
    if tpw > 1 {
        name.push_str(&format!("_t{tpw}"));
    }
    if add {
        name.push_str("_add");
    }
    if experts {
        name.push_str("_experts");
    }
    let k = KernelBuilder::new(&name, [LANES, 1, 1]);
    let w = k.buffer("w", Scalar::U32, Access::Read);
    let xq = k.buffer("xq", Scalar::U32, Access::Read);
    let xd = k.buffer("xd", Scalar::F32, Access::Read);
    let xs = k.buffer("xs", Scalar::F32, Access::Read);
    let ids = experts.then(|| k.buffer("ids", Scalar::U32, Access::Read));
    let r = add.then(|| k.buffer("r", Scalar::F32, Access::Read));
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let rows = k.param("rows", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let tokens = k.param("tokens", Scalar::U32);
    let lid = k.local_index();
    let blocks = cols / k.u32(layout.elems());
    // Token j of the workgroup; the last token stands in for those past the end, whose sums
    // are not stored.
    let token = |j: u32| k.workgroup_id(1) * k.u32(tpw) + k.u32(j);
    let read_token = |j: u32| token(j).min(tokens - k.u32(1));
    // An expert's groups of rows follow the experts' before it; x's row serves `per_x` pairs.
    let pairs = ids.map(|ids| {
        let per_x = k.param("per_x", Scalar::U32);
        let y_rows = k.param("y_rows", Scalar::U32);
        let first = k.param("first", Scalar::U32);
        (k.load(ids, token(0)), per_x, (y_rows, first))
    });
    let group = match pairs {
        Some((e, ..)) => e * (rows / k.u32(LANES)) + k.workgroup_id(0),
        None => k.workgroup_id(0),
    };
    let read_token = |j: u32| match pairs {
        Some((_, per_x, _)) => read_token(j) / per_x,
        None => read_token(j),
    };
    let accs: Vec<_> = (0..tpw).map(|_| k.var("acc", Scalar::F32)).collect();
    let (block_steps, factor_words) = layout.super_block();
    let group_words =
        blocks * k.u32(step_words) + blocks / k.u32(block_steps) * k.u32(factor_words);
    let group_first = group * group_words;
    // Step `b` of K: each token's sum of the block, then the prefetch of the blocks ahead.
    let step = |b: Val<'_>| {
        // The step's first word, and its super-block's factors where the format has them.
        let (first, factors) = if factor_words == 0 {
            (group_first + b * k.u32(step_words), None)
        } else {
            let sb = b / k.u32(block_steps);
            let at = group_first + sb * k.u32(factor_words + block_steps * step_words);
            let within = b - sb * k.u32(block_steps);
            (
                at + k.u32(factor_words) + within * k.u32(step_words),
                Some(at),
            )
        };
        let step_word = |j| k.load(w, first + j);
        let codes: Vec<_> = (0..words)
            .map(|i| step_word(lid + k.u32(i * LANES)))
            .collect();
        let kb = &k;
        let factor_word = factors.map(|at| move |j| kb.load(w, at + j));
        let scales = Scales::load(&k, layout, lid, step_word, factor_word);
        for (j, acc) in accs.iter().enumerate() {
            let xb = read_token(j as u32) * blocks + b;
            let x_words = X_BLOCK / 4;
            let x: Vec<_> = (0..x_words)
                .map(|i| k.load(xq, xb * k.u32(x_words) + k.u32(i)))
                .collect();
            let dx = k.load(xd, xb);
            let sum = match (layout, &scales) {
                (Layout::Flat(f), Scales::Flat(d, m)) => {
                    let dot = block_dot(&k, f, &codes, &x);
                    let sx = needs_x_sum(f).then(|| k.load(xs, xb));
                    block_sum(&k, f, (*d, *m), (dx, sx), dot)
                }
                (_, Scales::Runs(runs)) => {
                    let dots = run_dots(&k, layout, &codes, &x);
                    runs_sum(&k, runs, (&dots, &x), (dx, || k.load(xs, xb)))
                }
                _ => unreachable!("a layout's scales are its own"),
            };
            acc.set(acc.get() + sum);
        }
        // The workgroup's blocks are consecutive, and the next workgroup's follow them: the
        // hardware's prefetcher alone left the output head at a third of the copy's bandwidth.
        // One hint per cache line of a block of 16 rows, clamped to the buffer's last word.
        let ahead = PREFETCH_BYTES.div_ceil(4 * step_words);
        let next = first + k.u32(ahead * step_words);
        let end = match pairs {
            Some((e, ..)) => (e + k.u32(1)) * rows,
            None => rows,
        };
        let last = end / k.u32(LANES) * group_words - k.u32(1);
        for line in (0..step_words).step_by(16) {
            k.prefetch(w, (next + k.u32(line)).min(last));
        }
    };
    k.for_range(k.u32(0), blocks, 1, step);
    let row = k.workgroup_id(0) * k.u32(LANES) + lid;
    for (j, acc) in accs.iter().enumerate() {
        let t = token(j as u32);
        k.if_(t.lt(tokens), || {
            let at = match pairs {
                Some((_, _, (y_rows, first))) => t * y_rows + first + row,
                None => t * rows + row,
            };
            let sum = r.map_or(acc.get(), |r| acc.get() + k.load(r, at));
            k.store(y, at, sum);
        });
    }
    Ok(k.finish())
}

/// A step's scales, loaded once for every token of the workgroup.
enum Scales<'b> {
    /// A flat block's f16 scale and minimum.
    Flat(Val<'b>, Option<Val<'b>>),
    /// Each run's f32 scale and minimum.
    Runs(Vec<(Val<'b>, Option<Val<'b>>)>),
}

impl<'b> Scales<'b> {
    /// The scales after the step's code words, for the row of invocation `lid`;
    /// `step_word(j)` loads word `j` of the step (the rows' words side by side), and
    /// `factor_word(j)` word `j` of its super-block's factors where the format has them.
    fn load(
        k: &'b KernelBuilder,
        layout: Layout,
        lid: Val<'b>,
        step_word: impl Fn(Val<'b>) -> Val<'b>,
        factor_word: Option<impl Fn(Val<'b>) -> Val<'b>>,
    ) -> Scales<'b> {
        let at = layout.code_words();
        let word = |i: u32| step_word(lid + k.u32(i * LANES));
        let pair =
            || step_word(k.u32(at * LANES) + lid / k.u32(2)) >> ((lid & k.u32(1)) * k.u32(16));
        let half = |bits: Val<'b>| f16_finite_bits_to_f32(k, bits & k.u32(0xffff));
        match (layout, factor_word) {
            // The row's two integers (a signed byte each) times its super-block's factors:
            // the run's scale and minimum, or two runs' scales.
            (Layout::Runs { min, .. }, Some(factor)) => {
                let ints = pair();
                let int = |b: u32| signed_byte(k, (ints >> k.u32(8 * b)) & k.u32(0xff));
                let d = factor(lid).bitcast(Scalar::F32);
                let (runs, _) = layout.runs();
                Scales::Runs(if min {
                    let m = factor(lid + k.u32(LANES)).bitcast(Scalar::F32);
                    vec![(d * int(0), Some(m * int(1)))]
                } else {
                    (0..runs).map(|r| (d * int(r), None)).collect()
                })
            }
            // The rows' halves follow their code words, two to a word.
            _ if layout.halves() => Scales::Flat(half(pair()), None),
            (Layout::Flat(_), _) => {
                let scales = word(at);
                Scales::Flat(half(scales), Some(half(scales >> k.u32(16))))
            }
            (Layout::Runs { min, .. }, None) => {
                let (runs, per) = layout.runs();
                Scales::Runs(
                    (0..runs)
                        .map(|r| {
                            let f32_at = |i: u32| word(at + r * per + i).bitcast(Scalar::F32);
                            (f32_at(0), min.then(|| f32_at(1)))
                        })
                        .collect(),
                )
            }
        }
    }
}

/// Each run's integer dot of the step's codes with x's (as F32): a run of 16 is x's words
/// 0..4 or 4..8, which nibbles hold in the low or the high halves of their bytes.
fn run_dots<'b>(
    k: &'b KernelBuilder,
    layout: Layout,
    codes: &[Val<'b>],
    x: &[Val<'b>],
) -> Vec<Val<'b>> {
    let (runs, _) = layout.runs();
    let sum = |parts: Vec<Val<'b>>| {
        parts
            .into_iter()
            .reduce(|a, b| a + b)
            .map_or_else(|| k.f32(0.0), |v| v.cast(Scalar::F32))
    };
    match layout {
        Layout::Runs {
            nibbles,
            high_bits,
            centre,
            ..
        } if nibbles || high_bits > 0 => {
            let mask = k.u32(0x0f0f_0f0f);
            // The bits above a nibble word's codes, moved above them: word `j`'s elements of
            // the first half or (`upper`) of the second.
            let above = |j: u32, upper: bool| match high_bits {
                0 => None,
                1 => Some(
                    ((codes[4] >> k.u32(j + 4 * u32::from(upper))) & k.u32(0x0101_0101))
                        << k.u32(4),
                ),
                _ => {
                    let plane = codes[4 + usize::from(upper)];
                    Some(((plane >> k.u32(2 * j)) & k.u32(0x0303_0303)) << k.u32(4))
                }
            };
            // Masked by a literal below 128 a byte, so that the lowering knows every byte
            // for unsigned; or, with a centre, each byte less it as a signed byte: moved by
            // 128 − centre into 128..192 or up, a byte at a time (no carry leaves a byte),
            // then its top bit flipped.
            let whole = k.u32(0x0101_0101 * ((16u32 << high_bits) - 1));
            let code = |j: u32, upper: bool| {
                let nibble = if upper {
                    (codes[j as usize] >> k.u32(4)) & mask
                } else {
                    codes[j as usize] & mask
                };
                match above(j, upper) {
                    None => nibble,
                    Some(a) if centre == 0 => (nibble | a) & whole,
                    Some(a) => {
                        let moved = k.u32(0x0101_0101 * (128 - centre as u32));
                        ((nibble | a) + moved) ^ k.u32(0x8080_8080)
                    }
                }
            };
            let low: Vec<_> = (0..4)
                .map(|j| code(j, false).dot4_i8(x[j as usize]))
                .collect();
            let high: Vec<_> = (0..4)
                .map(|j| code(j, true).dot4_i8(x[4 + j as usize]))
                .collect();
            if runs == 1 {
                vec![sum(low.into_iter().chain(high).collect())]
            } else {
                vec![sum(low), sum(high)]
            }
        }
        _ => {
            let per = codes.len() / runs as usize;
            (0..runs as usize)
                .map(|r| {
                    sum((r * per..(r + 1) * per)
                        .map(|j| codes[j].dot4_i8(x[j]))
                        .collect())
                })
                .collect()
        }
    }
}

/// A step of runs against x's block: each run's integer dot with x's codes (`dots_of`) times
/// its scale, and its minimum times the run's sum of x (`dx·Σq` from `xs` for a run as long
/// as the block, else x's codes of the run summed by a dot with ones), all times x's scale
/// `dx`.
fn runs_sum<'b>(
    k: &'b KernelBuilder,
    runs: &[(Val<'b>, Option<Val<'b>>)],
    (dots_of, x): (&[Val<'b>], &[Val<'b>]),
    (dx, xs): (Val<'b>, impl Fn() -> Val<'b>),
) -> Val<'b> {
    let per = x.len() / runs.len();
    let mut dots = k.f32(0.0);
    let mut mins = k.f32(0.0);
    for (r, &(scale, min)) in runs.iter().enumerate() {
        let span = r * per..(r + 1) * per;
        dots = scale.fma(dots_of[r], dots);
        if let Some(m) = min {
            let sum_x = if runs.len() == 1 {
                xs()
            } else {
                dx * code_sum(k, &x[span]).cast(Scalar::F32)
            };
            mins = m.fma(sum_x, mins);
        }
    }
    dx.fma(dots, mins)
}

/// The grid of [`kernel`]: a workgroup per 16 rows and `tokens_per_workgroup` tokens.
pub fn grid(rows: u32, tokens: u32, tokens_per_workgroup: u32) -> [u32; 3] {
    [
        rows / LANES,
        tokens.div_ceil(tokens_per_workgroup.max(1)),
        1,
    ]
}

/// A conformance (and bench) case: random weights of `ty` interleaved, random x quantized on
/// the host, one token.
pub fn case(ty: WeightType, rows: u32, cols: u32) -> Result<Case, ShapeError> {
    case_with(ty, rows, cols, false, (1, 1))
}

/// [`case`] for `tokens` tokens, `per` to a workgroup, with a residual added when `add`.
pub fn case_with(
    ty: WeightType,
    rows: u32,
    cols: u32,
    add: bool,
    (tokens, per): (u32, u32),
) -> Result<Case, ShapeError> {
    let (r, c, t) = (rows as usize, cols as usize, tokens as usize);
    check_shape(ty, r, c)?;
    crate::support::nonzero(OP, "tokens", tokens)?;
    let kernel = kernel(ty, add, per)?;
    let mut rng = Rng::new(u64::from(rows) * 37 + u64::from(cols) + u64::from(tokens));
    let w = quantize(ty, &rng.f32s(r * c, -1.0, 1.0))?;
    let xs: Vec<_> = (0..t)
        .map(|_| quantize_x(&rng.f32s(c, -1.0, 1.0), XBlocks::for_weights(ty)))
        .collect();
    let resid = rng.f32s(r * t, -1.0, 1.0);
    let mut want = vec![];
    for x in &xs {
        want.extend(reference(ty, &w, r, c, x)?);
    }
    let cat = |f: fn(&Q8Activations) -> &[u8]| xs.iter().flat_map(f).copied().collect::<Vec<u8>>();
    let suffix = if add { "_add" } else { "" };
    let mut case = Case::new(
        format!("{OP}/{ty}/{rows}x{cols}/rows{LANES}/t{tokens}_{per}{suffix}"),
        kernel,
        grid(rows, tokens, per),
    )
    .input("w", Scalar::U32, interleave(ty, &w, r, c)?)
    .input("xq", Scalar::U32, cat(|x| bytemuck::cast_slice(&x.words)))
    .input("xd", Scalar::F32, cat(|x| bytemuck::cast_slice(&x.scales)))
    .input("xs", Scalar::F32, cat(|x| bytemuck::cast_slice(&x.sums)));
    if add {
        want.iter_mut()
            .zip(&resid)
            .for_each(|(y, &v)| *y += f64::from(v));
        case = case.input("r", Scalar::F32, f32_bytes(&resid));
    }
    Ok(case
        .output("y", Scalar::F32, vec![0; r * t * 4], want)
        .params(vec![
            ParamValue::U32(rows),
            ParamValue::U32(cols),
            ParamValue::U32(tokens),
        ]))
}

/// Every weight type at one group of rows, at SmolLM2's 576 columns, and at a long row; and
/// the residual's variant.
pub fn cases() -> Vec<Case> {
    let mut out = vec![];
    for ty in BlockFormat::ALL
        .map(BlockFormat::ty)
        .into_iter()
        .filter(|&t| Layout::of(t).is_ok())
    {
        // Rows of whole blocks: SmolLM2's 576 is not one of 256-element super-blocks.
        let block = Layout::of(ty).map_or(32, |l| l.block());
        let wide = 576u32.next_multiple_of(block);
        for (rows, cols) in [(16, block), (576, wide), (32, 4096)] {
            out.push(case(ty, rows, cols).expect("valid shapes"));
        }
        out.push(case_with(ty, 64, 1536, true, (1, 1)).expect("valid shapes"));
        // A prompt of 11 tokens, 8 to a workgroup: a full workgroup and a partial one.
        out.push(case_with(ty, 32, wide, true, (11, 8)).expect("valid shapes"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A type the product does not take is refused naming it and exactly the types it takes:
    /// every block format (the float types have no codes to multiply).
    #[test]
    fn a_type_it_does_not_take_is_refused_with_what_it_takes() {
        for ty in [WeightType::F32, WeightType::F16] {
            let e = kernel(ty, false, 1).unwrap_err().to_string();
            assert!(e.contains(ty.name()), "{e}");
            assert!(
                e.contains("(it takes q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k"),
                "{e}"
            );
        }
        assert!(takes(WeightType::Q4_1, 16, 64) && takes(WeightType::Q4_K, 16, 256));
        // A row of Q4_K must be whole super-blocks.
        assert!(!takes(WeightType::Q4_K, 16, 96));
    }
}

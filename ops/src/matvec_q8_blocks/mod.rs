//! [`matvec_q8`](crate::matvec_q8)'s product for GPUs, on the blocks of the formats whose
//! codes come as words of bytes ([`IntUnits`]: Q4_K, Q5_K, Q6_K as the file holds them, Q4_0,
//! Q4_1 and Q8_0 in a GPU's groups of eight blocks, whose codes are signed for Q8_0). A decode
//! step's product reads every weight once; with f32 x, a GPU spent more instructions per byte
//! of weights (a run's codes decoded to floats, eight f32 values of x per word of nibbles)
//! than it has while the memory streams them. Here a unit of 32 codes is four words of each
//! of its two runs, multiplied with x's codes by packed integer dot products
//! ([`BinaryOp::Dot4I8`](trine_ir::BinaryOp::Dot4I8)), and each run's scales apply once.
//!
//! A workgroup takes `rows_per_workgroup` rows; invocation `l` takes units `l`, `l + 128`, …
//! of each, so that neighbouring invocations read neighbouring 16-byte runs of codes, and x's
//! words for a unit are loaded once for all the rows. x comes in blocks of 32 with one scale
//! each ([`XBlocks::Q8_0`](crate::matvec_q8::XBlocks), as llama.cpp's CUDA backend
//! quantizes it for every type): a run of 16 lies in one of them.
//!
//! Bound: as [`matvec_q8`](crate::matvec_q8)'s, f32 rounding over exact integer dots.

use crate::blocks::{quad_words, BlockFormat, Bytes, IntUnits, Packed, UNIT};
use crate::matvec_attn::RopeOut;
use crate::matvec_fused::Epilogue;
use crate::matvec_q8::{code_sum, XBlocks, OP, X_BLOCK};
use crate::shape::ShapeError;
use crate::support::{prefetch_bytes, Combine, Reducer, Reduction};
use trine_gguf::quant::WeightType;
use trine_ir::{Access, BufferId, Kernel, KernelBuilder, Scalar, Val};

/// Invocations of a workgroup.
pub const WORKGROUP: u32 = 128;

/// Sums of squares a lane of a product with `rms` loads before its walk: a row of 4,096 is 128
/// blocks, four for each lane of a team of 32.
const SQUARES_AHEAD: u32 = 4;

/// How a workgroup divides its rows: teams of `width` invocations (32, or the whole
/// workgroup) each take `rows_per_team` rows and reduce their sums on their own; an
/// invocation takes `units` units that follow each other (one or two) a step, and `steps`
/// steps (one or two, `width` steps apart) an iteration, their loads issued together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Teams {
    pub width: u32,
    pub units: u32,
    pub steps: u32,
}

impl Teams {
    /// A team of the whole workgroup, a unit a step.
    pub const WHOLE: Teams = Teams {
        width: WORKGROUP,
        units: 1,
        steps: 1,
    };

    /// Teams of a subgroup of 32, each invocation two units (a pair sharing scales where the
    /// format's do) a step, `steps` steps an iteration.
    pub const fn pairs(steps: u32) -> Teams {
        Teams {
            width: 32,
            units: 2,
            steps,
        }
    }

    fn of_workgroup(self) -> u32 {
        WORKGROUP / self.width
    }
}

/// How x is quantized for this product: blocks of 32, one per run of 16 (a run never
/// straddles two).
pub const X_BLOCKS: XBlocks = XBlocks::Q8_0;

/// The format of `ty` where it has units of byte codes; else `op`'s refusal, naming the
/// formats that have them.
pub(crate) fn format(op: &'static str, ty: WeightType) -> Result<(Packed, IntUnits), ShapeError> {
    match BlockFormat::of(ty) {
        Some(BlockFormat::Packed(p)) => p.units.map(|u| (p, u)),
        _ => None,
    }
    .ok_or_else(|| {
        let names: Vec<&str> = BlockFormat::ALL
            .iter()
            .filter_map(|f| match f {
                BlockFormat::Packed(p) if p.units.is_some() => Some(p.ty.name()),
                _ => None,
            })
            .collect();
        ShapeError::Unsupported {
            op,
            what: format!(
                "{ty} weights on their own blocks (it takes {})",
                names.join(", ")
            ),
        }
    })
}

/// The format of `ty` and its units, where the product takes it.
pub fn format_units(ty: WeightType) -> Option<(Packed, IntUnits)> {
    format(OP, ty).ok()
}

/// Whether the product takes `ty` weights in rows of `cols`: a format with units, and rows of
/// whole blocks.
pub fn takes(ty: WeightType, cols: u32) -> bool {
    format(OP, ty).is_ok_and(|(p, _)| cols > 0 && cols.is_multiple_of(p.elems))
}

/// The product of `ty` weights (the file's bytes, bound as `U32` words) and x quantized in
/// [`X_BLOCKS`]. Buffers `w`, with `f16_view` also `w16` (the same bytes bound as `F16`: the
/// blocks' f16 scales converted natively, where assembling one from bytes costs some twenty
/// integer operations, per run and row), `xq`, `xd`; then as `epilogue` says
/// ([`Epilogue::Add`]: `r`, F32 `[rows]`, added, a residual connection; then `y`, F32
/// `[rows]`; [`Epilogue::RopeStore`]: no `y`, the rows are a QKV product's, rotated and
/// stored as [`crate::matvec_attn`]'s epilogue does it, for one token); parameters `rows`,
/// `cols` (and the rope's); grid [`grid`]. With `prefetch`, each team first asks L2 for its
/// rows, which on CUDA runs before the wait for the dispatch ahead; without it the name ends
/// in `_nopf`. With `rms`, x is x·g as a quantizer that leaves the norm to the product
/// writes it ([`crate::quantize::XLoad::NormLater`]): buffer `xn` (f32, each block of 32's
/// sum of the squares of x) after `xd` and parameter `eps` after `cols`; each row's sum is
/// scaled by the row's `1/sqrt(Σ xn / cols + eps)` before the epilogue (the name ends in
/// `_rms`).
pub fn kernel(
    ty: WeightType,
    reduce: Reduction,
    rows_per_team: u32,
    teams: Teams,
    epilogue: Epilogue,
    (f16_view, prefetch, rms): (bool, bool, bool),
) -> Result<Kernel, ShapeError> {
    let (p, units) = format(OP, ty)?;
    let nrows = crate::support::nonzero(OP, "rows per team", rows_per_team)?;
    match epilogue {
        Epilogue::None | Epilogue::Add => {}
        Epilogue::RopeStore(shape) if nrows.is_multiple_of(2) => shape.check()?,
        Epilogue::RopeStore(_) => {
            return Err(ShapeError::NotMultiple {
                op: OP,
                what: "rows per team of a product with rope (rope's pairs of rows)",
                value: nrows as usize,
                multiple: 2,
            })
        }
        Epilogue::Swiglu => return Err(ShapeError::Unsupported {
            op: OP,
            what:
                "SwiGLU after a product on the file's blocks (its quantizer after it computes it)"
                    .into(),
        }),
    }
    let per_block = p.elems / UNIT;
    if !teams.width.is_power_of_two()
        || teams.width > WORKGROUP
        || teams.width < 8
        || !(1..=2).contains(&teams.units)
        || !(1..=2).contains(&teams.steps)
        || !per_block.is_multiple_of(teams.units)
        || !(teams.width * teams.units).is_multiple_of(per_block)
    {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!(
                "teams of {} invocations, {} units a step, {} steps an iteration",
                teams.width, teams.units, teams.steps
            ),
        });
    }
    let mut name = format!("matvec_q8_{ty}_blocks_{}_r{nrows}", reduce.name());
    if teams != Teams::WHOLE {
        name.push_str(&format!(
            "_t{}u{}s{}",
            teams.width, teams.units, teams.steps
        ));
    }
    if f16_view {
        name.push_str("_h");
    }
    match epilogue {
        Epilogue::Add => name.push_str("_add"),
        Epilogue::RopeStore(shape) => name.push_str(&format!("_{}", shape.name())),
        Epilogue::None | Epilogue::Swiglu => {}
    }
    if !prefetch {
        name.push_str("_nopf");
    }
    if rms {
        name.push_str("_rms");
    }
    let k = KernelBuilder::new(&name, [WORKGROUP, 1, 1]);
    let w = k.buffer("w", Scalar::U32, Access::Read);
    let w16 = f16_view.then(|| k.buffer("w16", Scalar::F16, Access::Read));
    let xq = k.buffer("xq", Scalar::U32, Access::Read);
    let xd = k.buffer("xd", Scalar::F32, Access::Read);
    let xn = rms.then(|| k.buffer("xn", Scalar::F32, Access::Read));
    let r = (epilogue == Epilogue::Add).then(|| k.buffer("r", Scalar::F32, Access::Read));
    let rope_in = matches!(epilogue, Epilogue::RopeStore(_)).then(|| RopeOut::declare_inputs(&k));
    let y = rope_in
        .is_none()
        .then(|| k.buffer("y", Scalar::F32, Access::Write));
    let rows = k.param("rows", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let eps = rms.then(|| k.param("eps", Scalar::F32));
    let rope = match (epilogue, rope_in) {
        (Epilogue::RopeStore(shape), Some(bufs)) => Some(RopeOut::declare_outputs(&k, shape, bufs)),
        _ => None,
    };
    let lid = k.local_index();
    let width = teams.width;
    // A team of the whole workgroup keeps the plain indices (the same code as before teams:
    // the index arithmetic moved the output head's Q6_K product by a tenth).
    let (lane, team) = if width == WORKGROUP {
        (lid, k.workgroup_id(0))
    } else {
        (
            lid % k.u32(width),
            k.workgroup_id(0) * k.u32(teams.of_workgroup()) + lid / k.u32(width),
        )
    };
    let row0 = team * k.u32(nrows);
    // Rows past the end read the last row again, so that every invocation reaches the
    // reductions; their sums are not stored.
    let rows_at: Vec<Val> = (0..nrows)
        .map(|i| (row0 + k.u32(i)).min(rows - k.u32(1)))
        .collect();
    let blocks = cols / k.u32(p.elems);
    if prefetch {
        // The team's rows stream into L2 while the dispatch before it (x's quantizer) runs.
        let row_bytes = blocks * k.u32(p.bytes);
        let end = (rows_at[rows_at.len() - 1] + k.u32(1)) * row_bytes;
        prefetch_bytes(&k, (w, 4), (lane, width), (rows_at[0] * row_bytes, end));
    }
    // Each pair's rotation, from settled buffers only: before the wait for the kernel ahead
    // on CUDA.
    let token = k.u32(0);
    let turns: Vec<_> = rope.as_ref().map_or(vec![], |rope| {
        (0..nrows)
            .step_by(2)
            .map(|i| rope.turn(&k, token, row0 + k.u32(i)))
            .collect()
    });
    // The lane's share of the row's sums of squares: the first SQUARES_AHEAD loaded now, so
    // that they arrive while the walk runs, the rest (rows wider than that many per lane)
    // after it.
    let squares = xn.map(|xn| {
        let parts = cols / k.u32(X_BLOCK);
        let ahead: Vec<_> = (0..SQUARES_AHEAD)
            .map(|j| {
                let at = lane + k.u32(j * width);
                k.select(
                    at.lt(parts),
                    k.load(xn, at.min(parts - k.u32(1))),
                    k.f32(0.0),
                )
            })
            .collect();
        (xn, parts, ahead)
    });
    let accs: Vec<_> = (0..nrows).map(|_| k.var("acc", Scalar::F32)).collect();
    // A step is `teams.units` units that follow each other, of one block. A team's steps
    // cover whole blocks, so an invocation keeps its units' place in a block from one step to
    // the next: the loop walks blocks, and what depends on that place (which runs, which
    // scales of the block's header) is computed once, outside it.
    let units_a_step = teams.units;
    let first = lane * k.u32(units_a_step);
    let unit = first % k.u32(per_block);
    let of: Vec<_> = (0..units_a_step)
        .map(|i| if i == 0 { unit } else { unit + k.u32(i) })
        .collect();
    let blocks_a_step = width * units_a_step / per_block;
    let at: Vec<_> = rows_at.iter().map(|&row| ((w, w16), row)).collect();
    k.for_range(
        first / k.u32(per_block),
        blocks,
        blocks_a_step * teams.steps,
        |b0| {
            let mut sums: Vec<_> = accs.iter().map(|a| a.get()).collect();
            for s in 0..teams.steps {
                // An iteration's later step past the row's end reads its last block again,
                // unused.
                let b = if s == 0 {
                    b0
                } else {
                    b0 + k.u32(blocks_a_step * s)
                };
                let at_b = if s == 0 { b } else { b.min(blocks - k.u32(1)) };
                let new = unit_sums(
                    &k,
                    (p, units),
                    &at,
                    (xq, xd, None),
                    (blocks, at_b, &of),
                    &sums,
                );
                sums = if s == 0 {
                    new
                } else {
                    let inside = b.lt(blocks);
                    new.iter()
                        .zip(&sums)
                        .map(|(&n, &o)| k.select(inside, n, o))
                        .collect()
                };
            }
            accs.iter().zip(sums).for_each(|(acc, sum)| acc.set(sum));
        },
    );
    let reducer = Reducer::teams(&k, reduce, width);
    let totals: Vec<_> = accs
        .iter()
        .map(|acc| reducer.reduce(&k, lid, acc.get(), Combine::Sum))
        .collect();
    let totals = match (squares, eps) {
        (Some((xn, parts, ahead)), Some(eps)) => {
            let own = k.var("squares", Scalar::F32);
            own.set(ahead.into_iter().reduce(|a, b| a + b).expect("loads ahead"));
            k.for_range(lane + k.u32(SQUARES_AHEAD * width), parts, width, |i| {
                own.set(own.get() + k.load(xn, i))
            });
            let sum = reducer.reduce(&k, lid, own.get(), Combine::Sum);
            let inv = (sum / cols.cast(Scalar::F32) + eps).rsqrt();
            totals.into_iter().map(|t| t * inv).collect()
        }
        _ => totals,
    };
    let lead = lane.eq(k.u32(0));
    match (y, &rope) {
        (Some(y), _) => {
            for (i, &total) in totals.iter().enumerate() {
                let row = row0 + k.u32(i as u32);
                k.if_(lead & row.lt(rows), || {
                    let v = r.map_or(total, |r| total + k.load(r, row));
                    k.store(y, row, v);
                });
            }
        }
        // Rows come in pairs from an even first row, and a QKV product has an even count.
        (None, Some(rope)) => {
            for (j, (pair, turn)) in totals.chunks_exact(2).zip(&turns).enumerate() {
                let row = row0 + k.u32(2 * j as u32);
                k.if_(lead & row.lt(rows), || {
                    rope.store_pair(&k, (token, row), turn, (pair[0], pair[1]))
                });
            }
        }
        (None, None) => unreachable!("y is declared unless the rope epilogue stores"),
    }
    Ok(k.finish())
}

/// The weights a unit's product reads: the buffer of the file's bytes as `U32` words, its
/// `F16` view where bound, and the row.
pub(crate) type UnitRow<'b> = ((BufferId, Option<BufferId>), Val<'b>);

/// Units `of` (one, or two that follow each other) of block `b` (of a row's `blocks`) of each
/// of `rows` multiplied with x's codes (`xq`, scales `xd`; the row of x starting at element
/// `x0`, else at 0), added to `start`: the new sums, one per row. The rows share x's loads,
/// which depend on the units alone. Two units whose runs share their sub-blocks
/// ([`IntUnits::pairs_share`]) sum their dots before each sub-block's scales apply, once.
pub(crate) fn unit_sums<'b>(
    k: &'b KernelBuilder,
    (p, units): (Packed, IntUnits),
    rows: &[UnitRow<'b>],
    (xq, xd, x0): (BufferId, BufferId, Option<Val<'b>>),
    (blocks, b, of): (Val<'b>, Val<'b>, &[Val<'b>]),
    start: &[Val<'b>],
) -> Vec<Val<'b>> {
    let codes: Vec<_> = rows
        .iter()
        .map(|&((w, _), row)| {
            let base = (row * blocks + b) * k.u32(p.bytes);
            let header = units.header.map(|_| quad_words(k, w, base));
            let of: Vec<_> = of.iter().map(|&u| (units.words)(k, w, base, u)).collect();
            (base, header, of)
        })
        .collect();
    // Each run's x: its first element, its four words, its block's scale and the sum of its
    // codes. The runs' first elements depend on the unit alone, the same for every row.
    let xs: Vec<Vec<_>> = codes[0]
        .2
        .iter()
        .map(|unit| {
            unit.runs
                .iter()
                .map(|&(first, _)| {
                    let e = b * k.u32(p.elems) + first;
                    let e = x0.map_or(e, |x0| x0 + e);
                    // x's codes are a byte each and a run starts at a multiple of 16: its
                    // 16 bytes are one quad.
                    let words = k.load_quad(xq, e / k.u32(16));
                    let sum = code_sum(k, &words);
                    (first, words, k.load(xd, e / k.u32(X_BLOCK)), sum)
                })
                .collect()
        })
        .collect();
    codes
        .iter()
        .zip(rows)
        .zip(start)
        .map(|(((base, header, of), &((w, w16), _)), &sum)| {
            let dots: Vec<Vec<Val>> = of
                .iter()
                .zip(&xs)
                .map(|(unit, xs)| {
                    unit.runs
                        .iter()
                        .zip(xs)
                        .map(|(&(_, words), (_, x, _, _))| {
                            words
                                .iter()
                                .zip(x)
                                .map(|(&c, &v)| c.dot4_i8(v))
                                .reduce(|a, c| a + c)
                                .expect("four words")
                        })
                        .collect()
                })
                .collect();
            // Each run's dot; the unit's where its runs share their scales and x's; the two
            // units' for each run where their runs share sub-blocks.
            let terms: Vec<(Val, Val, Val, Val)> = if units.pairs_share && of.len() == 2 {
                (0..2)
                    .map(|r| {
                        let (first, _, dx, xsum) = xs[0][r];
                        (first, dots[0][r] + dots[1][r], dx, xsum + xs[1][r].3)
                    })
                    .collect()
            } else if units.one_sub {
                dots.iter()
                    .zip(&xs)
                    .map(|(d, x)| (x[0].0, d[0] + d[1], x[0].2, x[0].3 + x[1].3))
                    .collect()
            } else {
                dots.iter()
                    .zip(&xs)
                    .flat_map(|(d, x)| {
                        d.iter()
                            .zip(x)
                            .map(|(&dot, &(first, _, dx, xsum))| (first, dot, dx, xsum))
                    })
                    .collect()
            };
            let mut sum = sum;
            for (first, dot, dx, xsum) in terms {
                let dot = if units.centre == 0 {
                    dot
                } else {
                    dot - k.i32(units.centre) * xsum
                };
                let src = (Bytes::Words(w), w16);
                let sub = first / k.u32(p.sub);
                let scales = match (units.header, header) {
                    (Some(from), Some(words)) => from(k, words, sub),
                    _ => (p.scales)(k, src, *base, sub),
                };
                sum = (scales.d * dx).fma(dot.cast(Scalar::F32), sum);
                if let Some(m) = scales.m {
                    sum = (m * dx).fma(xsum.cast(Scalar::F32), sum);
                }
            }
            sum
        })
        .collect()
}

/// The grid of [`kernel`]: a workgroup per `rows_per_team` rows of each of its teams.
pub fn grid(rows: u32, rows_per_team: u32, teams: Teams) -> [u32; 3] {
    [
        rows.div_ceil(rows_per_team.max(1) * teams.of_workgroup()),
        1,
        1,
    ]
}

mod cases;
pub use cases::{case, cases, rope_case};

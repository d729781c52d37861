//! Builds a matvec kernel's IR: its buffers and parameters, the prefetches, the walk over the
//! rows (in [`super::dot`]), the reduction (in [`super::reduce`]) and the fused epilogues'
//! stores.

use super::dot::{dot_blocked, dot_pairs, dot_quantized};
use super::packed::{dot_packed, dot_packed_blocked};
use super::reduce::{reduce_shared, reduce_subgroup};
use super::{Epilogue, MatvecSpec, Prologue, Reduce, SEGMENT};
use crate::blocks::{BlockFormat, Bytes};
use crate::matvec_attn::{Combined, Input, RopeOut};
use crate::matvec_fused::{self as fused, Norm};
use crate::shape::ShapeError;
use crate::support::{prefetch_bytes, PREFETCH_LINE};
use trine_ir::{Access, Kernel, KernelBuilder, Scalar, Val, Var};

/// The matvec kernel for `spec`. Buffers: `w` (the weights: bytes if quantized, words with
/// [`MatvecSpec::word_codes`]), `w16` (the
/// same memory as f16, with `f16_scales`), `x`, `g` (with [`Prologue::RmsNorm`]), `r` (with
/// [`Epilogue::Add`]), `y`;
/// parameters `rows`, `cols`, `eps` (with [`Prologue::RmsNorm`]); grid [`MatvecSpec::grid`].
pub fn kernel(spec: MatvecSpec) -> Result<Kernel, ShapeError> {
    spec.check()?;
    let (ty, nrows, wg) = (spec.weights, spec.rows_per_workgroup, spec.workgroup);
    let format = BlockFormat::of(ty);
    let mut name = format!("matvec_{ty}_{}_r{nrows}_w{wg}", spec.reduce.name());
    if spec.reads_pairs() {
        name.push_str("_p");
    } else if spec.blocked {
        name.push_str("_b");
    } else if ty.is_quantized() && spec.segment != SEGMENT {
        name.push_str(&format!("_s{}", spec.segment));
    }
    let f16_scales = spec.binds_f16_view();
    if f16_scales {
        name.push_str("_h");
    }
    if spec.reads_words() {
        name.push('u');
    }
    let tpw = spec.tokens_per_workgroup;
    if tpw > 1 {
        name.push_str(&format!("_t{tpw}"));
    }
    name.push_str(&fused::suffix(spec.prologue, spec.epilogue, '_', '_'));
    let k = KernelBuilder::new(&name, [wg, 1, 1]);
    if spec.reduce == Reduce::Subgroup {
        k.require_subgroups();
    }
    let w = k.buffer("w", spec.weights_elem(), Access::Read);
    let w16 = f16_scales.then(|| k.buffer("w16", Scalar::F16, Access::Read));
    let combine = match spec.prologue {
        Prologue::Combine(c) => Some(c),
        _ => None,
    };
    let x_name = if combine.is_some() { "part" } else { "x" };
    let x = k.buffer(x_name, Scalar::F32, Access::Read);
    let g = (spec.prologue == Prologue::RmsNorm).then(|| k.buffer("g", Scalar::F32, Access::Read));
    let r = (spec.epilogue == Epilogue::Add).then(|| k.buffer("r", Scalar::F32, Access::Read));
    let rope_in =
        matches!(spec.epilogue, Epilogue::RopeStore(_)).then(|| RopeOut::declare_inputs(&k));
    let y = rope_in
        .is_none()
        .then(|| k.buffer("y", Scalar::F32, Access::Write));
    let rows = k.param("rows", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let eps = g.map(|_| k.param("eps", Scalar::F32));
    let rope = match (spec.epilogue, rope_in) {
        (Epilogue::RopeStore(shape), Some(bufs)) => Some(RopeOut::declare_outputs(&k, shape, bufs)),
        _ => None,
    };
    let n_tokens = (tpw > 1).then(|| k.param("tokens", Scalar::U32));
    let lid = k.local_index();
    let row0 = k.workgroup_id(0) * k.u32(nrows);
    let group = k.workgroup_id(1);
    // Rows past the end (in the last workgroup) read the last row again instead of branching,
    // so that every invocation reaches the reduction; their sums are never stored. Tokens
    // past the end of the prompt likewise.
    let last = rows - k.u32(1);
    let rows_at: Vec<Val> = (0..nrows).map(|r| (row0 + k.u32(r)).min(last)).collect();
    if let (Some(f), false) = (format, spec.blocked) {
        prefetch_rows(
            &k,
            (&spec, f),
            w,
            cols,
            (rows_at[0], rows_at[rows_at.len() - 1]),
        );
        if let Some(g) = g {
            prefetch_norm(&k, g, cols);
        }
    }
    // One token's rotation, from settled buffers only, right after the prefetches: before the
    // wait for the kernel ahead on CUDA.
    let outputs = spec.outputs();
    let turn = rope.as_ref().filter(|_| tpw == 1).map(|rope| {
        let (_, o) = split_output(&k, lid, outputs, tpw);
        rope.turn(&k, group, row0 + o * k.u32(2))
    });
    let tokens: Vec<Token> = (0..tpw)
        .map(|t| {
            let token = match n_tokens {
                None => group,
                Some(n) => (group * k.u32(tpw) + k.u32(t)).min(n - k.u32(1)),
            };
            Token {
                input: match combine {
                    Some(c) => Input::Combined(Combined::prologue(&k, c, x, wg, (token, t))),
                    None => Input::Plain {
                        x,
                        x0: token * cols,
                    },
                },
                norm: g.zip(eps).map(|(g, eps)| Norm {
                    g,
                    eps,
                    sum_sq: k.var("sum_sq", Scalar::F32),
                }),
                accs: (0..nrows).map(|_| k.var("acc", Scalar::F32)).collect(),
            }
        })
        .collect();
    // Each row of the workgroup with its accumulator, for one token.
    let rows_accs: Vec<(Val, Var)> = rows_at
        .iter()
        .copied()
        .zip(tokens[0].accs.clone())
        .collect();
    let (input, norm) = (&tokens[0].input, &tokens[0].norm);
    if let (true, Some(BlockFormat::Flat(f))) = (spec.reads_pairs(), format) {
        dot_pairs(&k, f, (w, w16), &tokens, cols, &rows_at);
    } else if let (true, Some(BlockFormat::Packed(p))) = (spec.blocked, format) {
        dot_packed_blocked(
            &k,
            p,
            (w, w16),
            (input, norm.as_ref()),
            cols,
            &rows_accs,
            wg,
        );
    } else if let Some(BlockFormat::Packed(p)) = format {
        let bytes = if spec.reads_words() {
            Bytes::Words(w)
        } else {
            Bytes::U8(w)
        };
        dot_packed(
            &k,
            p,
            (bytes, w16),
            (input, norm.as_ref()),
            cols,
            &rows_accs,
            (wg, spec.segment),
        );
    } else if let (true, Some(BlockFormat::Flat(f))) = (spec.blocked, format) {
        dot_blocked(
            &k,
            f,
            (w, w16),
            (input, norm.as_ref()),
            cols,
            &rows_accs,
            wg,
        );
    } else if spec.blocked {
        let bases: Vec<Val> = rows_accs.iter().map(|&(r, _)| r * cols).collect();
        let step = |c: Val<'_>, xv: Val<'_>, keep: Option<Val<'_>>| {
            let xv = norm.as_ref().map_or(xv, |n| n.scale(&k, xv, c));
            for (base, (_, acc)) in bases.iter().zip(&rows_accs) {
                let wv = k.load(w, *base + c).cast(Scalar::F32);
                let sum = wv.fma(xv, acc.get());
                acc.set(keep.map_or(sum, |inside| k.select(inside, sum, acc.get())));
            }
        };
        // Whole chunks of columns, at `chunk·wg + lid`: consecutive invocations, consecutive
        // columns.
        let whole = cols / k.u32(wg);
        k.for_range(k.u32(0), whole, 1, |chunk| {
            let c = chunk * k.u32(wg) + lid;
            step(c, input.load(&k, c), None);
        });
        // The last, partial chunk: invocations past the end read the last column and keep
        // their sums (a select, not a branch).
        k.if_((cols % k.u32(wg)).ne(k.u32(0)), || {
            let at = whole * k.u32(wg) + lid;
            let inside = at.lt(cols);
            let c = at.min(cols - k.u32(1));
            step(
                c,
                k.select(inside, input.load(&k, c), k.f32(0.0)),
                Some(inside),
            );
        });
    } else if let Some(BlockFormat::Flat(f)) = format {
        dot_quantized(
            &k,
            f,
            (w, w16, spec.reads_words()),
            (input, norm.as_ref()),
            cols,
            &rows_accs,
            (wg, spec.segment),
        );
    } else {
        let bases: Vec<Val> = rows_accs.iter().map(|&(r, _)| r * cols).collect();
        k.for_range(lid, cols, wg, |c| {
            let xv = input.load(&k, c);
            let xv = norm.as_ref().map_or(xv, |n| n.scale(&k, xv, c));
            for (base, (_, acc)) in bases.iter().zip(&rows_accs) {
                let wv = k.load(w, *base + c).cast(Scalar::F32);
                acc.set(wv.fma(xv, acc.get()));
            }
        });
    }
    // Per token, its rows' sums and then the sum of squares, reduced as row `nrows`.
    let sums: Vec<Val> = tokens
        .iter()
        .flat_map(|t| {
            let accs = t.accs.iter().map(|a| a.get());
            accs.chain(t.norm.as_ref().map(|n| n.sum_sq.get()))
        })
        .collect();
    // Invocation i stores output i: row i's sum, or SwiGLU's of rows 2i and 2i + 1; with
    // several tokens, output i % outputs of token i / outputs.
    let per_token = spec.reduced_rows();
    let split = |i| split_output(&k, i, outputs, tpw);
    let reads = |i| {
        let (t, o) = split(i);
        let rows = read_rows(&k, &spec, o);
        match tpw {
            1 => rows,
            _ => rows.into_iter().map(|r| r + t * k.u32(per_token)).collect(),
        }
    };
    let totals = match spec.reduce {
        Reduce::Subgroup => reduce_subgroup(&k, &sums, wg, (outputs * tpw, reads)),
        Reduce::Shared => reduce_shared(&k, &sums, wg, (outputs * tpw, reads)),
    };
    let (t, o) = split(lid);
    let token = match tpw {
        1 => group,
        _ => group * k.u32(tpw) + t,
    };
    let inside = n_tokens.map_or(k.bool(true), |n| token.lt(n));
    k.if_(lid.lt(k.u32(outputs * tpw)) & inside, || {
        let totals: Vec<Val> = match (norm, totals.split_last()) {
            (Some(n), Some((&sum_sq, sums))) => {
                let inv_rms = n.inv_rms(sum_sq, cols);
                sums.iter().map(|&t| t * inv_rms).collect()
            }
            _ => totals,
        };
        match (spec.epilogue, y, &rope) {
            (Epilogue::Swiglu, Some(y), _) => {
                let n = rows / k.u32(2);
                let i = k.workgroup_id(0) * k.u32(outputs) + o;
                k.if_(i.lt(n), || {
                    let v = crate::elementwise::silu_ir(&k, totals[0]) * totals[1];
                    k.store(y, token * n + i, v);
                });
            }
            (_, None, Some(rope)) => {
                let row = row0 + o * k.u32(2);
                k.if_(row.lt(rows), || {
                    let turn = turn.unwrap_or_else(|| rope.turn(&k, token, row));
                    rope.store_pair(&k, (token, row), &turn, (totals[0], totals[1]))
                });
            }
            (_, Some(y), _) => {
                let row = row0 + o;
                k.if_(row.lt(rows), || {
                    let at = token * rows + row;
                    k.store(y, at, r.map_or(totals[0], |r| totals[0] + k.load(r, at)));
                });
            }
            (_, None, None) => unreachable!("y is declared unless the rope epilogue stores"),
        }
    });
    Ok(k.finish())
}

/// Prefetches the quantized rows `first..=last` ([`trine_ir::Stmt::Prefetch`]), a cache line
/// of 128 bytes per invocation and step. It is the kernel's first statement, so a GPU that
/// launches the kernel while the one before it still runs (CUDA on sm_90) fetches the weights,
/// which no earlier dispatch writes, in that time: in a decode step every product waits for its
/// x, and would then wait for its weights from memory too.
fn prefetch_rows<'b>(
    k: &'b KernelBuilder,
    (spec, f): (&MatvecSpec, BlockFormat),
    w: trine_ir::BufferId,
    cols: Val<'b>,
    (first, last): (Val<'b>, Val<'b>),
) {
    let row_bytes = (cols / k.u32(f.elems())) * k.u32(f.bytes());
    let bytes = (first * row_bytes, (last + k.u32(1)) * row_bytes);
    let elem = spec.weights_elem().size() as u32;
    prefetch_bytes(k, (w, elem), (k.local_index(), spec.workgroup), bytes);
}

/// Prefetches the norm's weights `g` (`cols` f32) beside the rows ([`prefetch_rows`]): no
/// dispatch writes them either, and they are read once a step, so the stream of a step's
/// weights has pushed them out of L2 by the time the product needs them. Workgroup `i` takes
/// line `i` only: every workgroup prefetching every line (the output head has 12,288
/// workgroups) made decode measurably slower (docs/bench/decode.md).
fn prefetch_norm<'b>(k: &'b KernelBuilder, g: trine_ir::BufferId, cols: Val<'b>) {
    const LINE: u32 = PREFETCH_LINE / 4;
    let lines = (cols + k.u32(LINE - 1)) / k.u32(LINE);
    let wg = k.workgroup_id(0);
    k.if_(k.local_index().eq(k.u32(0)) & wg.lt(lines), || {
        k.prefetch(g, wg * k.u32(LINE))
    });
}

/// Invocation `i`'s (token, output) in a workgroup of `tpw` tokens with `outputs` per token.
fn split_output<'b>(
    k: &'b KernelBuilder,
    i: Val<'b>,
    outputs: u32,
    tpw: u32,
) -> (Val<'b>, Val<'b>) {
    match tpw {
        1 => (k.u32(0), i),
        _ => (i / k.u32(outputs), i % k.u32(outputs)),
    }
}

/// One token of a workgroup: its input, its norm (with its own sum of squares) and its rows'
/// accumulators.
pub(super) struct Token<'b> {
    pub(super) input: Input<'b>,
    pub(super) norm: Option<Norm<'b>>,
    pub(super) accs: Vec<Var<'b>>,
}

/// The rows whose sums the invocation storing output `i` reads: `i`, or SwiGLU's gate and up
/// rows `2i` and `2i + 1`; then the norm's sum of squares, row `rows_per_workgroup`.
fn read_rows<'b>(k: &'b KernelBuilder, spec: &MatvecSpec, i: Val<'b>) -> Vec<Val<'b>> {
    let mut rows = match spec.epilogue {
        Epilogue::Swiglu | Epilogue::RopeStore(_) => {
            let gate = i * k.u32(2);
            vec![gate, gate + k.u32(1)]
        }
        Epilogue::None | Epilogue::Add => vec![i],
    };
    if spec.prologue == Prologue::RmsNorm {
        rows.push(k.u32(spec.rows_per_workgroup));
    }
    rows
}

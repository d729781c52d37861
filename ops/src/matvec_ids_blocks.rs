//! [`matvec_ids`](crate::matvec_ids)'s products for GPUs on 8-bit x and the file's blocks of
//! the formats whose codes come as words of bytes (Q4_K, Q5_K, Q6_K): the experts' rows are
//! multiplied unit by unit with packed integer dots, as
//! [`matvec_q8_blocks`](crate::matvec_q8_blocks) multiplies a dense product's
//! ([`unit_sums`](crate::matvec_q8_blocks::unit_sums), shared). x comes quantized in
//! [`X_BLOCKS`]: the token's rows for [`Out::Swiglu`], each chosen expert's own activation
//! for [`Out::WeightedSum`].
//!
//! An expert's row is short (Qwen3-30B-A3B's are 2048 and 768 elements: 64 and 24 units), so
//! one row leaves most of a workgroup idle. A workgroup takes `rows_per_workgroup` rows and,
//! for [`Out::WeightedSum`], every chosen expert of its token: its invocations stride over
//! the (row, expert, unit) triples, each adding its unit's sum into its row's accumulator
//! (weighted by the routing for [`Out::WeightedSum`]), and the workgroup reduces each row's.
//!
//! Bound: [`crate::matvec::NMSE`] against the f64 product of the dequantized weights and the
//! dequantized x (the integer dots are exact; what remains is f32 rounding).

use crate::blocks::{self, UNIT};
use crate::case::*;
use crate::elementwise::silu_ir;
use crate::matvec_ids::{reference, Inputs, MatvecIds, Out};
use crate::matvec_q8::{quantize_x, XBlocks, X_BLOCK};
use crate::matvec_q8_blocks::{format, unit_sums, UnitRow};
use crate::shape::ShapeError;
use crate::support::{seed, Combine, Reducer, Reduction};
use trine_gguf::quant::{quantize, WeightType};
use trine_ir::{Access, Kernel, KernelBuilder, Scalar, Val};

const OP: &str = "matvec_ids_blocks";

/// Invocations of a workgroup.
pub const WORKGROUP: u32 = 128;

/// How x is quantized for these products: as for the dense ones on the file's blocks.
pub const X_BLOCKS: XBlocks = crate::matvec_q8_blocks::X_BLOCKS;

/// Whether the products take `ty` experts in rows of `cols`: a format with units, rows of
/// whole blocks.
pub fn takes(ty: WeightType, cols: u32) -> bool {
    crate::matvec_q8_blocks::takes(ty, cols)
}

/// Rows a workgroup takes for experts' rows of `cols` `ty` weights: as many (one, two or
/// four) as keep the (row, unit) pairs of one chosen expert within a workgroup's
/// invocations; one for [`Out::WeightedSum`], whose chosen experts fill it.
pub fn rows_per_workgroup(ty: WeightType, out: Out, cols: u32) -> u32 {
    let units = format(OP, ty).map_or(1, |(p, _)| (cols / p.elems * (p.elems / UNIT)).max(1));
    match out {
        Out::Swiglu => [4, 2]
            .into_iter()
            .find(|&r| r * units <= WORKGROUP)
            .unwrap_or(1),
        Out::WeightedSum => 1,
    }
}

/// [`Out::Swiglu`]: `[row blocks, used, tokens]`; [`Out::WeightedSum`]: `[row blocks,
/// tokens, 1]`.
pub fn grid(s: &MatvecIds, rows_per_workgroup: u32) -> [u32; 3] {
    let blocks = s.rows.div_ceil(rows_per_workgroup.max(1));
    match s.out {
        Out::Swiglu => [blocks, s.used, s.tokens],
        Out::WeightedSum => [blocks, s.tokens, 1],
    }
}

/// Buffers, reads first, each matrix as `U32` words followed by its `F16` view where
/// `f16_view`. [`Out::Swiglu`]: `gate`, `up`, `ids`, `xq`, `xd`, then `y`.
/// [`Out::WeightedSum`]: `w`, `ids`, `weights`, `xq`, `xd`, `r`, then `y`. Parameters
/// rows, cols, used ([`MatvecIds::params`]); grid [`grid`].
pub fn kernel(
    ty: WeightType,
    out: Out,
    how: Reduction,
    rows_per_workgroup: u32,
    f16_view: bool,
) -> Result<Kernel, ShapeError> {
    let (p, units) = format(OP, ty)?;
    let nrows = crate::support::nonzero(OP, "rows per workgroup", rows_per_workgroup)?;
    let mut name = format!("{OP}_{ty}_{}_{}_r{nrows}", out.name(), how.name());
    if f16_view {
        name.push_str("_h");
    }
    let k = KernelBuilder::new(&name, [WORKGROUP, 1, 1]);
    let matrix = |name: &str| {
        let w = k.buffer(name, Scalar::U32, Access::Read);
        let w16 = f16_view.then(|| k.buffer(&format!("{name}16"), Scalar::F16, Access::Read));
        (w, w16)
    };
    let mats = match out {
        Out::Swiglu => vec![matrix("gate"), matrix("up")],
        Out::WeightedSum => vec![matrix("w")],
    };
    let ids = k.buffer("ids", Scalar::U32, Access::Read);
    let route = (out == Out::WeightedSum).then(|| k.buffer("weights", Scalar::F32, Access::Read));
    let xq = k.buffer("xq", Scalar::U32, Access::Read);
    let xd = k.buffer("xd", Scalar::F32, Access::Read);
    let r = (out == Out::WeightedSum).then(|| k.buffer("r", Scalar::F32, Access::Read));
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let rows = k.param("rows", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let used = k.param("used", Scalar::U32);
    let lid = k.local_index();
    let row0 = k.workgroup_id(0) * k.u32(nrows);
    let blocks = cols / k.u32(p.elems);
    let per_block = p.elems / UNIT;
    let row_units = blocks * k.u32(per_block);
    // Each row's sums, one per matrix.
    let accs: Vec<Vec<_>> = (0..nrows)
        .map(|_| {
            mats.iter()
                .map(|_| {
                    let v = k.var("acc", Scalar::F32);
                    v.set(k.f32(0.0));
                    v
                })
                .collect()
        })
        .collect();
    // Adds `sums` (one per matrix) times `scale` into row `rr`'s accumulators.
    let add = |rr, sums: Vec<Val>, scale: Option<Val>| {
        for (i, row) in accs.iter().enumerate() {
            // A row keeps only its own units' sums: an invocation's units span rows.
            let mine = (nrows > 1).then(|| k.u32(i as u32).eq(rr));
            for (acc, &s) in row.iter().zip(&sums) {
                let s = scale.map_or(s, |w| w * s);
                let s = mine.map_or(s, |m| k.select(m, s, k.f32(0.0)));
                acc.set(acc.get() + s);
            }
        }
    };
    // The unit's sums for the chosen expert at `at` (token × used + slot), on x's row `x0`.
    let unit = |at, rr, x0, u| {
        let row = (row0 + rr).min(rows - k.u32(1));
        let wrow = k.load(ids, at) * rows + row;
        let at_rows: Vec<UnitRow> = mats.iter().map(|&m| (m, wrow)).collect();
        let zeros = vec![k.f32(0.0); mats.len()];
        let (b, unit) = (u / k.u32(per_block), u % k.u32(per_block));
        unit_sums(
            &k,
            (p, units),
            &at_rows,
            (xq, xd, Some(x0)),
            (blocks, b, &[unit]),
            &zeros,
        )
    };
    let t = match out {
        Out::Swiglu => {
            let (slot, t) = (k.workgroup_id(1), k.workgroup_id(2));
            let at = t * used + slot;
            k.for_range(lid, row_units * k.u32(nrows), WORKGROUP, |i| {
                let (rr, u) = (i / row_units, i % row_units);
                add(rr, unit(at, rr, t * cols, u), None);
            });
            t
        }
        Out::WeightedSum => {
            let t = k.workgroup_id(1);
            let per_row = used * row_units;
            k.for_range(lid, per_row * k.u32(nrows), WORKGROUP, |i| {
                let (rr, rest) = (i / per_row, i % per_row);
                let at = t * used + rest / row_units;
                let weight = k.load(route.expect("declared above"), at);
                add(rr, unit(at, rr, at * cols, rest % row_units), Some(weight));
            });
            t
        }
    };
    let reducer = Reducer::new(&k, how);
    for (i, row_accs) in accs.iter().enumerate() {
        let totals: Vec<_> = row_accs
            .iter()
            .map(|a| reducer.reduce(&k, lid, a.get(), Combine::Sum))
            .collect();
        let row = row0 + k.u32(i as u32);
        k.if_(lid.eq(k.u32(0)) & row.lt(rows), || match out {
            Out::Swiglu => {
                let at = t * used + k.workgroup_id(1);
                k.store(y, at * rows + row, silu_ir(&k, totals[0]) * totals[1]);
            }
            Out::WeightedSum => {
                let at = t * rows + row;
                let resid = k.load(r.expect("declared above"), at);
                k.store(y, at, resid + totals[0]);
            }
        });
    }
    Ok(k.finish())
}

/// x as the kernel reads it after the host quantized it, in f32 (exact: an f16 scale times
/// a byte).
pub(crate) fn dequantized(words: &[u32], scales: &[f32]) -> Vec<f32> {
    words
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .enumerate()
        .map(|(i, b)| f32::from(b as i8) * scales[i / X_BLOCK as usize])
        .collect()
}

/// A conformance case: random experts, x quantized on the host, routing as
/// [`crate::matvec_ids::case`] draws it, against [`reference`] on the dequantized x.
pub fn case(
    s: MatvecIds,
    how: Reduction,
    rows_per_workgroup: u32,
    f16_view: bool,
) -> Result<Case, ShapeError> {
    s.check()?;
    let (p, _) = format(OP, s.weights)?;
    if !takes(s.weights, s.cols) {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!(
                "rows of {} {} weights (whole blocks of {} only)",
                s.cols, s.weights, p.elems
            ),
        });
    }
    let view = if f16_view { "_h" } else { "" };
    let name = format!(
        "{OP}/{}/{}/{}_r{rows_per_workgroup}{view}/t{}e{}k{}/{}x{}",
        s.weights,
        s.out.name(),
        how.name(),
        s.tokens,
        s.experts,
        s.used,
        s.rows,
        s.cols
    );
    let mut rng = Rng::new(seed(&name));
    let n = (s.experts * s.rows * s.cols) as usize;
    let mats: Vec<Vec<u8>> = (0..if s.out == Out::Swiglu { 2 } else { 1 })
        .map(|_| quantize(s.weights, &rng.f32s(n, -1.0, 1.0)))
        .collect::<Result<_, _>>()?;
    let (t, k) = (s.tokens as usize, s.used as usize);
    let ids = crate::matvec_ids::draw_ids(&mut rng, s.tokens, s.experts, s.used);
    let x_rows = match s.out {
        Out::Swiglu => t,
        Out::WeightedSum => t * k,
    };
    let xq = quantize_x(&rng.f32s(x_rows * s.cols as usize, -1.0, 1.0), X_BLOCKS);
    let x = dequantized(&xq.words, &xq.scales);
    let weights = crate::matvec_ids::draw_weights(&mut rng, t, k);
    let resid = rng.f32s(t * s.rows as usize, -2.0, 2.0);
    let refs: Vec<&[u8]> = mats.iter().map(Vec::as_slice).collect();
    let inputs = Inputs {
        ids: &ids,
        weights: &weights,
        x: &x,
        r: &resid,
    };
    let want = reference(&s, &refs, &inputs)?;
    let main = kernel(s.weights, s.out, how, rows_per_workgroup, f16_view)?;
    let mut c = Case::new(name, main, grid(&s, rows_per_workgroup));
    let names: &[&str] = match s.out {
        Out::Swiglu => &["gate", "up"],
        Out::WeightedSum => &["w"],
    };
    c = with_weights(c, mats.iter().zip(names.iter().copied()), f16_view);
    c = c.input("ids", Scalar::U32, u32_bytes(&ids));
    if s.out == Out::WeightedSum {
        c = c.input("weights", Scalar::F32, f32_bytes(&weights));
    }
    c = c
        .input("xq", Scalar::U32, bytemuck::cast_slice(&xq.words).to_vec())
        .input("xd", Scalar::F32, f32_bytes(&xq.scales));
    if s.out == Out::WeightedSum {
        c = c.input("r", Scalar::F32, f32_bytes(&resid));
    }
    c = c
        .output("y", Scalar::F32, vec![0; want.len() * 4], want)
        .params(s.params())
        .bound(crate::matvec::NMSE);
    if how == Reduction::Subgroup {
        c = c.fallback(kernel(
            s.weights,
            s.out,
            Reduction::Shared,
            rows_per_workgroup,
            f16_view,
        )?);
    }
    Ok(c)
}

/// `c` with each of the stacked matrices as the input its name says, padded to words, and as
/// its `F16` view (`NAME16`) where the kernel binds one.
pub(crate) fn with_weights<'m>(
    mut c: Case,
    mats: impl Iterator<Item = (&'m Vec<u8>, &'m str)>,
    f16_view: bool,
) -> Case {
    for (m, name) in mats {
        let padded = blocks::pad_to_words(m.clone());
        c = c.input(name, Scalar::U32, padded.clone());
        if f16_view {
            c = c.input(&format!("{name}16"), Scalar::F16, padded);
        }
    }
    c
}

/// Each format with units and both outputs: decode and prompt shapes, rows of one and of
/// several blocks, row counts the workgroup's rows do not divide, both reductions, the
/// scales read both ways, and Qwen3-30B-A3B's shape (8 of 128 experts, rows of 2048 and 768
/// elements) for one decode step.
pub fn cases() -> Vec<Case> {
    let shape = |weights, out, tokens, experts, used, rows, cols| MatvecIds {
        weights,
        out,
        tokens,
        experts,
        used,
        rows,
        cols,
    };
    let (sw, ws) = (Out::Swiglu, Out::WeightedSum);
    let (sg, sh) = (Reduction::Subgroup, Reduction::Shared);
    let (q4, q5, q6) = (WeightType::Q4_K, WeightType::Q5_K, WeightType::Q6_K);
    let shapes = [
        (shape(q4, sw, 1, 5, 2, 6, 768), sg, 4, true),
        (shape(q4, ws, 3, 5, 2, 7, 512), sh, 1, false),
        (shape(q4, sw, 3, 4, 3, 5, 256), sh, 2, false),
        (shape(q4, ws, 1, 4, 3, 3, 256), sg, 2, true),
        (shape(q5, sw, 2, 3, 2, 3, 512), sg, 1, true),
        (shape(q5, ws, 2, 3, 2, 4, 768), sg, 1, false),
        (shape(q6, sw, 2, 4, 2, 9, 256), sh, 4, true),
        (shape(q6, ws, 1, 4, 3, 5, 512), sg, 1, true),
        (shape(q4, sw, 1, 128, 8, 4, 2048), sg, 2, true),
        (shape(q6, ws, 1, 128, 8, 3, 768), sg, 1, true),
    ];
    shapes
        .into_iter()
        .map(|(s, how, per, view)| case(s, how, per, view))
        .collect::<Result<_, _>>()
        .expect("the fixed shapes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A format without units is refused by name, and Qwen3-30B-A3B's rows get the
    /// workgroup rows that fill a workgroup.
    #[test]
    fn formats_without_units_are_refused() {
        let e = kernel(WeightType::Q4_1, Out::Swiglu, Reduction::Shared, 1, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("q4_1") && e.contains(OP), "{e}");
        assert!(takes(WeightType::Q6_K, 768) && !takes(WeightType::Q8_0, 768));
        assert_eq!(rows_per_workgroup(WeightType::Q4_K, Out::Swiglu, 2048), 2);
        assert_eq!(rows_per_workgroup(WeightType::Q4_K, Out::Swiglu, 768), 4);
        assert_eq!(rows_per_workgroup(WeightType::Q4_K, Out::Swiglu, 4096), 1);
    }

    #[test]
    fn every_case_matches_its_reference_on_the_interpreter() {
        for c in cases() {
            if let Err(e) = c.check_reference() {
                panic!("{}: {e}", c.name);
            }
        }
    }
}

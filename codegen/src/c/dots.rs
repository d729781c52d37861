//! Sums of packed 8-bit dot products taken over every invocation at once, between regions.
//!
//! Inside a region GCC vectorises a packed dot product as a call of its 16-lane (8-lane)
//! version, and saves every vector register around each call: a quantized product's loop
//! spent more on those saves than on the products. A sum of at least [`MIN_DOTS`] of them
//! (a block of codes against x's) instead ends its region like a subgroup operation: the
//! region stores the operands that vary by invocation to arrays, and the sum runs over the
//! workgroup's invocations sixteen (eight) at a time as inline `vpdpbusd` (`vpmaddubsw` and
//! `vpmaddwd` on AVX2), its uniform operands broadcast. Only sums in control flow every
//! invocation takes are moved; the sums are wrapping integer ones, so the result is the
//! same whichever way it is grouped.

use super::uniform::Uniformity;
use crate::c_family::{dot_sum, expr_name};
use std::collections::{HashMap, HashSet};
use trine_ir::{ExprId, Info, Kernel};

/// Fewest dot products a sum needs to be taken between regions: the four one call of the
/// prelude's `trine_dot16u8i8` takes, below which the call costs less than the arrays.
const MIN_DOTS: usize = 4;

/// A sum of packed dot products of the kernel.
pub(super) struct DotSum {
    /// Each product's operands; with `unsigned_first`, the first has bytes below 128.
    pub pairs: Vec<(ExprId, ExprId)>,
    pub unsigned_first: bool,
}

/// The sums to take between regions, by the expression of each: I32 sums of at least
/// [`MIN_DOTS`] packed dot products that vary by invocation, each the largest such sum (one
/// that is part of a larger one is taken with it).
pub(super) fn sums(k: &Kernel, info: &Info, uniform: &Uniformity) -> HashMap<ExprId, DotSum> {
    let found: HashMap<ExprId, DotSum> = (0..k.exprs.len() as u32)
        .map(ExprId)
        .filter(|&e| !uniform.expr(e))
        .filter_map(|e| {
            let (pairs, unsigned_first) = dot_sum(k, info, e)?;
            (pairs.len() >= MIN_DOTS).then_some((
                e,
                DotSum {
                    pairs,
                    unsigned_first,
                },
            ))
        })
        .collect();
    let inner: HashSet<ExprId> = found.keys().flat_map(|&e| k.expr(e).operands()).collect();
    found
        .into_iter()
        .filter(|(e, _)| !inner.contains(e))
        .collect()
}

/// How the C code reads one operand of a product for a group of invocations.
pub(super) enum Operand {
    /// A per-invocation array, by name.
    Array(String),
    /// A workgroup-uniform scalar, by name.
    Scalar(String),
}

/// The C statements that compute sum `id` of `wg` invocations into its array, `operands` as
/// `sum.pairs` lists them: each line with its depth of nesting.
pub(super) fn lines(
    id: ExprId,
    sum: &DotSum,
    operands: &[(Operand, Operand)],
    wg: u32,
) -> Vec<(usize, String)> {
    nest(text(id, sum, operands, wg))
}

/// Each line's depth: one more inside each brace; every branch of the `#if` opens the same loop
/// over the invocations left, which the lines after `#endif` close.
fn nest(lines: Vec<String>) -> Vec<(usize, String)> {
    let (mut depth, mut at_if) = (0usize, 0usize);
    lines
        .into_iter()
        .map(|line| {
            if line.starts_with("#if") {
                at_if = depth;
                return (0, line);
            }
            if line.starts_with('#') {
                depth = at_if + usize::from(line.starts_with("#endif"));
                return (0, line);
            }
            if line.starts_with('}') {
                depth -= 1;
            }
            let out = (depth, line);
            if out.1.ends_with('{') {
                depth += 1;
            }
            out
        })
        .collect()
}

fn text(id: ExprId, sum: &DotSum, operands: &[(Operand, Operand)], wg: u32) -> Vec<String> {
    let out = format!("w_{}", expr_name(id));
    let vector = |bits: u32, op: &Operand| {
        let (load, set) = match bits {
            512 => ("_mm512_loadu_si512((const void*)", "_mm512_set1_epi32"),
            _ => ("_mm256_loadu_si256((const __m256i*)", "_mm256_set1_epi32"),
        };
        match op {
            Operand::Array(a) => format!("{load}&{a}[g])"),
            Operand::Scalar(s) => format!("{set}((int){s})"),
        }
    };
    let mut l = vec![];
    l.push("{".to_string());
    l.push("#if defined(__AVX512F__) && defined(__AVX512VNNI__)".to_string());
    l.push(format!(
        "for (uint32_t g = 0u; g + 16u <= {wg}u; g += 16u) {{"
    ));
    l.push("__m512i acc = _mm512_setzero_si512();".to_string());
    if sum.unsigned_first {
        for (a, b) in operands {
            l.push(format!(
                "acc = _mm512_dpbusd_epi32(acc, {}, {});",
                vector(512, a),
                vector(512, b)
            ));
        }
        l.push(format!("_mm512_storeu_si512((void*)&{out}[g], acc);"));
    } else {
        // Signed by signed as `vpdpbusd` does it: the first side moved by 128 into unsigned
        // bytes, and 128 times the second side's bytes taken back out.
        l.push("__m512i off = _mm512_setzero_si512();".to_string());
        l.push("const __m512i m = _mm512_set1_epi32((int)0x80808080u);".to_string());
        for (a, b) in operands {
            let b = vector(512, b);
            l.push(format!(
                "acc = _mm512_dpbusd_epi32(acc, _mm512_xor_si512({}, m), {b});",
                vector(512, a)
            ));
            l.push(format!("off = _mm512_dpbusd_epi32(off, m, {b});"));
        }
        l.push(format!(
            "_mm512_storeu_si512((void*)&{out}[g], _mm512_sub_epi32(acc, off));"
        ));
    }
    l.push("}".to_string());
    l.push(format!(
        "for (uint32_t l = {wg}u / 16u * 16u; l < {wg}u; l++) {{"
    ));
    l.push("#elif defined(__AVX2__)".to_string());
    l.push(format!(
        "for (uint32_t g = 0u; g + 8u <= {wg}u; g += 8u) {{"
    ));
    l.push("__m256i acc = _mm256_setzero_si256();".to_string());
    for (a, b) in operands {
        let (a, b) = (vector(256, a), vector(256, b));
        // The prelude's 8-lane products, which GCC inlines here (a plain call, not one the
        // vectoriser made).
        let f = if sum.unsigned_first {
            "_ZGVdN8vv_trine_dot4u8i8"
        } else {
            "_ZGVdN8vv_trine_dot4i8"
        };
        l.push(format!("acc = _mm256_add_epi32(acc, {f}({a}, {b}));"));
    }
    l.push(format!("_mm256_storeu_si256((__m256i*)&{out}[g], acc);"));
    l.push("}".to_string());
    l.push(format!(
        "for (uint32_t l = {wg}u / 8u * 8u; l < {wg}u; l++) {{"
    ));
    l.push("#else".to_string());
    l.push(format!("for (uint32_t l = 0u; l < {wg}u; l++) {{"));
    l.push("#endif".to_string());
    let f = if sum.unsigned_first {
        "trine_dot4u8i8"
    } else {
        "trine_dot4i8"
    };
    let scalar = |op: &Operand| match op {
        Operand::Array(a) => format!("{a}[l]"),
        Operand::Scalar(s) => s.clone(),
    };
    let terms: Vec<String> = operands
        .iter()
        .map(|(a, b)| format!("(unsigned int){f}({}, {})", scalar(a), scalar(b)))
        .collect();
    l.push(format!("{out}[l] = (int)({});", terms.join(" + ")));
    l.push("}".to_string());
    l.push("}".to_string());
    l
}

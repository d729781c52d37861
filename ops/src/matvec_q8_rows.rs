//! [`matvec_q8`](crate::matvec_q8)'s product for CPUs: one row per invocation, 16 rows per
//! workgroup, the weights interleaved at upload so that the 16 rows' code words for one block
//! lie side by side. The C lowering turns the workgroup's invocations into the lanes of one
//! loop, so each load of codes is one vector load across 16 rows, x's words (the same for
//! every row) are scalars, and a packed dot product is one call of its 16-lane version
//! (`vpdpbusd` where the CPU has AVX512-VNNI), with no reduction across invocations at all.
//! This is the layout llama.cpp's CPU backend repacks quantized weights into for the same
//! reason.
//!
//! [`interleave`] lays out a matrix of GGUF blocks for it: for each group of 16 rows and each
//! block column, the code words of the 16 rows (word `j` of every row, then word `j + 1`,
//! …), then one word per row holding its block's f16 scale in the low half and Q4_1's
//! minimum in the high half (0 for the others). Q4_1's 20-byte blocks keep their size; Q4_0
//! grows from 18 to 20 bytes and Q8_0 from 34 to 36.
//!
//! Bound: as [`matvec_q8`](crate::matvec_q8)'s, f32 rounding over exact integer dots.

use crate::blocks::{f16_finite_bits_to_f32, BlockFormat, Flat, Offset};
use crate::case::*;
use crate::matvec_q8::{
    block_dot, block_sum, needs_x_sum, quantize_x, reference, weight_format, Q8Activations, OP,
    X_BLOCK,
};
use crate::shape::ShapeError;
use trine_gguf::quant::{quantize, WeightType};
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar};

/// Rows per workgroup, one per invocation.
pub const LANES: u32 = 16;

/// How far ahead of the block being multiplied its weights are prefetched, in bytes. On
/// SmolLM2's output head (49152 × 576 Q8_0, 32 MB, read from memory at every token), the C
/// function alone on one core of an AVX2 CPU was faster with a prefetch than without, and
/// fastest at 2304 of the 1152, 2304 and 4608 bytes ahead tried (docs/bench/cpu.md records
/// the build that took 2 KiB).
const PREFETCH_BYTES: u32 = 2048;

/// Bytes a block of `f` takes in [`interleave`]'s layout: its code words and a word of scales.
fn interleaved_block_bytes(f: Flat) -> usize {
    4 * (f.code_words() as usize + 1)
}

/// Bytes of `rows` × `cols` weights of `ty` in [`interleave`]'s layout; 0 for a type without
/// blocks, which it does not take.
pub fn interleaved_bytes(ty: WeightType, rows: usize, cols: usize) -> usize {
    weight_format(ty).map_or(0, |f| {
        rows * (cols / f.elems as usize) * interleaved_block_bytes(f)
    })
}

fn check_shape(ty: WeightType, rows: usize, cols: usize) -> Result<Flat, ShapeError> {
    let f = weight_format(ty)?;
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
    multiple("cols", cols, f.elems as usize)?;
    Ok(f)
}

/// Whether the product takes `rows` × `cols` weights of `ty`: a format whose blocks are as
/// long as x's, whole groups of rows and whole blocks.
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
    let f = check_shape(ty, rows, cols)?;
    let (block_bytes, codes_at) = (f.bytes as usize, f.codes_at as usize);
    let blocks = cols / f.elems as usize;
    let expected = rows * blocks * block_bytes;
    if w.len() != expected {
        return Err(ShapeError::Mismatch {
            op: OP,
            what: "bytes of weights",
            expected,
            found: w.len(),
        });
    }
    let lanes = LANES as usize;
    let words = f.code_words() as usize;
    let mut out = Vec::with_capacity(rows * blocks * interleaved_block_bytes(f));
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
                let min = match f.offset {
                    Offset::Min { at } => [bl[at as usize], bl[at as usize + 1]],
                    _ => [0, 0],
                };
                out.extend_from_slice(&[bl[0], bl[1], min[0], min[1]]);
            }
        }
    }
    Ok(out)
}

/// The product for `ty` weights in [`interleave`]'s layout, for `tokens_per_workgroup` tokens
/// of x at once (a prompt's: each block's codes are loaded once for all of them). Buffers `w`
/// (U32), `xq`, `xd`, `xs` (as [`quantize_x`] makes them, token after token), with `add` also
/// `r` (F32 `[tokens × rows]`, added to the product: a residual connection), then `y` (F32
/// `[tokens × rows]`); parameters `rows`, `cols`, `tokens`; grid [`grid`].
pub fn kernel(ty: WeightType, add: bool, tokens_per_workgroup: u32) -> Result<Kernel, ShapeError> {
    let f = weight_format(ty)?;
    let tpw = tokens_per_workgroup;
    crate::support::nonzero(OP, "tokens per workgroup", tpw)?;
    let words = f.code_words();
    let mut name = format!("matvec_q8_{ty}_rows{LANES}");
    if tpw > 1 {
        name.push_str(&format!("_t{tpw}"));
    }
    if add {
        name.push_str("_add");
    }
    let k = KernelBuilder::new(&name, [LANES, 1, 1]);
    let w = k.buffer("w", Scalar::U32, Access::Read);
    let xq = k.buffer("xq", Scalar::U32, Access::Read);
    let xd = k.buffer("xd", Scalar::F32, Access::Read);
    let xs = k.buffer("xs", Scalar::F32, Access::Read);
    let r = add.then(|| k.buffer("r", Scalar::F32, Access::Read));
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let rows = k.param("rows", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let tokens = k.param("tokens", Scalar::U32);
    let lid = k.local_index();
    let group = k.workgroup_id(0);
    let blocks = cols / k.u32(f.elems);
    // Token j of the workgroup; the last token stands in for those past the end, whose sums
    // are not stored.
    let token = |j: u32| k.workgroup_id(1) * k.u32(tpw) + k.u32(j);
    let read_token = |j: u32| token(j).min(tokens - k.u32(1));
    let accs: Vec<_> = (0..tpw).map(|_| k.var("acc", Scalar::F32)).collect();
    k.for_range(k.u32(0), blocks, 1, |b| {
        let base = (group * blocks + b) * k.u32((words + 1) * LANES) + lid;
        let codes: Vec<_> = (0..words)
            .map(|j| k.load(w, base + k.u32(j * LANES)))
            .collect();
        let scales = k.load(w, base + k.u32(words * LANES));
        let d = f16_finite_bits_to_f32(&k, scales & k.u32(0xffff));
        let m = f
            .has_min()
            .then(|| f16_finite_bits_to_f32(&k, scales >> k.u32(16)));
        for (j, acc) in accs.iter().enumerate() {
            let xb = read_token(j as u32) * blocks + b;
            let x_words = X_BLOCK / 4;
            let x: Vec<_> = (0..x_words)
                .map(|i| k.load(xq, xb * k.u32(x_words) + k.u32(i)))
                .collect();
            let dot = block_dot(&k, f, &codes, &x);
            let dx = k.load(xd, xb);
            let sx = needs_x_sum(f).then(|| k.load(xs, xb));
            acc.set(acc.get() + block_sum(&k, f, (d, m), (dx, sx), dot));
        }
        // The workgroup's blocks are consecutive, and the next workgroup's follow them: the
        // hardware's prefetcher alone left the output head at a third of the copy's bandwidth.
        // One hint per cache line of a block of 16 rows, clamped to the buffer's last word.
        let block_words = (words + 1) * LANES;
        let ahead = PREFETCH_BYTES.div_ceil(4 * block_words);
        let next = (group * blocks + b + k.u32(ahead)) * k.u32(block_words);
        let last = rows * blocks * k.u32(words + 1) - k.u32(1);
        for line in (0..block_words).step_by(16) {
            k.prefetch(w, (next + k.u32(line)).min(last));
        }
    });
    let row = group * k.u32(LANES) + lid;
    for (j, acc) in accs.iter().enumerate() {
        let t = token(j as u32);
        k.if_(t.lt(tokens), || {
            let at = t * rows + row;
            let sum = r.map_or(acc.get(), |r| acc.get() + k.load(r, at));
            k.store(y, at, sum);
        });
    }
    Ok(k.finish())
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
        .map(|_| quantize_x(&rng.f32s(c, -1.0, 1.0)))
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
        .filter(|&t| weight_format(t).is_ok())
    {
        for (rows, cols) in [(16, 32), (576, 576), (32, 4096)] {
            out.push(case(ty, rows, cols).expect("valid shapes"));
        }
        out.push(case_with(ty, 64, 1536, true, (1, 1)).expect("valid shapes"));
        // A prompt of 11 tokens, 8 to a workgroup: a full workgroup and a partial one.
        out.push(case_with(ty, 32, 576, true, (11, 8)).expect("valid shapes"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A type the product does not take is refused naming it and exactly the types it takes:
    /// the flat formats whose blocks are as long as x's.
    #[test]
    fn a_type_it_does_not_take_is_refused_with_what_it_takes() {
        for ty in [WeightType::F32, WeightType::Q4_K, WeightType::Q5_0] {
            let e = kernel(ty, false, 1).unwrap_err().to_string();
            assert!(e.contains(ty.name()), "{e}");
            assert!(e.contains("(it takes q8_0, q4_0, q4_1)"), "{e}");
        }
        assert!(takes(WeightType::Q4_1, 16, 64) && !takes(WeightType::Q4_K, 16, 256));
    }
}

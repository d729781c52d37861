//! x quantized to 8 bits for the products with 8-bit activations ([`crate::matvec_q8`]'s
//! blocks, as [`quantize_x`] makes them on the host), computed from what the node before the
//! product writes ([`XLoad`]): x itself, or what a node before the quantizer would have
//! written (SwiGLU of gate/up pairs, x normalised, split attention combined), so that a
//! decode step skips that node's dispatch, which on a GPU costs more than its arithmetic.
//!
//! Bound: the codes exactly, the scales and sums to one f16 step ([`quantize_case`]: Vulkan
//! may round a division differently). A folded load computes its values in f32 as the node it
//! replaces does; the cases keep every scaled value away from a rounding half
//! ([`away_from_halves`]), so that no ulp of difference can move a code.

use crate::attention_split::{Combining, SplitAttention};
use crate::blocks::round_to_f16;
use crate::case::*;
use crate::matvec_q8::{quantize_x, quantize_x_later, Q8Activations, XBlocks, X_BLOCK};
use crate::rms_norm::{self, inv_rms, RmsNorm};
use crate::shape::ShapeError;
use crate::support::{nonzero, Combine, Reducer, Reduction};
use trine_ir::{Access, BufferId, Kernel, KernelBuilder, ParamValue, Scalar, Val};

const OP: &str = "quantize";

/// Invocations a GPU's quantizer that folds the RMS norm in takes: each of its workgroups
/// sums the whole row's squares, which 128 invocations walk in a quarter of the round trips
/// to memory that 32 took.
pub const NORM_INVOCATIONS: u32 = 128;

/// What the quantizer computes x from: x itself, or what a node before it would have written,
/// saving that node's dispatch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum XLoad {
    /// x as it is.
    None,
    /// SwiGLU of x's interleaved gate/up pairs, as
    /// [`swiglu_pairs_kernel`](crate::elementwise::swiglu_pairs_kernel) computes it: element
    /// `i` is `silu(x[2i])·x[2i + 1]`.
    Swiglu,
    /// x's rows (`cols` wide) normalised as [`crate::rms_norm`] does it: buffer `g` (f32,
    /// `[cols]`, the norm's weight) after `x`, parameters `cols` and `eps`. Every workgroup sums
    /// its row's squares itself, a row of a few thousand values read from cache.
    Norm,
    /// x scaled by a norm's weight (buffer `g` after `x`, parameter `cols`), into Q8_0 blocks
    /// only, with f32 scales: the row's 1/rms is left to the product after it
    /// ([`crate::matvec_q8_blocks`] with `rms`), which works it out from each block's sum of
    /// the squares of x, written to buffer `xn` (f32, one per block) after `xs`. The quantizer
    /// then waits on no reduction over the row, which a decode step's critical path carried
    /// once per norm.
    NormLater,
    /// x is split attention's partials (`[tokens × heads × splits × (head_dim + 2)]`, as
    /// [`crate::attention_split`] writes them), combined as its combine kernel does; each
    /// element's invocation folds its head's splits itself.
    Combine { head_dim: u32, splits: u32 },
}

impl XLoad {
    fn suffix(self) -> String {
        match self {
            XLoad::None => String::new(),
            XLoad::Swiglu => "_swiglu".into(),
            XLoad::Norm => "_norm".into(),
            XLoad::NormLater => "_norm_later".into(),
            XLoad::Combine { head_dim, splits } => format!("_combine_d{head_dim}_s{splits}"),
        }
    }
}

/// The grid of [`kernel`] for `elements` of x: a workgroup per block.
pub fn grid(blocks: XBlocks, elements: u32) -> [u32; 3] {
    [elements / blocks.elems(), 1, 1]
}

/// Quantizes x (f32 `[tokens × cols]`) into `xq` (U32, a word per 4 elements), `xd` and
/// `xs` (f32, one per 32 elements) as [`XBlocks`] says, from x as `load` says: a workgroup
/// per block, an invocation per element, and at least `invocations` (those past the block
/// only sum a folded norm's row of squares; the name then ends in `_wg` and the count). The
/// block's maximum |x| (and a folded norm's sum of squares) is a workgroup reduction as
/// `reduce` says: a shared-memory tree, or subgroups' reductions and one step through shared
/// memory (the name then ends in `_subgroup`); a maximum is exact whatever the order. An
/// invocation per 32 elements sums their codes (an integer below 2^24 in magnitude, exact in
/// f32) and one per word packs four. Consecutive invocations read consecutive x values, which
/// the C lowering loads as vectors; one invocation per block read each block with a gather
/// per element, which GCC then ran in scalar code (measured slower on SmolLM2's quantize
/// nodes on a CPU: docs/bench/cpu.md).
pub fn kernel(
    blocks: XBlocks,
    load: XLoad,
    invocations: u32,
    reduce: Reduction,
) -> Result<Kernel, ShapeError> {
    if let XLoad::Combine { head_dim, splits } = load {
        nonzero(OP, "combined head_dim", head_dim)?;
        nonzero(OP, "combined splits", splits)?;
    }
    if load == XLoad::NormLater && blocks != XBlocks::Q8_0 {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!(
                "a norm left to the product into {} blocks (it writes q8_0)",
                blocks.name()
            ),
        });
    }
    let n = blocks.elems();
    let wg = n.max(invocations);
    if wg > n && load != XLoad::Norm {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!("{wg} invocations a block of {n} without a norm's row to sum"),
        });
    }
    let mut name = format!("quantize_{}{}", blocks.name(), load.suffix());
    if wg > n {
        name.push_str(&format!("_wg{wg}"));
    }
    if reduce == Reduction::Subgroup {
        name.push_str("_subgroup");
    }
    let k = KernelBuilder::new(&name, [wg, 1, 1]);
    let x_name = match load {
        XLoad::Combine { .. } => "part",
        _ => "x",
    };
    let x = k.buffer(x_name, Scalar::F32, Access::Read);
    let normed = matches!(load, XLoad::Norm | XLoad::NormLater);
    let g = normed.then(|| k.buffer("g", Scalar::F32, Access::Read));
    let xq = k.buffer("xq", Scalar::U32, Access::Write);
    let xd = k.buffer("xd", Scalar::F32, Access::Write);
    let xs = k.buffer("xs", Scalar::F32, Access::Write);
    let xn = (load == XLoad::NormLater).then(|| k.buffer("xn", Scalar::F32, Access::Write));
    let lid = k.local_index();
    let b = k.workgroup_id(0);
    // Invocations past the block's elements read its last one and count as zeros.
    let mine = (wg > n).then(|| lid.lt(k.u32(n)));
    let at = b * k.u32(n) + mine.map_or(lid, |_| lid.min(k.u32(n - 1)));
    let reducer = Reducer::new(&k, reduce);
    let mut squares = None;
    let v = match (load, g) {
        (XLoad::Swiglu, _) => {
            let gate = k.load(x, at * k.u32(2));
            crate::elementwise::silu_ir(&k, gate) * k.load(x, at * k.u32(2) + k.u32(1))
        }
        (XLoad::Norm, Some(g)) => {
            let cols = k.param("cols", Scalar::U32);
            let eps = k.param("eps", Scalar::F32);
            let (own, weight, base) = normed_element(&k, (x, g), at, b * k.u32(n), cols);
            let scale = inv_rms(&k, &reducer, (x, base), cols, eps);
            let v = own * scale * weight;
            mine.map_or(v, |mine| k.select(mine, v, k.f32(0.0)))
        }
        (XLoad::NormLater, Some(g)) => {
            let cols = k.param("cols", Scalar::U32);
            let (own, weight, _) = normed_element(&k, (x, g), at, b * k.u32(n), cols);
            squares = Some(reducer.reduce(&k, lid, own * own, Combine::Sum));
            own * weight
        }
        (XLoad::Combine { head_dim, splits }, _) => {
            let d = k.u32(head_dim);
            Combining::of(&k, x, (head_dim, splits), at / d).element(&k, at % d)
        }
        _ => k.load(x, at),
    };
    // Starting from 0 as the host's fold does: a block of NaN only gives a scale of 0.
    let amax = reducer
        .reduce(&k, lid, v.abs(), Combine::Max)
        .max(k.f32(0.0));
    let some = amax.gt(k.f32(0.0));
    let id = k.select(some, k.f32(127.0) / amax, k.f32(0.0));
    // ggml's nearest_int: the integer sits in the low mantissa bits of v·id + 1.5·2²³.
    let rounded = (v * id + k.f32(12_582_912.0)).bitcast(Scalar::U32) & k.u32(0x007f_ffff);
    let q = rounded.bitcast(Scalar::I32) - k.i32(0x0040_0000);
    let codes = k.shared("codes", Scalar::I32, n);
    match mine {
        Some(mine) => k.if_(mine, || k.store_shared(codes, lid, q)),
        None => k.store_shared(codes, lid, q),
    }
    k.barrier();
    let d = amax / k.f32(127.0);
    let scale = match blocks {
        // x not yet normalised may lie past f16's range; the scale stays f32.
        XBlocks::Q8_0 if load == XLoad::NormLater => d,
        XBlocks::Q8_0 | XBlocks::Q8_1 => round_to_f16(&k, d),
        XBlocks::Q8_K => k.select(some, k.f32(1.0) / id, k.f32(0.0)),
    };
    k.if_(lid.lt(k.u32(n / 4)), || {
        let word = (0..4u32).fold(k.u32(0), |w, byte| {
            let c = k
                .load_shared(codes, lid * k.u32(4) + k.u32(byte))
                .bitcast(Scalar::U32);
            w | ((c & k.u32(255)) << k.u32(8 * byte))
        });
        k.store(xq, b * k.u32(n / 4) + lid, word);
    });
    if let (Some(xn), Some(squares)) = (xn, squares) {
        k.if_(lid.eq(k.u32(0)), || k.store(xn, b, squares));
    }
    k.if_(lid.lt(k.u32(n / X_BLOCK)), || {
        let first = lid * k.u32(X_BLOCK);
        let sum = (0..X_BLOCK)
            .map(|e| k.load_shared(codes, first + k.u32(e)))
            .reduce(|a, c| a + c)
            .expect("a block has elements")
            .cast(Scalar::F32);
        let at = b * k.u32(n / X_BLOCK) + lid;
        k.store(xd, at, scale);
        k.store(
            xs,
            at,
            match blocks {
                XBlocks::Q8_1 => round_to_f16(&k, d * sum),
                XBlocks::Q8_0 | XBlocks::Q8_K => scale * sum,
            },
        );
    });
    Ok(k.finish())
}

/// Element `at` of x and its norm weight, for a block starting at element `first` of rows of
/// `cols`, and where the block's row starts.
fn normed_element<'b>(
    k: &'b KernelBuilder,
    (x, g): (BufferId, BufferId),
    at: Val<'b>,
    first: Val<'b>,
    cols: Val<'b>,
) -> (Val<'b>, Val<'b>, Val<'b>) {
    // A block lies in one row: cols is a multiple of the block.
    let base = first / cols * cols;
    // The norm's weight is the model's, written by no dispatch: on CUDA its element is read
    // before the wait for the product ahead, off the step's critical path.
    k.settled(g);
    k.prefetch(g, at - base);
    let weight = k.load(g, at - base);
    (k.load(x, at), weight, base)
}

/// The quantizing kernel against [`quantize_x`]: the codes exactly, the scales and sums to
/// within one f16 step of one of them. Vulkan lets a division be 2.5 ulp off (NVIDIA's driver
/// gave Q8_K scales an ulp off, NMSE 4e-18), and a Q8_0 scale an ulp off can round to the
/// neighbouring f16, a step of at most 2⁻¹⁰ of it: NMSE (2⁻¹⁰)²/32 over this case's 32 or
/// more scales.
fn quantize_case(blocks: XBlocks, cols: u32) -> Case {
    let mut rng = Rng::new(u64::from(cols));
    let mut x = rng.f32s(cols as usize, -3.0, 3.0);
    // A block of zeros (scale 0), one with a single large value, and values v·id (here v, as
    // id is 1) that fall on a half (ties go to even: 0.5 → 0, 1.5 → 2, -2.5 → -2).
    let n = blocks.elems() as usize;
    x[n..2 * n].fill(0.0);
    x[2 * n] = 100.0;
    x[3 * n..4 * n].fill(0.0);
    x[3 * n..3 * n + 4].copy_from_slice(&[127.0, 0.5, 1.5, -2.5]);
    let q = quantize_x(&x, blocks);
    let case = Case::new(
        format!("quantize_{}/{cols}", blocks.name()),
        kernel(blocks, XLoad::None, blocks.elems(), Reduction::Shared).expect("a valid load"),
        grid(blocks, cols),
    )
    .input("x", Scalar::F32, f32_bytes(&x));
    expect(case, &q)
}

/// [`quantize_case`]'s bound on scales and sums.
const ONE_F16_STEP: f64 = 1.0 / (1024.0 * 1024.0 * 32.0);

/// A quantizer case's outputs: `q`'s codes exactly, its scales and sums to [`ONE_F16_STEP`].
fn expect(case: Case, q: &Q8Activations) -> Case {
    case.output_exact(
        "xq",
        Scalar::U32,
        vec![0; q.words.len() * 4],
        q.words.iter().map(|&v| f64::from(v)).collect(),
    )
    .output(
        "xd",
        Scalar::F32,
        vec![0; q.scales.len() * 4],
        q.scales.iter().map(|&v| f64::from(v)).collect(),
    )
    .output(
        "xs",
        Scalar::F32,
        vec![0; q.sums.len() * 4],
        q.sums.iter().map(|&v| f64::from(v)).collect(),
    )
    .bound(ONE_F16_STEP)
}

/// Nudges `x` until no value of `computed(x)` scaled by its block's `127/max|v|` lies within
/// 0.02 of a half, where a device's f32 arithmetic (`exp`, `rsqrt` a few ulp off, sums in
/// another order) could round it to the other code: `nudge(x, i)` moves element `i` of the
/// computed values by about 1% (and so, sometimes, its block's scale and its neighbours).
/// Returns the computed values the case expects.
fn away_from_halves(
    x: &mut [f32],
    n: usize,
    computed: impl Fn(&[f32]) -> Vec<f32>,
    nudge: impl Fn(&mut [f32], usize),
) -> Vec<f32> {
    loop {
        let v = computed(x);
        let mut moved = false;
        for (i, block) in v.chunks(n).enumerate() {
            let amax = block.iter().fold(0f32, |m, e| m.max(e.abs()));
            for (j, &e) in block.iter().enumerate() {
                let t = (e * (127.0 / amax)).abs();
                if (t - t.floor() - 0.5).abs() < 0.02 {
                    nudge(x, i * n + j);
                    moved = true;
                }
            }
        }
        if !moved {
            return v;
        }
    }
}

/// The quantizer with SwiGLU folded in, on `tokens` rows of `cols` outputs, against SwiGLU
/// computed in f64 and quantized by [`quantize_x`].
fn quantize_swiglu_case(blocks: XBlocks, tokens: u32, cols: u32) -> Case {
    let mut rng = Rng::new(u64::from(cols) + 7);
    let mut x = rng.f32s(2 * (cols * tokens) as usize, -3.0, 3.0);
    let computed = |x: &[f32]| -> Vec<f32> {
        x.chunks(2)
            .map(|p| {
                let (gate, up) = (f64::from(p[0]), f64::from(p[1]));
                (gate / (1.0 + (-gate).exp()) * up) as f32
            })
            .collect()
    };
    let n = blocks.elems() as usize;
    let v = away_from_halves(&mut x, n, computed, |x, i| x[2 * i + 1] *= 1.01);
    let q = quantize_x(&v, blocks);
    let case = Case::new(
        format!("quantize_{}_swiglu/{tokens}x{cols}", blocks.name()),
        kernel(blocks, XLoad::Swiglu, blocks.elems(), Reduction::Shared).expect("a valid load"),
        grid(blocks, tokens * cols),
    )
    .input("x", Scalar::F32, f32_bytes(&x));
    expect(case, &q)
}

/// The quantizer with the RMS norm folded in, on `tokens` rows of `cols`, at least
/// `invocations` a workgroup, against [`rms_norm::reference`] quantized by [`quantize_x`].
fn quantize_norm_case(
    blocks: XBlocks,
    tokens: u32,
    cols: u32,
    (invocations, reduce): (u32, Reduction),
) -> Case {
    let mut rng = Rng::new(u64::from(cols) + 11);
    let mut x = rng.f32s((cols * tokens) as usize, -2.0, 2.0);
    let g = rng.f32s(cols as usize, 0.5, 1.5);
    let shape = RmsNorm {
        rows: tokens,
        cols,
        eps: 1e-5,
    };
    let computed = |x: &[f32]| -> Vec<f32> {
        let y = rms_norm::reference(&shape, x, &g).expect("the case's shape");
        y.iter().map(|&v| v as f32).collect()
    };
    let n = blocks.elems() as usize;
    let v = away_from_halves(&mut x, n, computed, |x, i| x[i] *= 1.01);
    let q = quantize_x(&v, blocks);
    let kernel = kernel(blocks, XLoad::Norm, invocations, reduce).expect("a valid load");
    let case = Case::new(
        format!("{}/{tokens}x{cols}", kernel.name),
        kernel,
        grid(blocks, tokens * cols),
    )
    .input("x", Scalar::F32, f32_bytes(&x))
    .input("g", Scalar::F32, f32_bytes(&g))
    .params(vec![ParamValue::U32(cols), ParamValue::F32(shape.eps)]);
    expect(case, &q)
}

/// The quantizer that leaves the norm to the product, on `tokens` rows of `cols`, against
/// [`quantize_x_later`]: codes exactly, scales and sums of squares to [`ONE_F16_STEP`].
fn quantize_norm_later_case(tokens: u32, cols: u32, reduce: Reduction) -> Case {
    let mut rng = Rng::new(u64::from(cols) + 17);
    let mut x = rng.f32s((cols * tokens) as usize, -2.0, 2.0);
    let g = rng.f32s(cols as usize, 0.5, 1.5);
    let scaled = |x: &[f32]| -> Vec<f32> {
        x.iter()
            .enumerate()
            .map(|(i, &e)| e * g[i % cols as usize])
            .collect()
    };
    let n = XBlocks::Q8_0.elems() as usize;
    away_from_halves(&mut x, n, scaled, |x, i| x[i] *= 1.01);
    let (q, squares) = quantize_x_later(&x, &g);
    let kernel = kernel(XBlocks::Q8_0, XLoad::NormLater, n as u32, reduce).expect("a valid load");
    let case = Case::new(
        format!("{}/{tokens}x{cols}", kernel.name),
        kernel,
        grid(XBlocks::Q8_0, tokens * cols),
    )
    .input("x", Scalar::F32, f32_bytes(&x))
    .input("g", Scalar::F32, f32_bytes(&g))
    .params(vec![ParamValue::U32(cols)]);
    expect(case, &q).output(
        "xn",
        Scalar::F32,
        vec![0; squares.len() * 4],
        squares.iter().map(|&v| f64::from(v)).collect(),
    )
}

/// The quantizer with split attention's combine folded in, on `tokens` tokens of `heads`
/// heads, against [`crate::attention_split::reference_combine`] quantized by [`quantize_x`].
fn quantize_combine_case(blocks: XBlocks, tokens: u32, heads: u32, head_dim: u32) -> Case {
    let splits = 3;
    let shape = SplitAttention {
        tokens,
        heads,
        kv_heads: heads,
        head_dim,
        splits,
    };
    let mut rng = Rng::new(u64::from(heads * head_dim) + 13);
    let width = (head_dim + 2) as usize;
    let mut part = rng.f32s((tokens * heads * splits) as usize * width, -1.0, 1.0);
    for (i, split) in part.chunks_mut(width).enumerate() {
        split[head_dim as usize] = rng.f32s(1, -2.0, 2.0)[0];
        split[head_dim as usize + 1] = 0.5 + (i % 3) as f32;
    }
    let computed = |p: &[f32]| -> Vec<f32> {
        let y = crate::attention_split::reference_combine(&shape, p).expect("the case's shape");
        y.iter().map(|&v| v as f32).collect()
    };
    let d = head_dim as usize;
    // Every split's accumulator of the element: the combined value scales with them.
    let nudge = |p: &mut [f32], i: usize| {
        let (row, e) = (i / d, i % d);
        for s in 0..splits as usize {
            p[(row * splits as usize + s) * width + e] *= 1.01;
        }
    };
    let v = away_from_halves(&mut part, blocks.elems() as usize, computed, nudge);
    let q = quantize_x(&v, blocks);
    let load = XLoad::Combine { head_dim, splits };
    let case = Case::new(
        format!(
            "quantize_{}_combine/{tokens}x{heads}x{head_dim}",
            blocks.name()
        ),
        kernel(blocks, load, blocks.elems(), Reduction::Shared).expect("a valid load"),
        grid(blocks, tokens * heads * head_dim),
    )
    .input("part", Scalar::F32, f32_bytes(&part));
    expect(case, &q)
}

/// Each quantizer at 4096 columns, and at 1024 (Q8_K's four blocks of 256, the fewest the
/// case's special blocks need); with SwiGLU folded in, on three rows of 1024; with the norm,
/// on two rows of 1024, on a block's invocations and on [`NORM_INVOCATIONS`] where that is
/// more, its sums in shared memory and by subgroup; with the combine, two tokens of eight
/// heads of 64 (a Q8_K block spans four heads).
pub fn cases() -> Vec<Case> {
    let mut out = vec![];
    for b in [XBlocks::Q8_0, XBlocks::Q8_1, XBlocks::Q8_K] {
        out.extend([
            quantize_case(b, 4096),
            quantize_case(b, 1024),
            quantize_swiglu_case(b, 3, 1024),
            quantize_norm_case(b, 2, 1024, (b.elems(), Reduction::Shared)),
            quantize_norm_case(b, 2, 1024, (b.elems(), Reduction::Subgroup)),
            quantize_combine_case(b, 2, 8, 64),
        ]);
        if b == XBlocks::Q8_0 {
            for how in [Reduction::Shared, Reduction::Subgroup] {
                out.push(quantize_norm_later_case(2, 1024, how));
            }
        }
        if NORM_INVOCATIONS > b.elems() {
            for how in [Reduction::Shared, Reduction::Subgroup] {
                out.push(quantize_norm_case(b, 2, 1024, (NORM_INVOCATIONS, how)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// More invocations than a block's elements only where a norm's row gives them work.
    #[test]
    fn extra_invocations_without_a_norm_are_refused() {
        let e = kernel(
            XBlocks::Q8_0,
            XLoad::Swiglu,
            NORM_INVOCATIONS,
            Reduction::Shared,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("128 invocations a block of 32"),
            "{e}"
        );
        let wide = kernel(
            XBlocks::Q8_0,
            XLoad::Norm,
            NORM_INVOCATIONS,
            Reduction::Subgroup,
        )
        .expect("a norm's row");
        assert_eq!(
            (wide.name.as_str(), wide.workgroup_size),
            ("quantize_q8_0_norm_wg128_subgroup", [128, 1, 1])
        );
        let k = kernel(
            XBlocks::Q8_K,
            XLoad::Norm,
            NORM_INVOCATIONS,
            Reduction::Shared,
        )
        .expect("a norm's row");
        assert_eq!(
            (k.name.as_str(), k.workgroup_size),
            ("quantize_q8_k_norm", [256, 1, 1])
        );
    }
}

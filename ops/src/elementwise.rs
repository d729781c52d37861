//! Element-wise kernels the executor runs, one element per invocation:
//! - `swiglu_pairs`: `y[i] = silu(x[2i])·x[2i + 1]` with `silu(x) = x / (1 + e^-x)`
//!   (llama.cpp's FFN, `ggml_swiglu_split`, on gate and up rows stacked in pairs);
//! - `geglu_pairs`: `y[i] = gelu(x[2i])·x[2i + 1]` with GELU's tanh form
//!   `gelu(x) = x/2·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))` (Gemma's FFN, `ggml_geglu_split`);
//! - `swiglu_halves`: the same on a token's row of all gate values then all up values, what
//!   a product over a file's fused gate/up tensor (Phi-3's `ffn_up.weight`) writes;
//! - `copy`: f32 → f16, f16 → f32 and f32 → f32 (a conversion rounds to nearest even).
//!
//! Bounds: the copies are exact ([`NMSE_EXACT`]); SwiGLU and GeGLU use the default 1e-7: their
//! f32 error is a few ulp of `exp` or `tanh` plus a handful of roundings, a relative error below
//! 1e-6 per element and so an NMSE below 1e-12; the bound leaves a factor of 10^5. llama.cpp's
//! CPU GeGLU reads GELU from a table of f16 inputs and outputs (`GGML_GELU_FP16`), a relative
//! error near 1e-3; trine computes the formula, as ggml's GPU backends do.

use super::shape::ShapeError;
use super::support::{elements, expect_len, multiple_of, nonzero, seed, Float};
use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar, Val};

/// Invocations per workgroup.
pub const WG: u32 = 256;

/// Checks an element count and returns the grid that covers it.
pub fn grid(n: u32) -> Result<[u32; 3], ShapeError> {
    nonzero("elementwise", "n", n)?;
    elements("elementwise", "n", &[n])?;
    Ok([n.div_ceil(WG), 1, 1])
}

/// `x / (1 + e^-x)`: the silu every kernel emits (the fused SwiGLU of the matvec too), so that
/// fused and unfused ops round alike.
pub(crate) fn silu_ir<'b>(k: &'b KernelBuilder, x: Val<'b>) -> Val<'b> {
    x / (k.f32(1.0) + (-x).exp())
}

/// SwiGLU of interleaved pairs: `y[i] = silu(x[2i])·x[2i + 1]`, what a product over gate and
/// up rows stacked in pairs produces (the executor's `w_gate_up`), for a product whose SwiGLU
/// runs after it instead of in its epilogue. Buffers: `x`, `y` f32. Params: n (outputs).
pub fn swiglu_pairs_kernel() -> Kernel {
    glu_pairs_kernel(Glu::Swiglu)
}

/// `y[i] = act(x[2i])·x[2i + 1]`, the gated unit `glu` of interleaved pairs.
fn glu_pairs_kernel(glu: Glu) -> Kernel {
    let k = KernelBuilder::new(&format!("{}_pairs_f32", glu.name()), [WG, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let gate = k.load(x, i * k.u32(2));
        let up = k.load(x, i * k.u32(2) + k.u32(1));
        k.store(y, i, glu.ir(&k, gate, up));
    });
    k.finish()
}

/// `√(2/π)` and the cubic term's coefficient of GELU's tanh form, as ggml writes them.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_COEF_A: f32 = 0.044_715;

/// GELU's tanh form in the IR: `x/2·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²)))`.
fn gelu_ir<'b>(k: &'b KernelBuilder, x: Val<'b>) -> Val<'b> {
    let inner = k.f32(SQRT_2_OVER_PI) * x * (k.f32(1.0) + k.f32(GELU_COEF_A) * x * x);
    k.f32(0.5) * x * (k.f32(1.0) + inner.tanh())
}

/// GeGLU of interleaved pairs: `y[i] = gelu(x[2i])·x[2i + 1]` on a product over gate and up
/// rows stacked in pairs, as [`swiglu_pairs_kernel`] with GELU for silu. Buffers: `x`, `y` f32.
/// Params: n (outputs).
pub fn geglu_pairs_kernel() -> Kernel {
    glu_pairs_kernel(Glu::Geglu)
}

/// The activation of a gated unit's gate: SiLU (SwiGLU) or GELU's tanh form (GeGLU), as the
/// pairs kernels and a product's epilogue ([`crate::matmul_tiles`]) apply it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Glu {
    Swiglu,
    Geglu,
}

impl Glu {
    pub fn name(self) -> &'static str {
        match self {
            Glu::Swiglu => "swiglu",
            Glu::Geglu => "geglu",
        }
    }

    /// `act(gate)·up` in the IR, as the unfused kernels compute it.
    pub(crate) fn ir<'b>(self, k: &'b KernelBuilder, gate: Val<'b>, up: Val<'b>) -> Val<'b> {
        match self {
            Glu::Swiglu => silu_ir(k, gate) * up,
            Glu::Geglu => gelu_ir(k, gate) * up,
        }
    }

    /// `act(gate)·up` in f64.
    pub fn reference(self, gate: f64, up: f64) -> f64 {
        match self {
            Glu::Swiglu => silu(gate) * up,
            Glu::Geglu => gelu(gate) * up,
        }
    }
}

/// How a product's gate and up rows lie, and so where SwiGLU finds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GateUp {
    /// Row pairs (gate i, up i): the executor's stacking of separate gate and up tensors,
    /// which a product's epilogue or the quantizer after it can combine.
    Pairs,
    /// All gate rows, then all up rows: a fused tensor as the file holds it, combined by
    /// [`swiglu_halves_kernel`].
    Halves,
}

/// SwiGLU of each token's row of `ff` gate values then `ff` up values:
/// `y[t·ff + i] = silu(x[2t·ff + i])·x[2t·ff + ff + i]`. Buffers: `x`, `y` f32. Params: n
/// (outputs, a multiple of ff), ff.
pub fn swiglu_halves_kernel() -> Kernel {
    let k = KernelBuilder::new("swiglu_halves_f32", [WG, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let ff = k.param("ff", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let gate_at = (i / ff) * ff * k.u32(2) + i % ff;
        let gate = k.load(x, gate_at);
        let up = k.load(x, gate_at + ff);
        k.store(y, i, silu_ir(&k, gate) * up);
    });
    k.finish()
}

/// [`swiglu_halves_kernel`] rounded to f16 as it writes, for a product on f16 tiles after it
/// (which reads its x so): four outputs an invocation, their gate and up values a quad load
/// each. `ff` a multiple of 4 ([`swiglu_halves_rounded_check`]). Buffers: `x` (f32 bits as
/// `U32` quads), `y` f16. Params: n, ff. Grid [`swiglu_halves_rounded_grid`].
pub fn swiglu_halves_rounded_kernel() -> Kernel {
    let k = KernelBuilder::new("swiglu_halves_f16_quads", [WG, 1, 1]);
    let x = k.buffer("x", Scalar::U32, Access::Read);
    let y = k.buffer("y", Scalar::F16, Access::Write);
    let n = k.param("n", Scalar::U32);
    let ff = k.param("ff", Scalar::U32);
    let q = k.global_id(0);
    k.if_(q.lt(n >> k.u32(2)), || {
        let i = q << k.u32(2);
        let gate_at = (i / ff) * ff * k.u32(2) + i % ff;
        let quad = |at: Val<'_>| {
            k.load_quad(x, at >> k.u32(2))
                .map(|v| v.bitcast(Scalar::F32))
        };
        let (gate, up) = (quad(gate_at), quad(gate_at + ff));
        for (j, (g, u)) in gate.into_iter().zip(up).enumerate() {
            let v = silu_ir(&k, g) * u;
            k.store(y, i + k.u32(j as u32), v.cast(Scalar::F16));
        }
    });
    k.finish()
}

/// Whether [`swiglu_halves_rounded_kernel`] takes rows of `ff` outputs: quads of whole rows.
pub fn swiglu_halves_rounded_check(ff: u32) -> Result<(), ShapeError> {
    nonzero("swiglu_halves", "ff", ff)?;
    multiple_of("swiglu_halves", "ff", ff, 4).map(|_| ())
}

/// A workgroup per [`WG`] quads of [`swiglu_halves_rounded_kernel`]'s `n` outputs.
pub fn swiglu_halves_rounded_grid(n: u32) -> Result<[u32; 3], ShapeError> {
    grid(n.div_ceil(4))
}

/// A [`geglu_pairs_kernel`] case of `n` outputs.
pub fn geglu_pairs_case(n: u32) -> Result<Case, ShapeError> {
    let grid = grid(n)?;
    let name = format!("geglu_pairs/f32/{n}");
    let mut r = Rng::new(seed(&name));
    let x = activation_inputs(&mut r, 2 * n as usize);
    let (gate, up): (Vec<f32>, Vec<f32>) = x.chunks(2).map(|p| (p[0], p[1])).unzip();
    let want = reference_geglu(&gate, &up)?;
    Ok(Case::new(name, geglu_pairs_kernel(), grid)
        .input("x", Scalar::F32, f32_bytes(&x))
        .output("y", Scalar::F32, vec![0; n as usize * 4], want)
        .params(vec![ParamValue::U32(n)]))
}

/// A [`swiglu_halves_kernel`] case of `tokens` rows of `ff` outputs, or of
/// [`swiglu_halves_rounded_kernel`] where `out` is f16 (judged against the reference rounded
/// so).
pub fn swiglu_halves_case(tokens: u32, ff: u32, out: Float) -> Result<Case, ShapeError> {
    nonzero("swiglu_halves", "ff", ff)?;
    elements("swiglu_halves", "tokens × 2·ff", &[tokens, ff, 2])?;
    let n = tokens * ff;
    let (name, kernel, grid, x_elem) = match out {
        Float::F32 => (
            format!("swiglu_halves/f32/{tokens}x{ff}"),
            swiglu_halves_kernel(),
            grid(n)?,
            Scalar::F32,
        ),
        _ => {
            swiglu_halves_rounded_check(ff)?;
            (
                format!("swiglu_halves/f32->{}/{tokens}x{ff}", out.name()),
                swiglu_halves_rounded_kernel(),
                swiglu_halves_rounded_grid(n)?,
                Scalar::U32,
            )
        }
    };
    let mut r = Rng::new(seed(&name));
    let x = activation_inputs(&mut r, 2 * n as usize);
    let (mut gate, mut up) = (vec![], vec![]);
    for row in x.chunks(2 * ff as usize) {
        gate.extend_from_slice(&row[..ff as usize]);
        up.extend_from_slice(&row[ff as usize..]);
    }
    let mut want = reference_swiglu(&gate, &up)?;
    if out == Float::F16 {
        want = want.iter().map(|&v| out.round(v)).collect();
    }
    let y = out.scalar();
    Ok(Case::new(name, kernel, grid)
        .input("x", x_elem, f32_bytes(&x))
        .output("y", y, vec![0; n as usize * y.size()], want)
        .params(vec![ParamValue::U32(n), ParamValue::U32(ff)]))
}

/// A [`swiglu_pairs_kernel`] case of `n` outputs.
pub fn swiglu_pairs_case(n: u32) -> Result<Case, ShapeError> {
    let grid = grid(n)?;
    let name = format!("swiglu_pairs/f32/{n}");
    let mut r = Rng::new(seed(&name));
    let x = activation_inputs(&mut r, 2 * n as usize);
    let (gate, up): (Vec<f32>, Vec<f32>) = x.chunks(2).map(|p| (p[0], p[1])).unzip();
    let want = reference_swiglu(&gate, &up)?;
    Ok(Case::new(name, swiglu_pairs_kernel(), grid)
        .input("x", Scalar::F32, f32_bytes(&x))
        .output("y", Scalar::F32, vec![0; n as usize * 4], want)
        .params(vec![ParamValue::U32(n)]))
}

/// Buffers: `x` of `from`, `y` of `to`. Params: n, `x_at`, `y_at`: `y[y_at + i] = x[x_at + i]`.
/// The offsets serve the graph: the KV cache is written at the position of the tokens appended,
/// and the output head reads the last token's row, offsets a binding cannot always take
/// because of its alignment. The same type copies.
pub fn copy_kernel(from: Float, to: Float) -> Kernel {
    let name = format!("copy_{}_{}", from.name(), to.name());
    let k = KernelBuilder::new(&name, [WG, 1, 1]);
    let x = k.buffer("x", from.scalar(), Access::Read);
    let y = k.buffer("y", to.scalar(), Access::Write);
    let n = k.param("n", Scalar::U32);
    let x_at = k.param("x_at", Scalar::U32);
    let y_at = k.param("y_at", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let v = k.load(x, x_at + i);
        k.store(
            y,
            y_at + i,
            if from == to { v } else { v.cast(to.scalar()) },
        );
    });
    k.finish()
}

/// `x / (1 + e^-x)` in f64.
pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// `silu(gate)·up` element by element, in f64.
pub fn reference_swiglu(gate: &[f32], up: &[f32]) -> Result<Vec<f64>, ShapeError> {
    expect_len("swiglu", "up", gate.len(), up.len())?;
    Ok(gate
        .iter()
        .zip(up)
        .map(|(&g, &u)| silu(f64::from(g)) * f64::from(u))
        .collect())
}

/// GELU's tanh form in f64, with ggml's constants.
pub fn gelu(x: f64) -> f64 {
    let c = f64::from(SQRT_2_OVER_PI);
    0.5 * x * (1.0 + (c * x * (1.0 + f64::from(GELU_COEF_A) * x * x)).tanh())
}

/// `gelu(gate)·up` element by element, in f64.
pub fn reference_geglu(gate: &[f32], up: &[f32]) -> Result<Vec<f64>, ShapeError> {
    expect_len("geglu", "up", gate.len(), up.len())?;
    Ok(gate
        .iter()
        .zip(up)
        .map(|(&g, &u)| gelu(f64::from(g)) * f64::from(u))
        .collect())
}

/// `a + b` element by element, in f64: a residual connection.
pub fn reference_add(a: &[f32], b: &[f32]) -> Result<Vec<f64>, ShapeError> {
    expect_len("add", "b", a.len(), b.len())?;
    Ok(a.iter()
        .zip(b)
        .map(|(&a, &b)| f64::from(a) + f64::from(b))
        .collect())
}

/// Inputs for an activation: uniform values and, where there is room, the edges where the
/// formulas saturate or overflow in f32 (e^100 is +inf) and the signed zeros.
fn activation_inputs(r: &mut Rng, n: usize) -> Vec<f32> {
    let edges = [0.0, -0.0, 20.0, -20.0, 100.0, -100.0, 1e-3, -1e-3];
    if n < 4 * edges.len() {
        return r.f32s(n, -6.0, 6.0);
    }
    let mut x = r.f32s(n - edges.len(), -6.0, 6.0);
    x.extend(edges);
    x
}

/// A copy/conversion case of the last `n` elements of a source of `x_at + n` written at element
/// `at` of a destination of `at + n + 3` zeros. The copied values are uniform over f16's
/// range, then the edges: signed zeros, an f16 subnormal, a value that rounds to f16's smallest
/// subnormal, the largest f16, one that rounds to f16 infinity, infinities and NaN.
pub fn copy_case(from: Float, to: Float, n: u32, x_at: u32, at: u32) -> Result<Case, ShapeError> {
    let grid = grid(n)?;
    let name = format!("copy/{}->{}/{x_at}+{n}@{at}", from.name(), to.name());
    let mut r = Rng::new(seed(&name));
    let edges = [
        0.0,
        -0.0,
        1e-6,
        -3e-8,
        65504.0,
        65520.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    let mut x = r.f32s((n as usize).saturating_sub(edges.len()), -60000.0, 60000.0);
    x.extend(edges.iter().take(n as usize));
    let x = from.stored(&x);
    let (at_len, tail) = (at as usize, 3);
    let want = std::iter::repeat_n(0.0, at_len)
        .chain(x.iter().map(|&v| to.round(v as f64)))
        .chain(std::iter::repeat_n(0.0, tail))
        .collect();
    let y0 = vec![0.0; at_len + x.len() + tail];
    // Values before x_at that a kernel ignoring the offset would copy instead.
    let mut src = from.stored(&r.f32s(x_at as usize, 1.0, 2.0));
    src.extend(&x);
    Ok(Case::new(name, copy_kernel(from, to), grid)
        .input("x", from.scalar(), from.bytes(&src))
        .output("y", to.scalar(), to.bytes(&y0), want)
        .params(vec![
            ParamValue::U32(n),
            ParamValue::U32(x_at),
            ParamValue::U32(at),
        ])
        .bound(NMSE_EXACT))
}

pub fn cases() -> Vec<Case> {
    use Float::{F16, F32};
    let mut v = vec![];
    // SmolLM2-135M's FFN width, and an odd count.
    v.extend([1536, 255].map(swiglu_pairs_case));
    // Gemma 3 270M's FFN width, and an odd count.
    v.extend([2048, 255].map(geglu_pairs_case));
    // Phi-3-mini's FFN width for one token, and three tokens of an odd width.
    v.extend([(1, 8192), (3, 257)].map(|(t, ff)| swiglu_halves_case(t, ff, Float::F32)));
    // Rounded to f16 as a mixture of experts' pairs are for their down products on tiles.
    v.push(swiglu_halves_case(5, 768, Float::F16));
    v.push(swiglu_halves_case(3, 1028, Float::F16));
    // Then SmolLM2-135M's graph: K rows (3 KV heads × 64) of 2 tokens written at position 5 of
    // a cache, and the last of 7 tokens' rows (576 wide) picked for the output head.
    for (from, to, n, x_at, at) in [
        (F32, F16, 1000, 0, 0),
        (F16, F32, 1000, 0, 0),
        (F32, F32, 4097, 0, 0),
        (F32, F16, 384, 0, 960),
        (F32, F32, 384, 0, 960),
        (F32, F32, 576, 3456, 0),
    ] {
        v.push(copy_case(from, to, n, x_at, at));
    }
    v.into_iter()
        .collect::<Result<_, _>>()
        .expect("the fixed shapes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silu_by_hand() {
        assert!((silu(1.0) - 0.731_058_578_630_004_9).abs() < 1e-15);
    }

    /// GELU's tanh form at 1 and -2, worked in Python's float64 with ggml's f32 constants
    /// widened (`0.5*x*(1+math.tanh(c*x*(1+a*x*x)))`).
    #[test]
    fn gelu_by_hand() {
        assert!((gelu(1.0) - 0.841_191_996_606_485_7).abs() < 1e-15);
        assert!((gelu(-2.0) + 0.045_402_302_044_692_09).abs() < 1e-15);
    }

    #[test]
    fn references_and_shapes() {
        assert_eq!(
            reference_swiglu(&[0.0, 1.0], &[5.0, 2.0]).unwrap(),
            vec![0.0, 2.0 * silu(1.0)]
        );
        assert_eq!(reference_add(&[0.5], &[3.0]).unwrap(), vec![3.5]);
        assert!(matches!(
            reference_add(&[1.0], &[]),
            Err(ShapeError::Mismatch { .. })
        ));
        assert!(matches!(grid(0), Err(ShapeError::Zero { .. })));
        assert_eq!(grid(257).unwrap(), [2, 1, 1]);
    }
}

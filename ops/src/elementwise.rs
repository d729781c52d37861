//! Element-wise ops, one element per invocation, stored in f32 or f16 and computed in f32:
//! - unary: `silu(x) = x / (1 + e^-x)`; `gelu`, ggml's tanh approximation
//!   `0.5·x·(1 + tanh(sqrt(2/π)·x·(1 + 0.044715·x²)))` (`ggml_gelu_f32` in ggml-cpu `vec.h`);
//!   `scale(x) = s·x` with `s` a parameter;
//! - binary, on two inputs of the same length: `add`, `mul`, and `swiglu(gate, up) =
//!   silu(gate)·up` (llama.cpp's FFN: `ggml_swiglu_split`);
//! - `copy`: f32 → f16, f16 → f32 and f32 → f32 (a conversion rounds to nearest even).
//!
//! The kernel computes gelu as `x / (1 + e^(−2u))` with `u = sqrt(2/π)·x·(1 + 0.044715·x²)`:
//! the same function, since `0.5·(1 + tanh u) = 1 / (1 + e^(−2u))`, written with `exp`, which
//! every target computes to a few ulp, because `tanh` may be lowered to a hardware
//! approximation (PTX's `tanh.approx.f32` is specified to about 2^-11 relative error), which
//! alone would use up the bound. For large negative x, `e^(−2u)` overflows to +inf and the
//! result is −0, the limit.
//!
//! Bounds: `add`, `mul`, `scale` and the copies are one correctly rounded operation, so the
//! default 1e-7 (the copies are exact: [`NMSE_EXACT`]). silu, gelu and swiglu also use the
//! default 1e-7: their f32 error is a few ulp of `exp` plus three or four roundings, a relative
//! error below 1e-6 per element and so an NMSE below 1e-12; the bound leaves a factor of 10^5.
//! f16 outputs are compared with the reference rounded to f16: they differ only where the f32
//! result and the exact one round to neighbouring f16 values, a relative error of at most
//! 2^-10 on the rare element that sits within an f32 error of a rounding boundary.

use super::shape::ShapeError;
use super::support::{elements, expect_len, load_f32, nonzero, seed, store_f32, Float};
use crate::case::*;
use trine_ir::{Access, Kernel, KernelBuilder, ParamValue, Scalar, Val};

/// Invocations per workgroup.
pub const WG: u32 = 256;

/// sqrt(2/π), as ggml's `SQRT_2_OVER_PI`.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// ggml's `GELU_COEF_A`.
const GELU_COEF_A: f64 = 0.044715;

/// One-input ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unary {
    Silu,
    Gelu,
    /// `s·x`, with `s` the kernel's second parameter.
    Scale,
}

impl Unary {
    pub fn name(self) -> &'static str {
        match self {
            Unary::Silu => "silu",
            Unary::Gelu => "gelu",
            Unary::Scale => "scale",
        }
    }
}

/// Two-input ops, on inputs of the same length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Binary {
    Add,
    Mul,
    /// `silu(a)·b`, with `a` the gate and `b` the up projection.
    Swiglu,
}

impl Binary {
    pub fn name(self) -> &'static str {
        match self {
            Binary::Add => "add",
            Binary::Mul => "mul",
            Binary::Swiglu => "swiglu",
        }
    }
}

/// Checks an element count and returns the grid that covers it.
pub fn grid(n: u32) -> Result<[u32; 3], ShapeError> {
    nonzero("elementwise", "n", n)?;
    elements("elementwise", "n", &[n])?;
    Ok([n.div_ceil(WG), 1, 1])
}

/// `x / (1 + e^-x)`: the silu every kernel emits (the fused SwiGLU of the matvec too), so that
/// fused and unfused ops round alike.
pub(super) fn silu_ir<'b>(k: &'b KernelBuilder, x: Val<'b>) -> Val<'b> {
    x / (k.f32(1.0) + (-x).exp())
}

fn gelu_ir<'b>(k: &'b KernelBuilder, x: Val<'b>) -> Val<'b> {
    // −2u = x·(c0 + c1·x²) with c0 = −2·sqrt(2/π), c1 = c0·0.044715.
    let c0 = -2.0 * SQRT_2_OVER_PI;
    let c1 = c0 * GELU_COEF_A;
    let minus_2u = x * (x * x).fma(k.f32(c1 as f32), k.f32(c0 as f32));
    x / (k.f32(1.0) + minus_2u.exp())
}

/// Buffers: `x`, `y` of `t`. Params: n, and for [`Unary::Scale`] the factor s (f32).
pub fn unary_kernel(op: Unary, t: Float) -> Kernel {
    let k = KernelBuilder::new(&format!("{}_{}", op.name(), t.name()), [WG, 1, 1]);
    let x = k.buffer("x", t.scalar(), Access::Read);
    let y = k.buffer("y", t.scalar(), Access::Write);
    let n = k.param("n", Scalar::U32);
    let s = (op == Unary::Scale).then(|| k.param("s", Scalar::F32));
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let v = load_f32(&k, t, x, i);
        let r = match op {
            Unary::Silu => silu_ir(&k, v),
            Unary::Gelu => gelu_ir(&k, v),
            // `s` is declared exactly when the op is Scale.
            Unary::Scale => s.map_or(v, |s| v * s),
        };
        store_f32(&k, t, y, i, r);
    });
    k.finish()
}

/// Buffers: `a`, `b`, `y` of `t`. Params: n.
pub fn binary_kernel(op: Binary, t: Float) -> Kernel {
    let k = KernelBuilder::new(&format!("{}_{}", op.name(), t.name()), [WG, 1, 1]);
    let a = k.buffer("a", t.scalar(), Access::Read);
    let b = k.buffer("b", t.scalar(), Access::Read);
    let y = k.buffer("y", t.scalar(), Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let (av, bv) = (load_f32(&k, t, a, i), load_f32(&k, t, b, i));
        let r = match op {
            Binary::Add => av + bv,
            Binary::Mul => av * bv,
            Binary::Swiglu => silu_ir(&k, av) * bv,
        };
        store_f32(&k, t, y, i, r);
    });
    k.finish()
}

/// SwiGLU of interleaved pairs: `y[i] = silu(x[2i])·x[2i + 1]`, what a product over gate and
/// up rows stacked in pairs produces (the executor's `w_gate_up`), for a product whose SwiGLU
/// runs after it instead of in its epilogue. Buffers: `x`, `y` f32. Params: n (outputs).
pub fn swiglu_pairs_kernel() -> Kernel {
    let k = KernelBuilder::new("swiglu_pairs_f32", [WG, 1, 1]);
    let x = k.buffer("x", Scalar::F32, Access::Read);
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let n = k.param("n", Scalar::U32);
    let i = k.global_id(0);
    k.if_(i.lt(n), || {
        let gate = k.load(x, i * k.u32(2));
        let up = k.load(x, i * k.u32(2) + k.u32(1));
        k.store(y, i, silu_ir(&k, gate) * up);
    });
    k.finish()
}

/// A [`swiglu_pairs_kernel`] case of `n` outputs.
pub fn swiglu_pairs_case(n: u32) -> Result<Case, ShapeError> {
    let grid = grid(n)?;
    let name = format!("swiglu_pairs/f32/{n}");
    let mut r = Rng::new(seed(&name));
    let x = activation_inputs(&mut r, 2 * n as usize);
    let (gate, up): (Vec<f32>, Vec<f32>) = x.chunks(2).map(|p| (p[0], p[1])).unzip();
    let want = reference_binary(Binary::Swiglu, &gate, &up)?;
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

/// ggml's tanh approximation of gelu, in f64, written as ggml writes it.
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x)).tanh())
}

/// The plain-Rust reference of a unary op in f64; `s` is the factor of [`Unary::Scale`].
pub fn reference_unary(op: Unary, s: f32, x: &[f32]) -> Vec<f64> {
    x.iter()
        .map(|&v| {
            let v = v as f64;
            match op {
                Unary::Silu => silu(v),
                Unary::Gelu => gelu(v),
                Unary::Scale => s as f64 * v,
            }
        })
        .collect()
}

/// The plain-Rust reference of a binary op in f64.
pub fn reference_binary(op: Binary, a: &[f32], b: &[f32]) -> Result<Vec<f64>, ShapeError> {
    expect_len(op.name(), "b", a.len(), b.len())?;
    Ok(a.iter()
        .zip(b)
        .map(|(&a, &b)| {
            let (a, b) = (a as f64, b as f64);
            match op {
                Binary::Add => a + b,
                Binary::Mul => a * b,
                Binary::Swiglu => silu(a) * b,
            }
        })
        .collect())
}

/// `rows × cols` elements named as a shape: real model shapes read as such.
fn shape_name(rows: u32, cols: u32) -> String {
    if rows == 1 {
        cols.to_string()
    } else {
        format!("{rows}x{cols}")
    }
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

/// A unary case over `rows × cols` elements with inputs stored as `t`.
pub fn unary_case(op: Unary, t: Float, rows: u32, cols: u32) -> Result<Case, ShapeError> {
    let n = elements(op.name(), "n", &[rows, cols])?;
    let grid = grid(n)?;
    let name = format!("{}/{}/{}", op.name(), t.name(), shape_name(rows, cols));
    let mut r = Rng::new(seed(&name));
    let x = t.stored(&activation_inputs(&mut r, n as usize));
    let s = 0.125f32;
    let want = reference_unary(op, s, &x)
        .into_iter()
        .map(|v| t.round(v))
        .collect();
    let mut params = vec![ParamValue::U32(n)];
    if op == Unary::Scale {
        params.push(ParamValue::F32(s));
    }
    Ok(Case::new(name, unary_kernel(op, t), grid)
        .input("x", t.scalar(), t.bytes(&x))
        .output("y", t.scalar(), vec![0; t.bytes(&x).len()], want)
        .params(params))
}

/// A binary case over `rows × cols` elements with inputs stored as `t`.
pub fn binary_case(op: Binary, t: Float, rows: u32, cols: u32) -> Result<Case, ShapeError> {
    let n = elements(op.name(), "n", &[rows, cols])?;
    let grid = grid(n)?;
    let name = format!("{}/{}/{}", op.name(), t.name(), shape_name(rows, cols));
    let mut r = Rng::new(seed(&name));
    let a = t.stored(&activation_inputs(&mut r, n as usize));
    let b = t.stored(&r.f32s(n as usize, -3.0, 3.0));
    let want = reference_binary(op, &a, &b)?
        .into_iter()
        .map(|v| t.round(v))
        .collect();
    Ok(Case::new(name, binary_kernel(op, t), grid)
        .input("a", t.scalar(), t.bytes(&a))
        .input("b", t.scalar(), t.bytes(&b))
        .output("y", t.scalar(), vec![0; t.bytes(&a).len()], want)
        .params(vec![ParamValue::U32(n)]))
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
    let unary = [
        (Unary::Silu, F32, 1, 1),
        (Unary::Silu, F32, 1, 1000),
        (Unary::Silu, F32, 1, 4097),
        (Unary::Silu, F16, 1, 1000),
        (Unary::Gelu, F32, 1, 1),
        (Unary::Gelu, F32, 1, 1000),
        (Unary::Gelu, F32, 1, 4097),
        (Unary::Gelu, F16, 1, 1000),
        (Unary::Scale, F32, 1, 1000),
        (Unary::Scale, F32, 1, 49152), // logits over SmolLM2's vocabulary
        (Unary::Scale, F16, 1, 1000),
    ];
    for (op, t, rows, cols) in unary {
        v.push(unary_case(op, t, rows, cols));
    }
    let binary = [
        (Binary::Add, F32, 1, 576), // SmolLM2-135M residual, decode
        (Binary::Add, F32, 7, 576), // and prefill
        (Binary::Add, F32, 1, 1000),
        (Binary::Add, F16, 1, 1000),
        (Binary::Mul, F32, 1, 576),
        (Binary::Mul, F32, 1, 1000),
        (Binary::Mul, F16, 1, 1000),
        (Binary::Swiglu, F32, 1, 1536), // SmolLM2-135M FFN, decode
        (Binary::Swiglu, F32, 7, 1536), // and prefill
        (Binary::Swiglu, F32, 1, 255),
        (Binary::Swiglu, F16, 1, 1536),
    ];
    for (op, t, rows, cols) in binary {
        v.push(binary_case(op, t, rows, cols));
    }
    // SmolLM2-135M's FFN width, and an odd count.
    v.extend([1536, 255].map(swiglu_pairs_case));
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
    fn gelu_as_written_in_the_kernel_is_ggml_gelu() {
        // The kernel's form x / (1 + e^(−2u)) against ggml's tanh form, in f64.
        for i in -400..=400 {
            let x = i as f64 / 40.0;
            let u = SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x);
            let kernel_form = x / (1.0 + (-2.0 * u).exp());
            assert!((kernel_form - gelu(x)).abs() < 1e-14, "x = {x}");
        }
        assert!((gelu(1.0) - 0.841_191_990_608_276_8).abs() < 1e-15);
        assert!((silu(1.0) - 0.731_058_578_630_004_9).abs() < 1e-15);
    }

    #[test]
    fn references_and_shapes() {
        assert_eq!(
            reference_binary(Binary::Swiglu, &[0.0, 1.0], &[5.0, 2.0]).unwrap(),
            vec![0.0, 2.0 * silu(1.0)]
        );
        assert_eq!(reference_unary(Unary::Scale, 0.5, &[3.0]), vec![1.5]);
        assert!(matches!(
            reference_binary(Binary::Add, &[1.0], &[]),
            Err(ShapeError::Mismatch { .. })
        ));
        assert!(matches!(grid(0), Err(ShapeError::Zero { .. })));
        assert_eq!(grid(257).unwrap(), [2, 1, 1]);
    }
}

//! What a Llama decode step fuses into its matvecs ([`super::matvec`]): the RMS norm before the
//! QKV, gate/up and output-head products, the residual add after the attention-output and
//! down projections, and SwiGLU after gate/up. Each saves a dispatch and a round trip of the
//! activations through memory.
//!
//! - [`Prologue::RmsNorm`]: x is the residual stream, not yet normalised. Every workgroup sums
//!   x² over its token while it loads x for the dot products (the columns are split across
//!   its invocations exactly once, so the partial sums cover x once), multiplies x by the norm
//!   weight g on load, and scales the row sums by `1/sqrt(Σx²/cols + eps)`: the sum of squares
//!   is reduced as one more row of the same reduction, so the norm costs no extra barrier.
//! - [`Epilogue::Add`]: `y = W·x + r`.
//! - [`Epilogue::Swiglu`]: W's rows interleave gate and up (row 2i gate i, row 2i+1 up i), so
//!   that a workgroup holds both rows of each of its outputs: `y_i = silu(gate_i)·up_i`.
//!
//! Bound: [`super::matvec::NMSE`], the plain matvec's, measured over these cases too. Against the unfused composition (whose
//! reference [`reference`] is: rms_norm's reference, matvec's, then elementwise's, with the
//! f32 buffers between them) the fused kernel adds one rounding per element of x (the product
//! with g), the f32 sum of squares and `rsqrt` (a relative error below 1e-6 shared by a whole
//! token's outputs, as rms_norm's bound argues), one multiply per output, and for SwiGLU a few
//! ulp of `exp` and three roundings: relative errors of about 1e-6 at worst, an NMSE of order
//! 1e-12. What dominates is the product's own error where cancellation leaves a sum small
//! against Σ|w·x|, which SwiGLU compounds by multiplying two sums. Measured: the interpreter
//! against the references at most 1.4e-11 (`q4_1/14x96/shared/swiglu`: without the norm, x
//! in [-1, 1) leaves gate and up at a few units against Σ|w·x| ≈ 24, and its seven outputs
//! are up to 9e-6 off), 1e-13 on SmolLM2's shapes; against the interpreter, the compiled-C
//! CPU backend at most 9e-14, lavapipe 2.6e-12, a GPU through Vulkan and CUDA 2.7e-13 and
//! 3.1e-13 (the conformance records, docs/conformance/README.md).

use super::elementwise::{reference_add, reference_swiglu};
use super::matvec::{reference as matvec_reference, spec_case, MatvecSpec, Reduce};
pub use super::matvec_attn::{CombineShape, RopeShape};
use super::rms_norm::{self, RmsNorm};
use super::shape::ShapeError;
use super::support::{expect_len, nonzero};
use crate::case::*;
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Scalar, Val, Var};

const OP: &str = "matvec";

/// SmolLM2's (and Llama's) `rms_norm_eps`, for the cases.
pub const EPS: f32 = 1e-5;

/// What the kernel does to x before the product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prologue {
    None,
    /// `x / sqrt(mean(x²) + eps) · g`, rms_norm's op: buffer `g` (f32, `[cols]`) right after
    /// `x`, parameter `eps` (f32) after `cols`.
    RmsNorm,
    /// x is split attention's output, combined from its partials: buffer `part` (f32,
    /// `[tokens × heads × splits × (head_dim + 2)]`) in place of `x`; `cols` must be
    /// `heads · head_dim`. See [`super::matvec_attn`].
    Combine(CombineShape),
}

/// What the kernel does to the row sums before it stores them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    None,
    /// `y = W·x + r`: buffer `r` (f32, `[tokens × rows]`) just before `y`.
    Add,
    /// `y_i = silu(gate_i)·up_i` with gate i in row 2i and up i in row 2i+1: `rows` is twice
    /// the outputs, y is `[tokens × rows/2]`. Needs an even `rows_per_workgroup`.
    Swiglu,
    /// The rows are a fused QKV projection's: rope on q and k and the KV-cache store at the
    /// step's position, instead of `y` (see [`super::matvec_attn`]). Buffers `step` (u32) and
    /// `freq` (f32, rope's table) after the inputs, then `q` (f32), `k_cache`, `v_cache`;
    /// parameters `heads`, `kv_heads` last. Needs an even `rows_per_workgroup`.
    RopeStore(RopeShape),
}

impl Epilogue {
    /// Outputs per token of a product of `rows` rows.
    pub fn outputs(self, rows: u32) -> Result<u32, ShapeError> {
        match self {
            Epilogue::Swiglu if !rows.is_multiple_of(2) => Err(ShapeError::NotMultiple {
                op: OP,
                what: "rows of a SwiGLU product (gate and up interleaved)",
                value: rows as usize,
                multiple: 2,
            }),
            Epilogue::Swiglu => Ok(rows / 2),
            Epilogue::RopeStore(_) if !rows.is_multiple_of(2) => Err(ShapeError::NotMultiple {
                op: OP,
                what: "rows of a QKV product (rope pairs)",
                value: rows as usize,
                multiple: 2,
            }),
            Epilogue::None | Epilogue::Add | Epilogue::RopeStore(_) => Ok(rows),
        }
    }
}

/// The suffix of a kernel's name (`_norm_swiglu`) and of a case's (`/norm+swiglu`), empty
/// without fusion: different kernels must have different names, which key the caches.
pub(super) fn suffix(prologue: Prologue, epilogue: Epilogue, sep: char, join: char) -> String {
    let parts: Vec<String> = [
        match prologue {
            Prologue::None => None,
            Prologue::RmsNorm => Some("norm".to_string()),
            Prologue::Combine(c) => Some(c.name()),
        },
        match epilogue {
            Epilogue::None => None,
            Epilogue::Add => Some("add".to_string()),
            Epilogue::Swiglu => Some("swiglu".to_string()),
            Epilogue::RopeStore(r) => Some(r.name()),
        },
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("{sep}{}", parts.join(&join.to_string()))
    }
}

/// The RmsNorm prologue inside the kernel: the norm weight, eps and the invocation's partial
/// Σx².
pub(super) struct Norm<'b> {
    pub(super) g: BufferId,
    pub(super) eps: Val<'b>,
    pub(super) sum_sq: Var<'b>,
}

impl<'b> Norm<'b> {
    /// `x_c · g_c` for the value `v = x_c` just loaded, adding `v²` to the sum of squares
    /// (as rms_norm accumulates it).
    pub(super) fn scale(&self, k: &'b KernelBuilder, v: Val<'b>, c: Val<'b>) -> Val<'b> {
        self.sum_sq.set(v.fma(v, self.sum_sq.get()));
        v * k.load(self.g, c)
    }

    /// `1/sqrt(Σx²/cols + eps)` from the workgroup's sum of squares, as rms_norm computes it.
    pub(super) fn inv_rms(&self, sum_sq: Val<'b>, cols: Val<'b>) -> Val<'b> {
        (sum_sq / cols.cast(Scalar::F32) + self.eps).rsqrt()
    }
}

/// A fused product's inputs beyond W and x.
#[derive(Clone, Copy, Debug)]
pub struct Fused<'a> {
    /// [`Prologue::RmsNorm`]: the norm weight g (`[cols]`) and eps; `None` without the norm.
    pub norm: Option<(&'a [f32], f32)>,
    pub epilogue: Epilogue,
    /// [`Epilogue::Add`]: r, `[tokens × rows]`; empty otherwise.
    pub residual: &'a [f32],
}

/// The unfused composition in f64, from the ops' own references: rms_norm, then matvec for
/// each token of x (`[tokens × cols]`), then add or swiglu, each intermediate rounded to f32
/// as the buffers between the unfused kernels hold it. Returns `[tokens × outputs]`.
pub fn reference(
    ty: WeightType,
    w: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
    fused: &Fused,
) -> Result<Vec<f64>, ShapeError> {
    let (r32, c32) = (to_u32("rows", rows)?, to_u32("cols", cols)?);
    nonzero(OP, "cols", c32)?;
    let tokens = to_u32("tokens", x.len() / cols)?;
    nonzero(OP, "tokens", tokens)?;
    expect_len(OP, "x", tokens as usize * cols, x.len())?;
    fused.epilogue.outputs(r32)?;
    let normed: Vec<f32> = match fused.norm {
        Some((g, eps)) => {
            let shape = RmsNorm {
                rows: tokens,
                cols: c32,
                eps,
            };
            f32s(&rms_norm::reference(&shape, x, g)?)
        }
        None => x.to_vec(),
    };
    let mut y = Vec::with_capacity(rows * tokens as usize);
    for xt in normed.chunks_exact(cols) {
        y.extend(matvec_reference(ty, w, rows, cols, xt)?);
    }
    match fused.epilogue {
        // Rope's rotation and the stores follow in [`super::matvec_attn::reference_rope`].
        Epilogue::None | Epilogue::RopeStore(_) => Ok(y),
        Epilogue::Add => reference_add(&f32s(&y), fused.residual),
        Epilogue::Swiglu => {
            let y = f32s(&y);
            let gate: Vec<f32> = y.iter().step_by(2).copied().collect();
            let up: Vec<f32> = y.iter().skip(1).step_by(2).copied().collect();
            reference_swiglu(&gate, &up)
        }
    }
}

fn f32s(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&v| v as f32).collect()
}

fn to_u32(what: &'static str, v: usize) -> Result<u32, ShapeError> {
    u32::try_from(v).map_err(|_| ShapeError::TooLarge {
        op: OP,
        what,
        value: v,
        limit: u32::MAX as usize,
    })
}

/// Every fused form Llama's step uses, first on SmolLM2-135M's Q4_1 projections (576 wide,
/// 1536 FFN, 960 = 576 + 2 · 192 rows of fused QKV; the gate/up product interleaved, 3072
/// rows) and a 1000-row slice of its Q8_0 output head (the whole head takes the interpreter
/// ten seconds); then every combination on small odd shapes of every weight type, with the
/// shared tree as its own case (the backends here all have subgroups, so a fallback would not
/// run); then the executor's CPU and GPU shapes and odd ones, and prefill.
pub fn cases() -> Vec<Case> {
    use Epilogue as E;
    use Prologue as P;
    use Reduce::{Shared, Subgroup};
    use WeightType::*;
    let plain = |ty, reduce| MatvecSpec::new(ty, reduce);
    let fused = |ty, reduce, prologue, epilogue| MatvecSpec {
        prologue,
        epilogue,
        ..plain(ty, reduce)
    };
    // (spec, rows, cols, tokens)
    let mut shapes: Vec<(MatvecSpec, u32, u32, u32)> = vec![
        (fused(Q4_1, Subgroup, P::RmsNorm, E::None), 960, 576, 1),
        (fused(Q4_1, Subgroup, P::None, E::Add), 576, 576, 1),
        (fused(Q4_1, Subgroup, P::RmsNorm, E::Swiglu), 3072, 576, 1),
        (fused(Q4_1, Subgroup, P::None, E::Add), 576, 1536, 1),
        (fused(Q8_0, Subgroup, P::RmsNorm, E::None), 1000, 576, 1),
    ];
    for ty in crate::blocks::weight_types() {
        let odd = if ty.is_quantized() {
            crate::blocks::whole_blocks(ty, 96)
        } else {
            45
        };
        for (prologue, epilogue, rows) in [
            (P::RmsNorm, E::None, 7),
            (P::None, E::Add, 7),
            (P::RmsNorm, E::Add, 7),
            (P::None, E::Swiglu, 14),
            (P::RmsNorm, E::Swiglu, 14),
        ] {
            for reduce in [Subgroup, Shared] {
                shapes.push((fused(ty, reduce, prologue, epilogue), rows, odd, 1));
            }
        }
    }
    // The executor's shapes: the CPU's (8 rows on 8 invocations, f16 scales, segments of 8 or
    // 16), the GPUs' wide one (8 rows on 128 invocations) and small one (2 rows on 128), SmolLM2's
    // gate/up included; and
    // shapes that leave a workgroup partly past the last row (6 rows, 32-element segments).
    let shaped =
        |spec: MatvecSpec, (rows_per_workgroup, workgroup, segment, f16_scales)| MatvecSpec {
            rows_per_workgroup,
            workgroup,
            segment,
            f16_scales,
            ..spec
        };
    for shape in [
        (8, 8, 16, false),
        (8, 8, 8, true),
        (8, 8, 16, true),
        (8, 128, 8, true),
        (6, 16, 32, true),
        (2, 32, 32, false),
        (2, 128, 8, true),
    ] {
        for (spec, rows, cols, tokens) in [
            (fused(Q4_1, Subgroup, P::RmsNorm, E::Swiglu), 26, 96, 1),
            (fused(Q4_1, Shared, P::RmsNorm, E::None), 13, 96, 2),
            (fused(Q8_0, Subgroup, P::RmsNorm, E::Add), 13, 96, 2),
            (fused(Q4_0, Subgroup, P::None, E::Add), 13, 96, 1),
            (fused(Q4_0, Shared, P::None, E::Swiglu), 26, 96, 1),
            (fused(F16, Subgroup, P::RmsNorm, E::Swiglu), 26, 45, 1),
        ] {
            shapes.push((shaped(spec, shape), rows, cols, tokens));
        }
    }
    for shape in [(8, 8, 8, true), (8, 128, 8, true), (2, 128, 8, true)] {
        let spec = fused(Q4_1, Subgroup, P::RmsNorm, E::Swiglu);
        shapes.push((shaped(spec, shape), 3072, 576, 1));
    }
    // The CPUs' blocked walk, SmolLM2's gate/up included.
    let blocked = |spec: MatvecSpec, workgroup| MatvecSpec {
        workgroup,
        blocked: true,
        ..shaped(spec, (8, workgroup, 8, true))
    };
    for (spec, workgroup, rows, cols, tokens) in [
        (
            fused(Q4_1, Subgroup, P::RmsNorm, E::Swiglu),
            16,
            3072,
            576,
            1,
        ),
        (fused(Q4_1, Subgroup, P::RmsNorm, E::Swiglu), 16, 26, 96, 3),
        (fused(Q4_1, Shared, P::None, E::Add), 16, 13, 96, 2),
        (fused(Q4_0, Subgroup, P::RmsNorm, E::Add), 8, 13, 96, 1),
        (fused(Q8_0, Subgroup, P::RmsNorm, E::None), 32, 1002, 576, 1),
        (fused(F16, Subgroup, P::RmsNorm, E::Swiglu), 8, 26, 45, 1),
    ] {
        shapes.push((blocked(spec, workgroup), rows, cols, tokens));
    }
    let pairs = |spec: MatvecSpec| MatvecSpec {
        rows_per_workgroup: 4,
        pairs: true,
        ..blocked(spec, 32)
    };
    for (spec, rows, cols, tokens) in [
        (fused(Q4_1, Subgroup, P::RmsNorm, E::Swiglu), 3072, 576, 1),
        (fused(Q4_1, Subgroup, P::RmsNorm, E::Swiglu), 26, 96, 3),
        (fused(Q4_1, Shared, P::None, E::Add), 13, 96, 2),
        (fused(Q4_0, Subgroup, P::RmsNorm, E::Add), 13, 64, 1),
    ] {
        shapes.push((pairs(spec), rows, cols, tokens));
    }
    // Prompts, 4 and 8 tokens per workgroup: SmolLM2's gate/up on 7 tokens, and odd shapes.
    let prompt = |spec| MatvecSpec {
        tokens_per_workgroup: 4,
        ..pairs(spec)
    };
    let gate_up_8 = MatvecSpec {
        tokens_per_workgroup: 8,
        ..pairs(fused(Q4_1, Subgroup, P::RmsNorm, E::Swiglu))
    };
    shapes.push((gate_up_8, 3072, 576, 13));
    for (spec, rows, cols, tokens) in [
        (fused(Q4_1, Subgroup, P::RmsNorm, E::Swiglu), 3072, 576, 7),
        (fused(Q4_1, Shared, P::RmsNorm, E::Add), 13, 96, 5),
        (fused(Q4_0, Subgroup, P::None, E::Swiglu), 26, 64, 9),
    ] {
        shapes.push((prompt(spec), rows, cols, tokens));
    }
    // Q4_1 codes read as words: one word per segment of 8, two of 16, four of 32; SmolLM2's
    // gate/up in the GPUs' shape.
    let words = |spec, shape| MatvecSpec {
        word_codes: true,
        ..shaped(spec, shape)
    };
    let gate_up = fused(Q4_1, Subgroup, P::RmsNorm, E::Swiglu);
    shapes.push((words(gate_up, (2, 128, 8, true)), 3072, 576, 1));
    // An output head in the GPUs' tall shape (4 rows on 64 invocations), the last workgroup
    // partly past the last row.
    let head = fused(Q8_0, Subgroup, P::RmsNorm, E::None);
    shapes.push((shaped(head, (4, 64, 8, true)), 1002, 576, 1));
    for shape in [(2, 128, 8, true), (8, 8, 16, true), (6, 16, 32, true)] {
        for (spec, rows, cols, tokens) in [
            (gate_up, 26, 96, 1),
            (fused(Q4_1, Shared, P::None, E::Add), 13, 96, 2),
            (fused(Q4_1, Subgroup, P::None, E::None), 7, 96, 1),
        ] {
            shapes.push((words(spec, shape), rows, cols, tokens));
        }
    }
    // Prefill: x, r and y per token.
    shapes.extend([
        (fused(Q4_1, Subgroup, P::RmsNorm, E::None), 192, 576, 7),
        (fused(Q4_1, Subgroup, P::RmsNorm, E::Swiglu), 64, 576, 5),
        (fused(Q8_0, Shared, P::None, E::Add), 7, 96, 3),
        (fused(F32, Subgroup, P::RmsNorm, E::Add), 7, 45, 4),
        (fused(Q4_0, Shared, P::RmsNorm, E::Swiglu), 14, 96, 6),
        (
            shaped(
                fused(Q4_1, Subgroup, P::RmsNorm, E::Swiglu),
                (8, 8, 8, true),
            ),
            26,
            96,
            3,
        ),
    ]);
    shapes
        .into_iter()
        .enumerate()
        .map(|(i, (spec, rows, cols, tokens))| {
            spec_case(spec, rows, cols, tokens, 4000 + i as u64)
                .expect("the listed shapes are valid")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matvec::kernel;

    /// Whether the interpreter's run of `case` agrees with its plain-Rust reference.
    fn passes(case: &Case) -> bool {
        case.check_reference().is_ok()
    }

    /// `case` with the input buffer `name` replaced by `f` of its f32 values.
    fn with_input(case: &Case, name: &str, f: impl Fn(f32) -> f32) -> Case {
        let mut c = case.clone();
        for b in c.buffers.iter_mut().filter(|b| b.name == name) {
            let v: Vec<f32> = decode(Scalar::F32, &b.data)
                .iter()
                .map(|&x| f(x as f32))
                .collect();
            b.data = f32_bytes(&v);
        }
        c
    }

    fn small(prologue: Prologue, epilogue: Epilogue, reduce: Reduce) -> Case {
        let spec = MatvecSpec {
            prologue,
            epilogue,
            ..MatvecSpec::new(WeightType::Q4_1, reduce)
        };
        let rows = if epilogue == Epilogue::Swiglu { 14 } else { 7 };
        spec_case(spec, rows, 96, 2, 7).unwrap()
    }

    /// The cases can fail: each fused input the kernel ignored or misused would show.
    #[test]
    fn wrong_inputs_fail() {
        for reduce in [Reduce::Subgroup, Reduce::Shared] {
            let norm = small(Prologue::RmsNorm, Epilogue::None, reduce);
            assert!(passes(&norm));
            // The norm divides a scale of x out; g is not.
            assert!(passes(&with_input(&norm, "x", |v| 3.0 * v)));
            assert!(!passes(&with_input(&norm, "g", |_| 1.0)));
            // Another token's x, as a kernel ignoring the grid's y would read.
            let mut swapped = norm.clone();
            let x = swapped.buffers.iter_mut().find(|b| b.name == "x").unwrap();
            x.data.rotate_left(96 * 4);
            assert!(!passes(&swapped));

            let add = small(Prologue::None, Epilogue::Add, reduce);
            assert!(passes(&add));
            assert!(!passes(&with_input(&add, "r", |_| 0.0)));

            // Gate and up swapped within each pair: silu(up)·gate.
            let swiglu = small(Prologue::RmsNorm, Epilogue::Swiglu, reduce);
            assert!(passes(&swiglu));
            let mut swapped = swiglu.clone();
            let w = swapped.buffers.iter_mut().find(|b| b.name == "w").unwrap();
            let row = WeightType::Q4_1.bytes(OP, "cols", 96).unwrap();
            for pair in w.data.chunks_exact_mut(2 * row) {
                pair.rotate_left(row);
            }
            assert!(!passes(&swapped));
        }
    }

    #[test]
    fn reference_is_the_unfused_composition() {
        // W = [[1, 2], [3, 4]] in f32, x = [3, 4] (mean square 12.5), g = [1, 0.5].
        let w = trine_gguf::quant::quantize(WeightType::F32, &[1.0, 2.0, 3.0, 4.0]).unwrap();
        let x = [3.0, 4.0];
        let fused = |norm, epilogue, residual| Fused {
            norm,
            epilogue,
            residual,
        };
        let s = (12.5f64).sqrt();
        let normed = [(3.0 / s) as f32 as f64, (2.0 / s) as f32 as f64];
        let dot = |r: [f64; 2]| (r[0] * normed[0] + r[1] * normed[1]) as f32 as f64;
        let got = reference(
            WeightType::F32,
            &w,
            2,
            2,
            &x,
            &fused(Some((&[1.0, 0.5], 0.0)), Epilogue::None, &[]),
        )
        .unwrap();
        assert_eq!(got, vec![dot([1.0, 2.0]), dot([3.0, 4.0])]);
        let got = reference(
            WeightType::F32,
            &w,
            2,
            2,
            &x,
            &fused(None, Epilogue::Add, &[0.5, -1.0]),
        )
        .unwrap();
        assert_eq!(got, vec![11.5, 24.0]);
        let got = reference(
            WeightType::F32,
            &w,
            2,
            2,
            &x,
            &fused(None, Epilogue::Swiglu, &[]),
        )
        .unwrap();
        assert_eq!(got, vec![super::super::elementwise::silu(11.0) * 25.0]);
    }

    #[test]
    fn every_fusion_has_its_own_kernel_name() {
        let mut names = vec![];
        for prologue in [Prologue::None, Prologue::RmsNorm] {
            for epilogue in [Epilogue::None, Epilogue::Add, Epilogue::Swiglu] {
                let spec = MatvecSpec {
                    prologue,
                    epilogue,
                    ..MatvecSpec::new(WeightType::Q4_1, Reduce::Subgroup)
                };
                names.push(kernel(spec).unwrap().name);
            }
        }
        assert_eq!(names[0], "matvec_q4_1_subgroup_r4_w64");
        assert_eq!(names[5], "matvec_q4_1_subgroup_r4_w64_norm_swiglu");
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 6);
    }

    #[test]
    fn bad_fused_shapes_are_typed_errors() {
        let spec = MatvecSpec {
            epilogue: Epilogue::Swiglu,
            rows_per_workgroup: 3,
            ..MatvecSpec::new(WeightType::Q8_0, Reduce::Shared)
        };
        assert!(matches!(
            kernel(spec),
            Err(ShapeError::NotMultiple {
                value: 3,
                multiple: 2,
                ..
            })
        ));
        let spec = MatvecSpec {
            rows_per_workgroup: 4,
            ..spec
        };
        assert!(matches!(
            spec_case(spec, 7, 32, 1, 1),
            Err(ShapeError::NotMultiple { value: 7, .. })
        ));
        // The sum of squares takes one more row of shared memory.
        let spec = MatvecSpec {
            prologue: Prologue::RmsNorm,
            rows_per_workgroup: 8,
            workgroup: 1024,
            ..MatvecSpec::new(WeightType::Q8_0, Reduce::Shared)
        };
        assert!(kernel(MatvecSpec {
            prologue: Prologue::None,
            ..spec
        })
        .is_ok());
        assert!(matches!(kernel(spec), Err(ShapeError::TooLarge { .. })));
        let w = [0u8; 34];
        let fused = Fused {
            norm: None,
            epilogue: Epilogue::Add,
            residual: &[1.0; 2],
        };
        assert!(matches!(
            reference(WeightType::Q8_0, &w, 1, 32, &[0.0; 32], &fused),
            Err(ShapeError::Mismatch { .. })
        ));
    }
}

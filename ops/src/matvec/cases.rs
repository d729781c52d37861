//! The matvec's conformance cases: random weights and inputs, with the fused ops' inputs
//! where a spec fuses them, against the f64 reference.

use super::{check_shapes, kernel, Epilogue, MatvecSpec, Prologue, Reduce, NMSE, OP};
use crate::blocks::{self, BlockFormat};
use crate::case::*;
use crate::matvec_fused::{self as fused, Fused};
use crate::shape::ShapeError;
use crate::support::{elements, nonzero};
use trine_gguf::quant::{quantize, WeightType};
use trine_ir::{ParamValue, Scalar};

/// A conformance case: random W (quantized with ggml's reference quantizers) and x.
pub fn case(
    ty: WeightType,
    rows: u32,
    cols: u32,
    reduce: Reduce,
    seed: u64,
) -> Result<Case, ShapeError> {
    batched_case(ty, rows, cols, 1, reduce, seed)
}

/// A conformance case multiplying W with `tokens` vectors at once, as prefill does.
pub fn batched_case(
    ty: WeightType,
    rows: u32,
    cols: u32,
    tokens: u32,
    reduce: Reduce,
    seed: u64,
) -> Result<Case, ShapeError> {
    spec_case(MatvecSpec::new(ty, reduce), rows, cols, tokens, seed)
}

/// A conformance case of any [`MatvecSpec`]; its name shows the spec where it is not
/// [`MatvecSpec::new`]'s, then what it fuses (`/norm+swiglu`). The fused inputs: g in
/// [0.5, 1.5) as rms_norm's cases, eps [`crate::matvec_fused::EPS`], r in [-2, 2).
pub fn spec_case(
    spec: MatvecSpec,
    rows: u32,
    cols: u32,
    tokens: u32,
    seed: u64,
) -> Result<Case, ShapeError> {
    let (ty, reduce) = (spec.weights, spec.reduce);
    let (r, c) = (rows as usize, cols as usize);
    // Fail before generating data for a shape the op rejects.
    check_shapes(ty, r, c, ty.bytes(OP, "cols", c)?.saturating_mul(r), c)?;
    nonzero(OP, "tokens", tokens)?;
    elements(OP, "x", &[tokens, cols])?;
    elements(OP, "y", &[tokens, rows])?;
    // SwiGLU's rows come in pairs.
    spec.epilogue.outputs(rows)?;
    let mut rng = Rng::new(seed);
    let w = quantize(ty, &rng.f32s(r * c, -1.0, 1.0))?;
    let x = rng.f32s(c * tokens as usize, -1.0, 1.0);
    // Drawn after W and x, so that the plain cases keep their data.
    let g = (spec.prologue == Prologue::RmsNorm).then(|| rng.f32s(c, 0.5, 1.5));
    let res = (spec.epilogue == Epilogue::Add).then(|| rng.f32s(r * tokens as usize, -2.0, 2.0));
    let want = fused::reference(
        ty,
        &w,
        r,
        c,
        &x,
        &Fused {
            norm: g.as_deref().map(|g| (g, fused::EPS)),
            epilogue: spec.epilogue,
            residual: res.as_deref().unwrap_or_default(),
        },
    )?;
    let mut name = format!("{OP}/{ty}/{rows}x{cols}");
    if tokens > 1 {
        name.push_str(&format!("/t{tokens}"));
    }
    if reduce == Reduce::Shared {
        name.push_str("/shared");
    }
    let unfused = MatvecSpec {
        prologue: Prologue::None,
        epilogue: Epilogue::None,
        ..spec
    };
    if unfused != MatvecSpec::new(ty, reduce) {
        name.push('/');
        name.push_str(&spec.shape_name());
    }
    name.push_str(&fused::suffix(spec.prologue, spec.epilogue, '/', '+'));
    let mut case = spec.weight_inputs(
        Case::new(name, kernel(spec)?, spec.grid(rows, tokens)),
        w,
        cols,
    );
    let mut params = vec![ParamValue::U32(rows), ParamValue::U32(cols)];
    case = case.input("x", Scalar::F32, f32_bytes(&x));
    if let Some(g) = g {
        case = case.input("g", Scalar::F32, f32_bytes(&g));
        params.push(ParamValue::F32(fused::EPS));
    }
    if let Some(res) = res {
        case = case.input("r", Scalar::F32, f32_bytes(&res));
    }
    params.extend(spec.tokens_params(tokens));
    let mut case = case
        .output("y", Scalar::F32, vec![0; want.len() * 4], want)
        .params(params)
        .bound(NMSE);
    if reduce == Reduce::Subgroup {
        case = case.fallback(kernel(MatvecSpec {
            reduce: Reduce::Shared,
            ..spec
        })?);
    }
    Ok(case)
}

/// For every weight type: small odd shapes, one row, and SmolLM2-135M's projections (576
/// model width, 1536 FFN), the shared fallback on two of them (every backend here has
/// subgroups, so it would not run otherwise). Then SmolLM2's output head, 49152 × 576 in Q8_0
/// as its GGUF stores it, and a 4096 × 4096 Q4_0 matrix (a 7B model's projection): the two
/// largest cases, the slowest in the interpreter of a debug build.
pub fn cases() -> Vec<Case> {
    let listed = |spec, rows, cols, tokens, seed| {
        spec_case(spec, rows, cols, tokens, seed).expect("the listed shapes are valid")
    };
    let mut shapes: Vec<(WeightType, u32, u32, Reduce)> = vec![];
    for ty in blocks::weight_types() {
        let odd = if ty.is_quantized() {
            blocks::whole_blocks(ty, 96)
        } else {
            45
        };
        let w = |cols| blocks::whole_blocks(ty, cols);
        for (rows, cols) in [
            (7, odd),
            (1, odd),
            (576, w(576)),
            (1536, w(576)),
            (576, 1536),
        ] {
            shapes.push((ty, rows, cols, Reduce::Subgroup));
        }
        shapes.push((ty, 7, odd, Reduce::Shared));
        shapes.push((ty, 576, 1536, Reduce::Shared));
    }
    shapes.push((WeightType::Q8_0, 49152, 576, Reduce::Subgroup));
    shapes.push((WeightType::Q4_0, 4096, 4096, Reduce::Subgroup));
    let mut v: Vec<Case> = shapes
        .into_iter()
        .enumerate()
        .map(|(i, (ty, rows, cols, reduce))| {
            case(ty, rows, cols, reduce, 1000 + i as u64).expect("the listed shapes are valid")
        })
        .collect();
    // Prefill: a 7-token prompt through SmolLM2's K projection and a small odd one.
    for (ty, rows, cols, tokens, reduce) in [
        (WeightType::Q4_1, 192, 576, 7, Reduce::Subgroup),
        (WeightType::Q8_0, 7, 96, 3, Reduce::Shared),
        (WeightType::F32, 7, 45, 5, Reduce::Subgroup),
    ] {
        v.push(
            batched_case(ty, rows, cols, tokens, reduce, 2000 + rows as u64)
                .expect("the listed shapes are valid"),
        );
    }
    // The executor's shapes: the CPU's (8 rows on 8 invocations; 16-element segments; scales
    // through an f16 view) and the GPUs' (8 rows on 128 invocations, f16 scales), prefill
    // included.
    for (ty, rows, cols, tokens, reduce) in [
        (WeightType::Q4_1, 1536, 576, 1, Reduce::Subgroup),
        (WeightType::Q4_1, 192, 576, 3, Reduce::Shared),
        (WeightType::Q8_0, 13, 96, 1, Reduce::Subgroup),
        (WeightType::Q4_0, 13, 96, 2, Reduce::Subgroup),
        (WeightType::F16, 13, 45, 1, Reduce::Subgroup),
    ] {
        for (workgroup, segment, f16_scales) in
            [(8, 16, false), (8, 8, true), (8, 16, true), (128, 8, true)]
        {
            let spec = MatvecSpec {
                rows_per_workgroup: 8,
                workgroup,
                segment,
                f16_scales,
                ..MatvecSpec::new(ty, reduce)
            };
            v.push(listed(spec, rows, cols, tokens, 3000 + rows as u64));
        }
    }
    // Packed formats in the walks the executor gives them: the GPUs' segments of 8, 16 and
    // 32 elements (two runs of a 16-element sub-block), codes read as words or as bytes,
    // scales through the f16 view or from bytes, and the CPUs' blocked walk on each sub-block,
    // on 8 invocations and on as many as a sub-block's elements; rows past the last
    // workgroup's end. Odd rows of the formats whose blocks are not whole words start mid-word.
    for (i, p) in BlockFormat::ALL.iter().enumerate() {
        let BlockFormat::Packed(p) = *p else {
            continue;
        };
        for (workgroup, segment, (f16_scales, word_codes), blocked) in [
            (128, 8, (true, true), false),
            (32, 16, (false, false), false),
            (64, 32, (true, true), false),
            (32, 32, (true, false), false),
            (8, 8, (true, false), true),
            (p.sub.min(32), 8, (false, false), true),
        ] {
            let spec = MatvecSpec {
                rows_per_workgroup: 4,
                workgroup,
                segment,
                f16_scales,
                word_codes,
                blocked,
                ..MatvecSpec::new(p.ty, Reduce::Subgroup)
            };
            v.push(listed(spec, 13, 2 * p.elems, 1, 3400 + i as u64));
        }
    }
    // Codes read as words, in the GPUs' shapes: Q4_1's aligned words, Q8_0's put together
    // from two (96 columns: every other row starts mid-word; 13 rows end mid-word).
    for (ty, rows, cols, tokens, (rpw, workgroup, segment)) in [
        (WeightType::Q4_1, 192, 576, 1, (2, 128, 8)),
        (WeightType::Q8_0, 13, 96, 1, (4, 32, 8)),
        (WeightType::Q8_0, 13, 96, 2, (2, 128, 16)),
        (WeightType::Q8_0, 49, 576, 1, (8, 128, 32)),
    ] {
        let spec = MatvecSpec {
            rows_per_workgroup: rpw,
            workgroup,
            segment,
            f16_scales: true,
            word_codes: true,
            ..MatvecSpec::new(ty, Reduce::Subgroup)
        };
        v.push(listed(spec, rows, cols, tokens, 3300 + rows as u64));
    }
    // The CPUs' blocked walk: 16 invocations for Q4 (8 too), 32 for Q8_0, 8 for floats (whose
    // last chunk of columns is partly past the end, or whole); scales through the f16 view or
    // from bytes.
    for (ty, rows, cols, tokens, workgroup, f16_scales) in [
        (WeightType::Q4_1, 1536, 576, 1, 16, true),
        (WeightType::Q4_1, 13, 96, 2, 8, false),
        (WeightType::Q4_0, 13, 96, 1, 16, true),
        (WeightType::Q4_0, 7, 64, 3, 8, true),
        (WeightType::Q8_0, 13, 96, 2, 32, true),
        (WeightType::Q8_0, 7, 64, 1, 16, false),
        (WeightType::F16, 13, 45, 2, 8, false),
        (WeightType::F32, 7, 45, 1, 8, false),
        (WeightType::F32, 5, 64, 2, 8, false),
    ] {
        let spec = MatvecSpec {
            rows_per_workgroup: 8,
            workgroup,
            f16_scales,
            blocked: true,
            ..MatvecSpec::new(ty, Reduce::Subgroup)
        };
        v.push(listed(spec, rows, cols, tokens, 3500 + rows as u64));
    }
    // Q4 in pairs of blocks on 32 invocations: even rows of blocks (SmolLM2's 18), odd ones
    // (the last block in its own layout), scales through the f16 view or from bytes.
    for (ty, rows, cols, tokens, f16_scales) in [
        (WeightType::Q4_1, 1536, 576, 1, true),
        (WeightType::Q4_1, 13, 96, 2, true),
        (WeightType::Q4_1, 7, 160, 1, false),
        (WeightType::Q4_0, 13, 160, 1, true),
        (WeightType::Q4_0, 7, 64, 3, false),
        (WeightType::Q4_0, 5, 32, 1, true),
    ] {
        let spec = MatvecSpec {
            rows_per_workgroup: 4,
            workgroup: 32,
            f16_scales,
            blocked: true,
            pairs: true,
            ..MatvecSpec::new(ty, Reduce::Subgroup)
        };
        v.push(listed(spec, rows, cols, tokens, 3600 + cols as u64));
    }
    // Prompts on several tokens per workgroup, the last group partly past the last token.
    for (ty, rows, cols, tokens, tpw) in [
        (WeightType::Q4_1, 192, 576, 7, 4),
        (WeightType::Q4_1, 192, 576, 11, 8),
        (WeightType::Q4_1, 13, 96, 8, 4),
        (WeightType::Q4_0, 7, 160, 5, 2),
    ] {
        let spec = MatvecSpec {
            rows_per_workgroup: 4,
            workgroup: 32,
            f16_scales: true,
            blocked: true,
            pairs: true,
            tokens_per_workgroup: tpw,
            ..MatvecSpec::new(ty, Reduce::Subgroup)
        };
        v.push(listed(spec, rows, cols, tokens, 3700 + cols as u64));
    }
    v
}

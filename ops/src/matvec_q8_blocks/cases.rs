//! The product's conformance cases: random weights of each format with units, x quantized on
//! the host, every form of teams and both reductions, the residual's variant and the rope's.

use super::{format, grid, kernel, takes, Teams, OP, X_BLOCKS};
use crate::blocks::BlockFormat;
use crate::case::*;
use crate::key_layout::KeyLayout;
use crate::matvec_attn::{rope_caches, with_rope_io, QkvRope, RopeShape};
use crate::matvec_fused::Epilogue;
use crate::matvec_q8::{quantize_x, quantize_x_later, reference, Q8Activations};
use crate::rope::RopeMode;
use crate::rope_freqs::RopeFreqs;
use crate::rope_store::{self, HeadSpan, RopeStore};
use crate::shape::ShapeError;
use crate::support::{seed, Float, Reduction};
use trine_gguf::quant::{quantize, WeightType};
use trine_ir::{ParamValue, Scalar};

/// The eps of the cases whose product normalises x ([`super::kernel`]'s `rms`).
const EPS: f32 = 1e-5;

/// A case's x: random values quantized on the host as the quantizer before the product writes
/// them; with `rms`, x·g (g random) left unnormalised, with each block's sum of squares and
/// the row's 1/rms the product applies.
fn case_x(rng: &mut Rng, cols: u32, rms: bool) -> (Q8Activations, Option<(Vec<f32>, f64)>) {
    let x = rng.f32s(cols as usize, -1.0, 1.0);
    if !rms {
        return (quantize_x(&x, X_BLOCKS), None);
    }
    let g = rng.f32s(cols as usize, 0.5, 1.5);
    let (q, squares) = quantize_x_later(&x, &g);
    let mean = x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / f64::from(cols);
    (q, Some((squares, 1.0 / (mean + f64::from(EPS)).sqrt())))
}

/// A conformance (and bench) case: random weights of `ty`, random x quantized on the host;
/// with `rms`, x·g the product normalises.
pub fn case(
    ty: WeightType,
    (rows, cols): (u32, u32),
    reduce: Reduction,
    (rows_per_team, teams): (u32, Teams),
    (add, f16_view, prefetch, rms): (bool, bool, bool, bool),
) -> Result<Case, ShapeError> {
    let (p, _) = format(OP, ty)?;
    if !takes(ty, cols) {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!(
                "rows of {cols} {ty} weights (whole blocks of {} only)",
                p.elems
            ),
        });
    }
    let (r, c) = (rows as usize, cols as usize);
    let mut rng = Rng::new(u64::from(rows) * 31 + u64::from(cols));
    let w = quantize(ty, &rng.f32s(r * c, -1.0, 1.0))?;
    let (x, norm) = case_x(&mut rng, cols, rms);
    let mut want = reference(ty, &w, r, c, &x)?;
    if let Some((_, inv)) = norm {
        want.iter_mut().for_each(|y| *y *= inv);
    }
    let resid = rng.f32s(r, -1.0, 1.0);
    let view = if f16_view { "_h" } else { "" };
    let suffix = if add { "_add" } else { "" };
    let nopf = if prefetch { "" } else { "_nopf" };
    let normed = if rms { "_rms" } else { "" };
    let w = crate::blocks::pad_to_words(w);
    let mut case = Case::new(
        format!(
            "{OP}/{ty}/{rows}x{cols}/blocks_{}_r{rows_per_team}_t{}u{}s{}{view}{suffix}{nopf}{normed}",
            reduce.name(),
            teams.width,
            teams.units,
            teams.steps
        ),
        kernel(
            ty,
            reduce,
            rows_per_team,
            teams,
            if add { Epilogue::Add } else { Epilogue::None },
            (f16_view, prefetch, rms),
        )?,
        grid(rows, rows_per_team, teams),
    )
    .input("w", Scalar::U32, w.clone());
    if f16_view {
        case = case.input("w16", Scalar::F16, w);
    }
    case = case
        .input("xq", Scalar::U32, bytemuck::cast_slice(&x.words).to_vec())
        .input("xd", Scalar::F32, bytemuck::cast_slice(&x.scales).to_vec());
    let mut params = vec![ParamValue::U32(rows), ParamValue::U32(cols)];
    if let Some((squares, _)) = &norm {
        case = case.input("xn", Scalar::F32, f32_bytes(squares));
        params.push(ParamValue::F32(EPS));
    }
    if add {
        want.iter_mut()
            .zip(&resid)
            .for_each(|(y, &v)| *y += f64::from(v));
        case = case.input("r", Scalar::F32, f32_bytes(&resid));
    }
    Ok(case
        .output("y", Scalar::F32, vec![0; r * 4], want)
        .params(params))
}

/// A conformance case of the product with the rope epilogue, one token at `pos`: random
/// weights of `ty` over the heads `store` says (a layer's stacked QKV, or the span of them a
/// product of another type holds), x quantized on the host, turned by `freqs`; q against the
/// product's reference rounded to f32 then [`rope_store::reference`], and both caches whole, so
/// that a write to the wrong row or head shows.
pub fn rope_case(
    ty: WeightType,
    cols: u32,
    store: RopeStore,
    (reduce, rows_per_team, teams): (Reduction, u32, Teams),
    (pos, kv): (u32, Float),
    (freqs, rms): (&RopeFreqs, bool),
) -> Result<Case, ShapeError> {
    store.check()?;
    let rope = RopeShape {
        head_dim: store.head_dim,
        rot_dim: store.rot_dim,
        kv,
        keys: store.keys,
    };
    let qkv = QkvRope {
        weights: ty,
        cols,
        store,
    };
    let rows = qkv.rows();
    let name =
        format!(
        "{OP}/{ty}/qkv{}x{}x{}{}+{cols}/pos{pos}+ctx{}/blocks_{}_r{rows_per_team}_t{}u{}s{}/{}{}{}",
        store.heads,
        store.kv_heads,
        store.head_dim,
        store
            .part
            .map_or(String::new(), |p| format!("[{}..{}]", p.first, p.first + p.count)),
        store.context,
        reduce.name(),
        teams.width,
        teams.units,
        teams.steps,
        rope.name(),
        freqs.label(),
        if rms { "/rms" } else { "" }
    );
    let mut rng = Rng::new(seed(&name));
    let w = quantize(ty, &rng.f32s((rows * cols) as usize, -1.0, 1.0))?;
    let (x, norm) = case_x(&mut rng, cols, rms);
    let (k0, v0) = rope_caches(&mut rng, &store, kv);
    let inv = norm.as_ref().map_or(1.0, |&(_, inv)| inv);
    let sums: Vec<f32> = reference(ty, &w, rows as usize, cols as usize, &x)?
        .into_iter()
        .map(|v| (v * inv) as f32)
        .collect();
    let want = rope_store::reference(&store, freqs, pos, &sums, &k0, &v0)?;
    let kernel = kernel(
        ty,
        reduce,
        rows_per_team,
        teams,
        Epilogue::RopeStore(rope),
        (true, true, rms),
    )?;
    let w = crate::blocks::pad_to_words(w);
    let mut params = vec![ParamValue::U32(rows), ParamValue::U32(cols)];
    let mut case = Case::new(name, kernel, grid(rows, rows_per_team, teams))
        .input("w", Scalar::U32, w.clone())
        .input("w16", Scalar::F16, w)
        .input("xq", Scalar::U32, bytemuck::cast_slice(&x.words).to_vec())
        .input("xd", Scalar::F32, bytemuck::cast_slice(&x.scales).to_vec());
    if let Some((squares, _)) = &norm {
        case = case.input("xn", Scalar::F32, f32_bytes(squares));
        params.push(ParamValue::F32(EPS));
    }
    params.extend(qkv.params());
    Ok(with_rope_io(case, rope, &store, (pos, freqs), (k0, v0), want).params(params))
}

/// The rope's cases: an 8B layer's head shape scaled down (head size 128, four query heads a
/// KV head) stacked and as the V span of a layer whose V has its own type, in columns, f32
/// and f16 caches, partial rotation and Llama 3's frequency factors; the teams of a subgroup
/// and the whole workgroup, both reductions.
fn rope_cases() -> Vec<Case> {
    let store = |heads, kv_heads, head_dim| RopeStore {
        tokens: 1,
        heads,
        kv_heads,
        head_dim,
        rot_dim: head_dim,
        context: 40,
        mode: RopeMode::Normal,
        keys: KeyLayout::Rows,
        part: None,
    };
    let v_span = |s: RopeStore| RopeStore {
        part: Some(HeadSpan {
            first: s.heads + s.kv_heads,
            count: s.kv_heads,
        }),
        ..s
    };
    let columns = |s| RopeStore {
        keys: KeyLayout::Columns,
        ..s
    };
    let partial = |s: RopeStore| RopeStore {
        rot_dim: s.head_dim / 2,
        ..s
    };
    let (sub, shared) = (Reduction::Subgroup, Reduction::Shared);
    let mut llama3 = RopeFreqs::plain(500_000.0);
    llama3.factors = (0..64).map(|i| 1.0 + i as f32 / 16.0).collect();
    let plain = RopeFreqs::plain(10_000.0);
    let cases = [
        (
            WeightType::Q4_K,
            256,
            store(8, 2, 128),
            (sub, 2, Teams::pairs(1)),
            (17, Float::F16),
            (&llama3, false),
        ),
        (
            WeightType::Q6_K,
            512,
            v_span(store(8, 2, 128)),
            (sub, 2, Teams::WHOLE),
            (39, Float::F16),
            (&llama3, false),
        ),
        (
            WeightType::Q4_K,
            512,
            columns(store(4, 4, 64)),
            (shared, 2, Teams::pairs(2)),
            (3, Float::F32),
            (&plain, false),
        ),
        (
            WeightType::Q4_0x8,
            256,
            partial(store(6, 2, 32)),
            (shared, 4, Teams::WHOLE),
            (0, Float::F32),
            (&plain, false),
        ),
        (
            WeightType::Q5_K,
            256,
            store(6, 3, 64),
            (sub, 2, Teams::WHOLE),
            (9, Float::F16),
            (&plain, false),
        ),
        // x·g normalised by the product before its rope, as a decode step's QKV takes it.
        (
            WeightType::Q8_0x8,
            512,
            store(8, 2, 128),
            (sub, 2, Teams::pairs(2)),
            (21, Float::F16),
            (&llama3, true),
        ),
        (
            WeightType::Q4_K,
            1024,
            store(4, 2, 64),
            (shared, 2, Teams::WHOLE),
            (5, Float::F32),
            (&plain, true),
        ),
    ];
    cases
        .into_iter()
        .map(|(ty, cols, s, how, at, x)| {
            rope_case(ty, cols, s, how, at, x).expect("the listed shapes are valid")
        })
        .collect()
}

/// Every format with units: a row of one block, rows of three blocks (every other Q6_K block
/// then starts mid-word) in a count the workgroups' rows do not divide, a row longer than a
/// workgroup's units, both reductions, the residual's variant and scales read both ways; the
/// teams of a subgroup, with one unit, one pair and two pairs a step, a last step past the row.
pub fn cases() -> Vec<Case> {
    let mut out = vec![];
    for ty in BlockFormat::ALL
        .map(BlockFormat::ty)
        .into_iter()
        .filter(|&t| format(OP, t).is_ok())
    {
        let one = Teams {
            width: 32,
            units: 1,
            steps: 1,
        };
        let (shared, subgroup) = (Reduction::Shared, Reduction::Subgroup);
        // (rows, cols), reduction, (rows a team, teams), (residual added, f16 view, L2
        // prefetch, x normalised by the product). Of 4,608 columns (18 blocks, 72 pairs) two
        // steps of 32 pairs take 64, then 8 and one past the end.
        let (pairs1, pairs2) = (Teams::pairs(1), Teams::pairs(2));
        let shapes = [
            (
                (4, 256),
                shared,
                (1, Teams::WHOLE),
                (false, false, true, false),
            ),
            (
                (7, 768),
                subgroup,
                (2, Teams::WHOLE),
                (false, true, true, false),
            ),
            (
                (9, 4608),
                subgroup,
                (1, Teams::WHOLE),
                (true, true, true, false),
            ),
            (
                (9, 4608),
                subgroup,
                (2, Teams::WHOLE),
                (true, true, false, false),
            ),
            (
                (5, 768),
                shared,
                (2, Teams::WHOLE),
                (true, false, false, false),
            ),
            ((7, 768), subgroup, (2, one), (false, true, true, false)),
            (
                (10, 2048),
                subgroup,
                (2, pairs1),
                (false, true, true, false),
            ),
            (
                (13, 4608),
                subgroup,
                (2, pairs2),
                (false, true, true, false),
            ),
            ((11, 2304), shared, (2, pairs2), (true, false, true, false)),
            ((9, 4608), subgroup, (2, pairs2), (true, true, false, false)),
            // x·g the product normalises: rows of 128 and 144 blocks, four sums of squares
            // a lane of a subgroup's team and more; the whole workgroup's team, a residual.
            ((10, 4096), subgroup, (2, pairs2), (false, true, true, true)),
            ((7, 4608), shared, (2, pairs1), (false, false, false, true)),
            (
                (5, 4608),
                subgroup,
                (2, Teams::WHOLE),
                (true, true, true, true),
            ),
        ];
        for (shape, reduce, per, how) in shapes {
            out.push(case(ty, shape, reduce, per, how).expect("valid shapes"));
        }
    }
    out.extend(rope_cases());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A format without units, and rows that are not whole blocks, are refused by name.
    #[test]
    fn what_it_does_not_take_is_refused() {
        let e = kernel(
            WeightType::Q4_0,
            Reduction::Shared,
            1,
            Teams::WHOLE,
            Epilogue::None,
            (false, true, false),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("q4_0 weights")
                && e.contains("(it takes q4_k, q5_k, q6_k, q4_0x8, q4_1x8, q8_0x8)"),
            "{e}"
        );
        let e = kernel(
            WeightType::Q4_K,
            Reduction::Shared,
            2,
            Teams::WHOLE,
            Epilogue::Swiglu,
            (false, true, false),
        )
        .unwrap_err();
        assert!(e.to_string().contains("SwiGLU"), "{e}");
        assert!(takes(WeightType::Q6_K, 512) && !takes(WeightType::Q6_K, 96));
        assert!(takes(WeightType::Q8_0x8, 512) && !takes(WeightType::Q8_0x8, 96));
        let e = case(
            WeightType::Q4_K,
            (1, 96),
            Reduction::Shared,
            (1, Teams::WHOLE),
            (false, false, true, false),
        )
        .unwrap_err();
        assert!(e.to_string().contains("96"), "{e}");
    }
}

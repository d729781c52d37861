//! The conformance cases of the QKV product with rope and of the output projection with the
//! combine: random weights, inputs and caches, against the unfused references.

use super::{reference_combine, reference_rope, CombineShape, QkvRope, RopeShape, OP};
use crate::attention_split;
use crate::case::*;
use crate::key_layout::KeyLayout;
use crate::matvec::{MatvecSpec, Reduce};
use crate::matvec_fused::{self as fused, Epilogue, Prologue};
use crate::rope::RopeMode;
use crate::rope_freqs::RopeFreqs;
use crate::rope_store::{self, HeadSpan, RopeStore};
use crate::shape::ShapeError;
use crate::support::{seed, Float};
use trine_gguf::quant::{quantize, WeightType};
use trine_ir::{ParamValue, Scalar};

/// A conformance case of the QKV product with the rope epilogue (and the norm, as the graph
/// runs it) turning by `freqs`, on `spec`'s shape: q against the reference, and both caches
/// whole, so that a write to the wrong row or head shows.
pub fn rope_case(
    spec: MatvecSpec,
    shape: QkvRope,
    freqs: &RopeFreqs,
    pos: u32,
    kv: Float,
) -> Result<Case, ShapeError> {
    shape.store.check()?;
    let rope = RopeShape {
        head_dim: shape.store.head_dim,
        rot_dim: shape.store.rot_dim,
        kv,
        keys: shape.store.keys,
    };
    let spec = MatvecSpec {
        prologue: Prologue::RmsNorm,
        epilogue: Epilogue::RopeStore(rope),
        ..spec
    };
    let (ty, rows, cols, tokens) = (spec.weights, shape.rows(), shape.cols, shape.store.tokens);
    let name = format!(
        "{OP}/{ty}/qkv{}x{}x{}{}+{cols}/t{tokens}+pos{pos}+ctx{}/{}/norm+{}",
        shape.store.heads,
        shape.store.kv_heads,
        shape.store.head_dim,
        shape.store.part.map_or(String::new(), |p| format!(
            "[{}..{}]",
            p.first,
            p.first + p.count
        )),
        shape.store.context,
        spec.shape_name(),
        rope.name()
    ) + if spec.reduce == Reduce::Shared {
        "/shared"
    } else {
        ""
    } + &freqs.label();
    let mut rng = Rng::new(seed(&name));
    let w = quantize(ty, &rng.f32s((rows * cols) as usize, -1.0, 1.0))?;
    let x = rng.f32s((tokens * cols) as usize, -1.0, 1.0);
    let g = rng.f32s(cols as usize, 0.5, 1.5);
    let (k0, v0) = rope_caches(&mut rng, &shape.store, kv);
    let want = reference_rope(&shape, freqs, &w, &x, &g, pos, (&k0, &v0))?;
    let case = spec.weight_inputs(
        Case::new(name, crate::matvec::kernel(spec)?, spec.grid(rows, tokens)),
        w,
        cols,
    );
    let mut params = vec![
        ParamValue::U32(rows),
        ParamValue::U32(cols),
        ParamValue::F32(fused::EPS),
    ];
    params.extend(shape.params());
    params.extend(spec.tokens_params(tokens));
    let case = case
        .input("x", Scalar::F32, f32_bytes(&x))
        .input("g", Scalar::F32, f32_bytes(&g));
    Ok(with_rope_io(case, rope, &shape.store, (pos, freqs), (k0, v0), want).params(params))
}

/// Random caches for `store`'s heads and context, as a `kv` cache stores them.
pub(crate) fn rope_caches(rng: &mut Rng, store: &RopeStore, kv: Float) -> (Vec<f32>, Vec<f32>) {
    let cache = (store.context * store.kv_heads * store.head_dim) as usize;
    let k0 = kv.stored(&rng.f32s(cache, -3.0, 3.0));
    let v0 = kv.stored(&rng.f32s(cache, -3.0, 3.0));
    (k0, v0)
}

/// `case` with the rope epilogue's buffers after its own: `step` (at `pos`) and `freq` (of
/// `freqs`), q against `want`'s, and both caches whole from `caches` (the K cache in `rope`'s
/// layout, where in columns the positions past the context hold a value that must stay), so
/// that a write to the wrong row or head shows; to the bound of `rope`'s cache type.
pub(crate) fn with_rope_io(
    case: Case,
    rope: RopeShape,
    store: &RopeStore,
    (pos, freqs): (u32, &RopeFreqs),
    (k0, v0): (Vec<f32>, Vec<f32>),
    want: rope_store::RopeStoreOut,
) -> Case {
    let kv = rope.kv;
    let rounded = |v: Vec<f64>| v.into_iter().map(|x| kv.round(x)).collect::<Vec<_>>();
    let dims = (store.context, store.kv_heads, store.head_dim);
    let k_want = rope.keys.arrange(&rounded(want.k_cache), dims, 5.0);
    let k0 = rope.keys.arrange(&k0, dims, 5.0);
    let q0 = vec![f32::NAN; want.q.len()];
    case.input("step", Scalar::U32, u32_bytes(&[pos]))
        .input("freq", Scalar::F32, f32_bytes(&freqs.table(store.rot_dim)))
        .output("q", Scalar::F32, f32_bytes(&q0), want.q)
        .output("k_cache", kv.scalar(), kv.bytes(&k0), k_want)
        .output("v_cache", kv.scalar(), kv.bytes(&v0), rounded(want.v_cache))
        .bound(match kv {
            Float::F16 => crate::matvec::NMSE_F16_CACHE,
            Float::F32 => crate::matvec::NMSE,
        })
}

/// A conformance case of the output projection with the combine prologue and the residual
/// add: `part` from [`attention_split::reference_split`] on random q, k and v at `pos`.
pub fn combine_case(
    spec: MatvecSpec,
    shape: CombineShape,
    rows: u32,
    tokens: u32,
    pos: u32,
) -> Result<Case, ShapeError> {
    shape.check(None)?;
    let spec = MatvecSpec {
        prologue: Prologue::Combine(shape),
        epilogue: Epilogue::Add,
        ..spec
    };
    let ty = spec.weights;
    let cols = shape.heads * shape.head_dim;
    let mut name = format!(
        "{OP}/{ty}/{rows}x{cols}/t{tokens}+pos{pos}/{}/{}+add",
        spec.shape_name(),
        shape.name()
    );
    if spec.reduce == Reduce::Shared {
        name.push_str("/shared");
    }
    let mut rng = Rng::new(seed(&name));
    let w = quantize(ty, &rng.f32s((rows * cols) as usize, -1.0, 1.0))?;
    let attn = shape.attention(tokens);
    let kv_len = pos + tokens;
    let d = (shape.heads * shape.head_dim) as usize;
    let q = rng.f32s(tokens as usize * d, -2.0, 2.0);
    let kc = rng.f32s(kv_len as usize * d, -2.0, 2.0);
    let vc = rng.f32s(kv_len as usize * d, -1.0, 1.0);
    let part: Vec<f32> = attention_split::reference_split(&attn, kv_len, pos, &q, &kc, &vc)?
        .into_iter()
        .map(|v| v as f32)
        .collect();
    let res = rng.f32s((rows * tokens) as usize, -2.0, 2.0);
    let want = reference_combine(ty, &w, rows as usize, shape, &part, &res)?;
    let case = spec.weight_inputs(
        Case::new(name, crate::matvec::kernel(spec)?, spec.grid(rows, tokens)),
        w,
        cols,
    );
    let mut case = case
        .input("part", Scalar::F32, f32_bytes(&part))
        .input("r", Scalar::F32, f32_bytes(&res))
        .output("y", Scalar::F32, vec![0; want.len() * 4], want)
        .params(
            [ParamValue::U32(rows), ParamValue::U32(cols)]
                .into_iter()
                .chain(spec.tokens_params(tokens))
                .collect(),
        )
        .bound(crate::matvec::NMSE);
    if spec.reduce == Reduce::Subgroup {
        case = case.fallback(crate::matvec::kernel(MatvecSpec {
            reduce: Reduce::Shared,
            ..spec
        })?);
    }
    Ok(case)
}

/// SmolLM2-135M's two products on the GPUs' shape (2 rows on 128 invocations, f16 scales) and
/// the CPU's (4 rows on 32, in pairs of blocks), decode and a prompt chunk, 8 splits and one; then small odd shapes:
/// heads that are not a multiple of the workgroup's rows, a head dimension that is not a
/// multiple of a block, more heads than invocations, f32 caches and the shared reduction.
pub fn cases() -> Vec<Case> {
    use WeightType::*;
    let spec = |ty, (rows_per_workgroup, workgroup, segment, f16_scales), reduce| MatvecSpec {
        rows_per_workgroup,
        workgroup,
        segment,
        f16_scales,
        ..MatvecSpec::new(ty, reduce)
    };
    let gpu = (2, 128, 8, true);
    let cpu = |ty| MatvecSpec {
        blocked: true,
        pairs: true,
        ..spec(ty, (4, 32, 8, true), Reduce::Subgroup)
    };
    let prompt = |ty| MatvecSpec {
        tokens_per_workgroup: 8,
        ..cpu(ty)
    };
    let smol = |tokens, context| RopeStore {
        tokens,
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
        rot_dim: 64,
        context,
        mode: RopeMode::Normal,
        keys: KeyLayout::Rows,
        part: None,
    };
    let small = |tokens, heads, kv_heads, head_dim| RopeStore {
        tokens,
        heads,
        kv_heads,
        head_dim,
        rot_dim: head_dim,
        context: 12,
        mode: RopeMode::Normal,
        keys: KeyLayout::Rows,
        part: None,
    };
    let columns = |store| RopeStore {
        keys: KeyLayout::Columns,
        ..store
    };
    // A layer whose V is of another weight type: its own product, SmolLM2's last 3 heads.
    let v_part = |store| RopeStore {
        part: Some(HeadSpan {
            first: 12,
            count: 3,
        }),
        ..store
    };
    let partial = |store, rot_dim| RopeStore { rot_dim, ..store };
    let qkv = |weights, cols, store| QkvRope {
        weights,
        cols,
        store,
    };
    let mut v = vec![];
    // The GPUs' shape reads Q4_1 codes as words; one case keeps byte loads.
    let bytes_q4 = spec(Q4_1, gpu, Reduce::Subgroup);
    let gpu_q4 = MatvecSpec {
        word_codes: true,
        ..bytes_q4
    };
    for (s, shape, pos, kv) in [
        (gpu_q4, qkv(Q4_1, 576, smol(1, 2048)), 2047, Float::F16),
        (bytes_q4, qkv(Q4_1, 576, smol(1, 2048)), 0, Float::F16),
        (cpu(Q4_1), qkv(Q4_1, 576, smol(1, 64)), 17, Float::F16),
        (prompt(Q4_1), qkv(Q4_1, 576, smol(7, 32)), 13, Float::F16),
        (cpu(Q4_0), qkv(Q4_0, 64, small(2, 5, 5, 4)), 10, Float::F32),
        (gpu_q4, qkv(Q4_1, 576, smol(7, 32)), 13, Float::F16),
        (gpu_q4, qkv(Q4_1, 576, smol(1, 64)), 30, Float::F32),
        (gpu_q4, qkv(Q4_1, 576, v_part(smol(1, 64))), 30, Float::F16),
        (
            spec(Q6_K, gpu, Reduce::Subgroup),
            qkv(Q6_K, 256, v_part(small(2, 9, 3, 8))),
            7,
            Float::F32,
        ),
        (
            cpu(Q4_1),
            qkv(Q4_1, 576, v_part(smol(7, 32))),
            13,
            Float::F16,
        ),
        // The K cache in columns, as an executor led by a CPU keeps it.
        (gpu_q4, qkv(Q4_1, 576, columns(smol(7, 32))), 13, Float::F32),
        (
            cpu(Q4_1),
            qkv(Q4_1, 576, columns(smol(1, 64))),
            63,
            Float::F32,
        ),
        (
            spec(Q8_0, (4, 64, 8, false), Reduce::Shared),
            qkv(Q8_0, 96, small(3, 4, 2, 6)),
            5,
            Float::F16,
        ),
        (
            spec(F16, (2, 32, 8, false), Reduce::Subgroup),
            qkv(F16, 45, small(2, 3, 1, 10)),
            9,
            Float::F32,
        ),
        (
            spec(Q4_0, (6, 16, 32, true), Reduce::Subgroup),
            qkv(Q4_0, 64, small(2, 5, 5, 4)),
            10,
            Float::F16,
        ),
    ] {
        let freqs = RopeFreqs::plain(100_000.0);
        v.push(rope_case(s, shape, &freqs, pos, kv).expect("the listed shapes are valid"));
    }
    // Scaled frequencies: Llama 3.2's factors at the end of a context of 2048, YaRN past the
    // context it was trained for.
    for (s, shape, pos, kv, freqs) in [
        (
            gpu_q4,
            qkv(Q4_1, 576, smol(1, 2048)),
            2047,
            Float::F16,
            rope_store::llama3(64),
        ),
        (
            cpu(Q4_1),
            qkv(Q4_1, 576, columns(smol(3, 600))),
            597,
            Float::F32,
            rope_store::yarn(),
        ),
        (
            prompt(Q4_1),
            qkv(Q4_1, 576, smol(7, 600)),
            590,
            Float::F16,
            rope_store::yarn(),
        ),
        // Partial rotary: the first half of each head turned, by factors, the rest copied.
        (
            gpu_q4,
            qkv(Q4_1, 576, partial(smol(1, 2048), 32)),
            2047,
            Float::F16,
            rope_store::longrope(32),
        ),
        (
            cpu(Q4_1),
            qkv(Q4_1, 576, partial(columns(smol(3, 64)), 48)),
            40,
            Float::F32,
            rope_store::longrope(48),
        ),
        (
            prompt(Q4_1),
            qkv(Q4_1, 576, partial(smol(7, 32), 16)),
            13,
            Float::F16,
            rope_store::longrope(16),
        ),
    ] {
        v.push(rope_case(s, shape, &freqs, pos, kv).expect("the listed shapes are valid"));
    }
    let smol = |splits| CombineShape {
        heads: 9,
        head_dim: 64,
        splits,
    };
    for (s, shape, rows, tokens, pos) in [
        (gpu_q4, smol(8), 576, 1, 100),
        (bytes_q4, smol(8), 576, 1, 3),
        (cpu(Q4_1), smol(1), 576, 1, 40),
        (prompt(Q4_1), smol(1), 576, 5, 20),
        (
            cpu(Q4_0),
            CombineShape {
                heads: 3,
                head_dim: 32,
                splits: 3,
            },
            7,
            2,
            6,
        ),
        (gpu_q4, smol(1), 576, 5, 20),
        (
            spec(Q8_0, (4, 64, 8, false), Reduce::Shared),
            CombineShape {
                heads: 3,
                head_dim: 32,
                splits: 3,
            },
            7,
            2,
            6,
        ),
        (
            spec(F32, (2, 16, 8, false), Reduce::Subgroup),
            CombineShape {
                heads: 20,
                head_dim: 6,
                splits: 2,
            },
            5,
            1,
            9,
        ),
    ] {
        v.push(combine_case(s, shape, rows, tokens, pos).expect("the listed shapes are valid"));
    }
    v
}

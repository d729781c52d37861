//! The conformance cases of both dispatches: random q and caches, NaN past the step's last
//! token, against the references.

use super::{
    combine_kernel, grouped_kernel, reference_split, reference_split_windowed, split_kernel,
    split_kernel_heads, split_kernel_windowed, SplitAttention,
};
use crate::attention;
use crate::case::*;
use crate::key_layout::KeyLayout;
use crate::kv_type::KvType;
use crate::shape::ShapeError;
use crate::support::{seed, Reduction};
use trine_ir::Scalar;

/// Positions past the step's last token in a case's caches. They hold NaN, so a kernel that
/// reads a key or value it must not see fails the NaN pattern check.
const PAST_END: u32 = 3;

/// The inputs of a case: its name's shape part, `q`, and the caches as stored.
pub(super) struct Inputs {
    pub(super) shape_name: String,
    pub(super) kv_len: u32,
    pub(super) q: Vec<f32>,
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
}

/// Deterministic inputs for `shape` at `pos`, the same for the split and the combine case.
pub(super) fn inputs(shape: &SplitAttention, pos: u32, kv: KvType) -> Result<Inputs, ShapeError> {
    shape.check()?;
    let kind = if shape.tokens == 1 {
        "decode"
    } else {
        "prefill"
    };
    let dtype = match kv {
        KvType::F32 => "f32",
        KvType::F16 => "f32+f16kv",
        KvType::Q8_0 => "f32+q8_0kv",
    };
    let shape_name = format!(
        "{kind}/{dtype}/{}x{}x{}x{}+pos{pos}+s{}",
        shape.tokens, shape.heads, shape.kv_heads, shape.head_dim, shape.splits
    );
    let mut r = Rng::new(seed(&shape_name));
    let kv_len = pos + shape.tokens + PAST_END;
    let q = r.f32s(
        (shape.tokens * shape.heads * shape.head_dim) as usize,
        -2.0,
        2.0,
    );
    let row = (shape.kv_heads * shape.head_dim) as usize;
    let seen = (pos + shape.tokens) as usize * row;
    let cache = |r: &mut Rng, bound: f32| {
        let mut c = kv.stored(&r.f32s(seen, -bound, bound));
        c.resize(kv_len as usize * row, f32::NAN);
        c
    };
    let k = cache(&mut r, 2.0);
    let v = cache(&mut r, 1.0);
    Ok(Inputs {
        shape_name,
        kv_len,
        q,
        k,
        v,
    })
}

/// A conformance case of [`split_kernel`] for `shape` at position `pos` with the caches stored
/// as `kv`, or with `heads` of [`split_kernel_heads`] (a workgroup for each KV head's query
/// heads): `part` against [`reference_split`]. The K cache is in `keys`' layout (in columns,
/// with NaN past the cache's positions too).
pub fn split_case(
    shape: SplitAttention,
    pos: u32,
    kv: KvType,
    (how, keys): (Reduction, KeyLayout),
    heads: bool,
) -> Result<Case, ShapeError> {
    let x = inputs(&shape, pos, kv)?;
    let want = reference_split(&shape, x.kv_len, pos, &x.q, &x.k, &x.v)?;
    // NaN where the kernel must write: an element it skips fails the NaN pattern check.
    let part0 = vec![f32::NAN; want.len()];
    let dims = (x.kv_len, shape.kv_heads, shape.head_dim);
    let k_cache = keys.arrange(&x.k, dims, f32::NAN);
    let mut params = shape.params();
    params.extend(keys.params(x.kv_len));
    let (kernel, grid, form) = if heads {
        let group = shape.heads / shape.kv_heads;
        (
            split_kernel_heads(shape.head_dim, kv, how, keys, group)?,
            shape.grouped_grid(),
            "heads/",
        )
    } else {
        (
            split_kernel(shape.head_dim, kv, how, keys)?,
            shape.grid(),
            "",
        )
    };
    Ok(Case::new(
        format!(
            "attention_split/{form}{}/{}{}",
            x.shape_name,
            how.name(),
            keys.suffix()
        ),
        kernel,
        grid,
    )
    .input("q", Scalar::F32, f32_bytes(&x.q))
    .input("step", Scalar::U32, u32_bytes(&[pos]))
    .input("k", kv.scalar(), kv.bytes(&k_cache))
    .input("v", kv.scalar(), kv.bytes(&x.v))
    .output("part", Scalar::F32, f32_bytes(&part0), want)
    .params(params)
    .bound(attention::NMSE))
}

/// A conformance case of [`grouped_kernel`] for `shape` at position `pos` with the caches
/// stored as `kv` (K in rows): `part` against [`reference_split`], with [`split_kernel`] as
/// the fallback where a device cannot run subgroups of its width.
pub fn grouped_case(shape: SplitAttention, pos: u32, kv: KvType) -> Result<Case, ShapeError> {
    let x = inputs(&shape, pos, kv)?;
    let want = reference_split(&shape, x.kv_len, pos, &x.q, &x.k, &x.v)?;
    let part0 = vec![f32::NAN; want.len()];
    let group = shape.heads / shape.kv_heads;
    Ok(Case::new(
        format!("attention_split/grouped/{}", x.shape_name),
        grouped_kernel(shape.head_dim, group, kv)?,
        shape.grouped_grid(),
    )
    .fallback_on(
        split_kernel(shape.head_dim, kv, Reduction::Shared, KeyLayout::Rows)?,
        shape.grid(),
    )
    .input("q", Scalar::F32, f32_bytes(&x.q))
    .input("step", Scalar::U32, u32_bytes(&[pos]))
    .input("k", kv.scalar(), kv.bytes(&x.k))
    .input("v", kv.scalar(), kv.bytes(&x.v))
    .output("part", Scalar::F32, f32_bytes(&part0), want)
    .params(shape.params())
    .bound(attention::NMSE))
}

/// A conformance case of [`split_kernel_windowed`] for `shape` at position `pos`, each query
/// seeing the last `window` positions, the caches in f32 (K in `keys`' layout): `part` against
/// [`reference_split_windowed`]. The keys and values before the first query's window hold NaN,
/// so a kernel that reads one fails the NaN pattern check.
pub fn windowed_case(
    shape: SplitAttention,
    pos: u32,
    window: u32,
    (how, keys): (Reduction, KeyLayout),
) -> Result<Case, ShapeError> {
    let mut x = inputs(&shape, pos, KvType::F32)?;
    let row = (shape.kv_heads * shape.head_dim) as usize;
    let hidden = (pos + 1).saturating_sub(window) as usize * row;
    x.k[..hidden].fill(f32::NAN);
    x.v[..hidden].fill(f32::NAN);
    let want = reference_split_windowed(&shape, x.kv_len, pos, Some(window), &x.q, &x.k, &x.v)?;
    let part0 = vec![f32::NAN; want.len()];
    let mut params = shape.params();
    params.push(trine_ir::ParamValue::U32(window));
    params.extend(keys.params(x.kv_len));
    let k_cache = keys.arrange(&x.k, (x.kv_len, shape.kv_heads, shape.head_dim), f32::NAN);
    Ok(Case::new(
        format!(
            "attention_split/window{window}/{}/{}{}",
            x.shape_name,
            how.name(),
            keys.suffix()
        ),
        split_kernel_windowed(shape.head_dim, KvType::F32, how, keys)?,
        shape.grid(),
    )
    .input("q", Scalar::F32, f32_bytes(&x.q))
    .input("step", Scalar::U32, u32_bytes(&[pos]))
    .input("k", Scalar::F32, f32_bytes(&k_cache))
    .input("v", Scalar::F32, f32_bytes(&x.v))
    .output("part", Scalar::F32, f32_bytes(&part0), want)
    .params(params)
    .bound(attention::NMSE))
}

/// A conformance case of [`combine_kernel`]: the partials of [`split_case`]'s inputs (from
/// [`reference_split`], rounded to f32) against the unsplit [`attention::reference`].
pub fn combine_case(shape: SplitAttention, pos: u32, kv: KvType) -> Result<Case, ShapeError> {
    let x = inputs(&shape, pos, kv)?;
    let part: Vec<f32> = reference_split(&shape, x.kv_len, pos, &x.q, &x.k, &x.v)?
        .into_iter()
        .map(|v| v as f32)
        .collect();
    let want = attention::reference(&shape.attention(x.kv_len, pos), &x.q, &x.k, &x.v)?;
    let out0 = vec![f32::NAN; want.len()];
    Ok(Case::new(
        format!("attention_combine/{}", x.shape_name),
        combine_kernel(shape.head_dim, shape.splits)?,
        shape.combine_grid(),
    )
    .input("part", Scalar::F32, f32_bytes(&part))
    .output("out", Scalar::F32, f32_bytes(&out0), want)
    .params(shape.combine_params())
    .bound(attention::NMSE))
}

pub fn cases() -> Vec<Case> {
    use KvType::{F16, F32, Q8_0};
    // SmolLM2-135M: 9 query heads, 3 KV heads, head_dim 64.
    let smol = |tokens, splits| SplitAttention {
        tokens,
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
        splits,
    };
    let shapes = [
        (smol(1, 1), 0, F32),  // the first decode step: one key
        (smol(1, 4), 0, F32),  // one key, three empty splits
        (smol(1, 16), 2, F32), // more splits than keys
        (smol(1, 4), 5, F16),
        (smol(1, 4), 97, F32), // a prime position: uneven chunks
        (smol(1, 16), 333, F16),
        (smol(1, 1), 511, F32),
        (smol(1, 16), 511, F16),
        (smol(1, 32), 511, F32),
        (smol(1, 4), 2047, F32),
        (smol(1, 32), 2047, F16),
        (smol(1, 32), 2047, F32),
        (smol(5, 1), 3, F32), // prefill: one split
        (smol(5, 2), 3, F32), // the first token sees no key of the second split
        (smol(5, 2), 3, F16),
        // Multi-query, head_dim above the workgroup and not a multiple of it.
        (
            SplitAttention {
                tokens: 3,
                heads: 2,
                kv_heads: 1,
                head_dim: 80,
                splits: 3,
            },
            67,
            F32,
        ),
        // Odd head dimension, two query heads per KV head.
        (
            SplitAttention {
                tokens: 2,
                heads: 4,
                kv_heads: 2,
                head_dim: 17,
                splits: 5,
            },
            9,
            F16,
        ),
    ];
    // A q8_0 cache, in rows only: decode, a prompt, head_dim 128.
    let q8 = [
        (smol(1, 8), 97, Q8_0),
        (smol(5, 2), 3, Q8_0),
        (
            SplitAttention {
                tokens: 1,
                heads: 4,
                kv_heads: 1,
                head_dim: 128,
                splits: 4,
            },
            300,
            Q8_0,
        ),
    ];
    // Sliding windows: Gemma 3 270M's heads (4 over 1 KV head of 256) past its window of 512,
    // decode steps whose window starts inside a split or leaves whole splits empty, and a
    // prompt whose tokens' windows start at different keys.
    let gemma = |tokens, splits| SplitAttention {
        tokens,
        heads: 4,
        kv_heads: 1,
        head_dim: 256,
        splits,
    };
    let windowed = [
        (gemma(1, 8), 600, 512),
        (smol(1, 4), 9, 4),
        (smol(1, 16), 40, 3),
        (smol(5, 2), 6, 3),
        (smol(5, 1), 6, 1),
        (smol(3, 3), 1, 8),
    ]
    .into_iter()
    .flat_map(|(shape, pos, window)| {
        [
            (Reduction::Shared, KeyLayout::Rows),
            (Reduction::Subgroup, KeyLayout::Rows),
            (Reduction::Subgroup, KeyLayout::Columns),
        ]
        .map(|how| windowed_case(shape, pos, window, how))
    });
    // The grouped kernel: SmolLM2's heads (3 a KV head, 64 wide), Llama 3 8B's (4 a KV head,
    // 128 wide), Gemma 3 270M's (4 over one of 256), 8 a KV head; empty splits, uneven
    // chunks, a prompt's tokens.
    let llama8b = |splits| SplitAttention {
        tokens: 1,
        heads: 32,
        kv_heads: 8,
        head_dim: 128,
        splits,
    };
    let grouped = [
        (smol(1, 1), 0, F32),
        (smol(1, 16), 2, F32),
        (smol(1, 4), 97, F32),
        (smol(1, 16), 333, F16),
        (smol(1, 32), 2047, F16),
        (smol(5, 2), 3, F32),
        (llama8b(8), 700, F16),
        (llama8b(33), 4100, F16),
        (gemma(1, 8), 600, F16),
        (
            SplitAttention {
                tokens: 1,
                heads: 8,
                kv_heads: 1,
                head_dim: 64,
                splits: 3,
            },
            50,
            F32,
        ),
    ]
    .into_iter()
    .map(|(shape, pos, kv)| grouped_case(shape, pos, kv));
    let rows = |(shape, pos, kv)| {
        [
            split_case(shape, pos, kv, (Reduction::Shared, KeyLayout::Rows), false),
            split_case(
                shape,
                pos,
                kv,
                (Reduction::Subgroup, KeyLayout::Rows),
                false,
            ),
            combine_case(shape, pos, kv),
        ]
    };
    shapes
        .into_iter()
        .flat_map(|(shape, pos, kv)| {
            let columns = split_case(
                shape,
                pos,
                kv,
                (Reduction::Subgroup, KeyLayout::Columns),
                false,
            );
            // A workgroup for each KV head's query heads: the CPUs' form, and in rows.
            let heads = (shape.heads > shape.kv_heads).then(|| {
                [
                    split_case(
                        shape,
                        pos,
                        kv,
                        (Reduction::Subgroup, KeyLayout::Columns),
                        true,
                    ),
                    split_case(shape, pos, kv, (Reduction::Shared, KeyLayout::Rows), true),
                ]
            });
            rows((shape, pos, kv))
                .into_iter()
                .chain([columns])
                .chain(heads.into_iter().flatten())
        })
        .chain(q8.into_iter().flat_map(rows))
        .chain(windowed)
        .chain(grouped)
        .collect::<Result<_, _>>()
        .expect("the fixed shapes are valid")
}

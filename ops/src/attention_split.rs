//! Split-K attention ("flash decoding"): [`super::attention`]'s causal grouped-query attention
//! in two dispatches, for a step recorded once and replayed every token.
//!
//! Decode has one query token, so the one-workgroup-per-(head, token) kernel of
//! [`super::attention`] runs `heads` workgroups, each walking the whole cache: a few of a GPU's
//! cores, for a time that grows with the position. Here the visible keys are cut into `splits`
//! chunks, one workgroup each ([`split_kernel`]), and a second dispatch ([`combine_kernel`])
//! merges the chunks' partial softmaxes. A replayed step cannot take its position as a
//! parameter, so both read it from the `step` buffer (element 0 = `pos`, the tokens already in
//! the cache before this step; query token `t` sits at position `pos + t`).
//!
//! Layouts (row-major): `q` and `out` [tokens × heads × head_dim], the caches `k`, `v`
//! [context × kv_heads × head_dim], `part` [tokens × heads × splits × (head_dim + 2)]. Query
//! head `h` reads KV head `h / (heads / kv_heads)` and token `t` sees cache positions
//! `0..=pos + t`, as in [`super::attention`].
//!
//! Split `s` takes keys `[s·C, min((s+1)·C, pos + t + 1))` with `C = ceil((pos + tokens) /
//! splits)`: the chunk follows the position, so every split has work once the cache holds
//! `splits` keys, and the split count stays fixed for a recording. Inside a split the kernel is
//! [`super::attention`]'s online softmax (blocks of one key per invocation), stopped before
//! normalising: a split writes its output accumulators `acc = Σ e^(s_j − m)·v_j`, its maximum
//! score `m` and its sum `l = Σ e^(s_j − m)`. A split with no visible key (more splits than
//! keys, or the late splits of an early prefill token) writes `acc = 0, m = −inf, l = 0`. The
//! combine computes `M = max m_s`, `L = Σ l_s·e^(m_s − M)`, `out = Σ acc_s·e^(m_s − M) / L`.
//! Split 0 always holds key 0, so `M` is finite and an empty split's weight `e^(−inf)` is 0:
//! no NaN. One split is the unsplit attention with the division moved to the combine.
//!
//! Bound: [`super::attention`]'s, [`attention::NMSE`], measured over these kernels too.

use super::attention::{self, attend, for_owned, stage_query, Attended, Attention, Keys, WG};
use super::key_layout::{KeyIndex, KeyLayout};
use super::shape::ShapeError;
use super::support::{elements, expect_len, nonzero, seed, Float, Reduction, PREFETCH_LINE};
use crate::case::*;
use trine_ir::{Access, BufferId, Kernel, KernelBuilder, ParamValue, Scalar, Val};

const OP: &str = "attention_split";

/// One split attention: the shape of both dispatches. The cache length and the position are
/// not part of it: the kernels take the cache as it is bound and the position from `step`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitAttention {
    /// Query tokens.
    pub tokens: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    /// Chunks the visible keys are cut into, one workgroup each.
    pub splits: u32,
}

impl SplitAttention {
    /// Checks the shape; returns the element count of `part`.
    pub fn check(&self) -> Result<u32, ShapeError> {
        // The head counts, the head dimension and `q` are checked as the unsplit op checks
        // them, on a cache that holds just the query tokens.
        self.attention(self.tokens, 0).check()?;
        nonzero(OP, "splits", self.splits)?;
        elements(
            OP,
            "part",
            &[self.tokens, self.heads, self.splits, self.head_dim + 2],
        )
    }

    /// The unsplit attention this computes on a cache of `kv_len` positions at position `pos`.
    pub fn attention(&self, kv_len: u32, pos: u32) -> Attention {
        Attention {
            tokens: self.tokens,
            kv_len,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            offset: pos,
        }
    }

    /// The grid of [`split_kernel`].
    pub fn grid(&self) -> [u32; 3] {
        [self.splits, self.heads, self.tokens]
    }

    /// The grid of [`combine_kernel`].
    pub fn combine_grid(&self) -> [u32; 3] {
        [self.heads, self.tokens, 1]
    }

    pub fn scale(&self) -> f32 {
        1.0 / (self.head_dim as f32).sqrt()
    }

    /// [`split_kernel`]'s parameters, in declaration order.
    pub fn params(&self) -> Vec<ParamValue> {
        vec![
            ParamValue::U32(self.tokens),
            ParamValue::U32(self.heads),
            ParamValue::U32(self.kv_heads),
            ParamValue::U32(self.splits),
            ParamValue::F32(self.scale()),
        ]
    }

    /// [`combine_kernel`]'s parameters, in declaration order.
    pub fn combine_params(&self) -> Vec<ParamValue> {
        vec![ParamValue::U32(self.heads)]
    }
}

fn check_head_dim(head_dim: u32) -> Result<(), ShapeError> {
    let one = SplitAttention {
        tokens: 1,
        heads: 1,
        kv_heads: 1,
        head_dim,
        splits: 1,
    };
    one.check().map(drop)
}

/// The per-split kernel for one head dimension (a compile-time constant), KV cache storage
/// type and reduction of each block's scores (`how`; the shared tree runs everywhere).
/// Buffers: `q` f32, `step` u32, `k` and `v` of `kv`, `part` f32. Params: tokens, heads,
/// kv_heads, splits, scale. Grid [`SplitAttention::grid`]: `[splits, heads, tokens]`.
pub fn split_kernel(
    head_dim: u32,
    kv: Float,
    how: Reduction,
    keys: KeyLayout,
) -> Result<Kernel, ShapeError> {
    check_head_dim(head_dim)?;
    let k = KernelBuilder::new(
        &format!(
            "attention_split_{}_d{head_dim}_{}kv{}",
            how.name(),
            kv.name(),
            keys.suffix()
        ),
        [WG, 1, 1],
    );
    let PartsIo {
        q,
        step,
        k: kc,
        v: vc,
        part,
        tokens,
        heads,
        kv_heads,
    } = PartsIo::declare(&k, kv);
    let splits = k.param("splits", Scalar::U32);
    let scale = k.param("scale", Scalar::F32);
    let index = KeyIndex::declare(&k, keys, kv_heads, head_dim);
    k.settled(step);
    let s = k.workgroup_id(0);
    let h = k.workgroup_id(1);
    let t = k.workgroup_id(2);
    let one = k.u32(1);
    let row = t * heads + h;
    let d = k.u32(head_dim);
    let pos = k.load(step, k.u32(0));
    let (start, stop) = split_keys(&k, (pos, tokens, splits), s);
    let end = stop.min(pos + t + one);
    let keys = Keys {
        kv,
        k: kc,
        v: vc,
        kv_heads,
        heads,
        scale,
        index,
    };
    prefetch_chunk(&k, &keys, head_dim, h, (start, end));
    let q_sh = stage_query(&k, head_dim, q, row * d);
    k.barrier();
    let Attended { m, l, acc } = attend(&k, (head_dim, how), q_sh, h, keys, (start, end));
    let lid = k.local_index();

    let base = (row * splits + s) * k.u32(head_dim + 2);
    for_owned(&k, head_dim, lid, &acc, |i, a| {
        k.store(part, base + i, a.get())
    });
    k.if_(lid.eq(k.u32(0)), || {
        k.store(part, base + d, m.get());
        k.store(part, base + d + one, l.get());
    });
    Ok(k.finish())
}

/// Prefetches the rows of K and V this workgroup's keys `start..end` hold for head `h`
/// ([`trine_ir::Stmt::Prefetch`]), a cache line at a time, one key per invocation. The kernel
/// reads the position from the settled `step` buffer, so on CUDA this runs before the wait for
/// the QKV product ahead: every key but the newest was written by an earlier step, and a decode
/// step's stream of weights has pushed them out of L2 since, so that the scores would otherwise
/// wait on memory twice, once for K and once for V. Caches in rows only: the columns layout is
/// the CPUs', where prefetches are dropped.
/// Split `s`'s keys of a step over `pos + tokens` keys cut into `splits` chunks, `start..stop`:
/// `[s·C, (s+1)·C)` with `C = ceil((pos + tokens) / splits)`, which each caller then clamps to
/// the keys its rows see. The chunk follows the position, so every split has work once the
/// cache holds `splits` keys.
pub(super) fn split_keys<'b>(
    k: &'b KernelBuilder,
    (pos, tokens, splits): (Val<'b>, Val<'b>, Val<'b>),
    s: Val<'b>,
) -> (Val<'b>, Val<'b>) {
    let chunk = (pos + tokens + splits - k.u32(1)) / splits;
    let start = s * chunk;
    (start, start + chunk)
}

fn prefetch_chunk<'b>(
    k: &'b KernelBuilder,
    keys: &Keys<'b>,
    head_dim: u32,
    h: Val<'b>,
    (start, end): (Val<'b>, Val<'b>),
) {
    if keys.index.layout() != KeyLayout::Rows {
        return;
    }
    let line = PREFETCH_LINE / keys.kv.scalar().size() as u32;
    let kv_head = keys.kv_head(k, h, head_dim);
    k.for_range(start + k.local_index(), end, WG, |j| {
        for e in (0..head_dim).step_by(line as usize) {
            let e = kv_head + k.u32(e);
            k.prefetch(keys.k, keys.index.at(k, e, j));
            k.prefetch(keys.v, keys.v_at(k, head_dim, e, j));
        }
    });
}

/// The buffers of a kernel that writes split partials (this one, and
/// [`super::attention_flash`]'s): the rotated queries, the step buffer, the caches, `part`;
/// and its first parameters: tokens, heads, kv_heads.
pub(super) struct PartsIo<'b> {
    pub q: BufferId,
    pub step: BufferId,
    pub k: BufferId,
    pub v: BufferId,
    pub part: BufferId,
    pub tokens: Val<'b>,
    pub heads: Val<'b>,
    pub kv_heads: Val<'b>,
}

impl<'b> PartsIo<'b> {
    pub(super) fn declare(k: &'b KernelBuilder, kv: Float) -> PartsIo<'b> {
        Self::declare_out(k, kv, "part")
    }

    /// [`PartsIo::declare`] with the output buffer (`part`'s place) named `out`.
    pub(super) fn declare_out(k: &'b KernelBuilder, kv: Float, out: &str) -> PartsIo<'b> {
        PartsIo {
            q: k.buffer("q", Scalar::F32, Access::Read),
            step: k.buffer("step", Scalar::U32, Access::Read),
            k: k.buffer("k", kv.scalar(), Access::Read),
            v: k.buffer("v", kv.scalar(), Access::Read),
            part: k.buffer(out, Scalar::F32, Access::Write),
            tokens: k.param("tokens", Scalar::U32),
            heads: k.param("heads", Scalar::U32),
            kv_heads: k.param("kv_heads", Scalar::U32),
        }
    }
}

/// The combine kernel for one head dimension and split count (compile-time constants: the
/// loops over the splits have a constant trip count, so the compiler unrolls them and issues
/// their loads together instead of one round trip to memory per split; on an H100 a runtime
/// count made the combine of 16 splits take 5.3 µs). Buffers: `part` f32, `out` f32. Params:
/// heads. Grid [`SplitAttention::combine_grid`]: `[heads, tokens, 1]`.
pub fn combine_kernel(head_dim: u32, splits: u32) -> Result<Kernel, ShapeError> {
    check_head_dim(head_dim)?;
    nonzero(OP, "splits", splits)?;
    let k = KernelBuilder::new(
        &format!("attention_combine_d{head_dim}_s{splits}"),
        [WG, 1, 1],
    );
    let part = k.buffer("part", Scalar::F32, Access::Read);
    let out = k.buffer("out", Scalar::F32, Access::Write);
    let heads = k.param("heads", Scalar::U32);
    let splits = k.u32(splits);
    let lid = k.local_index();
    let h = k.workgroup_id(0);
    let t = k.workgroup_id(1);
    let d = k.u32(head_dim);
    let one = k.u32(1);
    let zero = k.u32(0);
    let row = t * heads + h;
    let first = row * splits;
    let width = k.u32(head_dim + 2);

    // Every invocation folds the few (m, l) pairs itself: no shared memory, no barrier.
    let max = k.var("max", Scalar::F32);
    max.set(k.f32(f32::NEG_INFINITY));
    k.for_range(zero, splits, 1, |s| {
        max.set(max.get().max(k.load(part, (first + s) * width + d)))
    });
    let big_m = max.get();
    let sum = k.var("sum", Scalar::F32);
    k.for_range(zero, splits, 1, |s| {
        let at = (first + s) * width + d;
        let w = (k.load(part, at) - big_m).exp();
        sum.set(k.load(part, at + one).fma(w, sum.get()));
    });
    let inv = k.f32(1.0) / sum.get();
    let o = k.var("o", Scalar::F32);
    k.for_range(lid, d, WG, |i| {
        o.set(k.f32(0.0));
        k.for_range(zero, splits, 1, |s| {
            let at = (first + s) * width;
            let w = (k.load(part, at + d) - big_m).exp();
            o.set(k.load(part, at + i).fma(w, o.get()));
        });
        k.store(out, row * d + i, o.get() * inv);
    });
    Ok(k.finish())
}

/// The plain-Rust reference of [`split_kernel`] in f64: `part` for a cache of `kv_len`
/// positions at position `pos`, on the values the buffers hold (the caches already rounded to
/// their storage type).
pub fn reference_split(
    shape: &SplitAttention,
    kv_len: u32,
    pos: u32,
    q: &[f32],
    k: &[f32],
    v: &[f32],
) -> Result<Vec<f64>, ShapeError> {
    let n = shape.check()?;
    let whole = shape.attention(kv_len, pos);
    let q_len = whole.check()?;
    let (t_n, h_n, kv_n, d, splits) = (
        shape.tokens as usize,
        shape.heads as usize,
        shape.kv_heads as usize,
        shape.head_dim as usize,
        shape.splits as usize,
    );
    expect_len(OP, "q", q_len as usize, q.len())?;
    let cache = kv_len as usize * kv_n * d;
    expect_len(OP, "k", cache, k.len())?;
    expect_len(OP, "v", cache, v.len())?;
    let scale = 1.0 / (d as f64).sqrt();
    let chunk = (pos as usize + t_n).div_ceil(splits);
    let mut part = vec![0f64; n as usize];
    for (row, out) in part.chunks_mut(splits * (d + 2)).enumerate() {
        let (t, h) = (row / h_n, row % h_n);
        let visible = pos as usize + t + 1;
        let kvh = h / (h_n / kv_n);
        let qr = &q[row * d..][..d];
        let at = |j: usize| (j * kv_n + kvh) * d;
        for (s, out) in out.chunks_mut(d + 2).enumerate() {
            let keys = (s * chunk).min(visible)..((s + 1) * chunk).min(visible);
            let scores: Vec<f64> = keys
                .clone()
                .map(|j| {
                    let kr = &k[at(j)..][..d];
                    scale
                        * qr.iter()
                            .zip(kr)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum::<f64>()
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let (acc, ml) = out.split_at_mut(d);
            for (j, score) in keys.zip(&scores) {
                let p = (score - m).exp();
                ml[1] += p;
                for (a, &vi) in acc.iter_mut().zip(&v[at(j)..][..d]) {
                    *a += p * vi as f64;
                }
            }
            ml[0] = m;
        }
    }
    Ok(part)
}

/// The plain-Rust reference of [`combine_kernel`] in f64, on the `part` values the buffer
/// holds.
pub fn reference_combine(shape: &SplitAttention, part: &[f32]) -> Result<Vec<f64>, ShapeError> {
    let n = shape.check()?;
    expect_len(OP, "part", n as usize, part.len())?;
    let (d, splits) = (shape.head_dim as usize, shape.splits as usize);
    let mut out = vec![0f64; n as usize / splits / (d + 2) * d];
    for (row, o) in part.chunks(splits * (d + 2)).zip(out.chunks_mut(d)) {
        let ml = |s: &[f32]| (s[d] as f64, s[d + 1] as f64);
        let big_m = row
            .chunks(d + 2)
            .map(|s| ml(s).0)
            .fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row
            .chunks(d + 2)
            .map(|s| ml(s).1 * (ml(s).0 - big_m).exp())
            .sum();
        for s in row.chunks(d + 2) {
            let w = (ml(s).0 - big_m).exp() / sum;
            for (oi, &a) in o.iter_mut().zip(&s[..d]) {
                *oi += w * a as f64;
            }
        }
    }
    Ok(out)
}

/// Positions past the step's last token in a case's caches. They hold NaN, so a kernel that
/// reads a key or value it must not see fails the NaN pattern check.
const PAST_END: u32 = 3;

/// The inputs of a case: its name's shape part, `q`, and the caches as stored.
struct Inputs {
    shape_name: String,
    kv_len: u32,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

/// Deterministic inputs for `shape` at `pos`, the same for the split and the combine case.
fn inputs(shape: &SplitAttention, pos: u32, kv: Float) -> Result<Inputs, ShapeError> {
    shape.check()?;
    let kind = if shape.tokens == 1 {
        "decode"
    } else {
        "prefill"
    };
    let dtype = match kv {
        Float::F32 => "f32",
        Float::F16 => "f32+f16kv",
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
/// as `kv`: `part` against [`reference_split`].
/// The K cache is in `keys`' layout (in columns, with NaN past the cache's positions too).
pub fn split_case(
    shape: SplitAttention,
    pos: u32,
    kv: Float,
    (how, keys): (Reduction, KeyLayout),
) -> Result<Case, ShapeError> {
    let x = inputs(&shape, pos, kv)?;
    let want = reference_split(&shape, x.kv_len, pos, &x.q, &x.k, &x.v)?;
    // NaN where the kernel must write: an element it skips fails the NaN pattern check.
    let part0 = vec![f32::NAN; want.len()];
    let dims = (x.kv_len, shape.kv_heads, shape.head_dim);
    let k_cache = keys.arrange(&x.k, dims, f32::NAN);
    let mut params = shape.params();
    params.extend(keys.params(x.kv_len));
    Ok(Case::new(
        format!(
            "attention_split/{}/{}{}",
            x.shape_name,
            how.name(),
            keys.suffix()
        ),
        split_kernel(shape.head_dim, kv, how, keys)?,
        shape.grid(),
    )
    .input("q", Scalar::F32, f32_bytes(&x.q))
    .input("step", Scalar::U32, u32_bytes(&[pos]))
    .input("k", kv.scalar(), kv.bytes(&k_cache))
    .input("v", kv.scalar(), kv.bytes(&x.v))
    .output("part", Scalar::F32, f32_bytes(&part0), want)
    .params(params)
    .bound(attention::NMSE))
}

/// A conformance case of [`combine_kernel`]: the partials of [`split_case`]'s inputs (from
/// [`reference_split`], rounded to f32) against the unsplit [`attention::reference`].
pub fn combine_case(shape: SplitAttention, pos: u32, kv: Float) -> Result<Case, ShapeError> {
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
    use Float::{F16, F32};
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
    shapes
        .into_iter()
        .flat_map(|(shape, pos, kv)| {
            [
                split_case(shape, pos, kv, (Reduction::Shared, KeyLayout::Rows)),
                split_case(shape, pos, kv, (Reduction::Subgroup, KeyLayout::Rows)),
                split_case(shape, pos, kv, (Reduction::Subgroup, KeyLayout::Columns)),
                combine_case(shape, pos, kv),
            ]
        })
        .collect::<Result<_, _>>()
        .expect("the fixed shapes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::nmse;
    use trine_backends::{Backend, BackendKind, Binding, Dispatch};
    use trine_ir::interp::interpret;

    /// Shapes for the chained runs: decode and prefill, more splits than keys, one split, a
    /// head dimension above the workgroup.
    fn chained_shapes() -> Vec<(SplitAttention, u32, Float)> {
        let s = |tokens, head_dim, splits| SplitAttention {
            tokens,
            heads: 4,
            kv_heads: 2,
            head_dim,
            splits,
        };
        vec![
            (s(1, 16, 1), 0, Float::F32),
            (s(1, 16, 8), 2, Float::F16),
            (s(1, 16, 3), 70, Float::F32),
            (s(1, 80, 4), 41, Float::F16),
            (s(4, 16, 1), 5, Float::F32),
            (s(4, 16, 3), 5, Float::F16),
        ]
    }

    fn f32s(bytes: &[u8]) -> Vec<f32> {
        bytemuck::cast_slice(bytes).to_vec()
    }

    /// Split then combine, on the interpreter.
    fn interpreted(shape: &SplitAttention, pos: u32, kv: Float, x: &Inputs) -> Vec<f32> {
        let part_len = shape.check().unwrap() as usize;
        let mut b = vec![
            f32_bytes(&x.q),
            u32_bytes(&[pos]),
            kv.bytes(&x.k),
            kv.bytes(&x.v),
            vec![0; part_len * 4],
        ];
        let split = split_kernel(shape.head_dim, kv, Reduction::Shared, KeyLayout::Rows).unwrap();
        interpret(&split, shape.grid(), &mut b, &shape.params(), 16).unwrap();
        let mut c = vec![b.pop().unwrap(), vec![0; x.q.len() * 4]];
        let combine = combine_kernel(shape.head_dim, shape.splits).unwrap();
        interpret(
            &combine,
            shape.combine_grid(),
            &mut c,
            &shape.combine_params(),
            16,
        )
        .unwrap();
        f32s(&c[1])
    }

    /// Split then combine on `backend`, `part` staying on the device between the dispatches.
    fn on_backend(
        backend: &dyn Backend,
        shape: &SplitAttention,
        pos: u32,
        kv: Float,
        x: &Inputs,
    ) -> Vec<f32> {
        let part_len = shape.check().unwrap() as u64 * 4;
        let datas = [
            f32_bytes(&x.q),
            u32_bytes(&[pos]),
            kv.bytes(&x.k),
            kv.bytes(&x.v),
            vec![0; part_len as usize],
            vec![0; x.q.len() * 4],
        ];
        let b: Vec<Binding> = datas
            .iter()
            .map(|d| {
                let buffer = backend.alloc(d.len() as u64).unwrap();
                backend.write(buffer, 0, d).unwrap();
                Binding {
                    buffer,
                    offset: 0,
                    size: d.len() as u64,
                }
            })
            .collect();
        let run = |kernel: Kernel, grid, bindings: &[Binding], params: &[ParamValue]| {
            let program = backend.compile(&kernel).unwrap();
            backend
                .dispatch(&Dispatch {
                    program,
                    grid,
                    bindings,
                    params,
                })
                .unwrap();
        };
        run(
            split_kernel(shape.head_dim, kv, Reduction::Shared, KeyLayout::Rows).unwrap(),
            shape.grid(),
            &b[..5],
            &shape.params(),
        );
        run(
            combine_kernel(shape.head_dim, shape.splits).unwrap(),
            shape.combine_grid(),
            &b[4..],
            &shape.combine_params(),
        );
        backend.synchronize().unwrap();
        let mut out = vec![0; x.q.len() * 4];
        backend.read(b[5].buffer, 0, &mut out).unwrap();
        for binding in b {
            backend.free(binding.buffer);
        }
        f32s(&out)
    }

    fn expected(shape: &SplitAttention, pos: u32, x: &Inputs) -> Vec<f64> {
        attention::reference(&shape.attention(x.kv_len, pos), &x.q, &x.k, &x.v).unwrap()
    }

    fn as_f64(v: &[f32]) -> Vec<f64> {
        v.iter().map(|&x| x as f64).collect()
    }

    #[test]
    fn split_then_combine_is_attention_on_the_interpreter() {
        for (shape, pos, kv) in chained_shapes() {
            let x = inputs(&shape, pos, kv).unwrap();
            let got = interpreted(&shape, pos, kv, &x);
            let e = nmse(&expected(&shape, pos, &x), &as_f64(&got)).unwrap();
            assert!(e < 1e-12, "{}: NMSE {e:e}", x.shape_name);
        }
    }

    #[test]
    fn split_then_combine_is_attention_on_the_cpu_backend() {
        let cpu = trine_backends::open(BackendKind::Cpu).unwrap();
        for (shape, pos, kv) in chained_shapes() {
            let x = inputs(&shape, pos, kv).unwrap();
            let got = on_backend(cpu.as_ref(), &shape, pos, kv, &x);
            let e = nmse(&expected(&shape, pos, &x), &as_f64(&got)).unwrap();
            assert!(e < 1e-12, "{}: NMSE {e:e}", x.shape_name);
        }
    }

    #[test]
    fn combined_reference_partials_are_attention() {
        for (shape, pos, kv) in chained_shapes() {
            let x = inputs(&shape, pos, kv).unwrap();
            let part = reference_split(&shape, x.kv_len, pos, &x.q, &x.k, &x.v).unwrap();
            let part: Vec<f32> = part.into_iter().map(|v| v as f32).collect();
            let got = reference_combine(&shape, &part).unwrap();
            let e = nmse(&expected(&shape, pos, &x), &got).unwrap();
            assert!(e < 1e-12, "{}: NMSE {e:e}", x.shape_name);
        }
    }

    #[test]
    fn empty_splits_are_zero_with_minus_infinite_maximum() {
        // Position 0, one key, three splits of one key each: splits 1 and 2 see nothing.
        let shape = SplitAttention {
            tokens: 1,
            heads: 1,
            kv_heads: 1,
            head_dim: 1,
            splits: 3,
        };
        let part = reference_split(&shape, 2, 0, &[1.0], &[2.0, 9.0], &[5.0, 7.0]).unwrap();
        let inf = f64::NEG_INFINITY;
        assert_eq!(part, vec![5.0, 2.0, 1.0, 0.0, inf, 0.0, 0.0, inf, 0.0]);
        let part: Vec<f32> = part.iter().map(|&v| v as f32).collect();
        assert_eq!(reference_combine(&shape, &part).unwrap(), vec![5.0]);
    }

    #[test]
    fn bad_shapes_are_typed_errors() {
        let s = SplitAttention {
            tokens: 2,
            heads: 9,
            kv_heads: 2,
            head_dim: 64,
            splits: 4,
        };
        assert!(matches!(s.check(), Err(ShapeError::NotMultiple { .. })));
        let s = SplitAttention { kv_heads: 3, ..s };
        assert_eq!(
            SplitAttention { splits: 0, ..s }.check(),
            Err(ShapeError::Zero {
                op: OP,
                what: "splits"
            })
        );
        assert!(matches!(
            SplitAttention {
                splits: u32::MAX,
                ..s
            }
            .check(),
            Err(ShapeError::TooLarge { .. })
        ));
        assert!(matches!(
            split_kernel(
                attention::MAX_HEAD_DIM + 1,
                Float::F32,
                Reduction::Shared,
                KeyLayout::Rows
            ),
            Err(ShapeError::TooLarge { .. })
        ));
        assert!(matches!(combine_kernel(0, 1), Err(ShapeError::Zero { .. })));
        assert!(matches!(
            combine_kernel(64, 0),
            Err(ShapeError::Zero { what: "splits", .. })
        ));
        let (q, cache) = (vec![0.0; 2 * 9 * 64], vec![0.0; 3 * 3 * 64]);
        // Position 2 with two tokens needs four cache positions.
        assert!(matches!(
            reference_split(&s, 3, 2, &q, &cache, &cache),
            Err(ShapeError::TooLarge { .. })
        ));
        assert!(matches!(
            reference_split(&s, 3, 1, &q[1..], &cache, &cache),
            Err(ShapeError::Mismatch { .. })
        ));
        assert!(reference_split(&s, 3, 1, &q, &cache, &cache).is_ok());
        assert!(matches!(
            reference_combine(&s, &[0.0; 5]),
            Err(ShapeError::Mismatch { .. })
        ));
    }
}

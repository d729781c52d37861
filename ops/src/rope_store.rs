//! Rope on the query and key heads of a fused QKV projection, and the KV cache store, in one
//! dispatch: what `rope` on q, `rope` on k and two `copy`s into the caches compute, for a step
//! recorded once and replayed every token.
//!
//! A replayed step cannot take its position as a parameter, so the kernel reads it from the
//! `step` buffer (element 0 = `pos`, the tokens already in the cache): token `t` is rotated for
//! position `pos + t` and written at cache row `pos + t`.
//!
//! Layouts (row-major): `qkv` [tokens × (heads + 2·kv_heads) × head_dim], each token's row the
//! query heads, then the key heads, then the value heads; `q` [tokens × heads × head_dim];
//! `k_cache`, `v_cache` [context × kv_heads × head_dim]. The caller keeps `pos + tokens` within
//! the context: the kernel does not clip the rows it writes, since dropped writes would hide a
//! step past the end of the cache instead of failing it.
//!
//! One invocation per pair of a head (rope's pairing, see [`super::rope`]): a query or key pair
//! is rotated exactly as the rope kernel rotates it (the same f32 angle and magnitude from the
//! same `freq` table, [`super::rope_freqs`]), a value pair is copied. A head of `head_dim`
//! values has `head_dim/2` pairs, so a token's row of `heads + 2·kv_heads` heads is covered by
//! the x axis of the grid and the tokens by its y axis, without a division by the row length.
//!
//! Bound: the default 1e-7, rope's (4e-10 measured against the f64 reference at position
//! 2047, from the f32 angle's rounding; lavapipe within 1e-15 of the interpreter: the
//! conformance records, docs/conformance/README.md). The key
//! cache in f16 is compared with the reference rounded to f16 (the rope output rounded once,
//! as `copy` rounds it), so only a rare one-ulp rounding flip counts; the value copy is exact.

use super::key_layout::{KeyIndex, KeyLayout};
use super::kv_type::{store_q8_block, KvType, Q8_BLOCK, Q8_WORDS};
use super::rope::{self, Rope, RopeMode};
use super::rope_freqs::{self, RopeFreqs, RopeScaling};
use super::shape::ShapeError;
use super::support::{elements, expect_len, multiple_of, nonzero, seed, store_f32, Float};
use crate::case::*;
use trine_ir::{Access, BufferId, Kernel, KernelBuilder, ParamValue, Scalar, Val};

const OP: &str = "rope_store";

/// Invocations per workgroup; each handles one pair.
pub const WG: u32 = 64;

/// One rope-and-store dispatch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeStore {
    pub tokens: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    /// The values of each query and key head rope turns, from its first
    /// ([`rope::check_rot_dim`]).
    pub rot_dim: u32,
    /// Positions each cache holds.
    pub context: u32,
    pub mode: RopeMode,
    /// The K cache's layout.
    pub keys: KeyLayout,
    /// The heads of a token's q, k, v row that `qkv` holds: `None`, all of them (one stacked
    /// QKV product); a span where the projections differ in weight type and each group of
    /// them is its own product, whose rows are those heads.
    pub part: Option<HeadSpan>,
}

/// Heads `first..first + count` of a token's row of query, key and value heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HeadSpan {
    pub first: u32,
    pub count: u32,
}

impl RopeStore {
    /// Checks the shape; returns the element count of `qkv`.
    pub fn check(&self) -> Result<u32, ShapeError> {
        nonzero(OP, "tokens", self.tokens)?;
        nonzero(OP, "heads", self.heads)?;
        nonzero(OP, "kv_heads", self.kv_heads)?;
        nonzero(OP, "context", self.context)?;
        check_head_dim(self.head_dim)?;
        rope::check_rot_dim(OP, self.head_dim, self.rot_dim)?;
        if self.tokens > self.context {
            return Err(ShapeError::TooLarge {
                op: OP,
                what: "tokens",
                value: self.tokens as usize,
                limit: self.context as usize,
            });
        }
        elements(OP, "cache", &[self.context, self.kv_heads, self.head_dim])?;
        let row = self.row_heads()?;
        let span = self.span()?;
        nonzero(OP, "heads of the part", span.count)?;
        if span.first as u64 + span.count as u64 > row as u64 {
            return Err(ShapeError::TooLarge {
                op: OP,
                what: "first + count heads of the part",
                value: span.first as usize + span.count as usize,
                limit: row as usize,
            });
        }
        elements(OP, "qkv", &[self.tokens, span.count, self.head_dim])
    }

    /// The heads `qkv` holds: [`RopeStore::part`], or the whole row.
    pub fn span(&self) -> Result<HeadSpan, ShapeError> {
        Ok(self.part.unwrap_or(HeadSpan {
            first: 0,
            count: self.row_heads()?,
        }))
    }

    /// Heads in one token's `qkv` row.
    fn row_heads(&self) -> Result<u32, ShapeError> {
        let n = self.heads as u64 + 2 * self.kv_heads as u64;
        u32::try_from(n).map_err(|_| ShapeError::TooLarge {
            op: OP,
            what: "heads + 2·kv_heads",
            value: n as usize,
            limit: u32::MAX as usize,
        })
    }

    /// `[pairs per token / WG, tokens, 1]` (meaningful once [`RopeStore::check`] passed).
    pub fn grid(&self) -> [u32; 3] {
        let heads = self.span().map_or(0, |s| s.count);
        let pairs = heads as u64 * (self.head_dim / 2) as u64;
        [pairs.div_ceil(WG as u64) as u32, self.tokens, 1]
    }

    /// `[heads held, tokens, 1]`: [`kernel_q8`]'s grid, a workgroup per head of a token.
    pub fn grid_q8(&self) -> [u32; 3] {
        [self.span().map_or(0, |s| s.count), self.tokens, 1]
    }

    /// The kernel's parameters, in declaration order: those a product's rope epilogue takes
    /// ([`RopeStore::epilogue_params`]), then the heads `qkv` holds per token.
    pub fn params(&self) -> Vec<ParamValue> {
        let mut p = self.epilogue_params();
        p.push(ParamValue::U32(self.span().map_or(0, |s| s.count)));
        p
    }

    /// The parameters of a product's rope epilogue ([`crate::matvec_fused::Epilogue::RopeStore`]),
    /// whose rows are the heads it holds: the head counts, the K cache's layout, the first
    /// head.
    pub fn epilogue_params(&self) -> Vec<ParamValue> {
        let mut p = vec![ParamValue::U32(self.heads), ParamValue::U32(self.kv_heads)];
        p.extend(self.keys.params(self.context));
        p.push(ParamValue::U32(self.span().map_or(0, |s| s.first)));
        p
    }

    /// The unfused rope over `heads` heads of every token, the first at position `pos`.
    fn rope(&self, heads: u32, pos: u32) -> Rope {
        Rope {
            tokens: self.tokens,
            heads,
            head_dim: self.head_dim,
            rot_dim: self.rot_dim,
            offset: pos,
            mode: self.mode,
        }
    }
}

fn check_head_dim(d: u32) -> Result<(), ShapeError> {
    nonzero(OP, "head_dim", d)?;
    multiple_of(OP, "head_dim", d, 2)?;
    Ok(())
}

/// The kernel for one head dimension and the values of it rope turns (compile-time constants,
/// so that the pair index is a division by a constant), rope layout and cache storage type.
/// Buffers: `qkv` f32, `step` u32, `freq` f32 [rot_dim/2 + 1] ([`RopeFreqs::table`]),
/// `q` f32, `k_cache` and `v_cache` of `kv`, the K cache in `keys`' layout. Params: heads,
/// kv_heads (and `k_stride` for columns), `first` and `count`, the heads `qkv` holds
/// ([`RopeStore::part`]). Grid: [`RopeStore::grid`].
pub fn kernel(
    (head_dim, rot_dim): (u32, u32),
    mode: RopeMode,
    kv: Float,
    keys: KeyLayout,
) -> Result<Kernel, ShapeError> {
    check_head_dim(head_dim)?;
    rope::check_rot_dim(OP, head_dim, rot_dim)?;
    let k = KernelBuilder::new(
        &format!(
            "rope_store_{}_d{head_dim}{}_{}kv{}",
            mode.name(),
            rope::rot_label(head_dim, rot_dim),
            kv.name(),
            keys.suffix()
        ),
        [WG, 1, 1],
    );
    let qkv = k.buffer("qkv", Scalar::F32, Access::Read);
    let step = k.buffer("step", Scalar::U32, Access::Read);
    let freq = k.buffer("freq", Scalar::F32, Access::Read);
    let q = k.buffer("q", Scalar::F32, Access::Write);
    let kc = k.buffer("k_cache", kv.scalar(), Access::Write);
    let vc = k.buffer("v_cache", kv.scalar(), Access::Write);
    let heads = k.param("heads", Scalar::U32);
    let kv_heads = k.param("kv_heads", Scalar::U32);
    let index = KeyIndex::declare(&k, keys, kv_heads, head_dim);
    let first = k.param("first", Scalar::U32);
    let count = k.param("count", Scalar::U32);
    let u = k.global_id(0);
    let t = k.workgroup_id(1);
    let (d, half) = (k.u32(head_dim), k.u32(head_dim / 2));
    let rotated_heads = heads + kv_heads;
    k.if_(u.lt(count * half), || {
        let held = u / half;
        let head = first + held;
        let i = u % half;
        let (i0, i1, turned) = rope::pair_in(&k, mode, (head_dim, rot_dim), i);
        let src = (t * count + held) * d;
        let a = k.load(qkv, src + i0);
        let b = k.load(qkv, src + i1);
        let pos = k.load(step, k.u32(0)) + t;
        let cache_row = pos * kv_heads * d;
        k.if_else(
            head.lt(rotated_heads),
            || {
                let (ra, rb) = rotate(&k, (freq, pos, i, rot_dim), turned, (a, b));
                k.if_else(
                    head.lt(heads),
                    || {
                        let dst = (t * heads + head) * d;
                        k.store(q, dst + i0, ra);
                        k.store(q, dst + i1, rb);
                    },
                    || {
                        let e = (head - heads) * d;
                        store_f32(&k, kv, kc, index.at(&k, e + i0, pos), ra);
                        store_f32(&k, kv, kc, index.at(&k, e + i1, pos), rb);
                    },
                );
            },
            || {
                let dst = cache_row + (head - rotated_heads) * d;
                store_f32(&k, kv, vc, dst + i0, a);
                store_f32(&k, kv, vc, dst + i1, b);
            },
        );
    });
    Ok(k.finish())
}

/// `(a, b)`, pair `i`'s values, turned for position `pos` by the `freq` table of `rot_dim`
/// values, or as they are where `turned` (from [`rope::pair_in`]) says the pair is past them.
fn rotate<'b>(
    k: &'b KernelBuilder,
    (freq, pos, i, rot_dim): (BufferId, Val<'b>, Val<'b>, u32),
    turned: Option<Val<'b>>,
    (a, b): (Val<'b>, Val<'b>),
) -> (Val<'b>, Val<'b>) {
    // A pair past the table reads its first entry, whose turn it does not keep.
    let at = turned.map_or(i, |t| k.select(t, i, k.u32(0)));
    let (cos, sin) = rope_freqs::turn(k, freq, pos, at, rot_dim);
    let (ra, rb) = (a * cos - b * sin, a * sin + b * cos);
    match turned {
        None => (ra, rb),
        Some(t) => (k.select(t, ra, a), k.select(t, rb, b)),
    }
}

/// The kernel for a q8_0 cache ([`KvType::Q8_0`], keys in rows): one workgroup per head of a
/// token, one invocation per pair of it, rope as [`kernel`] computes it; the head's values meet
/// in shared memory, where the invocations of its blocks of 32 quantize one block each. Buffers
/// and parameters as [`kernel`]'s, the caches `U32`; the head size a multiple of 32. Grid:
/// [`RopeStore::grid_q8`].
pub fn kernel_q8((head_dim, rot_dim): (u32, u32), mode: RopeMode) -> Result<Kernel, ShapeError> {
    check_head_dim(head_dim)?;
    rope::check_rot_dim(OP, head_dim, rot_dim)?;
    KvType::Q8_0.check(OP, KeyLayout::Rows, head_dim)?;
    if head_dim > 2048 {
        return Err(ShapeError::TooLarge {
            op: OP,
            what: "head_dim of a q8_0 cache (a workgroup holds a head's pairs)",
            value: head_dim as usize,
            limit: 2048,
        });
    }
    let half = head_dim / 2;
    let k = KernelBuilder::new(
        &format!(
            "rope_store_{}_d{head_dim}{}_q8_0kv",
            mode.name(),
            rope::rot_label(head_dim, rot_dim)
        ),
        [half, 1, 1],
    );
    let qkv = k.buffer("qkv", Scalar::F32, Access::Read);
    let step = k.buffer("step", Scalar::U32, Access::Read);
    let freq = k.buffer("freq", Scalar::F32, Access::Read);
    let q = k.buffer("q", Scalar::F32, Access::Write);
    let kc = k.buffer("k_cache", Scalar::U32, Access::Write);
    let vc = k.buffer("v_cache", Scalar::U32, Access::Write);
    let heads = k.param("heads", Scalar::U32);
    let kv_heads = k.param("kv_heads", Scalar::U32);
    let first = k.param("first", Scalar::U32);
    let count = k.param("count", Scalar::U32);
    let vals = k.shared("head", Scalar::F32, head_dim);
    let i = k.local_index();
    let held = k.workgroup_id(0);
    let t = k.workgroup_id(1);
    let head = first + held;
    let d = k.u32(head_dim);
    let (i0, i1, turned) = rope::pair_in(&k, mode, (head_dim, rot_dim), i);
    let src = (t * count + held) * d;
    let a = k.load(qkv, src + i0);
    let b = k.load(qkv, src + i1);
    let pos = k.load(step, k.u32(0)) + t;
    let rotated_heads = heads + kv_heads;
    let (ta, tb) = rotate(&k, (freq, pos, i, rot_dim), turned, (a, b));
    let turn = head.lt(rotated_heads);
    let ra = k.select(turn, ta, a);
    let rb = k.select(turn, tb, b);
    k.if_(head.lt(heads), || {
        let dst = (t * heads + head) * d;
        k.store(q, dst + i0, ra);
        k.store(q, dst + i1, rb);
    });
    k.store_shared(vals, i0, ra);
    k.store_shared(vals, i1, rb);
    k.barrier();
    // Block `i` of the head, by its first invocations: its words in the position's row.
    let blocks = head_dim / Q8_BLOCK;
    let row_words = kv_heads * k.u32(blocks * Q8_WORDS);
    let word = |kv_head| pos * row_words + (kv_head * k.u32(blocks) + i) * k.u32(Q8_WORDS);
    let at = i * k.u32(Q8_BLOCK);
    k.if_(head.ge(heads), || {
        k.if_(i.lt(k.u32(blocks)), || {
            k.if_else(
                turn,
                || store_q8_block(&k, (vals, at), kc, word(head - heads)),
                || store_q8_block(&k, (vals, at), vc, word(head - rotated_heads)),
            );
        });
    });
    Ok(k.finish())
}

/// What [`reference`] computes: `q` (NaN in the heads a part does not hold, which the kernel
/// does not write), and the caches after the store, in f64 and not rounded to the cache type.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeStoreOut {
    pub q: Vec<f64>,
    pub k_cache: Vec<f64>,
    pub v_cache: Vec<f64>,
}

/// The plain-Rust reference: [`rope::reference`] by `freqs` on the query and key heads of
/// `qkv`, and the rotated keys and the values written over rows `pos..pos + tokens` of the
/// caches, which hold the values their buffers hold (already rounded to the storage type).
pub fn reference(
    shape: &RopeStore,
    freqs: &RopeFreqs,
    pos: u32,
    qkv: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
) -> Result<RopeStoreOut, ShapeError> {
    let n = shape.check()?;
    expect_len(OP, "qkv", n as usize, qkv.len())?;
    let end = pos as usize + shape.tokens as usize;
    if end > shape.context as usize {
        return Err(ShapeError::TooLarge {
            op: OP,
            what: "pos + tokens",
            value: end,
            limit: shape.context as usize,
        });
    }
    let d = shape.head_dim as usize;
    let (q_dim, kv_dim) = (shape.heads as usize * d, shape.kv_heads as usize * d);
    let cache = shape.context as usize * kv_dim;
    expect_len(OP, "k_cache", cache, k_cache.len())?;
    expect_len(OP, "v_cache", cache, v_cache.len())?;
    // The held heads in place in whole rows, the others zero: rotated too, but not kept.
    let span = shape.span()?;
    let held = (span.first as usize * d)..((span.first + span.count) as usize * d);
    let row = q_dim + 2 * kv_dim;
    let mut whole = vec![0f32; shape.tokens as usize * row];
    for (dst, src) in whole.chunks_mut(row).zip(qkv.chunks(held.len())) {
        dst[held.clone()].copy_from_slice(src);
    }
    let rows = || whole.chunks(row);
    let q_in: Vec<f32> = rows().flat_map(|r| &r[..q_dim]).copied().collect();
    let k_in: Vec<f32> = rows()
        .flat_map(|r| &r[q_dim..][..kv_dim])
        .copied()
        .collect();
    let v_in: Vec<f64> = rows()
        .flat_map(|r| &r[q_dim + kv_dim..])
        .map(|&v| v as f64)
        .collect();
    let q = rope::reference(&shape.rope(shape.heads, pos), freqs, &q_in)?;
    let k_new = rope::reference(&shape.rope(shape.kv_heads, pos), freqs, &k_in)?;
    // Whether element `e` of a token's `width`-wide slice starting at row element `at` is held.
    let mask = |at: usize, width: usize| {
        let held = held.clone();
        move |e: usize| held.contains(&(at + e % width))
    };
    let rows_at = pos as usize * kv_dim..end * kv_dim;
    let q_held = mask(0, q_dim);
    Ok(RopeStoreOut {
        q: q.into_iter()
            .enumerate()
            .map(|(e, v)| if q_held(e) { v } else { f64::NAN })
            .collect(),
        k_cache: overwrite(k_cache, rows_at.clone(), k_new, mask(q_dim, kv_dim)),
        v_cache: overwrite(v_cache, rows_at, v_in, mask(q_dim + kv_dim, kv_dim)),
    })
}

/// `cache` in f64 with the elements `at` replaced by those of `new` that `held` (by index in
/// `new`) keeps.
fn overwrite(
    cache: &[f32],
    at: std::ops::Range<usize>,
    new: Vec<f64>,
    held: impl Fn(usize) -> bool,
) -> Vec<f64> {
    let mut out: Vec<f64> = cache.iter().map(|&v| v as f64).collect();
    for (e, v) in new.into_iter().enumerate() {
        if held(e) {
            out[at.start + e] = v;
        }
    }
    out
}

/// A case's name: the op, rope's layout, the cache type, the shape and position, the
/// frequencies, `extra`.
fn case_name(shape: &RopeStore, freqs: &RopeFreqs, kv: &str, pos: u32, extra: &str) -> String {
    format!(
        "{OP}/{}/f32+{kv}kv/{}x{}x{}x{}{}+ctx{}+pos{pos}+base{}{}{extra}",
        shape.mode.name(),
        shape.tokens,
        shape.heads,
        shape.kv_heads,
        shape.head_dim,
        rope::rot_label(shape.head_dim, shape.rot_dim),
        shape.context,
        freqs.base,
        freqs.label()
    )
}

/// A conformance case for `shape` turned by `freqs` at position `pos` with the caches stored
/// as `kv`, with deterministic inputs. The cache rows the step does not write hold values too,
/// so that a write to the wrong row shows.
pub fn case(shape: RopeStore, freqs: &RopeFreqs, pos: u32, kv: Float) -> Result<Case, ShapeError> {
    let n = shape.check()?;
    let part = shape.part.map_or(String::new(), |p| {
        format!("+heads{}..{}", p.first, p.first + p.count)
    });
    let name = case_name(
        &shape,
        freqs,
        kv.name(),
        pos,
        &format!("{}{part}", shape.keys.suffix()),
    );
    let mut r = Rng::new(seed(&name));
    let qkv = r.f32s(n as usize, -2.0, 2.0);
    let cache = (shape.context * shape.kv_heads * shape.head_dim) as usize;
    let k0 = kv.stored(&r.f32s(cache, -3.0, 3.0));
    let v0 = kv.stored(&r.f32s(cache, -3.0, 3.0));
    let want = reference(&shape, freqs, pos, &qkv, &k0, &v0)?;
    let rounded = |v: Vec<f64>| v.into_iter().map(|x| kv.round(x)).collect::<Vec<_>>();
    // NaN where the kernel must write: an element it skips fails the NaN pattern check.
    let q0 = vec![f32::NAN; want.q.len()];
    // In columns, the positions past the context hold a value that must stay.
    let dims = (shape.context, shape.kv_heads, shape.head_dim);
    let k0 = shape.keys.arrange(&k0, dims, 5.0);
    let k_want = shape.keys.arrange(&rounded(want.k_cache), dims, 5.0);
    let kernel = kernel((shape.head_dim, shape.rot_dim), shape.mode, kv, shape.keys)?;
    Ok(Case::new(name, kernel, shape.grid())
        .input("qkv", Scalar::F32, f32_bytes(&qkv))
        .input("step", Scalar::U32, u32_bytes(&[pos]))
        .input("freq", Scalar::F32, f32_bytes(&freqs.table(shape.rot_dim)))
        .output("q", Scalar::F32, f32_bytes(&q0), want.q)
        .output("k_cache", kv.scalar(), kv.bytes(&k0), k_want)
        .output("v_cache", kv.scalar(), kv.bytes(&v0), rounded(want.v_cache))
        .params(shape.params()))
}

/// A conformance case of [`kernel_q8`] for `shape` (keys in rows) turned by `freqs` at position
/// `pos`, `qkv` drawn from `[-amplitude, amplitude)`: `q` against [`reference`], the caches'
/// words exactly: those of the rows the step writes as [`KvType::Q8_0`] stores the reference's
/// values, the others as they were.
pub fn case_q8(
    shape: RopeStore,
    freqs: &RopeFreqs,
    pos: u32,
    amplitude: f32,
) -> Result<Case, ShapeError> {
    let n = shape.check()?;
    let span = shape.span()?;
    let kv = KvType::Q8_0;
    let heads = format!("+heads{}..{}", span.first, span.first + span.count);
    let name = case_name(
        &shape,
        freqs,
        kv.name(),
        pos,
        &format!("{heads}+amp{amplitude}"),
    );
    let mut r = Rng::new(seed(&name));
    let qkv = r.f32s(n as usize, -amplitude, amplitude);
    let cache = (shape.context * shape.kv_heads * shape.head_dim) as usize;
    let k0 = kv.stored(&r.f32s(cache, -3.0, 3.0));
    let v0 = kv.stored(&r.f32s(cache, -3.0, 3.0));
    let want = reference(&shape, freqs, pos, &qkv, &k0, &v0)?;
    // Each written head of a row stored anew, block by block; the rest keeps its words.
    let d = shape.head_dim as usize;
    let stored_words = |before: &[f32], after: Vec<f64>, first_head: u32| {
        let mut words = kv.bytes(before);
        for p in pos..pos + shape.tokens {
            for j in 0..shape.kv_heads {
                if !(span.first..span.first + span.count).contains(&(first_head + j)) {
                    continue;
                }
                let at = (p * shape.kv_heads + j) as usize * d;
                let head: Vec<f32> = after[at..at + d].iter().map(|&v| v as f32).collect();
                let bytes = kv.bytes(&head);
                let start = kv.bytes_for(at as u64) as usize;
                words[start..start + bytes.len()].copy_from_slice(&bytes);
            }
        }
        words
    };
    let k_words = stored_words(&k0, want.k_cache, shape.heads);
    let v_words = stored_words(&v0, want.v_cache, shape.heads + shape.kv_heads);
    let words = |b: &[u8]| decode(Scalar::U32, b);
    let q0 = vec![f32::NAN; want.q.len()];
    Ok(Case::new(
        name,
        kernel_q8((shape.head_dim, shape.rot_dim), shape.mode)?,
        shape.grid_q8(),
    )
    .input("qkv", Scalar::F32, f32_bytes(&qkv))
    .input("step", Scalar::U32, u32_bytes(&[pos]))
    .input("freq", Scalar::F32, f32_bytes(&freqs.table(shape.rot_dim)))
    .output("q", Scalar::F32, f32_bytes(&q0), want.q)
    .output_exact("k_cache", Scalar::U32, kv.bytes(&k0), words(&k_words))
    .output_exact("v_cache", Scalar::U32, kv.bytes(&v0), words(&v_words))
    .params(shape.params()))
}

pub fn cases() -> Vec<Case> {
    // SmolLM2-135M: 9 query heads, 3 KV heads, head_dim 64, base 100000.
    let smol = |tokens, context, mode| {
        let shape = RopeStore {
            tokens,
            heads: 9,
            kv_heads: 3,
            head_dim: 64,
            rot_dim: 64,
            context,
            mode,
            keys: KeyLayout::Rows,
            part: None,
        };
        (shape, RopeFreqs::plain(100_000.0))
    };
    let small = |tokens, heads, kv_heads, head_dim, context, mode| {
        let shape = RopeStore {
            tokens,
            heads,
            kv_heads,
            head_dim,
            rot_dim: head_dim,
            context,
            mode,
            keys: KeyLayout::Rows,
            part: None,
        };
        (shape, RopeFreqs::plain(10_000.0))
    };
    let columns = |(shape, f): (RopeStore, RopeFreqs)| {
        let shape = RopeStore {
            keys: KeyLayout::Columns,
            ..shape
        };
        (shape, f)
    };
    // Projections of two weight types: Q and K in one product, V in another (SmolLM2's 9 + 3
    // heads, then its 3), or K alone.
    let part = |(shape, f): (RopeStore, RopeFreqs), first, count| {
        let shape = RopeStore {
            part: Some(HeadSpan { first, count }),
            ..shape
        };
        (shape, f)
    };
    // Scaled frequencies: Llama 3.2's factors at the end of its trained context, YaRN (whose
    // magnitude is not 1) past its trained context, linear.
    let scaled = |(shape, _): (RopeStore, RopeFreqs), freqs: RopeFreqs| (shape, freqs);
    // Partial rotary: the first `rot_dim` values of each head turned, the rest copied.
    let partial = |(shape, f): (RopeStore, RopeFreqs), rot_dim| {
        let shape = RopeStore { rot_dim, ..shape };
        (shape, f)
    };
    // Phi-4-mini's heads: 24 query and 8 key/value heads of 128, the first 96 values turned
    // by LongRoPE's long factors (48, one per turned pair) with its magnitude.
    let phi4 = |tokens, context| {
        let shape = RopeStore {
            tokens,
            heads: 24,
            kv_heads: 8,
            head_dim: 128,
            rot_dim: 96,
            context,
            mode: RopeMode::Neox,
            keys: KeyLayout::Rows,
            part: None,
        };
        (shape, longrope(96))
    };
    use Float::{F16, F32};
    use RopeMode::{Neox, Normal};
    let shapes = [
        (smol(1, 2048, Normal), 0, F16),    // the first decode step
        (smol(1, 2048, Normal), 2047, F16), // the last position of the context
        (smol(1, 2048, Normal), 2047, F32),
        (smol(7, 32, Normal), 13, F16), // a prefill chunk after 13 tokens
        (smol(7, 32, Normal), 13, F32),
        (smol(16, 16, Normal), 0, F32), // a prefill that fills the cache
        (smol(7, 32, Neox), 13, F32),
        (small(3, 4, 2, 10, 100, Neox), 77, F16),
        (small(5, 5, 5, 6, 9, Normal), 4, F32), // no grouping, tiny heads
        (small(2, 1, 1, 2, 3, Neox), 1, F16),   // one pair per head
        // The K cache in columns, as an executor led by a CPU keeps it.
        (columns(smol(1, 64, Normal)), 63, F32),
        (columns(smol(7, 32, Normal)), 13, F32),
        (columns(small(3, 4, 2, 10, 100, Neox)), 77, F16),
        (part(smol(1, 2048, Normal), 0, 12), 2047, F16),
        (part(smol(7, 32, Normal), 12, 3), 13, F32),
        (part(columns(small(3, 4, 2, 10, 100, Neox)), 4, 2), 77, F16),
        (scaled(smol(1, 8192, Normal), llama3(64)), 8191, F16),
        (scaled(smol(7, 32, Neox), yarn()), 13, F32),
        (scaled(columns(smol(3, 600, Normal)), yarn()), 597, F16),
        (scaled(small(3, 4, 2, 10, 100, Normal), linear()), 77, F32),
        (phi4(1, 4100), 4099, F16),
        (phi4(5, 16), 9, F32),
        (columns(phi4(2, 40)), 31, F16),
        (part(phi4(1, 8), 24, 16), 7, F32),
        (partial(smol(7, 32, Normal), 32), 13, F32),
        (partial(columns(smol(3, 16, Normal)), 48), 11, F16),
        (partial(small(3, 4, 2, 10, 100, Neox), 2), 77, F32),
    ];
    // The last with scales in f16's subnormal range, which the kernel rounds by hand.
    let q8 = [
        (smol(1, 64, Normal), 63, 2.0),
        (smol(7, 32, Normal), 13, 2.0),
        (smol(3, 16, Neox), 2, 2.0),
        (part(smol(1, 64, Normal), 12, 3), 40, 2.0),
        (small(2, 4, 2, 128, 8, Normal), 5, 2.0),
        (smol(2, 8, Normal), 3, 2e-4),
        (scaled(smol(2, 600, Neox), yarn()), 598, 2.0),
        (phi4(3, 64), 40, 2.0),
        (partial(smol(2, 8, Normal), 16), 5, 2.0),
    ];
    shapes
        .into_iter()
        .map(|((shape, freqs), pos, kv)| case(shape, &freqs, pos, kv))
        .chain(
            q8.into_iter()
                .map(|((shape, freqs), pos, amp)| case_q8(shape, &freqs, pos, amp)),
        )
        .collect::<Result<_, _>>()
        .expect("the fixed shapes are valid")
}

/// Llama 3.2's frequencies for heads of `head_dim`: base 500000, the factors its converter
/// writes as `rope_freqs.weight`.
pub(crate) fn llama3(head_dim: u32) -> RopeFreqs {
    RopeFreqs {
        factors: trine_gguf::synth::rope::Llama3Rope::LLAMA_3_2.factors(head_dim),
        ..RopeFreqs::plain(500_000.0)
    }
}

/// LongRoPE's long factors for `rot_dim` turned values (Phi-3's shape,
/// [`trine_gguf::synth::rope::longrope_factors`]) with the magnitude Phi-4-mini's converter
/// writes, `√(1 + ln(32)/ln(4096))`.
pub(crate) fn longrope(rot_dim: u32) -> RopeFreqs {
    RopeFreqs {
        factors: trine_gguf::synth::rope::longrope_factors(rot_dim / 2).0,
        attn_factor: (1.0 + 32f32.ln() / 4096f32.ln()).sqrt(),
        ..RopeFreqs::plain(10_000.0)
    }
}

/// YaRN by 4 from a trained context of 512, with an attention factor: positions past 512 are
/// where it matters.
pub(crate) fn yarn() -> RopeFreqs {
    RopeFreqs {
        scaling: RopeScaling::Yarn {
            factor: 4.0,
            original_context: 512,
            beta_fast: rope_freqs::YARN_BETA_FAST,
            beta_slow: rope_freqs::YARN_BETA_SLOW,
        },
        attn_factor: 0.9,
        ..RopeFreqs::plain(100_000.0)
    }
}

/// Linear scaling by 2.
fn linear() -> RopeFreqs {
    RopeFreqs {
        scaling: RopeScaling::Linear { factor: 2.0 },
        ..RopeFreqs::plain(10_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_rotates_q_and_k_and_copies_v() {
        // One token at position 1, one head each, head_dim 2: q and k turn by 1 radian.
        let shape = RopeStore {
            tokens: 1,
            heads: 1,
            kv_heads: 1,
            head_dim: 2,
            rot_dim: 2,
            context: 3,
            mode: RopeMode::Normal,
            keys: KeyLayout::Rows,
            part: None,
        };
        let (s, c) = 1f64.sin_cos();
        let plain = RopeFreqs::plain(10_000.0);
        let out = reference(
            &shape,
            &plain,
            1,
            &[1.0, 0.0, 0.0, 2.0, 5.0, 6.0],
            &[9.0; 6],
            &[8.0; 6],
        )
        .unwrap();
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12);
        assert!(close(&out.q, &[c, s]), "{out:?}");
        assert!(
            close(&out.k_cache, &[9.0, 9.0, -2.0 * s, 2.0 * c, 9.0, 9.0]),
            "{out:?}"
        );
        assert_eq!(out.v_cache, vec![8.0, 8.0, 5.0, 6.0, 8.0, 8.0]);
        // The value head alone: q and the K cache are left as they were.
        let v_only = RopeStore {
            part: Some(HeadSpan { first: 2, count: 1 }),
            ..shape
        };
        let out = reference(&v_only, &plain, 1, &[5.0, 6.0], &[9.0; 6], &[8.0; 6]).unwrap();
        assert!(out.q.iter().all(|v| v.is_nan()), "{out:?}");
        assert_eq!(out.k_cache, vec![9.0; 6]);
        assert_eq!(out.v_cache, vec![8.0, 8.0, 5.0, 6.0, 8.0, 8.0]);
    }

    #[test]
    fn bad_shapes_are_typed_errors() {
        let s = RopeStore {
            tokens: 2,
            heads: 2,
            kv_heads: 1,
            head_dim: 4,
            rot_dim: 4,
            context: 3,
            mode: RopeMode::Normal,
            keys: KeyLayout::Rows,
            part: None,
        };
        assert!(matches!(
            RopeStore { head_dim: 5, ..s }.check(),
            Err(ShapeError::NotMultiple { .. })
        ));
        assert!(matches!(
            RopeStore { kv_heads: 0, ..s }.check(),
            Err(ShapeError::Zero { .. })
        ));
        assert!(matches!(
            RopeStore { tokens: 4, ..s }.check(),
            Err(ShapeError::TooLarge { what: "tokens", .. })
        ));
        assert!(matches!(
            RopeStore {
                heads: u32::MAX,
                kv_heads: u32::MAX,
                ..s
            }
            .check(),
            Err(ShapeError::TooLarge { .. })
        ));
        let span = |first, count| RopeStore {
            part: Some(HeadSpan { first, count }),
            ..s
        };
        assert!(matches!(span(1, 0).check(), Err(ShapeError::Zero { .. })));
        assert!(matches!(
            span(2, 3).check(),
            Err(ShapeError::TooLarge {
                value: 5,
                limit: 4,
                ..
            })
        ));
        assert!(matches!(
            kernel((3, 2), RopeMode::Normal, Float::F16, KeyLayout::Rows),
            Err(ShapeError::NotMultiple { .. })
        ));
        let plain = RopeFreqs::plain(10_000.0);
        let qkv = [0.0; 2 * 4 * 4];
        let cache = [0.0; 3 * 4];
        assert_eq!(
            reference(&s, &plain, 2, &qkv, &cache, &cache),
            Err(ShapeError::TooLarge {
                op: OP,
                what: "pos + tokens",
                value: 4,
                limit: 3
            })
        );
        assert!(matches!(
            reference(&s, &plain, 1, &qkv, &cache[1..], &cache),
            Err(ShapeError::Mismatch { .. })
        ));
        assert!(reference(&s, &plain, 1, &qkv, &cache, &cache).is_ok());
    }
}

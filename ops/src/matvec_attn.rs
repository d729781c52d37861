//! The two products on either side of attention, with what sits between them and attention
//! fused in, so that a decode layer is five dispatches: QKV, split attention, output projection,
//! gate/up, down.
//!
//! - [`Epilogue::RopeStore`] on the fused QKV projection: the row sums are q, then k, then v of
//!   each token (`(heads + 2·kv_heads) · head_dim` rows). Rope pairs adjacent elements (rope's
//!   [`RopeMode::Normal`], Llama's layout in GGUF), and a workgroup's rows come in pairs, so the
//!   invocation that holds rows `2i` and `2i + 1` rotates them by the step's position, exactly
//!   as [`super::rope_store`] rotates a pair (the same f32 angle from the same `freq` table),
//!   and stores q in `q` and k and v in the caches at row `pos + t`. What [`super::rope_store`]
//!   does with the `qkv` buffer between the two dispatches, without the buffer.
//! - [`Prologue::Combine`] on the attention-output projection: x is split attention's output,
//!   computed where the product loads it from the partials `part`
//!   ([`super::attention_split`]'s layout) instead of by [`super::attention_split::combine_kernel`]:
//!   first every workgroup folds each head's split maxima and sums into the weights
//!   `e^(m_s − M)` and `1/L` in shared memory (one barrier), then each x value is
//!   `(Σ_s acc_s·e^(m_s − M)) · (1/L)`, the combine's arithmetic in its order.
//!
//! Both read the position from the `step` buffer (element 0), as the unfused kernels do, so a
//! recorded step stays valid. Bound: the product's, [`super::matvec::NMSE`], measured over
//! these cases too, or [`super::matvec::NMSE_F16_CACHE`] where rope stores into f16 caches;
//! rope and the combine add a few roundings per element, and a fused kernel gives the unfused
//! kernels' bits on the interpreter (the tests below).

use super::attention_split::{self, SplitAttention};
use super::key_layout::{KeyIndex, KeyLayout};
use super::matvec::{reference as matvec_reference, MatvecSpec, Reduce};
use super::matvec_fused::{self as fused, Epilogue, Fused, Prologue};
use super::rope::RopeMode;
use super::rope_store::{self, RopeStore};
use super::shape::ShapeError;
use super::support::{cos_sin, nonzero, seed, store_f32, Float};
use crate::case::*;
use trine_gguf::quant::{quantize, WeightType};
use trine_ir::{Access, BufferId, KernelBuilder, ParamValue, Scalar, SharedId, Val};

const OP: &str = "matvec";

/// The combine fused before a product: x is `heads` heads of `head_dim`, each combined from
/// `splits` partials. All three are compile-time constants (the loops over the splits unroll,
/// the head of a column is a division by a constant, the weights' shared array has a size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CombineShape {
    pub heads: u32,
    pub head_dim: u32,
    pub splits: u32,
}

impl CombineShape {
    pub(super) fn check(&self, cols: Option<u32>) -> Result<(), ShapeError> {
        nonzero(OP, "combined heads", self.heads)?;
        nonzero(OP, "combined head_dim", self.head_dim)?;
        nonzero(OP, "combined splits", self.splits)?;
        let n = self.heads as u64 * self.head_dim as u64;
        match cols {
            Some(c) if u64::from(c) != n => Err(ShapeError::Mismatch {
                op: OP,
                what: "cols of a combined product (heads · head_dim)",
                expected: n as usize,
                found: c as usize,
            }),
            _ => Ok(()),
        }
    }

    /// f32 values of shared memory the weights take.
    pub(super) fn shared_floats(&self) -> u32 {
        self.heads * (self.splits + 1)
    }

    pub(super) fn name(&self) -> String {
        format!("combine_h{}d{}s{}", self.heads, self.head_dim, self.splits)
    }

    /// The split attention whose partials this combines, for `tokens` query tokens.
    fn attention(&self, tokens: u32) -> SplitAttention {
        SplitAttention {
            tokens,
            heads: self.heads,
            kv_heads: self.heads,
            head_dim: self.head_dim,
            splits: self.splits,
        }
    }
}

/// The rope and cache store fused after a QKV product: the head dimension (a compile-time
/// constant), the caches' storage type and the K cache's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RopeShape {
    pub head_dim: u32,
    pub kv: Float,
    pub keys: KeyLayout,
}

impl RopeShape {
    pub(super) fn check(&self) -> Result<(), ShapeError> {
        nonzero(OP, "rope head_dim", self.head_dim)?;
        if !self.head_dim.is_multiple_of(2) {
            return Err(ShapeError::NotMultiple {
                op: OP,
                what: "rope head_dim",
                value: self.head_dim as usize,
                multiple: 2,
            });
        }
        Ok(())
    }

    pub(super) fn name(&self) -> String {
        format!(
            "rope_d{}_{}kv{}",
            self.head_dim,
            self.kv.name(),
            self.keys.suffix()
        )
    }
}

/// Where a product's invocations get x from.
pub(super) enum Input<'b> {
    /// Buffer `x`, this token's row starting at `x0`.
    Plain {
        x: BufferId,
        x0: Val<'b>,
    },
    Combined(Combined<'b>),
}

impl<'b> Input<'b> {
    /// x at column `c` of this workgroup's token.
    pub(super) fn load(&self, k: &'b KernelBuilder, c: Val<'b>) -> Val<'b> {
        match self {
            Input::Plain { x, x0 } => k.load(*x, *x0 + c),
            Input::Combined(m) => m.load(k, c),
        }
    }

    /// x at column `start + offset`, where `start` is a multiple of `align` (a block's first
    /// column) and `offset < align`: where `align` divides the head size, the head is
    /// `start`'s, so that the partials' index is `offset` plus a workgroup-uniform base, which
    /// the C lowering vectorises (a head found by division per column it cannot).
    pub(super) fn load_aligned(
        &self,
        k: &'b KernelBuilder,
        (start, offset): (Val<'b>, Val<'b>),
        align: u32,
    ) -> Val<'b> {
        match self {
            Input::Combined(m) if m.shape.head_dim.is_multiple_of(align) => {
                let d = k.u32(m.shape.head_dim);
                m.load_in_head(k, start / d, start % d + offset)
            }
            _ => self.load(k, start + offset),
        }
    }
}

/// The combine prologue's state: the partials and the weights the workgroup computed.
pub(super) struct Combined<'b> {
    part: BufferId,
    /// `e^(m_s − M)` of head h and split s at `h·splits + s`.
    weights: SharedId,
    /// `1/L` of head h.
    inv: SharedId,
    /// The token's first partial row: `token · heads`.
    row0: Val<'b>,
    shape: CombineShape,
}

impl<'b> Combined<'b> {
    /// Emits the first phase: the workgroup's invocations fold the heads' maxima and sums
    /// (as the combine kernel does, every split of a head by one invocation), then a barrier.
    pub(super) fn prologue(
        k: &'b KernelBuilder,
        shape: CombineShape,
        part: BufferId,
        wg: u32,
        (token, slot): (Val<'b>, u32),
    ) -> Combined<'b> {
        let (heads, splits, d) = (shape.heads, shape.splits, shape.head_dim);
        // Token `slot` of the workgroup gets its own arrays.
        let name = |base: &str| match slot {
            0 => base.to_string(),
            _ => format!("{base}_{slot}"),
        };
        let weights = k.shared(&name("combine_w"), Scalar::F32, heads * splits);
        let inv = k.shared(&name("combine_inv"), Scalar::F32, heads);
        let row0 = token * k.u32(heads);
        let width = k.u32(d + 2);
        // Every split's maximum and sum are loaded at once, before any is used (the split count
        // is a compile-time constant): one round trip to memory, where loops of loads took two.
        k.for_range(k.local_index(), k.u32(heads), wg, |h| {
            let first = (row0 + h) * k.u32(splits);
            let (ms, ls): (Vec<Val>, Vec<Val>) = (0..splits)
                .map(|s| {
                    let at = (first + k.u32(s)) * width + k.u32(d);
                    (k.load(part, at), k.load(part, at + k.u32(1)))
                })
                .unzip();
            let big_m = ms.iter().fold(k.f32(f32::NEG_INFINITY), |m, &v| m.max(v));
            let mut sum = k.f32(0.0);
            for (s, (&m, &l)) in ms.iter().zip(&ls).enumerate() {
                let w = (m - big_m).exp();
                k.store_shared(weights, h * k.u32(splits) + k.u32(s as u32), w);
                sum = l.fma(w, sum);
            }
            k.store_shared(inv, h, k.f32(1.0) / sum);
        });
        k.barrier();
        Combined {
            part,
            weights,
            inv,
            row0,
            shape,
        }
    }

    /// Combined x at column `c`.
    fn load(&self, k: &'b KernelBuilder, c: Val<'b>) -> Val<'b> {
        let d = k.u32(self.shape.head_dim);
        self.load_in_head(k, c / d, c % d)
    }

    /// Combined x at element `i` of head `h`.
    fn load_in_head(&self, k: &'b KernelBuilder, h: Val<'b>, i: Val<'b>) -> Val<'b> {
        let (splits, d) = (self.shape.splits, self.shape.head_dim);
        let first = (self.row0 + h) * k.u32(splits);
        let mut o = k.f32(0.0);
        for s in 0..splits {
            let acc = k.load(self.part, (first + k.u32(s)) * k.u32(d + 2) + i);
            let w = k.load_shared(self.weights, h * k.u32(splits) + k.u32(s));
            o = acc.fma(w, o);
        }
        o * k.load_shared(self.inv, h)
    }
}

/// The rope epilogue's buffers and parameters.
pub(super) struct RopeOut<'b> {
    step: BufferId,
    freq: BufferId,
    q: BufferId,
    k_cache: BufferId,
    v_cache: BufferId,
    heads: Val<'b>,
    kv_heads: Val<'b>,
    index: KeyIndex<'b>,
    shape: RopeShape,
}

impl<'b> RopeOut<'b> {
    /// Declares the inputs (`step`, `freq`), both settled ([`trine_ir::Kernel::settled`]: the
    /// host writes the position before the step and the frequencies at load);
    /// [`RopeOut::declare_outputs`] the rest.
    pub(super) fn declare_inputs(k: &KernelBuilder) -> (BufferId, BufferId) {
        let bufs = (
            k.buffer("step", Scalar::U32, Access::Read),
            k.buffer("freq", Scalar::F32, Access::Read),
        );
        k.settled(bufs.0);
        k.settled(bufs.1);
        bufs
    }

    /// Declares `q`, `k_cache`, `v_cache` and the parameters `heads`, `kv_heads` (and
    /// `k_stride` for a K cache in columns) after the product's own.
    pub(super) fn declare_outputs(
        k: &'b KernelBuilder,
        shape: RopeShape,
        (step, freq): (BufferId, BufferId),
    ) -> Self {
        let kv = shape.kv.scalar();
        let q = k.buffer("q", Scalar::F32, Access::Write);
        let k_cache = k.buffer("k_cache", kv, Access::Write);
        let v_cache = k.buffer("v_cache", kv, Access::Write);
        let heads = k.param("heads", Scalar::U32);
        let kv_heads = k.param("kv_heads", Scalar::U32);
        RopeOut {
            step,
            freq,
            q,
            k_cache,
            v_cache,
            heads,
            kv_heads,
            index: KeyIndex::declare(k, shape.keys, kv_heads, shape.head_dim),
            shape,
        }
    }

    /// The position of token `t` and the rotation of the pair of rows `r`, `r + 1` (r even),
    /// from the settled buffers only: a kernel that computes it first does so before it waits
    /// for the kernel ahead (on CUDA), and its epilogue then waits on no load of its own. Rows
    /// of V get a rotation they do not use.
    pub(super) fn turn(&self, k: &'b KernelBuilder, t: Val<'b>, r: Val<'b>) -> Turn<'b> {
        let d = k.u32(self.shape.head_dim);
        let pos = k.load(self.step, k.u32(0)) + t;
        let i = (r % d) / k.u32(2);
        let theta = pos.cast(Scalar::F32) * k.load(self.freq, i);
        let (cos, sin) = cos_sin(k, theta);
        Turn { pos, cos, sin }
    }

    /// Rotates or copies the pair of rows `r`, `r + 1` (r even) of token `t`, whose sums are
    /// `a` and `b`, by `turn` ([`RopeOut::turn`] of the same pair), and stores it:
    /// [`super::rope_store::kernel`]'s arithmetic for one pair.
    pub(super) fn store_pair(
        &self,
        k: &'b KernelBuilder,
        (t, r): (Val<'b>, Val<'b>),
        turn: &Turn<'b>,
        (a, b): (Val<'b>, Val<'b>),
    ) {
        let d = k.u32(self.shape.head_dim);
        let one = k.u32(1);
        let q_rows = self.heads * d;
        let kv_rows = self.kv_heads * d;
        let Turn { pos, cos, sin } = *turn;
        let kv = self.shape.kv;
        k.if_else(
            r.lt(q_rows + kv_rows),
            || {
                let ra = a * cos - b * sin;
                let rb = a * sin + b * cos;
                k.if_else(
                    r.lt(q_rows),
                    || {
                        let dst = t * q_rows + r;
                        k.store(self.q, dst, ra);
                        k.store(self.q, dst + one, rb);
                    },
                    || {
                        let e = r - q_rows;
                        store_f32(k, kv, self.k_cache, self.index.at(k, e, pos), ra);
                        store_f32(k, kv, self.k_cache, self.index.at(k, e + one, pos), rb);
                    },
                );
            },
            || {
                let dst = pos * kv_rows + r - q_rows - kv_rows;
                store_f32(k, kv, self.v_cache, dst, a);
                store_f32(k, kv, self.v_cache, dst + one, b);
            },
        );
    }
}

/// [`RopeOut::turn`]: a token's position and a pair's cosine and sine.
#[derive(Clone, Copy)]
pub(super) struct Turn<'b> {
    pos: Val<'b>,
    cos: Val<'b>,
    sin: Val<'b>,
}

/// A QKV product of `heads` query and `kv_heads` key/value heads with the rope epilogue, at
/// position `pos` of caches of `context` positions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QkvRope {
    pub weights: WeightType,
    pub cols: u32,
    pub store: RopeStore,
}

impl QkvRope {
    pub fn rows(&self) -> u32 {
        (self.store.heads + 2 * self.store.kv_heads) * self.store.head_dim
    }

    /// The kernel's parameters after the product's (`rows`, `cols`, `eps`).
    pub fn params(&self) -> Vec<ParamValue> {
        self.store.params()
    }
}

/// The unfused composition in f64: the normed product ([`fused::reference`]) rounded to f32
/// as the `qkv` buffer would hold it, then [`rope_store::reference`].
pub fn reference_rope(
    shape: &QkvRope,
    w: &[u8],
    x: &[f32],
    g: &[f32],
    pos: u32,
    caches: (&[f32], &[f32]),
) -> Result<rope_store::RopeStoreOut, ShapeError> {
    let fused = Fused {
        norm: Some((g, fused::EPS)),
        epilogue: Epilogue::None,
        residual: &[],
    };
    let rows = shape.rows() as usize;
    let qkv = fused::reference(shape.weights, w, rows, shape.cols as usize, x, &fused)?;
    let qkv: Vec<f32> = qkv.iter().map(|&v| v as f32).collect();
    rope_store::reference(&shape.store, pos, &qkv, caches.0, caches.1)
}

/// The unfused composition in f64: [`attention_split::reference_combine`] rounded to f32 as
/// the attention buffer would hold it, the product, then the residual add.
pub fn reference_combine(
    ty: WeightType,
    w: &[u8],
    rows: usize,
    shape: CombineShape,
    part: &[f32],
    residual: &[f32],
) -> Result<Vec<f64>, ShapeError> {
    let cols = (shape.heads * shape.head_dim) as usize;
    let tokens = part.len() / (shape.heads * shape.splits * (shape.head_dim + 2)).max(1) as usize;
    nonzero(OP, "tokens", tokens as u32)?;
    let x = attention_split::reference_combine(&shape.attention(tokens as u32), part)?;
    let mut y = vec![];
    for xt in x.chunks_exact(cols) {
        let xt: Vec<f32> = xt.iter().map(|&v| v as f32).collect();
        y.extend(matvec_reference(ty, w, rows, cols, &xt)?);
    }
    let y: Vec<f32> = y.iter().map(|&v| v as f32).collect();
    super::elementwise::reference_add(&y, residual)
}

/// A conformance case of the QKV product with the rope epilogue (and the norm, as the graph
/// runs it), on `spec`'s shape: q against the reference, and both caches whole, so that a
/// write to the wrong row or head shows.
pub fn rope_case(
    spec: MatvecSpec,
    shape: QkvRope,
    pos: u32,
    kv: Float,
) -> Result<Case, ShapeError> {
    shape.store.check()?;
    let rope = RopeShape {
        head_dim: shape.store.head_dim,
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
        "{OP}/{ty}/qkv{}x{}x{}+{cols}/t{tokens}+pos{pos}+ctx{}/{}/norm+{}",
        shape.store.heads,
        shape.store.kv_heads,
        shape.store.head_dim,
        shape.store.context,
        spec.shape_name(),
        rope.name()
    ) + if spec.reduce == Reduce::Shared {
        "/shared"
    } else {
        ""
    };
    let mut rng = Rng::new(seed(&name));
    let w = quantize(ty, &rng.f32s((rows * cols) as usize, -1.0, 1.0))?;
    let x = rng.f32s((tokens * cols) as usize, -1.0, 1.0);
    let g = rng.f32s(cols as usize, 0.5, 1.5);
    let cache = (shape.store.context * shape.store.kv_heads * shape.store.head_dim) as usize;
    let k0 = kv.stored(&rng.f32s(cache, -3.0, 3.0));
    let v0 = kv.stored(&rng.f32s(cache, -3.0, 3.0));
    let want = reference_rope(&shape, &w, &x, &g, pos, (&k0, &v0))?;
    let rounded = |v: Vec<f64>| v.into_iter().map(|x| kv.round(x)).collect::<Vec<_>>();
    // In columns, the positions past the context hold a value that must stay.
    let dims = (
        shape.store.context,
        shape.store.kv_heads,
        shape.store.head_dim,
    );
    let k_want = rope.keys.arrange(&rounded(want.k_cache), dims, 5.0);
    let k0 = rope.keys.arrange(&k0, dims, 5.0);
    let case = spec.weight_inputs(
        Case::new(name, super::matvec::kernel(spec)?, spec.grid(rows, tokens)),
        w,
        cols,
    );
    let q0 = vec![f32::NAN; want.q.len()];
    let mut params = vec![
        ParamValue::U32(rows),
        ParamValue::U32(cols),
        ParamValue::F32(fused::EPS),
    ];
    params.extend(shape.params());
    params.extend(spec.tokens_params(tokens));
    Ok(case
        .input("x", Scalar::F32, f32_bytes(&x))
        .input("g", Scalar::F32, f32_bytes(&g))
        .input("step", Scalar::U32, u32_bytes(&[pos]))
        .input("freq", Scalar::F32, f32_bytes(&shape.store.frequencies()))
        .output("q", Scalar::F32, f32_bytes(&q0), want.q)
        .output("k_cache", kv.scalar(), kv.bytes(&k0), k_want)
        .output("v_cache", kv.scalar(), kv.bytes(&v0), rounded(want.v_cache))
        .params(params)
        .bound(match kv {
            Float::F16 => super::matvec::NMSE_F16_CACHE,
            Float::F32 => super::matvec::NMSE,
        }))
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
        Case::new(name, super::matvec::kernel(spec)?, spec.grid(rows, tokens)),
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
        .bound(super::matvec::NMSE);
    if spec.reduce == Reduce::Subgroup {
        case = case.fallback(super::matvec::kernel(MatvecSpec {
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
        context,
        base: 100_000.0,
        mode: RopeMode::Normal,
        keys: KeyLayout::Rows,
    };
    let small = |tokens, heads, kv_heads, head_dim| RopeStore {
        tokens,
        heads,
        kv_heads,
        head_dim,
        context: 12,
        base: 10_000.0,
        mode: RopeMode::Normal,
        keys: KeyLayout::Rows,
    };
    let columns = |store| RopeStore {
        keys: KeyLayout::Columns,
        ..store
    };
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
        v.push(rope_case(s, shape, pos, kv).expect("the listed shapes are valid"));
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

#[cfg(test)]
mod tests {
    use super::*;
    use trine_ir::interp::interpret;

    /// Whether the interpreter's run of `case` agrees with its plain-Rust reference.
    fn passes(case: &Case) -> bool {
        case.check_reference().is_ok()
    }

    fn buffer<'a>(case: &'a mut Case, name: &str) -> &'a mut Vec<u8> {
        &mut case
            .buffers
            .iter_mut()
            .find(|b| b.name == name)
            .unwrap()
            .data
    }

    /// Runs `case`'s kernel (or `kernel`) on the interpreter over `bufs`, returning them.
    fn run(
        kernel: &trine_ir::Kernel,
        grid: [u32; 3],
        mut bufs: Vec<Vec<u8>>,
        params: &[ParamValue],
    ) -> Vec<Vec<u8>> {
        interpret(kernel, grid, &mut bufs, params, 16).unwrap();
        bufs
    }

    /// The fused QKV product gives the bits of the normed product followed by the rope-store
    /// kernel, on the interpreter.
    #[test]
    fn rope_epilogue_equals_product_then_rope_store() {
        let spec = MatvecSpec {
            rows_per_workgroup: 2,
            workgroup: 32,
            ..MatvecSpec::new(WeightType::Q4_1, Reduce::Subgroup)
        };
        let shape = QkvRope {
            weights: WeightType::Q4_1,
            cols: 64,
            store: RopeStore {
                tokens: 3,
                heads: 4,
                kv_heads: 2,
                head_dim: 8,
                context: 10,
                base: 10_000.0,
                mode: RopeMode::Normal,
                keys: KeyLayout::Rows,
            },
        };
        let case = rope_case(spec, shape, 6, Float::F16).unwrap();
        let bufs: Vec<Vec<u8>> = case.buffers.iter().map(|b| b.data.clone()).collect();
        let fused = run(&case.kernel, case.grid, bufs.clone(), &case.params);

        let rows = shape.rows();
        let plain = MatvecSpec {
            prologue: Prologue::RmsNorm,
            ..spec
        };
        // w, x, g, then y.
        let qkv = run(
            &super::super::matvec::kernel(plain).unwrap(),
            plain.grid(rows, 3),
            vec![
                bufs[0].clone(),
                bufs[1].clone(),
                bufs[2].clone(),
                vec![0; (rows * 3 * 4) as usize],
            ],
            &case.params[..3],
        )
        .pop()
        .unwrap();
        // qkv, step, freq, then q and the caches.
        let unfused = run(
            &rope_store::kernel(8, RopeMode::Normal, Float::F16, KeyLayout::Rows).unwrap(),
            shape.store.grid(),
            vec![
                qkv,
                bufs[3].clone(),
                bufs[4].clone(),
                bufs[5].clone(),
                bufs[6].clone(),
                bufs[7].clone(),
            ],
            &shape.store.params(),
        );
        assert_eq!(fused[5], unfused[3], "q");
        assert_eq!(fused[6], unfused[4], "k_cache");
        assert_eq!(fused[7], unfused[5], "v_cache");
    }

    /// The fused output projection gives the bits of the combine kernel followed by the
    /// product with the residual add, on the interpreter.
    #[test]
    fn combine_prologue_equals_combine_then_product() {
        let spec = MatvecSpec {
            rows_per_workgroup: 2,
            workgroup: 32,
            ..MatvecSpec::new(WeightType::Q4_1, Reduce::Subgroup)
        };
        let shape = CombineShape {
            heads: 3,
            head_dim: 32,
            splits: 4,
        };
        let (rows, tokens) = (10, 2);
        let case = combine_case(spec, shape, rows, tokens, 9).unwrap();
        let bufs: Vec<Vec<u8>> = case.buffers.iter().map(|b| b.data.clone()).collect();
        let fused = run(&case.kernel, case.grid, bufs.clone(), &case.params);

        let attn = shape.attention(tokens);
        let x = run(
            &attention_split::combine_kernel(32, 4).unwrap(),
            attn.combine_grid(),
            vec![bufs[1].clone(), vec![0; (tokens * 96 * 4) as usize]],
            &attn.combine_params(),
        )
        .pop()
        .unwrap();
        let plain = MatvecSpec {
            epilogue: Epilogue::Add,
            ..spec
        };
        let y = run(
            &super::super::matvec::kernel(plain).unwrap(),
            plain.grid(rows, tokens),
            vec![
                bufs[0].clone(),
                x,
                bufs[2].clone(),
                vec![0; (rows * tokens * 4) as usize],
            ],
            &case.params,
        );
        assert_eq!(fused[3], y[3]);
    }

    /// The cases can fail: another position, swapped q/k rows, a wrong split's maximum.
    #[test]
    fn wrong_inputs_fail() {
        let spec = MatvecSpec {
            rows_per_workgroup: 2,
            workgroup: 32,
            ..MatvecSpec::new(WeightType::Q4_1, Reduce::Shared)
        };
        let store = RopeStore {
            tokens: 2,
            heads: 2,
            kv_heads: 1,
            head_dim: 32,
            context: 8,
            base: 10_000.0,
            mode: RopeMode::Normal,
            keys: KeyLayout::Rows,
        };
        let shape = QkvRope {
            weights: WeightType::Q4_1,
            cols: 64,
            store,
        };
        let case = rope_case(spec, shape, 3, Float::F16).unwrap();
        assert!(passes(&case));
        let mut moved = case.clone();
        *buffer(&mut moved, "step") = u32_bytes(&[4]);
        assert!(!passes(&moved));

        let shape = CombineShape {
            heads: 2,
            head_dim: 32,
            splits: 3,
        };
        let case = combine_case(spec, shape, 6, 1, 7).unwrap();
        assert!(passes(&case));
        let mut bent = case.clone();
        let part = buffer(&mut bent, "part");
        // Head 1's second split: its maximum raised by 2, as a combine that mixed up the
        // splits' (m, l) pairs would weigh it.
        let (head, split) = (1, 1);
        let at = ((head * 3 + split) * 34 + 32) * 4;
        let m = f32::from_le_bytes(part[at..at + 4].try_into().unwrap()) + 2.0;
        part[at..at + 4].copy_from_slice(&m.to_le_bytes());
        assert!(!passes(&bent));
    }

    #[test]
    fn bad_shapes_are_typed_errors() {
        let spec = MatvecSpec {
            epilogue: Epilogue::RopeStore(RopeShape {
                head_dim: 7,
                kv: Float::F16,
                keys: KeyLayout::Rows,
            }),
            ..MatvecSpec::new(WeightType::Q4_1, Reduce::Shared)
        };
        assert!(matches!(
            super::super::matvec::kernel(spec),
            Err(ShapeError::NotMultiple { value: 7, .. })
        ));
        let spec = MatvecSpec {
            epilogue: Epilogue::RopeStore(RopeShape {
                head_dim: 8,
                kv: Float::F16,
                keys: KeyLayout::Rows,
            }),
            rows_per_workgroup: 3,
            ..spec
        };
        assert!(matches!(
            super::super::matvec::kernel(spec),
            Err(ShapeError::NotMultiple { value: 3, .. })
        ));
        let shape = CombineShape {
            heads: 2,
            head_dim: 32,
            splits: 0,
        };
        assert!(matches!(
            combine_case(
                MatvecSpec::new(WeightType::Q4_1, Reduce::Shared),
                shape,
                4,
                1,
                0
            ),
            Err(ShapeError::Zero { .. })
        ));
        // The combine's weights do not fit the smallest device's shared memory.
        let spec = MatvecSpec {
            prologue: Prologue::Combine(CombineShape {
                heads: 4096,
                head_dim: 64,
                splits: 8,
            }),
            ..MatvecSpec::new(WeightType::Q4_1, Reduce::Shared)
        };
        assert!(matches!(
            super::super::matvec::kernel(spec),
            Err(ShapeError::TooLarge { .. })
        ));
    }
}

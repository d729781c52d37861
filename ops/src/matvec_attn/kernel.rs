//! The IR the matvec kernel fuses in: where its invocations get x from ([`Input`], with the
//! combine prologue's [`Combined`]) and the rope epilogue's rotation and stores ([`RopeOut`]).

use super::{CombineShape, RopeShape};
use crate::key_layout::KeyIndex;
use crate::rope_freqs;
use crate::support::store_f32;
use trine_ir::{Access, BufferId, KernelBuilder, Scalar, SharedId, Val};

/// Where a product's invocations get x from.
pub(crate) enum Input<'b> {
    /// Buffer `x`, this token's row starting at `x0`.
    Plain {
        x: BufferId,
        x0: Val<'b>,
    },
    Combined(Combined<'b>),
}

impl<'b> Input<'b> {
    /// x at column `c` of this workgroup's token.
    pub(crate) fn load(&self, k: &'b KernelBuilder, c: Val<'b>) -> Val<'b> {
        match self {
            Input::Plain { x, x0 } => k.load(*x, *x0 + c),
            Input::Combined(m) => m.load(k, c),
        }
    }

    /// x at column `start + offset`, where `start` is a multiple of `align` (a block's first
    /// column) and `offset < align`: where `align` divides the head size, the head is
    /// `start`'s, so that the partials' index is `offset` plus a workgroup-uniform base, which
    /// the C lowering vectorises (a head found by division per column it cannot).
    pub(crate) fn load_aligned(
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
pub(crate) struct Combined<'b> {
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
    pub(crate) fn prologue(
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
pub(crate) struct RopeOut<'b> {
    step: BufferId,
    freq: BufferId,
    q: BufferId,
    k_cache: BufferId,
    v_cache: BufferId,
    heads: Val<'b>,
    kv_heads: Val<'b>,
    index: KeyIndex<'b>,
    /// The row of a token's q, k, v row that the product's row 0 is: its first head's.
    first_row: Val<'b>,
    shape: RopeShape,
}

impl<'b> RopeOut<'b> {
    /// Declares the inputs (`step`, `freq`), both settled ([`trine_ir::Kernel::settled`]: the
    /// host writes the position before the step and the frequencies at load);
    /// [`RopeOut::declare_outputs`] the rest.
    pub(crate) fn declare_inputs(k: &KernelBuilder) -> (BufferId, BufferId) {
        let bufs = (
            k.buffer("step", Scalar::U32, Access::Read),
            k.buffer("freq", Scalar::F32, Access::Read),
        );
        k.settled(bufs.0);
        k.settled(bufs.1);
        bufs
    }

    /// Declares `q`, `k_cache`, `v_cache` and the parameters `heads`, `kv_heads` (and
    /// `k_stride` for a K cache in columns) and `first`, the head the product's rows start at
    /// ([`crate::rope_store::RopeStore::part`]), after the product's own.
    pub(crate) fn declare_outputs(
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
        let index = KeyIndex::declare(k, shape.keys, kv_heads, shape.head_dim);
        let first = k.param("first", Scalar::U32);
        RopeOut {
            step,
            freq,
            q,
            k_cache,
            v_cache,
            heads,
            kv_heads,
            index,
            first_row: first * k.u32(shape.head_dim),
            shape,
        }
    }

    /// The position of token `t` and the rotation of the product's pair of rows `r`, `r + 1`
    /// (r even), from the settled buffers only: a kernel that computes it first does so before
    /// it waits for the kernel ahead (on CUDA), and its epilogue then waits on no load of its
    /// own. Rows of V get a rotation they do not use. The product's first row is a head's
    /// first, so a pair's place in its head is `r`'s.
    pub(crate) fn turn(&self, k: &'b KernelBuilder, t: Val<'b>, r: Val<'b>) -> Turn<'b> {
        let RopeShape {
            head_dim, rot_dim, ..
        } = self.shape;
        let pos = k.load(self.step, k.u32(0)) + t;
        let i = (r % k.u32(head_dim)) / k.u32(2);
        // Rows come in adjacent pairs, rope's normal pairing; those past `rot_dim` are copied,
        // and read the table's first entry instead of past its end.
        let turned = (rot_dim < head_dim).then(|| i.lt(k.u32(rot_dim / 2)));
        let at = turned.map_or(i, |turned| k.select(turned, i, k.u32(0)));
        let (cos, sin) = rope_freqs::turn(k, self.freq, pos, at, rot_dim);
        Turn {
            pos,
            cos,
            sin,
            turned,
        }
    }

    /// Rotates or copies the product's pair of rows `r`, `r + 1` (r even) of token `t`, whose
    /// sums are `a` and `b`, by `turn` ([`RopeOut::turn`] of the same pair), and stores it:
    /// [`crate::rope_store::kernel`]'s arithmetic for one pair.
    pub(crate) fn store_pair(
        &self,
        k: &'b KernelBuilder,
        (t, r): (Val<'b>, Val<'b>),
        turn: &Turn<'b>,
        (a, b): (Val<'b>, Val<'b>),
    ) {
        let d = k.u32(self.shape.head_dim);
        let one = k.u32(1);
        let r = self.first_row + r;
        let q_rows = self.heads * d;
        let kv_rows = self.kv_heads * d;
        let Turn {
            pos,
            cos,
            sin,
            turned,
        } = *turn;
        let kv = self.shape.kv;
        k.if_else(
            r.lt(q_rows + kv_rows),
            || {
                let (ra, rb) = (a * cos - b * sin, a * sin + b * cos);
                let (ra, rb) = match turned {
                    None => (ra, rb),
                    Some(turned) => (k.select(turned, ra, a), k.select(turned, rb, b)),
                };
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
pub(crate) struct Turn<'b> {
    pos: Val<'b>,
    cos: Val<'b>,
    sin: Val<'b>,
    /// Whether the pair turns, where rope turns part of a head.
    turned: Option<Val<'b>>,
}

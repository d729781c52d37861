//! A product kernel's buffers and parameters ([`Io`]), and where the block's sums go
//! ([`Output`]): y, plus the residual, or a gated unit of row pairs, guarded at y's edges.

use super::TilesSpec;
use crate::elementwise::Glu;
use crate::matmul_stage::{Block, Fetch, Gather, Layout};
use crate::support::Float;
use trine_ir::{Access, BufferId, KernelBuilder, Scalar, SharedId, Val};

/// A product kernel's buffers and parameters, as [`kernel`] gives them, and its block's
/// first token and row.
pub(crate) struct Io<'b> {
    x: BufferId,
    w: BufferId,
    add: Option<BufferId>,
    y: BufferId,
    rows: Val<'b>,
    cols: Val<'b>,
    /// Where the K loop starts: 0, or this workgroup's share's first column
    /// ([`TilesSpec::split`]).
    pub k_begin: Val<'b>,
    /// Where the K loop ends: `cols`, 0 for an experts' workgroup past its expert's pairs,
    /// or the end of this workgroup's share ([`TilesSpec::split`]).
    pub k_end: Val<'b>,
    tokens: Val<'b>,
    /// y's rows per token and the first of them this product writes ([`TilesSpec::part`]).
    part: Option<(Val<'b>, Val<'b>)>,
    t0: Val<'b>,
    r0: Val<'b>,
    experts: Option<Experts<'b>>,
    /// Where this workgroup's slice of y starts ([`TilesSpec::split`]).
    slice: Option<Val<'b>>,
}

/// The expert a workgroup of a [`TilesSpec::experts`] product serves, and its pairs.
#[derive(Clone, Copy)]
struct Experts<'b> {
    /// [`crate::moe_sort`]'s lists: the expert's pairs from `at` on, `count` of them.
    lists: BufferId,
    at: Val<'b>,
    count: Val<'b>,
    /// Pairs a row of x serves: the slots a token has where x's rows are tokens, 1 where
    /// they are the pairs.
    per_x: Val<'b>,
    /// The expert's first row in W.
    w_first: Val<'b>,
}

impl<'b> Io<'b> {
    pub(crate) fn declare(k: &'b KernelBuilder, spec: &TilesSpec) -> Self {
        let (bm, bn) = spec.block();
        let w = k.buffer("w", spec.w_elem(), Access::Read);
        let x = k.buffer("x", spec.x_elem(), Access::Read);
        let add = spec.add.then(|| k.buffer("add", Scalar::F32, Access::Read));
        let lists = spec.experts.then(|| {
            (
                k.buffer("counts", Scalar::U32, Access::Read),
                k.buffer("lists", Scalar::U32, Access::Read),
            )
        });
        let y = k.buffer("y", spec.y_elem(), Access::Write);
        let rows = k.param("rows", Scalar::U32);
        let cols = k.param("cols", Scalar::U32);
        let tokens = k.param("tokens", Scalar::U32);
        let part = spec.part.then(|| {
            (
                k.param("y_rows", Scalar::U32),
                k.param("first", Scalar::U32),
            )
        });
        let t0 = k.workgroup_id(0) * k.u32(bm);
        let experts = lists.map(|(counts, lists)| {
            let per_x = k.param("per_x", Scalar::U32);
            let e = k.workgroup_id(2);
            Experts {
                lists,
                at: e * tokens,
                count: k.load(counts, e),
                per_x,
                w_first: e * rows,
            }
        });
        // A workgroup past its expert's pairs steps through no columns and writes nothing.
        let k_end = match experts {
            Some(ex) => k.select(t0.lt(ex.count), cols, k.u32(0)),
            None => cols,
        };
        let split = spec.split.then(|| {
            let chunk = k.param("k_chunk", Scalar::U32);
            let z = k.workgroup_id(2);
            (z * chunk, z * chunk + chunk, z * tokens * rows)
        });
        let (k_begin, k_end, slice) = match split {
            Some((begin, end, slice)) => (begin, end.min(cols), Some(slice)),
            None => (k.u32(0), k_end, None),
        };
        Io {
            x,
            w,
            add,
            y,
            rows,
            cols,
            k_begin,
            k_end,
            tokens,
            slice,
            part,
            t0,
            r0: k.workgroup_id(1) * k.u32(bn),
            experts,
        }
    }

    /// The block's first token (pair, for experts), and where its tokens end.
    pub(crate) fn tokens(&self) -> (Val<'b>, Val<'b>) {
        (self.t0, self.token_end())
    }

    fn token_end(&self) -> Val<'b> {
        self.experts.map_or(self.tokens, |ex| ex.count)
    }

    fn x_float(spec: &TilesSpec) -> Float {
        if spec.half_x {
            Float::F16
        } else {
            Float::F32
        }
    }

    /// The variables staging the block's x and W, in `layout`.
    pub(crate) fn fetch(
        &self,
        k: &'b KernelBuilder,
        spec: &TilesSpec,
        layout: Layout,
    ) -> Fetch<'b> {
        let (bm, bn) = spec.block();
        let x = Block {
            n: bm,
            r0: self.t0,
            rows: self.token_end(),
            cols: self.cols,
            gather: self.experts.map(|ex| Gather {
                list: ex.lists,
                at: ex.at,
                per: ex.per_x,
            }),
        };
        // An expert's rows of W follow the experts before it.
        let (r0, rows) = match self.experts {
            Some(ex) => (ex.w_first + self.r0, ex.w_first + self.rows),
            None => (self.r0, self.rows),
        };
        let w = Block {
            n: bn,
            r0,
            rows,
            cols: self.cols,
            gather: None,
        };
        Fetch::declare(
            k,
            (spec.block.invocations(), spec.depth),
            (self.x, x, Self::x_float(spec)),
            (self.w, w, spec.weights),
            (spec.lines(), layout),
        )
    }

    /// Loads the first step's share (`fetch`'s, at column `k0`), where this workgroup has
    /// steps: an experts' workgroup past its expert's pairs would read x through list entries
    /// it does not own, and a split's share past K's end would read past x and W.
    pub(crate) fn load_first(&self, k: &'b KernelBuilder, fetch: &Fetch<'b>, k0: Val<'b>) {
        if self.experts.is_some() || self.slice.is_some() {
            k.if_(k0.lt(self.k_end), || fetch.load(k, k0));
        } else {
            fetch.load(k, k0);
        }
    }

    /// Where the block's sums go.
    pub(crate) fn output(&self, spec: &TilesSpec) -> Output<'b> {
        Output {
            y: self.y,
            add: self.add,
            glu: spec.glu,
            half: spec.half_y,
            origin: (self.t0, self.r0),
            ends: (self.token_end(), self.rows),
            part: self.part,
            pairs: self.experts.map(|ex| (ex.lists, ex.at)),
            slice: self.slice,
        }
    }
}

/// Where the block's sums go: `y` (plus `add`) from (token, row) `origin`, within `ends`.
pub(crate) struct Output<'b> {
    y: BufferId,
    add: Option<BufferId>,
    /// Rows in pairs, each written as the gated unit of the two ([`TilesSpec::glu`]).
    pub(super) glu: Option<Glu>,
    /// The gated units rounded to f16 as they are written ([`TilesSpec::half_y`]).
    half: bool,
    origin: (Val<'b>, Val<'b>),
    ends: (Val<'b>, Val<'b>),
    /// y's rows per token and the row this product's first row is, where it is a part.
    part: Option<(Val<'b>, Val<'b>)>,
    /// For experts: the list and where the expert's pairs start in it. The block's token `t`
    /// is then the pair at `t`, whose row of y its number names.
    pairs: Option<(BufferId, Val<'b>)>,
    /// Where this workgroup's slice of y starts ([`TilesSpec::split`]).
    slice: Option<Val<'b>>,
}

impl<'b> Output<'b> {
    /// Writes the gated unit `glu` of the sums `gate` and `up` of (token, row) `(t, n)` and
    /// `(t, n + 1)` of the block (`n` even), if both rows are inside y.
    pub(super) fn write_pair(
        &self,
        k: &'b KernelBuilder,
        glu: Glu,
        (t, n): (Val<'b>, Val<'b>),
        (gate, up): (Val<'b>, Val<'b>),
    ) {
        let (tok, row) = (self.origin.0 + t, self.origin.1 + n);
        k.if_(
            tok.lt(self.ends.0) & (row + k.u32(1)).lt(self.ends.1),
            || {
                let (half, row) = match self.part {
                    Some((y_rows, first)) => (y_rows / k.u32(2), first + row),
                    None => (self.ends.1 / k.u32(2), row),
                };
                let v = glu.ir(k, gate, up);
                let v = if self.half { v.cast(Scalar::F16) } else { v };
                k.store(self.y, self.y_row(k, tok) * half + row / k.u32(2), v);
            },
        );
    }

    /// Writes `bm` tokens of the block's sums from `block`, f32 (token, row) `(t, n)` at
    /// `t·stride + n`, as the block's tokens `first_token + t`: each invocation a column of
    /// it, consecutive invocations consecutive rows of y, or a pair of rows with a gated unit.
    pub(crate) fn write_block(
        &self,
        k: &'b KernelBuilder,
        (block, stride): (SharedId, u32),
        (bm, bn): (u32, u32),
        invocations: u32,
        first_token: u32,
    ) {
        let lid = k.local_index();
        let read = |t: Val<'b>, n: Val<'b>| k.load_shared(block, t * k.u32(stride) + n);
        let tok = |t: Val<'b>| t + k.u32(first_token);
        if let Some(glu) = self.glu {
            let pairs = bn / 2;
            k.for_range(k.u32(0), k.u32(bm * pairs), invocations, |e| {
                let e = e + lid;
                let (t, n) = (e / k.u32(pairs), e % k.u32(pairs) * k.u32(2));
                self.write_pair(k, glu, (tok(t), n), (read(t, n), read(t, n + k.u32(1))));
            });
        } else {
            k.for_range(k.u32(0), k.u32(bm * bn), invocations, |e| {
                let e = e + lid;
                let (t, n) = (e / k.u32(bn), e % k.u32(bn));
                self.write(k, (tok(t), n), read(t, n));
            });
        }
    }

    /// Writes the sum `v` of (token, row) `(t, n)` of the block, if inside y.
    pub(super) fn write(&self, k: &'b KernelBuilder, (t, n): (Val<'b>, Val<'b>), v: Val<'b>) {
        let (tok, row) = (self.origin.0 + t, self.origin.1 + n);
        k.if_(tok.lt(self.ends.0) & row.lt(self.ends.1), || {
            let tok = self.y_row(k, tok);
            let at = match self.part {
                Some((y_rows, first)) => tok * y_rows + first + row,
                None => tok * self.ends.1 + row,
            };
            let at = self.slice.map_or(at, |slice| slice + at);
            let v = match self.add {
                Some(a) => v + k.load(a, at),
                None => v,
            };
            k.store(self.y, at, v);
        });
    }

    /// The row of y that the block's token `tok` writes.
    fn y_row(&self, k: &'b KernelBuilder, tok: Val<'b>) -> Val<'b> {
        match self.pairs {
            Some((lists, at)) => k.load(lists, at + tok),
            None => tok,
        }
    }
}

//! A product kernel's buffers and parameters ([`Io`]), and where the block's sums go
//! ([`Output`]): y, plus the residual, or SwiGLU of row pairs, guarded at y's edges.

use super::TilesSpec;
use crate::matmul_stage::{Block, Fetch, Layout};
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
    pub cols: Val<'b>,
    tokens: Val<'b>,
    /// y's rows per token and the first of them this product writes ([`TilesSpec::part`]).
    part: Option<(Val<'b>, Val<'b>)>,
    t0: Val<'b>,
    r0: Val<'b>,
}

impl<'b> Io<'b> {
    pub(crate) fn declare(k: &'b KernelBuilder, spec: &TilesSpec) -> Self {
        let (bm, bn) = spec.block();
        let w = k.buffer("w", spec.w_elem(), Access::Read);
        let x = k.buffer("x", spec.x_elem(), Access::Read);
        let add = spec.add.then(|| k.buffer("add", Scalar::F32, Access::Read));
        let y = k.buffer("y", Scalar::F32, Access::Write);
        let rows = k.param("rows", Scalar::U32);
        let cols = k.param("cols", Scalar::U32);
        let tokens = k.param("tokens", Scalar::U32);
        let part = spec.part.then(|| {
            (
                k.param("y_rows", Scalar::U32),
                k.param("first", Scalar::U32),
            )
        });
        Io {
            x,
            w,
            add,
            y,
            rows,
            cols,
            tokens,
            part,
            t0: k.workgroup_id(1) * k.u32(bm),
            r0: k.workgroup_id(0) * k.u32(bn),
        }
    }

    /// The block's first token, and the step's tokens.
    pub(crate) fn tokens(&self) -> (Val<'b>, Val<'b>) {
        (self.t0, self.tokens)
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
        let block = |n, r0, rows| Block {
            n,
            r0,
            rows,
            cols: self.cols,
        };
        Fetch::declare(
            k,
            (spec.block.invocations(), spec.depth),
            (self.x, block(bm, self.t0, self.tokens), Self::x_float(spec)),
            (self.w, block(bn, self.r0, self.rows), spec.weights),
            (spec.lines(), layout),
        )
    }

    /// Where the block's sums go.
    pub(crate) fn output(&self, spec: &TilesSpec) -> Output<'b> {
        Output {
            y: self.y,
            add: self.add,
            swiglu: spec.swiglu,
            origin: (self.t0, self.r0),
            ends: (self.tokens, self.rows),
            part: self.part,
        }
    }
}

/// Where the block's sums go: `y` (plus `add`) from (token, row) `origin`, within `ends`.
pub(crate) struct Output<'b> {
    y: BufferId,
    add: Option<BufferId>,
    /// Rows in pairs, each written as SwiGLU of the two ([`TilesSpec::swiglu`]).
    pub(super) swiglu: bool,
    origin: (Val<'b>, Val<'b>),
    ends: (Val<'b>, Val<'b>),
    /// y's rows per token and the row this product's first row is, where it is a part.
    part: Option<(Val<'b>, Val<'b>)>,
}

impl<'b> Output<'b> {
    /// Writes SwiGLU of the sums `gate` and `up` of (token, row) `(t, n)` and `(t, n + 1)` of
    /// the block (`n` even), if both rows are inside y.
    pub(super) fn write_pair(
        &self,
        k: &'b KernelBuilder,
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
                let v = crate::elementwise::silu_ir(k, gate) * up;
                k.store(self.y, tok * half + row / k.u32(2), v);
            },
        );
    }

    /// Writes the whole block's sums from `block`, f32 (token, row) `(t, n)` at
    /// `t·stride + n`: each invocation a column of it, consecutive invocations consecutive
    /// rows of y, or a pair of rows with SwiGLU.
    pub(crate) fn write_block(
        &self,
        k: &'b KernelBuilder,
        (block, stride): (SharedId, u32),
        (bm, bn): (u32, u32),
        invocations: u32,
    ) {
        let lid = k.local_index();
        let read = |t: Val<'b>, n: Val<'b>| k.load_shared(block, t * k.u32(stride) + n);
        if self.swiglu {
            let pairs = bn / 2;
            k.for_range(k.u32(0), k.u32(bm * pairs), invocations, |e| {
                let e = e + lid;
                let (t, n) = (e / k.u32(pairs), e % k.u32(pairs) * k.u32(2));
                self.write_pair(k, (t, n), (read(t, n), read(t, n + k.u32(1))));
            });
        } else {
            k.for_range(k.u32(0), k.u32(bm * bn), invocations, |e| {
                let e = e + lid;
                let (t, n) = (e / k.u32(bn), e % k.u32(bn));
                self.write(k, (t, n), read(t, n));
            });
        }
    }

    /// Writes the sum `v` of (token, row) `(t, n)` of the block, if inside y.
    pub(super) fn write(&self, k: &'b KernelBuilder, (t, n): (Val<'b>, Val<'b>), v: Val<'b>) {
        let (tok, row) = (self.origin.0 + t, self.origin.1 + n);
        k.if_(tok.lt(self.ends.0) & row.lt(self.ends.1), || {
            let at = match self.part {
                Some((y_rows, first)) => tok * y_rows + first + row,
                None => tok * self.ends.1 + row,
            };
            let v = match self.add {
                Some(a) => v + k.load(a, at),
                None => v,
            };
            k.store(self.y, at, v);
        });
    }
}

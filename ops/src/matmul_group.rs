//! [`super::matmul_tiles`]'s large block on warpgroup products ([`trine_ir::GroupOp`]):
//! Hopper's `wgmma`, whose tensor cores read both operands from shared memory, where the
//! subgroups' tiles load every operand into registers first (`ldmatrix`, the top stall of the
//! tiled kernel on an H100) and multiply 16 × 16 at a time.
//!
//! x and W, both f16, are copied asynchronously into [`STAGES`] stages in the swizzled layout
//! the products read ([`Layout::Swizzled`]), each step's copies started [`AHEAD`] steps
//! ahead. Each of the two warpgroups multiplies its 64 tokens of the block by all 128 rows,
//! one product of 64 columns of K a step, and lets it run on while the next step's copies
//! are started: it waits for a product only two steps later, before the barrier after which
//! that product's stage is copied into again. The accumulators go through shared memory to
//! y, guarded at its edges as the tiled kernel's are.

use super::matmul_stage::{Block, Fetch, Layout, BK};
use super::matmul_tiles::{Output, TilesSpec, OP};
use super::shape::ShapeError;
use super::support::Float;
use trine_gguf::quant::WeightType;
use trine_ir::{
    Access, BufferId, GroupAcc, Kernel, KernelBuilder, Scalar, TileMemory, Val, GROUP_INVOCATIONS,
    GROUP_K, GROUP_ROWS,
};

/// Stages of the copied blocks.
pub const STAGES: u32 = 4;
/// Steps between a step's copies and its product. A step's copies go to the stage the
/// product of `STAGES - AHEAD` steps before read, so with one product left running at each
/// barrier `AHEAD` is at most `STAGES - 2`.
pub const AHEAD: u32 = 2;

/// Whether `spec` has a warpgroup variant: f16 x and weights copied in the large block,
/// steps of two blocks of K (one product's [`GROUP_K`]), subgroups of 32, no SwiGLU.
pub fn eligible(spec: &TilesSpec) -> bool {
    spec.weights == WeightType::F16
        && spec.half_x
        && spec.copies
        && spec.tiles == Some(32)
        && spec.block == super::matmul_tiles::BlockSize::Large
        && spec.depth * BK == GROUP_K
        && !spec.swiglu
}

/// The kernel for an [`eligible`] `spec` with `spec.group` set: buffers and parameters as
/// [`super::matmul_tiles::kernel`]'s.
pub fn kernel(spec: TilesSpec) -> Result<Kernel, ShapeError> {
    let k = KernelBuilder::new(&spec.name(), [spec.block.invocations(), 1, 1]);
    build(&k, spec)?;
    Ok(k.finish())
}

fn build<'b>(k: &'b KernelBuilder, spec: TilesSpec) -> Result<(), ShapeError> {
    if !eligible(&spec) {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!("warpgroup products for {}", spec.name()),
        });
    }
    let (bm, bn) = spec.block();
    let invocations = spec.block.invocations();
    k.require_subgroup_width(32);
    let w = k.buffer("w", Scalar::F16, Access::Read);
    let x = k.buffer("x", Scalar::F16, Access::Read);
    let add = spec.add.then(|| k.buffer("add", Scalar::F32, Access::Read));
    let y = k.buffer("y", Scalar::F32, Access::Write);
    let rows = k.param("rows", Scalar::U32);
    let cols = k.param("cols", Scalar::U32);
    let tokens = k.param("tokens", Scalar::U32);
    let (x_stage, w_stage) = (bm * GROUP_K, bn * GROUP_K);
    let xs = k.shared("x_block", Scalar::F16, STAGES * x_stage);
    let ws = k.shared("w_block", Scalar::F16, STAGES * w_stage);
    let r0 = k.workgroup_id(0) * k.u32(bn);
    let t0 = k.workgroup_id(1) * k.u32(bm);
    let fetch = Fetch::declare(
        k,
        (invocations, spec.depth),
        (
            x,
            Block {
                n: bm,
                r0: t0,
                rows: tokens,
                cols,
            },
            Float::F16,
        ),
        (
            w,
            Block {
                n: bn,
                r0,
                rows,
                cols,
            },
            WeightType::F16,
        ),
        (true, Layout::Swizzled),
    );
    let acc = k.group_acc("acc", bn);
    acc.zero();
    let group = k.local_index() / k.u32(GROUP_INVOCATIONS);
    let stage_of = |k0: Val<'b>| k0 / k.u32(GROUP_K) % k.u32(STAGES);
    for s in 0..AHEAD {
        let k0 = k.u32(s * GROUP_K);
        k.if_(k0.lt(cols), || {
            fetch.copy(k, k0, (xs, k.u32(s * x_stage)), (ws, k.u32(s * w_stage)))
        });
        // Every step commits a batch, empty or not, so that the wait counts steps.
        k.copy_commit();
    }
    k.for_range(k.u32(0), cols, GROUP_K, |k0| {
        // The product two steps back read the stage this step's copies go to.
        k.group_wait(1);
        k.copy_wait(AHEAD - 1);
        k.barrier();
        let later = k0 + k.u32(AHEAD * GROUP_K);
        k.if_(later.lt(cols), || {
            let s = stage_of(later);
            fetch.copy(k, later, (xs, s * k.u32(x_stage)), (ws, s * k.u32(w_stage)))
        });
        k.copy_commit();
        let s = stage_of(k0);
        let a_at = s * k.u32(x_stage) + group * k.u32(GROUP_ROWS * GROUP_K);
        acc.mma((xs, a_at), (ws, s * k.u32(w_stage)));
    });
    k.group_wait(0);
    finish(k, acc, (y, add), (t0, r0), (tokens, rows), (bm, bn));
    Ok(())
}

/// Writes the block's sums to y (plus `add`): each warpgroup stores its accumulator to
/// shared memory, then consecutive invocations write consecutive rows of y.
fn finish<'b>(
    k: &'b KernelBuilder,
    acc: GroupAcc<'b>,
    (y, add): (BufferId, Option<BufferId>),
    origin: (Val<'b>, Val<'b>),
    ends: (Val<'b>, Val<'b>),
    (bm, bn): (u32, u32),
) {
    // Padded by 4 so that the rows a subgroup stores at once fall in different banks.
    let stride = bn + 4;
    let block = k.shared("y_block", Scalar::F32, bm * stride);
    let lid = k.local_index();
    let group = lid / k.u32(GROUP_INVOCATIONS);
    acc.store(
        TileMemory::Shared(block),
        group * k.u32(GROUP_ROWS * stride),
        k.u32(stride),
    );
    k.barrier();
    let out = Output {
        y,
        add,
        swiglu: false,
        origin,
        ends,
    };
    let invocations = 2 * GROUP_INVOCATIONS;
    k.for_range(k.u32(0), k.u32(bm * bn), invocations, |e| {
        let e = e + lid;
        let (t, n) = (e / k.u32(bn), e % k.u32(bn));
        out.write(k, (t, n), k.load_shared(block, t * k.u32(stride) + n));
    });
}

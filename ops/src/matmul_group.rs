//! [`super::matmul_tiles`]'s large block on warpgroup products ([`trine_ir::GroupOp`]):
//! Hopper's `wgmma`, whose tensor cores read both operands from shared memory, where the
//! subgroups' tiles load every operand into registers first (`ldmatrix`, the tiled kernel's
//! top stall in a profile) and multiply 16 × 16 at a time.
//!
//! A step is 64 columns of K (one product's [`GROUP_K`]), staged into one of a few stages
//! ([`stages`]) in the swizzled layout the products read ([`Layout::Swizzled`]): f16 blocks copied
//! asynchronously [`AHEAD`] steps ahead, the others (f32 x, quantized or f32 weights) loaded a
//! step ahead and put as f16 at the start of their step, as the tiled kernel stages them. Each
//! of the two warpgroups multiplies its 64 tokens by all the block's 128 rows, one product a
//! step, and lets it run on while the next step is staged: it
//! waits for a product only two steps later, before the barrier after which that product's
//! stage is written again. The accumulators go through shared memory to y, guarded at its
//! edges (with the residual, or SwiGLU of the row pairs) as the tiled kernel's are.
//!
//! The medium block (64 × 64, one warpgroup) on these products measured slower than on the
//! subgroups' tiles where it serves (SmolLM2's gate/up over 512 tokens, Q4_1 put; see
//! docs/bench/prefill.md), as puts bound it and its stages leave room for fewer workgroups,
//! so only the large block takes them.

use super::matmul_stage::{Layout, BK};
use super::matmul_tiles::{BlockSize, Io, Output, TilesSpec, OP};
use super::shape::ShapeError;
use trine_ir::{
    GroupAcc, Kernel, KernelBuilder, Scalar, SharedId, TileMemory, Val, GROUP_INVOCATIONS, GROUP_K,
    GROUP_ROWS,
};

/// Steps between a step's copies and its product: a block's one workgroup on a
/// multiprocessor (its shared memory allows no second) hides the copies' trip from memory
/// behind this many steps of products in its `AHEAD + 2` stages, which fit the 227 KiB a
/// Hopper workgroup may have ([`SHARED_LIMIT`]); the block of y lies over them
/// ([`finish`]).
pub const AHEAD: u32 = 4;

/// The most shared memory a workgroup may have on the devices with warpgroup products
/// (sm_90), in bytes.
pub const SHARED_LIMIT: u64 = 227 * 1024;

/// Stages of the staged blocks, with or without copies. At a step's barrier each warpgroup
/// has one product left running, the step before's, and the other may have had two until
/// it passed the barrier before. A step's copies go to the stage the product of
/// `stages - AHEAD` steps before read, which must have finished: `AHEAD + 2` stages. A put
/// goes to its own step's stage before the barrier, read `stages` steps before: three
/// stages, which leave room for a second workgroup on a multiprocessor where four would not.
pub fn stages(copies: bool) -> u32 {
    if copies {
        AHEAD + 2
    } else {
        3
    }
}

/// Whether `spec` has a warpgroup variant: the large block on subgroups of 32, steps of two
/// blocks of K (one product's [`GROUP_K`]).
pub fn eligible(spec: &TilesSpec) -> bool {
    spec.tiles == Some(32) && spec.block == BlockSize::Large && spec.depth * BK == GROUP_K
}

/// The kernel for an [`eligible`] `spec` with `spec.group` set: buffers and parameters as
/// [`super::matmul_tiles::kernel`]'s.
pub fn kernel(spec: TilesSpec) -> Result<Kernel, ShapeError> {
    let k = KernelBuilder::new(&spec.name(), [spec.block.invocations(), 1, 1]);
    build(&k, spec)?;
    let kernel = k.finish();
    let bytes = kernel.overlaid_shared_bytes();
    if bytes > SHARED_LIMIT {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!("{} in {bytes} bytes of shared memory", spec.name()),
        });
    }
    Ok(kernel)
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
    let io = Io::declare(k, &spec);
    let cols = io.k_end;
    let (x_stage, w_stage) = (bm * GROUP_K, bn * GROUP_K);
    // Copies where W is f16 (`TilesSpec::copied`), and x with it where it is f16 too.
    let copies = spec.copies;
    let stages = stages(copies);
    if !copies {
        // The put stages leave shared memory for two workgroups a multiprocessor; their
        // registers must leave room too (a Q6_K put's decoding took 146 an invocation
        // unbounded, which left room for one).
        k.min_resident(2);
    }
    let xs = k.shared("x_block", Scalar::F16, stages * x_stage);
    let ws = k.shared("w_block", Scalar::F16, stages * w_stage);
    let fetch = io.fetch(k, &spec, Layout::Swizzled);
    let acc = k.group_acc("acc", bn);
    acc.zero();
    let group = k.local_index() / k.u32(GROUP_INVOCATIONS);
    let stage_of = |k0: Val<'b>| k0 / k.u32(GROUP_K) % k.u32(stages);
    let at = |s: Val<'b>| (s * k.u32(x_stage), s * k.u32(w_stage));
    for s in (0..AHEAD).filter(|_| copies) {
        let k0 = io.k_begin + k.u32(s * GROUP_K);
        k.if_(k0.lt(cols), || {
            let (x0, w0) = at(stage_of(k0));
            fetch.copy(k, k0, (xs, x0), (ws, w0))
        });
        // Every step commits a batch, empty or not, so that the wait counts steps.
        k.copy_commit();
    }
    io.load_first(k, &fetch, io.k_begin);
    k.for_range(io.k_begin, cols, GROUP_K, |k0| {
        let (x0, w0) = at(stage_of(k0));
        // The product two steps back read the stage this step's copies go to.
        k.group_wait(1);
        fetch.put(k, (xs, x0), (ws, w0));
        if copies {
            k.copy_wait(AHEAD - 1);
        }
        k.barrier();
        if copies {
            let later = k0 + k.u32(AHEAD * GROUP_K);
            k.if_(later.lt(cols), || {
                let (xl, wl) = at(stage_of(later));
                fetch.copy(k, later, (xs, xl), (ws, wl))
            });
            k.copy_commit();
        }
        let next = k0 + k.u32(GROUP_K);
        k.if_(next.lt(cols), || fetch.load(k, next));
        let a_at = x0 + group * k.u32(GROUP_ROWS * GROUP_K);
        acc.mma((xs, a_at), (ws, w0));
    });
    k.group_wait(0);
    finish(k, acc, &io.output(&spec), (bm, bn), (invocations, xs));
    Ok(())
}

/// Writes the block's sums to y a warpgroup at a time: each stores its accumulator to shared
/// memory in turn, then consecutive invocations write consecutive rows of y (row pairs with
/// SwiGLU). The block of y lies over x's stages (`over`), which the products no longer read
/// once every warpgroup has waited for its last: the stages alone decide how many workgroups
/// a multiprocessor holds, so the put stages leave room for two.
fn finish<'b>(
    k: &'b KernelBuilder,
    acc: GroupAcc<'b>,
    out: &Output<'b>,
    (bm, bn): (u32, u32),
    (invocations, over): (u32, SharedId),
) {
    // Padded by 4 so that the rows a subgroup stores at once fall in different banks.
    let stride = bn + 4;
    let block = k.shared_over("y_block", Scalar::F32, GROUP_ROWS * stride, over);
    let group = k.local_index() / k.u32(GROUP_INVOCATIONS);
    for g in 0..bm / GROUP_ROWS {
        // The first waits for the other warpgroups' last products, which read the stages.
        k.barrier();
        k.if_(group.eq(k.u32(g)), || {
            acc.store(TileMemory::Shared(block), k.u32(0), k.u32(stride))
        });
        k.barrier();
        out.write_block(
            k,
            (block, stride),
            (GROUP_ROWS, bn),
            invocations,
            g * GROUP_ROWS,
        );
    }
}

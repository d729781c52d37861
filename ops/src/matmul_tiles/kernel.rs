//! Builds the tiled product's IR: the shared blocks and the K loop, loading each step's
//! blocks during the step before, or with asynchronous copies in stages.

use super::compute::Compute;
use super::io::Io;
use super::{BlockSize, TilesSpec, BK, COPY_STAGES, OP};
use crate::matmul_stage::{stage, Fetch, Layout};
use crate::shape::ShapeError;
use trine_ir::{Kernel, KernelBuilder, Scalar, SharedId, Val};

/// The kernel for `spec`. Buffers: `w` (f32, f16, or a quantized type's bytes as `U32`
/// words), `x` f32, then `add` f32 with [`TilesSpec::add`] or `counts` and `lists` with
/// [`TilesSpec::experts`], then `y` f32 (`rows / 2` wide with [`TilesSpec::glu`], f16 with
/// [`TilesSpec::half_y`]). Params:
/// rows, cols, tokens (then y_rows and first for a part, per_x for experts). Grid
/// [`TilesSpec::grid`] ([`TilesSpec::experts_grid`]); K must
/// be whole steps of [`TilesSpec::depth`] blocks. Errors: a subgroup width that does not
/// divide the block's tiles evenly among the workgroup's subgroups; a depth other than 1, 2
/// or 4; a residual with a gated unit; y in f16 without one; a weight format the staging does
/// not decode.
pub fn kernel(spec: TilesSpec) -> Result<Kernel, ShapeError> {
    let (bm, bn) = spec.block();
    let depth = spec.depth;
    if !matches!(depth, 1 | 2 | 4) {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!("steps of {depth} blocks of K"),
        });
    }
    if spec.add && spec.glu.is_some() {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: "a residual added to a gated unit's output".into(),
        });
    }
    if spec.half_y && spec.glu.is_none() {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: "y in f16 other than a gated unit's".into(),
        });
    }
    if spec.split && (spec.add || spec.glu.is_some() || spec.part || spec.experts) {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: "K split with a residual, a gated unit, a part or experts".into(),
        });
    }
    if spec.experts && spec.add {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: "an experts' product with a residual".into(),
        });
    }
    if !super::takes(spec.weights) {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: format!("{} weights (blocks it cannot stage)", spec.weights),
        });
    }
    if spec.group {
        return crate::matmul_group::kernel(spec);
    }
    let invocations = spec.block.invocations();
    let k = KernelBuilder::new(&spec.name(), [invocations, 1, 1]);
    let io = Io::declare(&k, &spec);
    let cols = io.k_end;
    // Copied blocks have COPY_STAGES stages, a put x two (see `pipelined`): more than 48 KiB
    // for the large block, which CUDA, the one target of copies, takes as dynamic shared
    // memory.
    let (x_stage, w_stage) = (bm * stage(depth), bn * stage(depth));
    let put_stages = put_stages(&spec, (x_stage, w_stage), invocations);
    let (x_stages, w_stages) = match (spec.copies, spec.half_x) {
        (true, true) => (COPY_STAGES, COPY_STAGES),
        (true, false) => (2, COPY_STAGES),
        (false, _) => (put_stages, put_stages),
    };
    let xs = k.shared("x_block", Scalar::F16, x_stages * x_stage);
    let ws = k.shared("w_block", Scalar::F16, w_stages * w_stage);

    if spec.tiles.is_none() && spec.block == BlockSize::Large {
        return Err(ShapeError::Unsupported {
            op: OP,
            what: "the large block without tiles".into(),
        });
    }
    let compute = match spec.tiles {
        Some(width) => Compute::tiles(&k, width, (bm, bn), invocations)?,
        None => Compute::scalar(&k, (bm, bn), invocations, io.tokens()),
    };
    let fetch = io.fetch(&k, &spec, Layout::Padded);
    let width = BK * depth;
    if spec.copies {
        pipelined(
            &k,
            (&fetch, &compute),
            (xs, ws),
            (x_stage, w_stage),
            (cols, depth),
            &io,
        );
    } else {
        // Step k + 1's loads are issued before step k's products ([`crate::matmul_stage`]).
        // In two stages, step i is put into stage i mod 2, so one barrier a step suffices: an
        // invocation that has passed step i's barrier knows every subgroup has finished step
        // i − 1's products, and step i + 1's put writes the stage those read. In one, the
        // next step restages both blocks only after a second barrier.
        let zero = k.u32(0);
        io.load_first(&k, &fetch, io.k_begin);
        k.for_range(io.k_begin, cols, width, |k0| {
            let (x0, w0) = if put_stages == 2 {
                let stage = k0 / k.u32(width) % k.u32(2);
                (stage * k.u32(x_stage), stage * k.u32(w_stage))
            } else {
                (zero, zero)
            };
            fetch.put(&k, (xs, x0), (ws, w0));
            k.barrier();
            let next = k0 + k.u32(width);
            k.if_(next.lt(cols), || fetch.load(&k, next));
            compute.step(&k, (xs, ws, x0, w0), depth);
            if put_stages == 1 {
                k.barrier();
            }
        });
    }
    compute.finish(&k, &io.output(&spec), (bm, bn), invocations);
    Ok(k.finish())
}

/// Stages of put blocks without copies: two on tiles where they fit in [`TWO_STAGES_BYTES`]
/// with the subgroups' output tiles, so that a step's put overlaps the step before's
/// products and each step waits at one barrier, not two; else one.
fn put_stages(spec: &TilesSpec, (x_stage, w_stage): (u32, u32), invocations: u32) -> u32 {
    let width = match spec.tiles {
        Some(width) if !spec.copies => width,
        _ => return 1,
    };
    let staged = 2 * (x_stage + w_stage) * 2;
    let outputs = invocations / width * Compute::OUTPUT_TILE_BYTES;
    if staged + outputs <= TWO_STAGES_BYTES {
        2
    } else {
        1
    }
}

/// The shared memory of the smallest device (lavapipe's), which every block but the large
/// one keeps within.
const TWO_STAGES_BYTES: u32 = 32 * 1024;

/// The K loop with copied weights: W's block of step i lands in stage i mod
/// [`COPY_STAGES`], started `COPY_STAGES - 1` steps ahead, and x's is copied alike (f16 x)
/// or, loaded a step ahead as without copies, put into stage i mod 2, so one barrier a step
/// suffices. When every invocation has passed step i's barrier, every subgroup has finished
/// step i − 1's products, so the stages those read may be written again: by the copies
/// started after that barrier, and by the next step's put.
fn pipelined<'b>(
    k: &'b KernelBuilder,
    (fetch, compute): (&Fetch<'b>, &Compute<'b>),
    (xs, ws): (SharedId, SharedId),
    (x_stage, w_stage): (u32, u32),
    (cols, depth): (Val<'b>, u32),
    io: &Io<'b>,
) {
    let width = BK * depth;
    let ahead = COPY_STAGES - 1;
    let stage_of =
        |k0: Val<'b>, stages: u32, size: u32| (k0 / k.u32(width)) % k.u32(stages) * k.u32(size);
    let x_stages = if fetch.copies_x() { COPY_STAGES } else { 2 };
    for s in 0..ahead {
        let k0 = io.k_begin + k.u32(s * width);
        let (x0, w0) = (
            stage_of(k0, x_stages, x_stage),
            stage_of(k0, COPY_STAGES, w_stage),
        );
        k.if_(k0.lt(cols), || fetch.copy(k, k0, (xs, x0), (ws, w0)));
        // Every step commits a batch, empty or not, so that the wait counts steps.
        k.copy_commit();
    }
    io.load_first(k, fetch, io.k_begin);
    k.for_range(io.k_begin, cols, width, |k0| {
        let x0 = stage_of(k0, x_stages, x_stage);
        fetch.put(k, (xs, x0), (ws, k.u32(0)));
        k.copy_wait(ahead - 1);
        k.barrier();
        let later = k0 + k.u32(ahead * width);
        k.if_(later.lt(cols), || {
            let x0 = stage_of(later, x_stages, x_stage);
            fetch.copy(
                k,
                later,
                (xs, x0),
                (ws, stage_of(later, COPY_STAGES, w_stage)),
            )
        });
        k.copy_commit();
        let next = k0 + k.u32(width);
        k.if_(next.lt(cols), || fetch.load(k, next));
        compute.step(k, (xs, ws, x0, stage_of(k0, COPY_STAGES, w_stage)), depth);
    });
}

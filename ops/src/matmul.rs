//! Batched matrix product `C[z] = A[z] · B[z]` (or `A[z] · B[z]ᵀ`), A and B in f32 or f16,
//! accumulated and written in f32: prefill's projections (activations times weights stored one
//! row per output feature, so B transposed) and attention's batched products.
//!
//! Tiled through shared memory: a workgroup of `tile × tile` invocations computes a block of
//! `(tile·reg)²` outputs, each invocation `reg × reg` of them (strided by `tile`, so that
//! neighbouring invocations touch neighbouring addresses), stepping through K `tile` columns
//! at a time. Inputs are converted to f32 as they are staged. Sizes need not be multiples of
//! the block. The batch is grid z; leading dimensions and batch strides (in elements) are
//! parameters, so views and broadcasts (a batch stride of 0) need no copies.
//!
//! Bound: [`NMSE_MATMUL`] (5e-11, 100 times the worst measured, see there). f16 inputs lose
//! nothing in the products (11 × 11 significant bits fit f32's 24), so only f32 accumulation
//! rounds: NMSE ≈ K·2^-48 for these random inputs, while a lost tile of K (16 of at most 1536
//! terms) would cost about 16/K ≥ 1e-2.

use super::shape::ShapeError;
use crate::case::*;
use half::f16;
use trine_ir::{Access, BufferId, Kernel, KernelBuilder, ParamValue, Scalar, Val, Var};

const OP: &str = "matmul";

/// Compile-time choices of a matmul kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulSpec {
    /// Element type of A: F32 or F16.
    pub a: Scalar,
    /// Element type of B: F32 or F16.
    pub b: Scalar,
    /// B is stored `[N × K]` (element (p, j) at `j·ldb + p`), as weight matrices are.
    pub b_transposed: bool,
    /// Workgroup side and K step.
    pub tile: u32,
    /// Outputs per invocation along each side.
    pub reg: u32,
    /// B transposed only: the CPUs' panel walk instead of tiles ([`lanes_kernel`]), with this
    /// block of sums per invocation; `tile` and `reg` do not apply.
    pub lanes: Option<LaneBlock>,
}

/// [`MatmulSpec::lanes`]' workgroup: one invocation per column of a vector of C's columns.
const LANES: u32 = 8;

/// Rows of C one [`MatmulSpec::lanes`] workgroup computes, a block of [`LaneBlock::rows`] at a
/// time: enough that staging B's panel costs little beside the products (it was a fifth of
/// the time at 192 rows), few enough that a 512-token prompt still makes two panels of
/// workgroups per strip of columns for the threads to share.
const PANEL_ROWS: u32 = 256;
/// Elements of K staged at a time: B's panel, `LANES · vectors` columns of `PANEL_K` f32, at
/// most 24 KiB, stays in a core's L1 cache beside A's rows.
const PANEL_K: u32 = 128;

/// The outputs each invocation of a [`MatmulSpec::lanes`] workgroup keeps while it walks K:
/// `rows` rows of C times `vectors` columns spaced [`LANES`] apart, a sum each, which GCC keeps
/// in vector registers (one per row and vector) beside A's element broadcast for each row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LaneBlock {
    pub rows: u32,
    pub vectors: u32,
}

impl LaneBlock {
    /// The block for a CPU with `registers` vector registers: its sums and A's broadcasts
    /// must fit, or GCC spills sums in the loop over K.
    ///
    /// GCC tuned for AMD's cores reads each vector of the panel as a memory operand of every
    /// fused multiply-add that uses it, so an element of K costs `rows · (vectors + 1)` loads
    /// for `rows · vectors` multiply-adds: many vectors and few rows keep the loads near one
    /// per multiply-add. On one core of the AVX2-only EPYC (2026-11-26, 512 × 576 × 576 f32,
    /// the C function alone, best of three alternating rounds on a noisy VM, GFLOP/s): 2 × 6
    /// 52–56, 4 × 3 49–50, 2 × 4 41–51, 3 × 4 39–49, 3 × 3 43, 6 × 2 26–29 (its six
    /// broadcasts and twelve sums spill); the dot walk this replaced (each workgroup's sums
    /// along K, added through shared memory at the end) 44–50; a hand-written 6 × 2 with
    /// intrinsics, which GCC compiles with the panel in registers, 57–80.
    ///
    /// 32 registers (AVX-512): 4 × 6, by the same count; not measured on such a machine.
    pub fn for_registers(registers: u32) -> LaneBlock {
        let rows = if registers >= 32 { 4 } else { 2 };
        LaneBlock { rows, vectors: 6 }
    }

    /// Columns of C per workgroup.
    fn cols(&self) -> u32 {
        self.vectors * LANES
    }
}

impl MatmulSpec {
    /// 16 × 16 invocations computing 32 × 32 outputs: 8 KiB of shared memory, and 4 outputs
    /// per invocation to reuse each staged value twice.
    pub fn new(a: Scalar, b: Scalar, b_transposed: bool) -> MatmulSpec {
        MatmulSpec {
            a,
            b,
            b_transposed,
            tile: 16,
            reg: 2,
            lanes: None,
        }
    }

    /// Outputs per workgroup along each side.
    pub fn block(&self) -> u32 {
        self.tile * self.reg
    }

    /// Rows and columns of C per workgroup.
    fn block_sides(&self) -> (u32, u32) {
        if let Some(b) = self.lanes {
            (PANEL_ROWS, b.cols())
        } else {
            (self.block(), self.block())
        }
    }

    fn check(&self) -> Result<(), ShapeError> {
        for (what, t) in [("a", self.a), ("b", self.b)] {
            if !matches!(t, Scalar::F32 | Scalar::F16) {
                return Err(ShapeError::Unsupported {
                    op: OP,
                    what: format!("{what} of type {t} (f32 or f16 only)"),
                });
            }
        }
        if let Some(b) = self.lanes {
            if !self.b_transposed {
                return Err(ShapeError::Unsupported {
                    op: OP,
                    what: "the lanes walk with B not transposed (its rows must run along K)".into(),
                });
            }
            for (what, v) in [
                ("lane block rows", b.rows),
                ("lane block vectors", b.vectors),
            ] {
                if v == 0 {
                    return Err(ShapeError::Zero { op: OP, what });
                }
            }
            if !PANEL_ROWS.is_multiple_of(b.rows) {
                return Err(ShapeError::Unsupported {
                    op: OP,
                    what: format!(
                        "lane block rows {} (a divisor of the panel's {PANEL_ROWS})",
                        b.rows
                    ),
                });
            }
            let panel = PANEL_K as usize * b.cols() as usize * 4;
            within_shared(
                "shared bytes of the lanes walk's panel (128 × 8 × vectors × 4)",
                panel,
            )?;
        }
        for (what, v) in [("tile", self.tile), ("reg", self.reg)] {
            if v == 0 {
                return Err(ShapeError::Zero { op: OP, what });
            }
        }
        let invocations = self.tile as usize * self.tile as usize;
        if invocations > 1024 {
            return Err(ShapeError::TooLarge {
                op: OP,
                what: "invocations (tile²)",
                value: invocations,
                limit: 1024,
            });
        }
        // Two f32 tiles of block × tile.
        let shared = 2 * self.block() as usize * self.tile as usize * 4;
        within_shared("shared bytes (2 × tile² × reg × 4)", shared)
    }
}

/// Whether `bytes` of shared memory fit the smallest device's 32 KiB.
fn within_shared(what: &'static str, bytes: usize) -> Result<(), ShapeError> {
    if bytes > 32 * 1024 {
        return Err(ShapeError::TooLarge {
            op: OP,
            what,
            value: bytes,
            limit: 32 * 1024,
        });
    }
    Ok(())
}

/// Sizes and layout of one batched product; strides and leading dimensions in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulShape {
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    pub stride_a: usize,
    pub stride_b: usize,
    pub stride_c: usize,
}

impl MatmulShape {
    /// Densely packed matrices, one after another in the batch; `broadcast_b` shares one B.
    pub fn packed(
        batch: usize,
        m: usize,
        n: usize,
        k: usize,
        b_transposed: bool,
        broadcast_b: bool,
    ) -> MatmulShape {
        let ldb = if b_transposed { k } else { n };
        MatmulShape {
            batch,
            m,
            n,
            k,
            lda: k,
            ldb,
            ldc: n,
            stride_a: m * k,
            stride_b: if broadcast_b { 0 } else { k * n },
            stride_c: m * n,
        }
    }

    /// Elements a buffer needs: the last batch's offset plus the extent of one matrix; `None`
    /// for an empty shape or one that overflows.
    fn extent(&self, stride: usize, rows: usize, ld: usize, cols: usize) -> Option<usize> {
        stride
            .checked_mul(self.batch.checked_sub(1)?)?
            .checked_add(rows.checked_sub(1)?.checked_mul(ld)?)?
            .checked_add(cols)
    }

    /// Offset of element (row, col) of batch z, for a matrix with this stride and ld.
    fn at(stride: usize, ld: usize, z: usize, row: usize, col: usize) -> usize {
        z * stride + row * ld + col
    }
}

/// Checks sizes, leading dimensions, buffer lengths (in elements) and that indices fit u32.
pub fn check_shapes(
    s: &MatmulShape,
    b_transposed: bool,
    a_len: usize,
    b_len: usize,
    c_len: usize,
) -> Result<(), ShapeError> {
    for (what, v) in [("batch", s.batch), ("m", s.m), ("n", s.n), ("k", s.k)] {
        if v == 0 {
            return Err(ShapeError::Zero { op: OP, what });
        }
    }
    let (b_rows, b_cols) = if b_transposed { (s.n, s.k) } else { (s.k, s.n) };
    let layouts = [
        ("lda", "a", s.lda, s.stride_a, s.m, s.k, a_len),
        ("ldb", "b", s.ldb, s.stride_b, b_rows, b_cols, b_len),
        ("ldc", "c", s.ldc, s.stride_c, s.m, s.n, c_len),
    ];
    for (ld_name, buf, ld, stride, rows, cols, len) in layouts {
        if ld < cols {
            return Err(ShapeError::TooSmall {
                op: OP,
                what: ld_name,
                needed: cols,
                found: ld,
            });
        }
        let needed = s.extent(stride, rows, ld, cols).unwrap_or(usize::MAX);
        if needed > u32::MAX as usize {
            return Err(ShapeError::TooLarge {
                op: OP,
                what: buf,
                value: needed,
                limit: u32::MAX as usize,
            });
        }
        if len < needed {
            return Err(ShapeError::TooSmall {
                op: OP,
                what: buf,
                needed,
                found: len,
            });
        }
    }
    // Batches of C written by different workgroups must not overlap.
    let c_matrix = (s.m - 1) * s.ldc + s.n;
    if s.batch > 1 && s.stride_c < c_matrix {
        return Err(ShapeError::TooSmall {
            op: OP,
            what: "c batch stride",
            needed: c_matrix,
            found: s.stride_c,
        });
    }
    Ok(())
}

/// `C = A·B` (or `A·Bᵀ`) in f64 from input values given as f64, over a C that starts as
/// `c_init` (elements outside the matrices keep their value, as in the kernel's buffer).
pub fn reference(
    s: &MatmulShape,
    b_transposed: bool,
    a: &[f64],
    b: &[f64],
    c_init: &[f64],
) -> Result<Vec<f64>, ShapeError> {
    check_shapes(s, b_transposed, a.len(), b.len(), c_init.len())?;
    let mut c = c_init.to_vec();
    for z in 0..s.batch {
        for i in 0..s.m {
            for j in 0..s.n {
                let sum = (0..s.k)
                    .map(|p| {
                        let bv = if b_transposed {
                            b[MatmulShape::at(s.stride_b, s.ldb, z, j, p)]
                        } else {
                            b[MatmulShape::at(s.stride_b, s.ldb, z, p, j)]
                        };
                        a[MatmulShape::at(s.stride_a, s.lda, z, i, p)] * bv
                    })
                    .sum();
                c[MatmulShape::at(s.stride_c, s.ldc, z, i, j)] = sum;
            }
        }
    }
    Ok(c)
}

/// The matmul kernel for `spec`. Buffers `a`, `b`, `c` (f32); parameters m, n, k, lda, ldb,
/// ldc, stride_a, stride_b, stride_c; grid [`grid`].
pub fn kernel(spec: MatmulSpec) -> Result<Kernel, ShapeError> {
    spec.check()?;
    if let Some(block) = spec.lanes {
        return Ok(lanes_kernel(spec, block));
    }
    let (t, r, bm) = (spec.tile, spec.reg, spec.block());
    let bt = if spec.b_transposed { "t" } else { "" };
    let name = format!("matmul_{}_{}{bt}_t{t}r{r}", spec.a, spec.b);
    let k = KernelBuilder::new(&name, [t, t, 1]);
    let ([a, b, c], [m, n, kk, lda, ldb, ldc, sa, sb, sc]) = interface(&k, &spec, Access::Write);
    let ta = k.shared("ta", Scalar::F32, bm * t);
    let tb = k.shared("tb", Scalar::F32, t * bm);
    let (tx, ty) = (k.local_id(0), k.local_id(1));
    let row0 = k.workgroup_id(1) * k.u32(bm);
    let col0 = k.workgroup_id(0) * k.u32(bm);
    let z = k.workgroup_id(2);
    let (a_base, b_base, c_base) = (z * sa, z * sb, z * sc);
    let tile = k.u32(t);
    let zero = k.f32(0.0);
    // An invocation's i-th row or column is strided by the tile, so that neighbouring
    // invocations touch neighbouring elements.
    let strided = |v, i: u32| plus(&k, v, i * t);
    let accs: Vec<Var> = (0..r * r).map(|_| k.var("acc", Scalar::F32)).collect();
    let tiles = (kk + k.u32(t - 1)) / tile;
    k.for_range(k.u32(0), tiles, 1, |step| {
        let k0 = step * tile;
        // A's tile: block rows × tile columns, row-major in `ta`, read along rows.
        let p = k0 + tx;
        for i in 0..r {
            let lr = strided(ty, i);
            let row = row0 + lr;
            let v = guarded_load(&k, zero, row.lt(m) & p.lt(kk), || {
                k.load(a, a_base + row * lda + p)
            });
            k.store_shared(ta, lr * tile + tx, v);
        }
        // B's tile: tile rows × block columns, row-major in `tb`. Read along B's rows in
        // memory: along N, or along K when B is transposed.
        for j in 0..r {
            let (lc, p, slot) = if spec.b_transposed {
                let lc = strided(ty, j);
                (lc, k0 + tx, tx * k.u32(bm) + lc)
            } else {
                let lc = strided(tx, j);
                (lc, k0 + ty, ty * k.u32(bm) + lc)
            };
            let col = col0 + lc;
            let at = if spec.b_transposed {
                col * ldb + p
            } else {
                p * ldb + col
            };
            let v = guarded_load(&k, zero, p.lt(kk) & col.lt(n), || k.load(b, b_base + at));
            k.store_shared(tb, slot, v);
        }
        k.barrier();
        let a_rows: Vec<Val> = (0..r).map(|i| strided(ty, i) * tile).collect();
        let b_cols: Vec<Val> = (0..r).map(|j| strided(tx, j)).collect();
        k.for_range(k.u32(0), tile, 1, |p| {
            let av: Vec<Val> = a_rows.iter().map(|&o| k.load_shared(ta, o + p)).collect();
            let pb = p * k.u32(bm);
            let bv: Vec<Val> = b_cols.iter().map(|&o| k.load_shared(tb, pb + o)).collect();
            for (i, &x) in av.iter().enumerate() {
                for (j, &y) in bv.iter().enumerate() {
                    let acc = accs[i * r as usize + j];
                    acc.set(x.fma(y, acc.get()));
                }
            }
        });
        k.barrier();
    });
    for i in 0..r {
        let row = row0 + strided(ty, i);
        for j in 0..r {
            let col = col0 + strided(tx, j);
            let acc = accs[(i * r + j) as usize];
            k.if_(row.lt(m) & col.lt(n), || {
                k.store(c, c_base + row * ldc + col, acc.get())
            });
        }
    }
    Ok(k.finish())
}

/// [`MatmulSpec::lanes`]' kernel (B transposed), the outer-product walk of CPU BLAS kernels:
/// a workgroup of [`LANES`] invocations computes [`PANEL_ROWS`] rows of C times
/// `block.cols()` columns, invocation `lid` the columns `lid`, `lid + LANES`, … of the strip.
/// For each [`PANEL_K`] elements of K, the workgroup first stages B's panel transposed in
/// shared memory (element p of the strip's column j at `p · cols + j`, so a row of the panel
/// is the strip's columns side by side), then walks its rows `block.rows` at a time: at each
/// element p, every invocation multiplies A's element (the same for all, a broadcast) by its
/// columns' panel values (consecutive invocations, consecutive addresses: one vector) into
/// `rows × vectors` sums that GCC keeps in registers. The sums go to C after each panel and
/// come back for the next, which stores and reloads f32 exactly: every output is the fused
/// multiply-adds of its dot product in K's order. Rows and columns past the edges read the
/// last ones again and are not stored.
pub fn lanes_kernel(spec: MatmulSpec, block: LaneBlock) -> Kernel {
    let LaneBlock { rows, vectors } = block;
    let width = block.cols();
    let name = format!("matmul_{}_{}t_lanes{rows}x{vectors}", spec.a, spec.b);
    let k = KernelBuilder::new(&name, [LANES, 1, 1]);
    let ([a, b, c], [m, n, kk, lda, ldb, ldc, sa, sb, sc]) =
        interface(&k, &spec, Access::ReadWrite);
    let (lid, zero, one) = (k.local_index(), k.u32(0), k.u32(1));
    let col0 = k.workgroup_id(0) * k.u32(width);
    let row0 = k.workgroup_id(1) * k.u32(PANEL_ROWS);
    let z = k.workgroup_id(2);
    let rows_end = (row0 + k.u32(PANEL_ROWS)).min(m);
    let cols: Vec<Val> = (0..vectors)
        .map(|v| col0 + k.u32(v * LANES) + lid)
        .collect();
    let panel = k.shared("panel", Scalar::F32, PANEL_K * width);
    let accs: Vec<Var> = (0..rows * vectors)
        .map(|_| k.var("acc", Scalar::F32))
        .collect();
    k.for_range(zero, kk, PANEL_K, |kc| {
        let len = (kk - kc).min(k.u32(PANEL_K));
        // Invocation `lid` copies its columns of the strip, one element of K at a time: a
        // gather along B's rows, a vector store along the panel's.
        let from: Vec<Val> = cols
            .iter()
            .map(|&col| z * sb + col.min(n - one) * ldb + kc)
            .collect();
        k.for_range(zero, len, 1, |p| {
            for (v, &f) in (0..).zip(&from) {
                let x = k.load(b, f + p).cast(Scalar::F32);
                k.store_shared(panel, p * k.u32(width) + k.u32(v * LANES) + lid, x);
            }
        });
        k.barrier();
        k.for_range(row0, rows_end, rows, |r0| {
            let row = |i: u32| r0 + k.u32(i);
            let a_rows: Vec<Val> = (0..rows)
                .map(|i| z * sa + row(i).min(m - one) * lda + kc)
                .collect();
            let out = |i: u32, v: u32| z * sc + row(i) * ldc + cols[v as usize];
            let stored = |i: u32, v: u32| row(i).lt(m) & cols[v as usize].lt(n);
            // Whether every output of the block is inside C, the same for every invocation:
            // then the sums load and store without a condition per invocation, which the C
            // lowering would run as masked moves (microcoded on AMD's cores).
            let full = (r0 + k.u32(rows)).le(m) & (col0 + k.u32(width)).le(n);
            let each = |f: &dyn Fn(u32, u32)| {
                for i in 0..rows {
                    for v in 0..vectors {
                        f(i, v)
                    }
                }
            };
            let acc = |i: u32, v: u32| accs[(i * vectors + v) as usize];
            each(&|i, v| acc(i, v).set(k.f32(0.0)));
            k.if_(kc.ne(zero), || {
                k.if_else(
                    full,
                    || each(&|i, v| acc(i, v).set(k.load(c, out(i, v)))),
                    || each(&|i, v| k.if_(stored(i, v), || acc(i, v).set(k.load(c, out(i, v))))),
                )
            });
            k.for_range(zero, len, 1, |p| {
                let bv: Vec<Val> = (0..vectors)
                    .map(|v| k.load_shared(panel, p * k.u32(width) + k.u32(v * LANES) + lid))
                    .collect();
                for (i, &from) in (0..).zip(&a_rows) {
                    let x = k.load(a, from + p).cast(Scalar::F32);
                    for (v, &y) in (0..).zip(&bv) {
                        acc(i, v).set(x.fma(y, acc(i, v).get()));
                    }
                }
            });
            k.if_else(
                full,
                || each(&|i, v| k.store(c, out(i, v), acc(i, v).get())),
                || each(&|i, v| k.if_(stored(i, v), || k.store(c, out(i, v), acc(i, v).get()))),
            );
        });
        // The next panel overwrites this one.
        k.barrier();
    });
    k.finish()
}

/// What every matmul kernel declares: buffers a, b, c, then the parameters m, n, k, lda, ldb,
/// ldc and the three batch strides.
fn interface<'b>(
    k: &'b KernelBuilder,
    spec: &MatmulSpec,
    c_access: Access,
) -> ([BufferId; 3], [Val<'b>; 9]) {
    let a = k.buffer("a", spec.a, Access::Read);
    let b = k.buffer("b", spec.b, Access::Read);
    let c = k.buffer("c", Scalar::F32, c_access);
    let params = [
        "m", "n", "k", "lda", "ldb", "ldc", "stride_a", "stride_b", "stride_c",
    ]
    .map(|p| k.param(p, Scalar::U32));
    ([a, b, c], params)
}

fn plus<'b>(k: &'b KernelBuilder, v: Val<'b>, c: u32) -> Val<'b> {
    v + k.u32(c)
}

/// `load()` as f32 where `inside`, else 0, in a fresh variable.
fn guarded_load<'b>(
    k: &'b KernelBuilder,
    zero: Val<'b>,
    inside: Val<'b>,
    load: impl FnOnce() -> Val<'b>,
) -> Val<'b> {
    let v = k.var("staged", Scalar::F32);
    v.set(zero);
    k.if_(inside, || v.set(load().cast(Scalar::F32)));
    v.get()
}

/// The grid for `shape`: one workgroup per output block, batch along z.
pub fn grid(spec: &MatmulSpec, s: &MatmulShape) -> [u32; 3] {
    let (rows, cols) = spec.block_sides();
    [
        s.n.div_ceil(cols as usize),
        s.m.div_ceil(rows as usize),
        s.batch,
    ]
    .map(|v| v as u32)
}

/// Random values of type `ty` (rounded to f16 where it is f16): their bytes and values.
fn random(rng: &mut Rng, ty: Scalar, n: usize) -> (Vec<u8>, Vec<f64>) {
    let v = rng.f32s(n, -1.0, 1.0);
    if ty == Scalar::F16 {
        let h: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
        (f16_bytes(&h), h.iter().map(|x| x.to_f64()).collect())
    } else {
        (f32_bytes(&v), v.iter().map(|&x| f64::from(x)).collect())
    }
}

/// A conformance case over `shape` with random inputs.
pub fn case(spec: MatmulSpec, s: MatmulShape, seed: u64) -> Result<Case, ShapeError> {
    let (b_rows, b_cols) = if spec.b_transposed {
        (s.n, s.k)
    } else {
        (s.k, s.n)
    };
    let lens = [
        s.extent(s.stride_a, s.m, s.lda, s.k),
        s.extent(s.stride_b, b_rows, s.ldb, b_cols),
        s.extent(s.stride_c, s.m, s.ldc, s.n),
    ];
    let [a_len, b_len, c_len] = lens.map(|l| l.unwrap_or(usize::MAX));
    check_shapes(&s, spec.b_transposed, a_len, b_len, c_len)?;
    let kernel = kernel(spec)?;
    let mut rng = Rng::new(seed);
    let (a_bytes, a) = random(&mut rng, spec.a, a_len);
    let (b_bytes, b) = random(&mut rng, spec.b, b_len);
    // f16 buffers of odd length are padded to whole words for Vulkan.
    let [a_bytes, b_bytes] = [a_bytes, b_bytes].map(crate::dequant::pad_to_words);
    let want = reference(&s, spec.b_transposed, &a, &b, &vec![0.0; c_len])?;
    let dtype = if spec.a == spec.b {
        spec.a.to_string()
    } else {
        format!("{},{}", spec.a, spec.b)
    };
    let mut name = format!("{OP}/{dtype}/{}x{}x{}", s.m, s.n, s.k);
    if spec.b_transposed {
        name.push_str("/bT");
    }
    let dense = MatmulShape::packed(s.batch, s.m, s.n, s.k, spec.b_transposed, s.stride_b == 0);
    if s != dense {
        name.push_str("/strided");
    }
    if s.batch > 1 {
        name.push_str(&format!("/batch{}", s.batch));
    }
    if s.stride_b == 0 && s.batch > 1 {
        name.push_str("/bcast");
    }
    if let Some(b) = spec.lanes {
        name.push_str(&format!("/lanes{}x{}", b.rows, b.vectors));
    } else if (spec.tile, spec.reg) != (16, 2) {
        name.push_str(&format!("/t{}r{}", spec.tile, spec.reg));
    }
    let params = [
        s.m, s.n, s.k, s.lda, s.ldb, s.ldc, s.stride_a, s.stride_b, s.stride_c,
    ]
    .map(|v| ParamValue::U32(v as u32));
    Ok(Case::new(name, kernel, grid(&spec, &s))
        .input("a", spec.a, a_bytes)
        .input("b", spec.b, b_bytes)
        .output("c", Scalar::F32, vec![0; c_len * 4], want)
        .params(params.to_vec())
        .bound(NMSE_MATMUL))
}

/// One element, one row, odd sizes, more than one block in every direction, batches (with
/// their own and with a shared B), a padded layout, a different tiling, and SmolLM2-135M's
/// prefill projections (576 model width, 1536 FFN) — each under about 30 M multiply-adds so
/// the interpreter and lavapipe stay quick.
pub fn cases() -> Vec<Case> {
    use Scalar::{F16, F32};
    let mut padded = MatmulShape::packed(2, 21, 13, 40, false, false);
    (padded.lda, padded.ldb, padded.ldc) = (43, 16, 15);
    (padded.stride_a, padded.stride_b, padded.stride_c) = (21 * 43 + 5, 40 * 16, 21 * 15 + 2);
    // (a, b, B transposed, batch, m, n, k, B shared by the batch)
    let list = [
        (F32, F32, false, 1, 1, 1, 1, false),
        (F32, F32, false, 1, 33, 17, 45, false),
        (F32, F32, false, 1, 70, 65, 129, false),
        (F32, F32, true, 1, 1, 65, 129, false),
        (F32, F32, true, 1, 70, 65, 129, false),
        (F32, F32, false, 3, 19, 23, 31, false),
        (F32, F32, true, 3, 19, 23, 31, true),
        (F16, F16, false, 1, 33, 17, 45, false),
        (F16, F16, true, 1, 70, 65, 129, false),
        (F16, F16, false, 3, 19, 23, 31, true),
        (F32, F16, true, 1, 1, 576, 576, false),
        (F32, F32, true, 1, 64, 576, 576, false),
        (F32, F16, true, 1, 32, 1536, 576, false),
        (F32, F16, true, 1, 16, 576, 1536, false),
    ];
    let mut all: Vec<(MatmulSpec, MatmulShape)> = list
        .into_iter()
        .map(|(a, b, bt, batch, m, n, k, bcast)| {
            let shape = MatmulShape::packed(batch, m, n, k, bt, bcast);
            (MatmulSpec::new(a, b, bt), shape)
        })
        .collect();
    all.push((MatmulSpec::new(F32, F32, false), padded));
    let small_tiles = MatmulSpec {
        tile: 8,
        reg: 4,
        ..MatmulSpec::new(F32, F32, false)
    };
    all.push((
        small_tiles,
        MatmulShape::packed(1, 70, 65, 129, false, false),
    ));
    // The CPUs' walk, with each block of `LaneBlock::for_registers`: one element; edges of
    // the row blocks and the column strips; more than one panel of K, the last one partial,
    // and more than one panel of rows;
    // batches with their own and a shared B, a padded layout, f16 B, and SmolLM2-135M's
    // projection.
    let wide = LaneBlock::for_registers(32);
    let narrow = LaneBlock::for_registers(16);
    let lanes = |a, b| MatmulSpec {
        lanes: Some(wide),
        ..MatmulSpec::new(a, b, true)
    };
    let narrow_lanes = MatmulSpec {
        lanes: Some(narrow),
        ..MatmulSpec::new(F32, F32, true)
    };
    let mut padded_t = MatmulShape::packed(2, 21, 13, 40, true, false);
    (padded_t.lda, padded_t.ldb, padded_t.ldc) = (43, 45, 15);
    (padded_t.stride_a, padded_t.stride_b, padded_t.stride_c) = (21 * 43 + 5, 13 * 45, 21 * 15 + 2);
    for (spec, shape) in [
        (
            lanes(F32, F32),
            MatmulShape::packed(1, 1, 1, 1, true, false),
        ),
        (
            lanes(F32, F32),
            MatmulShape::packed(1, 70, 65, 129, true, false),
        ),
        (
            lanes(F32, F32),
            MatmulShape::packed(1, 301, 53, 300, true, false),
        ),
        (
            lanes(F32, F32),
            MatmulShape::packed(3, 19, 23, 32, true, true),
        ),
        (lanes(F32, F32), padded_t),
        (
            lanes(F16, F16),
            MatmulShape::packed(3, 13, 9, 31, true, false),
        ),
        (
            lanes(F32, F16),
            MatmulShape::packed(1, 64, 576, 576, true, false),
        ),
        (
            narrow_lanes,
            MatmulShape::packed(1, 70, 65, 129, true, false),
        ),
        (
            narrow_lanes,
            MatmulShape::packed(1, 271, 50, 261, true, false),
        ),
        (narrow_lanes, MatmulShape::packed(3, 19, 23, 32, true, true)),
        (narrow_lanes, padded_t),
    ] {
        all.push((spec, shape));
    }
    all.into_iter()
        .enumerate()
        .map(|(i, (spec, s))| case(spec, s, 2000 + i as u64).expect("the listed shapes are valid"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_checked() {
        let s = MatmulShape::packed(1, 2, 3, 4, false, false);
        assert_eq!(check_shapes(&s, false, 8, 12, 6), Ok(()));
        assert_eq!(
            check_shapes(&s, false, 7, 12, 6),
            Err(ShapeError::TooSmall {
                op: OP,
                what: "a",
                needed: 8,
                found: 7
            })
        );
        let mut bad = s;
        bad.ldb = 2;
        assert!(matches!(
            check_shapes(&bad, false, 8, 12, 6),
            Err(ShapeError::TooSmall { what: "ldb", .. })
        ));
        let mut overlap = MatmulShape::packed(2, 2, 3, 4, false, false);
        overlap.stride_c = 5;
        assert!(matches!(
            check_shapes(&overlap, false, 16, 24, 11),
            Err(ShapeError::TooSmall {
                what: "c batch stride",
                ..
            })
        ));
        let huge = MatmulShape::packed(1, 1 << 20, 1 << 13, 1, false, false);
        assert!(matches!(
            check_shapes(&huge, false, 1 << 20, 1 << 13, usize::MAX),
            Err(ShapeError::TooLarge { what: "c", .. })
        ));
        let spec = MatmulSpec::new(Scalar::F32, Scalar::F32, false);
        assert!(matches!(
            case(spec, MatmulShape::packed(0, 2, 3, 4, false, false), 1),
            Err(ShapeError::Zero { what: "batch", .. })
        ));
        assert!(matches!(
            case(spec, MatmulShape::packed(1, 2, 3, 0, false, false), 1),
            Err(ShapeError::Zero { what: "k", .. })
        ));
        assert!(matches!(
            kernel(MatmulSpec::new(Scalar::I32, Scalar::F32, false)),
            Err(ShapeError::Unsupported { .. })
        ));
        let spec = |tile, reg| MatmulSpec {
            tile,
            reg,
            ..MatmulSpec::new(Scalar::F32, Scalar::F32, false)
        };
        assert!(kernel(spec(32, 4)).is_ok());
        assert!(matches!(
            kernel(spec(32, 5)),
            Err(ShapeError::TooLarge { value: 40960, .. })
        ));
        assert!(matches!(
            kernel(spec(33, 1)),
            Err(ShapeError::TooLarge { value: 1089, .. })
        ));
    }

    #[test]
    fn reference_multiplies_and_transposes() {
        // A = [[1, 2], [3, 4]], B = [[5, 6], [7, 8]]: A·B = [[19, 22], [43, 50]],
        // A·Bᵀ = [[17, 23], [39, 53]].
        let s = MatmulShape::packed(1, 2, 2, 2, false, false);
        let (a, b) = ([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]);
        assert_eq!(
            reference(&s, false, &a, &b, &[0.0; 4]).unwrap(),
            [19.0, 22.0, 43.0, 50.0]
        );
        assert_eq!(
            reference(&s, true, &a, &b, &[0.0; 4]).unwrap(),
            [17.0, 23.0, 39.0, 53.0]
        );
    }
}

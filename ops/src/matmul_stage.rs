//! How [`super::matmul_tiles`] stages its blocks of x and W in shared memory, in two halves
//! a K step apart: [`Fetch::load`] reads an invocation's share of the next step's blocks from
//! memory into private variables, untouched, and [`Fetch::put`] converts them (x and plain
//! weights rounded to f16, quantized weights dequantised to f16) into shared memory at the
//! start of that step. The kernel loads step k+1 before it multiplies step k, so the loads are
//! in flight while the subgroups multiply: a GPU waits for a load only where its value is
//! first used, and nothing uses these values before the next step's `put`. Staged at once,
//! every step waited out a memory latency before its multiplications could start.
//!
//! Every value is the one the kernel staged before, computed the same way, so results do not
//! change.

use super::dequant::{self, codes_offset, f16_bits_to_f32, q4_nibbles, q8_value, u16_of};
use super::support::Float;
use trine_gguf::quant::WeightType;
use trine_ir::{BufferId, KernelBuilder, Scalar, SharedId, Val, Var};

/// The K columns of one step: one quantized block.
pub const BK: u32 = 32;

/// Row stride of the staged blocks, in elements: padded by 8 (16 bytes, keeping tile loads
/// aligned) so that the rows a tile load reads fall in different shared-memory banks.
pub const STAGE: u32 = BK + 8;

/// One matrix's block `[n × BK]` at (r0, k0), `n` rows from `r0` of a matrix with `rows` rows
/// and `cols` columns.
#[derive(Clone, Copy)]
pub struct Block<'b> {
    pub n: u32,
    pub r0: Val<'b>,
    pub rows: Val<'b>,
    pub cols: Val<'b>,
}

/// An invocation's share of one step's block of a matrix: its values as loaded.
enum Share<'b> {
    /// Elements `j·invocations + lid` of a row-major float block, each as its buffer holds it.
    Rows { float: Float, values: Vec<Var<'b>> },
    /// Half of one quantized row's block (16 elements, the half `lid % 2` of row `lid / 2`):
    /// its 16 code bytes (Q4: the bytes holding them, both halves' nibbles) and the bytes of
    /// its scales (d, and m for Q4_1), each a `U32` as a byte load gives it.
    Half {
        ty: WeightType,
        codes: Vec<Var<'b>>,
        scales: Vec<Var<'b>>,
    },
}

/// The private variables of an invocation's share of one step: x's block and W's.
pub struct Fetch<'b> {
    x: (Block<'b>, BufferId, Share<'b>),
    w: (Block<'b>, BufferId, Share<'b>),
    invocations: u32,
}

impl<'b> Fetch<'b> {
    /// Declares the variables for x's block (`f32`) and W's (stored as `ty`).
    pub fn declare(
        k: &'b KernelBuilder,
        invocations: u32,
        (x, xb): (BufferId, Block<'b>),
        (w, wb, ty): (BufferId, Block<'b>, WeightType),
    ) -> Fetch<'b> {
        debug_assert!(
            2 * wb.n <= invocations,
            "one half of a quantized row per invocation"
        );
        let rows = |name: &str, float: Float, n: u32| Share::Rows {
            float,
            values: (0..n * BK / invocations)
                .map(|i| k.var(&format!("{name}{i}"), float.scalar()))
                .collect(),
        };
        let w_share = match ty {
            WeightType::F32 => rows("w", Float::F32, wb.n),
            WeightType::F16 => rows("w", Float::F16, wb.n),
            _ => {
                let scale_bytes = if ty == WeightType::Q4_1 { 4 } else { 2 };
                Share::Half {
                    ty,
                    codes: (0..BK / 2)
                        .map(|i| k.var(&format!("code{i}"), Scalar::U32))
                        .collect(),
                    scales: (0..scale_bytes)
                        .map(|i| k.var(&format!("scale_byte{i}"), Scalar::U32))
                        .collect(),
                }
            }
        };
        Fetch {
            x: (xb, x, rows("x", Float::F32, xb.n)),
            w: (wb, w, w_share),
            invocations,
        }
    }

    /// Loads the share of the step at column `k0` into the variables.
    pub fn load(&self, k: &'b KernelBuilder, k0: Val<'b>) {
        for (block, buf, share) in [&self.x, &self.w] {
            match share {
                Share::Rows { values, .. } => {
                    for (j, v) in values.iter().enumerate() {
                        let (row, c) = self.element(k, block, j);
                        let at = row.min(block.rows - k.u32(1)) * block.cols + k0 + c;
                        v.set(k.load(*buf, at));
                    }
                }
                Share::Half { ty, codes, scales } => {
                    // The small block has fewer halves than invocations: the rest load the
                    // last half again and stage nothing.
                    let e = k.local_index().min(k.u32(2 * block.n - 1));
                    let base = self.half_base(k, block, *ty, e, k0);
                    for (i, b) in scales.iter().enumerate() {
                        b.set(k.load(*buf, base + k.u32(i as u32)));
                    }
                    let half = e % k.u32(2);
                    let first = match ty {
                        // A Q8_0 half is its own 16 bytes; a Q4 half's nibbles share the
                        // block's 16 bytes with the other half.
                        WeightType::Q8_0 => base + k.u32(2) + half * k.u32(BK / 2),
                        _ => base + k.u32(codes_offset(*ty)),
                    };
                    for (i, c) in codes.iter().enumerate() {
                        c.set(k.load(*buf, first + k.u32(i as u32)));
                    }
                }
            }
        }
    }

    /// Stores the loaded share into `xs` and `ws` as f16: rows past a matrix's as zeros.
    pub fn put(&self, k: &'b KernelBuilder, xs: SharedId, ws: SharedId) {
        for ((block, _, share), dst) in [(&self.x, xs), (&self.w, ws)] {
            match share {
                Share::Rows { float, values } => {
                    for (j, v) in values.iter().enumerate() {
                        let (row, c) = self.element(k, block, j);
                        let value = match float {
                            Float::F32 => v.get(),
                            _ => v.get().cast(Scalar::F32),
                        };
                        let value = k.select(row.lt(block.rows), value, k.f32(0.0));
                        let r = row - block.r0;
                        k.store_shared(dst, r * k.u32(STAGE) + c, value.cast(Scalar::F16));
                    }
                }
                Share::Half { ty, codes, scales } => {
                    let e = k.local_index();
                    k.if_(e.lt(k.u32(2 * block.n)), || {
                        let (n, half) = (e / k.u32(2), e % k.u32(2));
                        let inside = (block.r0 + n).lt(block.rows);
                        let f16_at = |i: usize| {
                            f16_bits_to_f32(k, u16_of(k, scales[i].get(), scales[i + 1].get()))
                        };
                        let s = dequant::Scales {
                            d: f16_at(0),
                            m: (*ty == WeightType::Q4_1).then(|| f16_at(2)),
                        };
                        for (i, byte) in codes.iter().enumerate() {
                            let code = code_of(k, *ty, byte.get(), half);
                            let j = half * k.u32(BK / 2) + k.u32(i as u32);
                            let v = k.select(inside, s.value(code), k.f32(0.0));
                            k.store_shared(dst, n * k.u32(STAGE) + j, v.cast(Scalar::F16));
                        }
                    });
                }
            }
        }
    }

    /// The row and column (within the block) of this invocation's element `j` of a float
    /// block: consecutive invocations, consecutive columns.
    fn element(&self, k: &'b KernelBuilder, block: &Block<'b>, j: usize) -> (Val<'b>, Val<'b>) {
        let e = k.u32(j as u32 * self.invocations) + k.local_index();
        (block.r0 + e / k.u32(BK), e % k.u32(BK))
    }

    /// Byte offset of the block at column `k0` of half `e`'s row.
    fn half_base(
        &self,
        k: &'b KernelBuilder,
        block: &Block<'b>,
        ty: WeightType,
        e: Val<'b>,
        k0: Val<'b>,
    ) -> Val<'b> {
        let row = (block.r0 + e / k.u32(2)).min(block.rows - k.u32(1));
        let blocks = block.cols / k.u32(BK);
        (row * blocks + k0 / k.u32(BK)) * k.u32(ty.block_bytes() as u32)
    }
}

/// The code, as `F32`, of element `i` of `half` from its byte: Q8_0's signed byte, a Q4
/// byte's low nibble (half 0) or high nibble (half 1), as [`dequant`] decodes them.
fn code_of<'b>(k: &'b KernelBuilder, ty: WeightType, byte: Val<'b>, half: Val<'b>) -> Val<'b> {
    match ty {
        WeightType::Q8_0 => q8_value(k, byte),
        _ => {
            let (lo, hi) = q4_nibbles(k, ty, byte);
            k.select(half.eq(k.u32(0)), lo, hi)
        }
    }
}

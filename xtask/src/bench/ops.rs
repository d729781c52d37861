//! What the bench measures: every op at the shapes of SmolLM2-135M and Llama-7B, with the bytes
//! each one moves and the arithmetic it does.
//!
//! Conventions. Bytes moved: every input read once (weights, activations, caches, tables) plus
//! every output written once, at their stored sizes (a quantized block with its scales, in the
//! layout the device reads: the CPUs' interleaved one for products on quantized x). Flops:
//! multiply-adds count 2; GEMV 2·rows·cols per token, matmul 2·m·n·k, attention decode
//! 4·heads·context·head_dim (the q·k scores and the weighted sum of v). Element-wise ops count
//! their arithmetic per element: rms_norm 4 (square, add, two scalings), rope 6 per rotated
//! pair, softmax 5 (max, subtract, exp, add, normalise), swiglu 5 (negate, exp, add, divide,
//! multiply), add 1; transcendental functions count 1.

use trine_gguf::quant::WeightType;
use trine_ops::matvec_q8_rows;
use trine_ops::support::Float;

/// The model whose dimensions a shape comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// 576 wide, 9 heads / 3 KV heads of 64, FFN 1536, vocab 49152, rope base 100000.
    SmolLm2,
    /// 4096 wide, 32 heads of 128, FFN 11008, rope base 10000.
    Llama7b,
    /// 4096 wide, FFN 14336: the down projection the quantized-GEMV target is set at.
    Llama3_8b,
}

impl Model {
    pub fn name(self) -> &'static str {
        match self {
            Model::SmolLm2 => "smollm2-135m",
            Model::Llama7b => "llama-7b",
            Model::Llama3_8b => "llama3-8b",
        }
    }

    pub fn rope_base(self) -> f32 {
        match self {
            Model::SmolLm2 => 100_000.0,
            Model::Llama7b => 10_000.0,
            Model::Llama3_8b => 500_000.0,
        }
    }
}

/// One op at one shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    /// `y[rows] = W[rows × cols]·x`, one token.
    Matvec {
        ty: WeightType,
        rows: u32,
        cols: u32,
    },
    /// As `Matvec`, with x already quantized to 8 bits (codes, a scale and a sum per 32) and
    /// the weights multiplied four codes at a time (`trine_ops::matvec_q8`).
    MatvecQ8 {
        ty: WeightType,
        rows: u32,
        cols: u32,
    },
    /// `C[m × n] = A[m × k]·Bᵀ`, A f32, B (the weights, stored `[n × k]`) of `b`.
    Matmul {
        b: Float,
        m: u32,
        n: u32,
        k: u32,
    },
    /// `y[m × n] = x[m × k]·Wᵀ` on matrix tiles where the device has them (`trine_ops::
    /// matmul_tiles`, the GPUs' prompt products): x f32, W `[n × k]` of `ty` as GGUF stores it.
    MatmulTiles {
        ty: WeightType,
        m: u32,
        n: u32,
        k: u32,
        /// x's storage: f32 as the executor's products take it, or f16 as cuBLAS's f16
        /// product does.
        x: Float,
    },
    RmsNorm {
        rows: u32,
        cols: u32,
    },
    /// Normal (Llama) rope over `tokens × heads` heads of `head_dim`.
    Rope {
        tokens: u32,
        heads: u32,
        head_dim: u32,
    },
    Softmax {
        rows: u32,
        cols: u32,
    },
    /// One query token against a KV cache of `context` positions.
    Attention {
        heads: u32,
        kv_heads: u32,
        head_dim: u32,
        context: u32,
    },
    Swiglu {
        n: u32,
    },
    Add {
        n: u32,
    },
}

/// A row of the bench.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Item {
    pub model: Model,
    pub op: Op,
}

use Model::{Llama3_8b as L3, Llama7b as L7, SmolLm2 as Smol};

/// GEMV shapes (rows, cols) of each layer: q/o, k/v, gate/up, down.
const GEMV: &[(Model, u32, u32)] = &[
    (Smol, 576, 576),
    (Smol, 192, 576),
    (Smol, 1536, 576),
    (Smol, 576, 1536),
    (L7, 4096, 4096),
    (L7, 11008, 4096),
    (L7, 4096, 11008),
    (L3, 4096, 14336),
];

/// Everything else, in the order the table shows it.
#[rustfmt::skip]
const OTHERS: &[Item] = &[
    // SmolLM2's tied output head, Q8_0 as its GGUF stores it.
    item(Smol, Op::Matvec { ty: WeightType::Q8_0, rows: 49152, cols: 576 }),
    item(Smol, Op::MatvecQ8 { ty: WeightType::Q8_0, rows: 49152, cols: 576 }),
    item(Smol, Op::MatvecQ8 { ty: WeightType::Q4_1, rows: 3072, cols: 576 }),
    item(Smol, Op::MatvecQ8 { ty: WeightType::Q4_1, rows: 576, cols: 1536 }),
    item(L7, Op::MatvecQ8 { ty: WeightType::Q8_0, rows: 4096, cols: 4096 }),
    item(L7, Op::MatvecQ8 { ty: WeightType::Q4_0, rows: 4096, cols: 4096 }),
    item(L7, Op::MatvecQ8 { ty: WeightType::Q4_1, rows: 4096, cols: 4096 }),
    item(L3, Op::MatvecQ8 { ty: WeightType::Q8_0, rows: 4096, cols: 14336 }),
    item(L3, Op::MatvecQ8 { ty: WeightType::Q4_0, rows: 4096, cols: 14336 }),
    item(L3, Op::MatvecQ8 { ty: WeightType::Q4_1, rows: 4096, cols: 14336 }),
    item(Smol, Op::Matmul { b: Float::F32, m: 512, n: 576, k: 576 }),
    item(Smol, Op::Matmul { b: Float::F16, m: 512, n: 576, k: 576 }),
    item(Smol, Op::Matmul { b: Float::F32, m: 512, n: 1536, k: 576 }),
    item(Smol, Op::Matmul { b: Float::F16, m: 512, n: 1536, k: 576 }),
    item(Smol, Op::MatmulTiles { ty: WeightType::Q4_1, m: 512, n: 3072, k: 576, x: Float::F32 }),
    item(Smol, Op::MatmulTiles { ty: WeightType::Q4_1, m: 512, n: 576, k: 1536, x: Float::F32 }),
    item(L7, Op::MatmulTiles { ty: WeightType::F16, m: 512, n: 4096, k: 4096, x: Float::F32 }),
    item(L7, Op::MatmulTiles { ty: WeightType::F16, m: 512, n: 4096, k: 4096, x: Float::F16 }),
    item(L7, Op::MatmulTiles { ty: WeightType::Q4_1, m: 512, n: 4096, k: 4096, x: Float::F32 }),
    item(Smol, Op::RmsNorm { rows: 1, cols: 576 }),
    item(Smol, Op::RmsNorm { rows: 512, cols: 576 }),
    item(L7, Op::RmsNorm { rows: 1, cols: 4096 }),
    item(L7, Op::RmsNorm { rows: 512, cols: 4096 }),
    item(Smol, Op::Rope { tokens: 1, heads: 9, head_dim: 64 }),
    item(Smol, Op::Rope { tokens: 512, heads: 9, head_dim: 64 }),
    item(L7, Op::Rope { tokens: 1, heads: 32, head_dim: 128 }),
    item(L7, Op::Rope { tokens: 512, heads: 32, head_dim: 128 }),
    item(Smol, Op::Softmax { rows: 1, cols: 49152 }),
    item(L7, Op::Softmax { rows: 32, cols: 4096 }),
    item(Smol, Op::Attention { heads: 9, kv_heads: 3, head_dim: 64, context: 128 }),
    item(Smol, Op::Attention { heads: 9, kv_heads: 3, head_dim: 64, context: 512 }),
    item(Smol, Op::Attention { heads: 9, kv_heads: 3, head_dim: 64, context: 2048 }),
    item(Smol, Op::Attention { heads: 9, kv_heads: 3, head_dim: 64, context: 8192 }),
    item(L7, Op::Attention { heads: 32, kv_heads: 32, head_dim: 128, context: 128 }),
    item(L7, Op::Attention { heads: 32, kv_heads: 32, head_dim: 128, context: 512 }),
    item(L7, Op::Attention { heads: 32, kv_heads: 32, head_dim: 128, context: 2048 }),
    item(L7, Op::Attention { heads: 32, kv_heads: 32, head_dim: 128, context: 8192 }),
    item(Smol, Op::Swiglu { n: 1536 }),
    item(L7, Op::Swiglu { n: 11008 }),
    item(Smol, Op::Add { n: 576 }),
    item(L7, Op::Add { n: 4096 }),
];

const fn item(model: Model, op: Op) -> Item {
    Item { model, op }
}

/// The whole list: each GEMV shape in every weight type, then [`OTHERS`].
pub fn list() -> Vec<Item> {
    let gemv = GEMV.iter().flat_map(|&(model, rows, cols)| {
        WeightType::ALL.map(|ty| item(model, Op::Matvec { ty, rows, cols }))
    });
    gemv.chain(OTHERS.iter().copied()).collect()
}

fn float_bytes(t: Float) -> u64 {
    match t {
        Float::F32 => 4,
        Float::F16 => 2,
    }
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Matvec { .. } => "matvec",
            Op::MatvecQ8 { .. } => "matvec_q8",
            Op::Matmul { .. } => "matmul",
            Op::MatmulTiles { .. } => "matmul_tiles",
            Op::RmsNorm { .. } => "rms_norm",
            Op::Rope { .. } => "rope",
            Op::Softmax { .. } => "softmax",
            Op::Attention { .. } => "attention",
            Op::Swiglu { .. } => "swiglu",
            Op::Add { .. } => "add",
        }
    }

    pub fn shape(&self) -> String {
        match *self {
            Op::Matvec { rows, cols, .. } | Op::MatvecQ8 { rows, cols, .. } => {
                format!("{rows}x{cols}")
            }
            Op::Matmul { m, n, k, .. } | Op::MatmulTiles { m, n, k, .. } => {
                format!("{m}x{n}x{k}")
            }
            Op::RmsNorm { rows, cols } | Op::Softmax { rows, cols } => format!("{rows}x{cols}"),
            Op::Rope {
                tokens,
                heads,
                head_dim,
            } => format!("{tokens}t x {heads}x{head_dim}"),
            Op::Attention {
                heads,
                kv_heads,
                head_dim,
                context,
            } => format!("ctx{context} {heads}/{kv_heads}x{head_dim}"),
            Op::Swiglu { n } | Op::Add { n } => format!("{n}"),
        }
    }

    /// The stored types, as a label; attention's depends on the KV cache type `kv`.
    pub fn dtype(&self, kv: Float) -> String {
        match self {
            Op::Matvec { ty, .. } => ty.name().to_string(),
            Op::MatvecQ8 { ty, .. } => format!("{}xq8", ty.name()),
            Op::Matmul { b, .. } => format!("f32x{}", b.name()),
            Op::MatmulTiles { ty, x, .. } => format!("{}x{}", x.name(), ty.name()),
            Op::Attention { .. } => format!("f32+{}kv", kv.name()),
            _ => "f32".into(),
        }
    }

    /// Bytes read plus bytes written (see the module's conventions), with attention's KV cache
    /// of `kv` and, where `cpu_layout`, a product on quantized x reading the CPUs' interleaved
    /// blocks ([`matvec_q8_rows::interleave`]: Q4_0 20 bytes instead of 18, Q8_0 36 instead of
    /// 34).
    pub fn bytes(&self, kv: Float, cpu_layout: bool) -> u64 {
        let f = 4u64;
        match *self {
            Op::Matvec { ty, rows, cols } => {
                let (r, c) = (rows as u64, cols as u64);
                r * c / ty.block_elems() as u64 * ty.block_bytes() as u64 + (c + r) * f
            }
            Op::MatvecQ8 { ty, rows, cols } => {
                let (r, c) = (rows as u64, cols as u64);
                let block = if cpu_layout {
                    matvec_q8_rows::interleaved_block_bytes(ty)
                } else {
                    ty.block_bytes()
                };
                let weights = r * c / ty.block_elems() as u64 * block as u64;
                // x: a byte per element, and a scale and a sum per block.
                weights + c + c / 32 * 2 * f + r * f
            }
            Op::Matmul { b, m, n, k } => {
                let (m, n, k) = (m as u64, n as u64, k as u64);
                m * k * f + n * k * float_bytes(b) + m * n * f
            }
            Op::MatmulTiles { ty, m, n, k, x } => {
                let (m, n, k) = (m as u64, n as u64, k as u64);
                let weights = n * k / ty.block_elems() as u64 * ty.block_bytes() as u64;
                let xb = x.scalar().size() as u64;
                m * k * xb + weights + m * n * f
            }
            Op::RmsNorm { rows, cols } => (2 * rows as u64 * cols as u64 + cols as u64) * f,
            Op::Rope {
                tokens,
                heads,
                head_dim,
            } => (2 * tokens as u64 * heads as u64 * head_dim as u64 + head_dim as u64 / 2) * f,
            Op::Softmax { rows, cols } => 2 * rows as u64 * cols as u64 * f,
            Op::Attention {
                heads,
                kv_heads,
                head_dim,
                context,
            } => {
                let cache = 2 * context as u64 * kv_heads as u64 * head_dim as u64;
                2 * heads as u64 * head_dim as u64 * f + cache * float_bytes(kv)
            }
            Op::Swiglu { n } | Op::Add { n } => 3 * n as u64 * f,
        }
    }

    /// Floating-point operations (see the module's conventions).
    pub fn flops(&self) -> u64 {
        match *self {
            Op::Matvec { rows, cols, .. } | Op::MatvecQ8 { rows, cols, .. } => {
                2 * rows as u64 * cols as u64
            }
            Op::Matmul { m, n, k, .. } | Op::MatmulTiles { m, n, k, .. } => {
                2 * m as u64 * n as u64 * k as u64
            }
            Op::RmsNorm { rows, cols } => 4 * rows as u64 * cols as u64,
            Op::Rope {
                tokens,
                heads,
                head_dim,
            } => 6 * tokens as u64 * heads as u64 * (head_dim as u64 / 2),
            Op::Softmax { rows, cols } => 5 * rows as u64 * cols as u64,
            Op::Attention {
                heads,
                head_dim,
                context,
                ..
            } => 4 * heads as u64 * context as u64 * head_dim as u64,
            Op::Swiglu { n } => 5 * n as u64,
            Op::Add { n } => n as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemv_bytes_and_flops_by_hand() {
        // Q4_0: 18 bytes per 32 weights; 4096×4096 of them is 9,437,184 bytes, plus x and y.
        let q4 = Op::Matvec {
            ty: WeightType::Q4_0,
            rows: 4096,
            cols: 4096,
        };
        assert_eq!(q4.bytes(Float::F32, false), 9_437_184 + 2 * 4096 * 4);
        assert_eq!(q4.flops(), 33_554_432);
        // Q8_0 output head: 49152 × 18 blocks × 34 bytes, x 576 floats, y 49152 floats.
        let head = Op::Matvec {
            ty: WeightType::Q8_0,
            rows: 49152,
            cols: 576,
        };
        assert_eq!(head.bytes(Float::F32, false), 30_081_024 + 2304 + 196_608);
        // Q4_1 carries a 4-byte scale and minimum per block of 32: 20 bytes.
        let q41 = Op::Matvec {
            ty: WeightType::Q4_1,
            rows: 576,
            cols: 1536,
        };
        assert_eq!(
            q41.bytes(Float::F32, false),
            576 * 48 * 20 + (1536 + 576) * 4
        );
        let f16 = Op::Matvec {
            ty: WeightType::F16,
            rows: 11008,
            cols: 4096,
        };
        assert_eq!(
            f16.bytes(Float::F32, false),
            90_177_536 + (4096 + 11008) * 4
        );
    }

    /// A product on quantized x reads the blocks a device holds: GGUF's on a GPU, the CPUs'
    /// interleaved ones (a word of codes per 4 bytes, then a word of scales) on a CPU.
    #[test]
    fn quantized_x_products_count_the_layout_read() {
        let q8x = |ty| Op::MatvecQ8 {
            ty,
            rows: 4096,
            cols: 4096,
        };
        // x: 4096 code bytes, 128 scales and 128 sums of 4 bytes; y: 4096 floats.
        let x_and_y = 4096 + 128 * 8 + 4096 * 4;
        let blocks = 4096 * 128;
        assert_eq!(
            q8x(WeightType::Q4_0).bytes(Float::F32, false),
            blocks * 18 + x_and_y
        );
        assert_eq!(
            q8x(WeightType::Q4_0).bytes(Float::F32, true),
            blocks * 20 + x_and_y
        );
        assert_eq!(
            q8x(WeightType::Q4_1).bytes(Float::F32, true),
            blocks * 20 + x_and_y
        );
        assert_eq!(
            q8x(WeightType::Q8_0).bytes(Float::F32, true),
            blocks * 36 + x_and_y
        );
    }

    #[test]
    fn other_ops_by_hand() {
        let mm = Op::Matmul {
            b: Float::F16,
            m: 512,
            n: 1536,
            k: 576,
        };
        // A 1,179,648 + B (f16) 1,769,472 + C 3,145,728 bytes; 2·512·1536·576 flops.
        assert_eq!(mm.bytes(Float::F32, false), 6_094_848);
        assert_eq!(mm.flops(), 905_969_664);
        let att = Op::Attention {
            heads: 9,
            kv_heads: 3,
            head_dim: 64,
            context: 8192,
        };
        // K and V: 8192 × 3 × 64 halves each (3 MiB together); q and out 2304 bytes each.
        assert_eq!(att.bytes(Float::F16, false), 6_291_456 + 4608);
        assert_eq!(att.bytes(Float::F32, false), 12_582_912 + 4608);
        assert_eq!(att.flops(), 18_874_368);
        assert_eq!(
            Op::RmsNorm { rows: 1, cols: 576 }.bytes(Float::F32, false),
            6912
        );
        assert_eq!(Op::Add { n: 4096 }.bytes(Float::F32, false), 49_152);
        let rope = Op::Rope {
            tokens: 1,
            heads: 32,
            head_dim: 128,
        };
        // x and y 16 KiB each, 64 frequencies; 2048 pairs of 6 flops.
        assert_eq!(rope.bytes(Float::F32, false), 32_768 + 256);
        assert_eq!(rope.flops(), 12_288);
    }
}

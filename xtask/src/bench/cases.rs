//! Each bench item's inputs and kernel on a device: random inputs from the op library's
//! conformance cases (built once and shared by every backend that needs the same variant), the
//! executor's choices for the device, and the subgroup kernel only where it runs.

use super::ops::{Item, Op};
use trine_backends::{DeviceInfo, DeviceType};
use trine_ir::Scalar;
use trine_llama::tuning::{kv_type, matvec_spec, MatvecSize};
use trine_ops::attention::{self, Attention};
use trine_ops::case::Case;
use trine_ops::elementwise::{self, Binary};
use trine_ops::matmul::{self, LaneBlock, MatmulShape, MatmulSpec};
use trine_ops::matvec::{self, MatvecSpec, Reduce};
use trine_ops::rms_norm::{self, RmsNorm};
use trine_ops::rope::{self, Rope, RopeMode};
use trine_ops::shape::ShapeError;
use trine_ops::softmax::{self, Mask, Softmax};
use trine_ops::support::{Float, Reduction};
use trine_ops::{matmul_tiles, matvec_q8, matvec_q8_rows};

/// Rows per workgroup of the benched [`matvec_q8`] product. On an H100 (2026-11-26, 4096 ×
/// 14336, two rounds) 2 rows were the fastest for every type on both GPU backends: vulkan
/// q8_0 28.2 µs against 29.7–29.8 at 4, q4_0 19.5 against 19.7, q4_1 19.4–19.5 against
/// 20.3–20.4; 1 and 8 rows were slower still.
const MATVEC_Q8_ROWS: u32 = 2;

/// What a device changes in an item's inputs: the KV cache type, for a matvec the executor's
/// kernel shape for the device (the CPU's differs from the GPUs', and may bind the weights
/// twice), and whether a matmul takes the CPUs' walk ([`MatmulSpec::lanes`]) and a product
/// with quantized x the CPUs' rows ([`matvec_q8_rows`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Variant {
    pub kv: Float,
    pub matvec: Option<MatvecSpec>,
    pub cpu_walks: bool,
}

impl Item {
    /// The variant for a device; `shape` (rows per workgroup, invocations, segment) replaces
    /// the executor's shape of a quantized matvec on a GPU.
    pub fn variant(&self, info: &DeviceInfo, shape: Option<&[u32]>) -> Variant {
        Variant {
            kv: kv_type(info),
            matvec: match self.op {
                Op::Matvec { ty, rows, cols } => {
                    let size = MatvecSize::of(rows, cols, 1);
                    let mut spec = matvec_spec(ty, Reduce::Subgroup, info, size, true);
                    if let (Some(&[r, w, s]), true) = (
                        shape,
                        ty.is_quantized() && info.device_type != DeviceType::Cpu,
                    ) {
                        (spec.rows_per_workgroup, spec.workgroup, spec.segment) = (r, w, s);
                    }
                    Some(spec)
                }
                _ => None,
            },
            cpu_walks: info.device_type == DeviceType::Cpu,
        }
    }

    /// Random inputs, kernel and grid for this item, built once for every backend of the same
    /// [`Variant`]. Kernels with a subgroup variant carry the shared-memory one as fallback.
    pub fn case(&self, v: Variant) -> Result<Case, ShapeError> {
        match self.op {
            Op::Matvec { ty, rows, cols } => {
                let spec = v
                    .matvec
                    .unwrap_or_else(|| MatvecSpec::new(ty, Reduce::Subgroup));
                matvec::spec_case(spec, rows, cols, 1, 1)
            }
            Op::MatvecQ8 { ty, rows, cols } if v.cpu_walks => matvec_q8_rows::case(ty, rows, cols),
            Op::MatvecQ8 { ty, rows, cols } => matvec_q8::case(ty, rows, cols, MATVEC_Q8_ROWS),
            Op::Matmul { b, m, n, k } => {
                // The CPU backend compiles for this host, whose registers size the block. f16
                // B converts once per element as the panel is staged, so it walks panels too.
                let block = LaneBlock::for_registers(trine_backends::cpu::vector_registers());
                let spec = MatmulSpec {
                    lanes: v.cpu_walks.then_some(block),
                    ..MatmulSpec::new(Scalar::F32, b.scalar(), true)
                };
                let shape = MatmulShape::packed(1, m as usize, n as usize, k as usize, true, false);
                matmul::case(spec, shape, 1)
            }
            // As the executor multiplies them: on warpgroup products where the device has
            // them and the block allows, f16 weights (and f16 x) copied asynchronously where
            // the device can, the tiled kernel elsewhere.
            Op::MatmulTiles { ty, m, n, k, x } => {
                let block = matmul_tiles::BlockSize::for_product(n, m, false);
                let staging = matmul_tiles::Staging::best(ty, k, block, x);
                matmul_tiles::case_in(ty, (n, k, m), false, (block, staging, x))
            }
            Op::RmsNorm { rows, cols } => rms_norm::case(
                RmsNorm {
                    rows,
                    cols,
                    eps: 1e-5,
                },
                Reduction::Subgroup,
            ),
            Op::Rope {
                tokens,
                heads,
                head_dim,
            } => rope::case(
                Rope {
                    tokens,
                    heads,
                    head_dim,
                    // Decode at position 127; prefill from position 0.
                    offset: if tokens == 1 { 127 } else { 0 },
                    base: self.model.rope_base(),
                    mode: RopeMode::Normal,
                },
                Float::F32,
            ),
            Op::Softmax { rows, cols } => softmax::case(
                Softmax {
                    rows,
                    cols,
                    scale: 1.0,
                    mask: Mask::None,
                },
                Reduction::Subgroup,
            ),
            Op::Attention {
                heads,
                kv_heads,
                head_dim,
                context,
            } => attention::case(
                Attention {
                    tokens: 1,
                    kv_len: context,
                    heads,
                    kv_heads,
                    head_dim,
                    offset: context - 1,
                },
                v.kv,
            ),
            Op::Swiglu { n } => elementwise::binary_case(Binary::Swiglu, Float::F32, 1, n),
            Op::Add { n } => elementwise::binary_case(Binary::Add, Float::F32, 1, n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::ops::list;

    #[test]
    fn every_item_builds_a_case_with_the_bytes_it_claims() {
        // The buffers a case uploads and reads back are what `bytes` counts, up to padding of
        // f16 and quantized buffers to whole 4-byte words. Products with quantized x are
        // checked in the CPUs' layout, which binds the weights once (the GPUs' binds them
        // twice, the second time as an f16 view of the scales).
        for it in list().into_iter().filter(|it| it.op.flops() < 50_000_000) {
            let v = Variant {
                kv: Float::F16,
                matvec: None,
                cpu_walks: true,
            };
            let case = it.case(v).unwrap();
            let held: u64 = case.buffers.iter().map(|b| b.data.len() as u64).sum();
            let claimed = it.op.bytes(Float::F16, true);
            assert!(
                held >= claimed && held - claimed < 16,
                "{:?}: buffers {held}, claimed {claimed}",
                it.op
            );
        }
    }
}

//! The FFN's down projection in the gate/up product's epilogue
//! ([`super::matvec::Epilogue::SwigluDown`]): one dispatch for `y += W_down·swiglu(W_gate_up·x)`.
//!
//! A decode step on a big GPU is a chain of dependent dispatches, each costing a launch and a
//! drain (on an H100 about 2.5 µs more per dependent dispatch through NVIDIA's Vulkan driver
//! than in a CUDA graph), so the down projection's own dispatch is worth saving. Each
//! workgroup of the gate/up product holds a few consecutive outputs `h_c..h_{c+n}` of SwiGLU
//! once its rows are reduced; W_down's columns `c..c+n` of every row are all their share of
//! the down projection. So after the reduction the workgroup puts its `h` in shared memory
//! and its invocations walk W_down's rows, each adding `Σ_e W_down[j, c+e]·h_{c+e}` to
//! `y[j]` with an atomic add ([`trine_ir::Stmt::AtomicAdd`]). `y` holds the residual stream
//! beforehand, so the adds leave the residual connection done too.
//!
//! The workgroup's columns lie in one 32-element block of W_down (its outputs divide 32), so
//! a row's share is one block's scales and a few codes. W_down is Q4_0, Q4_1 or Q8_0, read as
//! bytes with its scales through an f16 view where the product has one.
//!
//! Bound: the adds land in any order, so `y` differs between runs by the rounding of a sum of
//! `cols / outputs` partial sums, each of `outputs` products: an f32 sum of the same size as
//! the unfused down product's, whose bound ([`super::matvec::NMSE`]) this takes. The reference
//! is the unfused composition ([`reference`]): the gate/up product with its SwiGLU, rounded
//! to f32 as the activation buffer between the unfused kernels holds it, then the down
//! product and the residual add.

use super::dequant;
use super::matvec::{reference as matvec_reference, spec_case, MatvecSpec, Prologue};
use super::matvec_fused::{self as fused, Epilogue, Fused};
use super::shape::ShapeError;
use crate::case::*;
use trine_gguf::quant::{WeightType, QK};
use trine_ir::{BufferId, KernelBuilder, SharedId, Val};

const OP: &str = "matvec";

/// Whether W_down of type `ty` can be read in a gate/up product's epilogue.
pub fn supports(ty: WeightType) -> bool {
    matches!(ty, WeightType::Q4_0 | WeightType::Q4_1 | WeightType::Q8_0)
}

/// The down projection's buffers and sizes inside the kernel.
pub(super) struct Down<'b> {
    pub ty: WeightType,
    /// W_down's bytes and their f16 view.
    pub w: (BufferId, Option<BufferId>),
    /// The residual stream, added to atomically.
    pub y: BufferId,
    /// W_down's rows (y's width per token): the gate/up product's columns, the model's
    /// width.
    pub rows: Val<'b>,
    /// The workgroup's SwiGLU outputs.
    pub h: SharedId,
}

impl<'b> Down<'b> {
    /// After the workgroup's `outputs` values of SwiGLU stand in `h` (from column `c0` of
    /// W_down, `cols` wide) and a barrier: every row's share of them added to `y` of `token`.
    pub(super) fn add_shares(
        &self,
        k: &'b KernelBuilder,
        (token, c0, cols): (Val<'b>, Val<'b>, Val<'b>),
        outputs: u32,
        wg: u32,
    ) {
        let (w, w16) = self.w;
        let block_bytes = k.u32(self.ty.block_bytes() as u32);
        let row_bytes = (cols / k.u32(QK as u32)) * block_bytes;
        let block = (c0 / k.u32(QK as u32)) * block_bytes;
        // The columns' place in their block, the same for every row.
        let first = c0 % k.u32(QK as u32);
        let hs: Vec<Val> = (0..outputs)
            .map(|e| k.load_shared(self.h, k.u32(e)))
            .collect();
        let h_sum =
            (self.ty == WeightType::Q4_1).then(|| hs[1..].iter().fold(hs[0], |a, &v| a + v));
        k.for_range(k.local_index(), self.rows, wg, |j| {
            let base = j * row_bytes + block;
            let scales = dequant::load_scales(k, self.ty, (w, w16), base);
            let codes =
                (0..outputs).map(|e| dequant::element_code(k, self.ty, w, base, first + k.u32(e)));
            let dot = codes
                .zip(&hs)
                .fold(k.f32(0.0), |acc, (code, &h)| code.fma(h, acc));
            let share = match (scales.m, h_sum) {
                (Some(m), Some(s)) => scales.d.fma(dot, m * s),
                _ => scales.d * dot,
            };
            k.atomic_add(self.y, token * self.rows + j, share);
        });
    }
}

/// The unfused composition in f64 for `tokens` rows of x: gate/up (rows interleaved, with the
/// norm where `norm` has it) and SwiGLU as [`fused::reference`] computes them, rounded to
/// f32, then `W_down` (`cols × rows/2`, type `down_ty`) times that, plus `residual`
/// (`[tokens × cols]`).
pub fn reference(
    (ty, w, rows, cols): (WeightType, &[u8], usize, usize),
    (down_ty, w_down): (WeightType, &[u8]),
    x: &[f32],
    norm: Option<(&[f32], f32)>,
    residual: &[f32],
) -> Result<Vec<f64>, ShapeError> {
    let fused = Fused {
        norm,
        epilogue: Epilogue::Swiglu,
        residual: &[],
    };
    let h: Vec<f32> = fused::reference(ty, w, rows, cols, x, &fused)?
        .iter()
        .map(|&v| v as f32)
        .collect();
    let n = rows / 2;
    let mut y = Vec::with_capacity(residual.len());
    for ht in h.chunks_exact(n) {
        y.extend(matvec_reference(down_ty, w_down, cols, n, ht)?);
    }
    if residual.len() != y.len() {
        return Err(ShapeError::Mismatch {
            op: OP,
            what: "residual",
            expected: y.len(),
            found: residual.len(),
        });
    }
    Ok(y.iter()
        .zip(residual)
        .map(|(&v, &r)| (v as f32) as f64 + r as f64)
        .collect())
}

/// SmolLM2-135M's FFN (gate/up 3072 × 576 Q4_1, down 576 × 1536) in the GPUs' shape and the
/// CPUs', then odd shapes of every down type, with the shared tree, with 2 tokens, and with
/// outputs that fill a whole block of W_down.
pub fn cases() -> Vec<Case> {
    use super::matvec::Reduce::{Shared, Subgroup};
    use WeightType::*;
    let spec = |ty, down, reduce, (rows_per_workgroup, workgroup, f16_scales)| MatvecSpec {
        prologue: Prologue::RmsNorm,
        epilogue: Epilogue::SwigluDown(down),
        rows_per_workgroup,
        workgroup,
        f16_scales,
        word_codes: true,
        ..MatvecSpec::new(ty, reduce)
    };
    let mut list = vec![
        (spec(Q4_1, Q4_1, Subgroup, (16, 128, true)), (3072, 576), 1),
        (spec(Q4_1, Q4_1, Subgroup, (32, 128, true)), (3072, 576), 1),
        (
            MatvecSpec {
                blocked: true,
                ..spec(Q4_1, Q4_1, Subgroup, (8, 16, true))
            },
            (3072, 576),
            1,
        ),
    ];
    for down in [Q4_0, Q4_1, Q8_0] {
        for reduce in [Subgroup, Shared] {
            list.push((spec(Q8_0, down, reduce, (4, 64, true)), (128, 96), 1));
        }
        list.push((spec(Q4_0, down, Subgroup, (8, 32, false)), (64, 64), 2));
        list.push((spec(F16, down, Subgroup, (64, 64, true)), (128, 64), 1));
    }
    // The output projection that leaves the residual in both buffers (as a decode step's does
    // before the FFN adds into one of them), alone and with the norm before it.
    for prologue in [Prologue::None, Prologue::RmsNorm] {
        let twice = MatvecSpec {
            prologue,
            epilogue: Epilogue::AddTwice,
            rows_per_workgroup: 2,
            workgroup: 128,
            f16_scales: true,
            word_codes: true,
            ..MatvecSpec::new(Q4_1, Subgroup)
        };
        list.push((twice, (576, 576), 1));
        list.push((
            MatvecSpec {
                rows_per_workgroup: 4,
                workgroup: 64,
                ..twice
            },
            (13, 96),
            2,
        ));
    }
    list.into_iter()
        .enumerate()
        .map(|(i, (spec, (rows, cols), tokens))| {
            spec_case(spec, rows, cols, tokens, 9000 + i as u64)
                .expect("the listed shapes are valid")
        })
        .collect()
}

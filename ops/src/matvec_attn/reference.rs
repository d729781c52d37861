//! The f64 references of the fused products: the unfused compositions of the ops' own
//! references.

use super::{CombineShape, QkvRope, OP};
use crate::attention_split;
use crate::matvec::reference as matvec_reference;
use crate::matvec_fused::{self as fused, Epilogue, Fused};
use crate::rope_freqs::RopeFreqs;
use crate::rope_store;
use crate::shape::ShapeError;
use crate::support::nonzero;
use trine_gguf::quant::WeightType;

/// The unfused composition in f64: the normed product ([`fused::reference`]) rounded to f32
/// as the `qkv` buffer would hold it, then [`rope_store::reference`] by `freqs`.
pub fn reference_rope(
    shape: &QkvRope,
    freqs: &RopeFreqs,
    w: &[u8],
    x: &[f32],
    g: &[f32],
    pos: u32,
    caches: (&[f32], &[f32]),
) -> Result<rope_store::RopeStoreOut, ShapeError> {
    let fused = Fused {
        norm: Some((g, fused::EPS)),
        epilogue: Epilogue::None,
        residual: &[],
    };
    let rows = shape.rows() as usize;
    let qkv = fused::reference(shape.weights, w, rows, shape.cols as usize, x, &fused)?;
    let qkv: Vec<f32> = qkv.iter().map(|&v| v as f32).collect();
    rope_store::reference(&shape.store, freqs, pos, &qkv, caches.0, caches.1)
}

/// The unfused composition in f64: [`attention_split::reference_combine`] rounded to f32 as
/// the attention buffer would hold it, the product, then the residual add.
pub fn reference_combine(
    ty: WeightType,
    w: &[u8],
    rows: usize,
    shape: CombineShape,
    part: &[f32],
    residual: &[f32],
) -> Result<Vec<f64>, ShapeError> {
    let cols = (shape.heads * shape.head_dim) as usize;
    let tokens = part.len() / (shape.heads * shape.splits * (shape.head_dim + 2)).max(1) as usize;
    nonzero(OP, "tokens", tokens as u32)?;
    let x = attention_split::reference_combine(&shape.attention(tokens as u32), part)?;
    let mut y = vec![];
    for xt in x.chunks_exact(cols) {
        let xt: Vec<f32> = xt.iter().map(|&v| v as f32).collect();
        y.extend(matvec_reference(ty, w, rows, cols, &xt)?);
    }
    let y: Vec<f32> = y.iter().map(|&v| v as f32).collect();
    crate::elementwise::reference_add(&y, residual)
}

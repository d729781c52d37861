//! The f64 reference of the product, from the exactly dequantised weights.

use super::{check_shapes, OP};
use crate::shape::ShapeError;
use trine_gguf::quant::{dequantize, WeightType};

/// `y = W·x` in f64 from the exactly dequantised weights.
pub fn reference(
    ty: WeightType,
    w: &[u8],
    rows: usize,
    cols: usize,
    x: &[f32],
) -> Result<Vec<f64>, ShapeError> {
    check_shapes(ty, rows, cols, w.len(), x.len())?;
    let row_bytes = ty.bytes(OP, "cols", cols)?;
    // Row by row, so that an output head's weights are never all held in f64 at once.
    w.chunks_exact(row_bytes)
        .take(rows)
        .map(|row| {
            let row = dequantize(ty, row, cols)?;
            Ok(row.iter().zip(x).map(|(&a, &b)| a * f64::from(b)).sum())
        })
        .collect()
}

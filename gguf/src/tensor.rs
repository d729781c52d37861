//! Tensor types and the per-tensor record of a GGUF file, with the shape rules both the reader
//! and the writer enforce.

use super::error::GgufError;
use crate::quant::WeightType;

/// The ggml storage types trine can run. ggml's other types (k-quants, i-quants, …) are
/// rejected at open with [`GgufError::UnknownTensorType`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
}

impl TensorType {
    pub const ALL: [TensorType; 6] = [
        TensorType::F32,
        TensorType::F16,
        TensorType::BF16,
        TensorType::Q8_0,
        TensorType::Q4_0,
        TensorType::Q4_1,
    ];

    /// The [`WeightType`] of tensors of this type, which the kernels take as stored.
    /// BF16 has none (no kernel takes bf16 weights).
    pub fn weight_type(self) -> Option<WeightType> {
        match self {
            TensorType::F32 => Some(WeightType::F32),
            TensorType::F16 => Some(WeightType::F16),
            TensorType::Q8_0 => Some(WeightType::Q8_0),
            TensorType::Q4_0 => Some(WeightType::Q4_0),
            TensorType::Q4_1 => Some(WeightType::Q4_1),
            TensorType::BF16 => None,
        }
    }

    /// The id ggml's `enum ggml_type` gives this type, as stored in the file.
    pub fn ggml_id(self) -> u32 {
        match self {
            TensorType::F32 => 0,
            TensorType::F16 => 1,
            TensorType::Q4_0 => 2,
            TensorType::Q4_1 => 3,
            TensorType::Q8_0 => 8,
            TensorType::BF16 => 30,
        }
    }

    pub fn from_ggml_id(id: u32) -> Option<TensorType> {
        TensorType::ALL.into_iter().find(|t| t.ggml_id() == id)
    }

    /// ggml's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            TensorType::F32 => "f32",
            TensorType::F16 => "f16",
            TensorType::BF16 => "bf16",
            TensorType::Q8_0 => "q8_0",
            TensorType::Q4_0 => "q4_0",
            TensorType::Q4_1 => "q4_1",
        }
    }

    /// Elements per block: 1 for plain floats, 32 for the quantized types.
    pub fn block_elems(self) -> u64 {
        match self {
            TensorType::F32 | TensorType::F16 | TensorType::BF16 => 1,
            TensorType::Q8_0 | TensorType::Q4_0 | TensorType::Q4_1 => 32,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> u64 {
        match self {
            TensorType::F32 => 4,
            TensorType::F16 | TensorType::BF16 => 2,
            TensorType::Q8_0 => 34,
            TensorType::Q4_0 => 18,
            TensorType::Q4_1 => 20,
        }
    }
}

impl std::fmt::Display for TensorType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// GGML_MAX_DIMS: ggml tensors have at most four dimensions.
pub const MAX_DIMS: usize = 4;

/// One tensor of a GGUF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the contiguous (fastest-varying) dimension.
    pub dims: Vec<u64>,
    pub ty: TensorType,
    /// Where the data starts, relative to the data section.
    pub offset: u64,
    pub n_elements: u64,
    pub n_bytes: u64,
}

impl TensorInfo {
    /// A tensor record after checking the shape: 1 to 4 dims, none zero, whole blocks along
    /// `dims[0]`, and element and byte counts that fit in a u64.
    pub fn new(
        name: String,
        dims: Vec<u64>,
        ty: TensorType,
        offset: u64,
    ) -> Result<TensorInfo, GgufError> {
        if dims.is_empty() || dims.len() > MAX_DIMS {
            return Err(GgufError::BadDimCount {
                tensor: name,
                n_dims: dims.len() as u64,
            });
        }
        if let Some(axis) = dims.iter().position(|&d| d == 0) {
            return Err(GgufError::ZeroDim {
                tensor: name,
                axis,
                dims,
            });
        }
        if !dims[0].is_multiple_of(ty.block_elems()) {
            return Err(GgufError::NotBlockMultiple {
                tensor: name,
                ty,
                ne0: dims[0],
                block: ty.block_elems(),
            });
        }
        let n_elements = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        let n_bytes = n_elements.and_then(|n| (n / ty.block_elems()).checked_mul(ty.block_bytes()));
        match (n_elements, n_bytes) {
            (Some(n_elements), Some(n_bytes)) => Ok(TensorInfo {
                name,
                dims,
                ty,
                offset,
                n_elements,
                n_bytes,
            }),
            _ => Err(GgufError::ShapeOverflow { tensor: name, dims }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_block_sizes_are_ggmls() {
        // ggml.h's enum ggml_type and ggml.c's type_traits (blck_size, type_size).
        let expected = [
            (TensorType::F32, 0, 1, 4),
            (TensorType::F16, 1, 1, 2),
            (TensorType::Q4_0, 2, 32, 18),
            (TensorType::Q4_1, 3, 32, 20),
            (TensorType::Q8_0, 8, 32, 34),
            (TensorType::BF16, 30, 1, 2),
        ];
        for (ty, id, elems, bytes) in expected {
            assert_eq!(
                (ty.ggml_id(), ty.block_elems(), ty.block_bytes()),
                (id, elems, bytes)
            );
            assert_eq!(TensorType::from_ggml_id(id), Some(ty));
        }
        assert_eq!(TensorType::from_ggml_id(14), None); // Q6_K
    }

    #[test]
    fn sizes_of_a_q4_1_matrix() {
        let t = TensorInfo::new("w".into(), vec![576, 1536], TensorType::Q4_1, 0).unwrap();
        // 576·1536 elements in 32-element blocks of 20 bytes.
        assert_eq!((t.n_elements, t.n_bytes), (884_736, 552_960));
    }

    #[test]
    fn shape_errors() {
        let new = |dims: Vec<u64>, ty| TensorInfo::new("t".into(), dims, ty, 0).unwrap_err();
        assert!(matches!(
            new(vec![], TensorType::F32),
            GgufError::BadDimCount { n_dims: 0, .. }
        ));
        assert!(matches!(
            new(vec![1; 5], TensorType::F32),
            GgufError::BadDimCount { n_dims: 5, .. }
        ));
        assert!(matches!(
            new(vec![4, 0], TensorType::F32),
            GgufError::ZeroDim { axis: 1, .. }
        ));
        assert!(matches!(
            new(vec![48, 2], TensorType::Q8_0),
            GgufError::NotBlockMultiple {
                ne0: 48,
                block: 32,
                ..
            }
        ));
        assert!(matches!(
            new(vec![1 << 32, 1 << 32], TensorType::F32),
            GgufError::ShapeOverflow { .. }
        ));
        // The element count fits, the byte count does not.
        assert!(matches!(
            new(vec![1 << 62, 2], TensorType::F32),
            GgufError::ShapeOverflow { .. }
        ));
    }
}

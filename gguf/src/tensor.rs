//! Tensor types and the per-tensor record of a GGUF file, with the shape rules both the reader
//! and the writer enforce.

use super::error::GgufError;
use crate::quant::WeightType;

/// The ggml storage types trine reads: every [`WeightType`] and BF16. ggml's other types
/// (Q8_1, the 1- to 3-bit i-quants, the integer types, …) are rejected at open with
/// [`GgufError::UnknownTensorType`].
#[allow(non_camel_case_types)] // ggml's names, as every GGUF tool spells them
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ4_NL,
    IQ4_XS,
}

impl TensorType {
    pub const ALL: [TensorType; 16] = [
        TensorType::F32,
        TensorType::F16,
        TensorType::BF16,
        TensorType::Q8_0,
        TensorType::Q4_0,
        TensorType::Q4_1,
        TensorType::Q5_0,
        TensorType::Q5_1,
        TensorType::Q2_K,
        TensorType::Q3_K,
        TensorType::Q4_K,
        TensorType::Q5_K,
        TensorType::Q6_K,
        TensorType::Q8_K,
        TensorType::IQ4_NL,
        TensorType::IQ4_XS,
    ];

    /// The [`WeightType`] of tensors of this type, which the kernels take as stored.
    /// BF16 has none (no kernel takes bf16 weights).
    pub fn weight_type(self) -> Option<WeightType> {
        Some(match self {
            TensorType::F32 => WeightType::F32,
            TensorType::F16 => WeightType::F16,
            TensorType::Q8_0 => WeightType::Q8_0,
            TensorType::Q4_0 => WeightType::Q4_0,
            TensorType::Q4_1 => WeightType::Q4_1,
            TensorType::Q5_0 => WeightType::Q5_0,
            TensorType::Q5_1 => WeightType::Q5_1,
            TensorType::Q2_K => WeightType::Q2_K,
            TensorType::Q3_K => WeightType::Q3_K,
            TensorType::Q4_K => WeightType::Q4_K,
            TensorType::Q5_K => WeightType::Q5_K,
            TensorType::Q6_K => WeightType::Q6_K,
            TensorType::Q8_K => WeightType::Q8_K,
            TensorType::IQ4_NL => WeightType::IQ4_NL,
            TensorType::IQ4_XS => WeightType::IQ4_XS,
            TensorType::BF16 => return None,
        })
    }

    /// The id ggml's `enum ggml_type` gives this type, as stored in the file.
    pub fn ggml_id(self) -> u32 {
        match self {
            TensorType::F32 => 0,
            TensorType::F16 => 1,
            TensorType::Q4_0 => 2,
            TensorType::Q4_1 => 3,
            TensorType::Q5_0 => 6,
            TensorType::Q5_1 => 7,
            TensorType::Q8_0 => 8,
            TensorType::Q2_K => 10,
            TensorType::Q3_K => 11,
            TensorType::Q4_K => 12,
            TensorType::Q5_K => 13,
            TensorType::Q6_K => 14,
            TensorType::Q8_K => 15,
            TensorType::IQ4_NL => 20,
            TensorType::IQ4_XS => 23,
            TensorType::BF16 => 30,
        }
    }

    pub fn from_ggml_id(id: u32) -> Option<TensorType> {
        TensorType::ALL.into_iter().find(|t| t.ggml_id() == id)
    }

    /// ggml's name of the type, in lower case.
    pub fn name(self) -> &'static str {
        self.weight_type().map_or("bf16", WeightType::name)
    }

    /// Elements per block: 1 for plain floats, the [`WeightType`]'s block for the others.
    pub fn block_elems(self) -> u64 {
        self.weight_type().map_or(1, |w| w.block_elems() as u64)
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> u64 {
        self.weight_type().map_or(2, |w| w.block_bytes() as u64)
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
            (TensorType::Q5_0, 6, 32, 22),
            (TensorType::Q5_1, 7, 32, 24),
            (TensorType::Q8_0, 8, 32, 34),
            (TensorType::Q2_K, 10, 256, 84),
            (TensorType::Q3_K, 11, 256, 110),
            (TensorType::Q4_K, 12, 256, 144),
            (TensorType::Q5_K, 13, 256, 176),
            (TensorType::Q6_K, 14, 256, 210),
            (TensorType::Q8_K, 15, 256, 292),
            (TensorType::IQ4_NL, 20, 32, 18),
            (TensorType::IQ4_XS, 23, 256, 136),
            (TensorType::BF16, 30, 1, 2),
        ];
        assert_eq!(expected.len(), TensorType::ALL.len());
        for (ty, id, elems, bytes) in expected {
            assert_eq!(
                (ty.ggml_id(), ty.block_elems(), ty.block_bytes()),
                (id, elems, bytes),
                "{ty}"
            );
            assert_eq!(TensorType::from_ggml_id(id), Some(ty));
        }
        // Q8_1, IQ2_XXS, IQ3_S, I8 and TQ1_0, which trine does not read.
        for id in [9, 16, 21, 24, 34] {
            assert_eq!(TensorType::from_ggml_id(id), None, "id {id}");
        }
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

//! Where the data section starts and whether every tensor's bytes lie inside the file, aligned
//! and apart from each other.

use super::error::GgufError;
use super::tensor::TensorInfo;
use super::value::Value;

pub const ALIGNMENT_KEY: &str = "general.alignment";
/// GGUF_DEFAULT_ALIGNMENT.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// The alignment `general.alignment` asks for. The format stores it as a u32 (llama.cpp
/// rejects other types); it must be a power of two.
pub(crate) fn alignment(value: Option<&Value>) -> Result<u64, GgufError> {
    match value {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(&Value::U32(a)) if a.is_power_of_two() => Ok(a.into()),
        Some(&Value::U32(a)) => Err(GgufError::BadAlignment { value: a.into() }),
        Some(v) => Err(GgufError::WrongType {
            key: ALIGNMENT_KEY.to_string(),
            expected: "u32",
            found: v.type_name().to_string(),
        }),
    }
}

/// The data section's start: the end of the tensor records rounded up to the alignment.
pub(crate) fn data_offset(header_end: u64, alignment: u64) -> u64 {
    // header_end is at most a file length and alignment at most 2^31, so this cannot overflow.
    header_end.next_multiple_of(alignment)
}

/// Checks that each tensor's offset is aligned, its bytes lie inside a file of `file_len`
/// bytes, and no two tensors share a byte.
pub(crate) fn check(
    tensors: &[TensorInfo],
    data_offset: u64,
    alignment: u64,
    file_len: u64,
) -> Result<(), GgufError> {
    for t in tensors {
        if t.offset % alignment != 0 {
            return Err(GgufError::MisalignedTensor {
                tensor: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        // u128 holds the sum of any three u64 values, so hostile offsets cannot wrap here.
        let start = u128::from(data_offset) + u128::from(t.offset);
        let end = start + u128::from(t.n_bytes);
        if end > u128::from(file_len) {
            let clamp = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
            return Err(GgufError::TensorOutOfFile {
                tensor: t.name.clone(),
                start: clamp(start),
                end: clamp(end),
                len: file_len,
            });
        }
    }
    let mut by_offset: Vec<&TensorInfo> = tensors.iter().collect();
    by_offset.sort_by_key(|t| t.offset);
    for pair in by_offset.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        // Both lie inside the file (checked above), so the sum cannot overflow.
        let a_end = a.offset + a.n_bytes;
        if a_end > b.offset {
            return Err(GgufError::TensorOverlap {
                first: a.name.clone(),
                first_start: a.offset,
                first_end: a_end,
                second: b.name.clone(),
                second_start: b.offset,
            });
        }
    }
    Ok(())
}

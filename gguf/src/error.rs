//! Everything that can be wrong with a GGUF file, or with a request made of one. Each variant
//! names the offending value and where it was found, so a bad file can be diagnosed from the
//! message alone.

use super::tensor::TensorType;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the file is {len} bytes, shorter than the {need}-byte GGUF header")]
    TooShort { len: u64, need: u64 },
    #[error("bad magic {found:02x?} (expected \"GGUF\")")]
    BadMagic { found: [u8; 4] },
    #[error("GGUF version {version} is not supported (only 2 and 3)")]
    UnsupportedVersion { version: u32 },
    /// A count whose smallest possible encoding is already longer than the rest of the file.
    #[error("{count} {what} cannot fit in the {remaining} bytes left at offset {offset}")]
    CountTooLarge {
        what: &'static str,
        count: u64,
        offset: u64,
        remaining: u64,
    },
    /// A string or array length that exceeds the rest of the file (checked before allocating).
    #[error("{what}: length {len} at offset {offset} exceeds the {remaining} bytes left")]
    LengthTooLarge {
        what: String,
        len: u64,
        offset: u64,
        remaining: u64,
    },
    /// Metadata whose decoded form would take more memory than the reader allows for a file of
    /// this size (see `parse::decode_limit`): each element of an array becomes a [`super::Value`]
    /// of 32 bytes, so a file of byte-sized elements would otherwise decode to 32 times its size.
    #[error("{what} at offset {offset}: the metadata would decode to more than {limit} bytes, the limit for a {file_len}-byte file")]
    MetadataTooLarge {
        what: String,
        offset: u64,
        limit: u64,
        file_len: u64,
    },
    /// A fixed-size field runs past the end of the file.
    #[error("{what}: {need} bytes at offset {offset} run past the end of the file ({len} bytes)")]
    Truncated {
        what: String,
        offset: u64,
        need: u64,
        len: u64,
    },
    #[error("{what}: invalid UTF-8 at offset {offset}")]
    InvalidUtf8 { what: String, offset: u64 },
    #[error("metadata key {key:?}: unknown value type {type_id}")]
    UnknownValueType { key: String, type_id: u32 },
    #[error("metadata key {key:?}: a bool must be 0 or 1, found byte {byte}")]
    InvalidBool { key: String, byte: u8 },
    #[error("metadata key {key:?}: arrays nested deeper than {limit} levels")]
    ArrayTooDeep { key: String, limit: usize },
    /// An array whose elements are not all of one type (GGUF arrays are homogeneous).
    #[error("metadata key {key:?}: array mixes {first} and {other}")]
    MixedArray {
        key: String,
        first: &'static str,
        other: &'static str,
    },
    #[error("metadata key {key:?} appears twice")]
    DuplicateKey { key: String },
    #[error("tensor {name:?} appears twice")]
    DuplicateTensor { name: String },
    #[error("tensor {tensor:?}: {n_dims} dimensions (1 to 4 are allowed)")]
    BadDimCount { tensor: String, n_dims: u64 },
    #[error("tensor {tensor:?}: dimension {axis} is 0 (dims {dims:?})")]
    ZeroDim {
        tensor: String,
        axis: usize,
        dims: Vec<u64>,
    },
    #[error("tensor {tensor:?}: the element or byte count of dims {dims:?} overflows")]
    ShapeOverflow { tensor: String, dims: Vec<u64> },
    #[error("tensor {tensor:?}: unknown ggml type id {type_id}")]
    UnknownTensorType { tensor: String, type_id: u32 },
    #[error("tensor {tensor:?}: ne[0] = {ne0} is not a multiple of {ty}'s block of {block}")]
    NotBlockMultiple {
        tensor: String,
        ty: TensorType,
        ne0: u64,
        block: u64,
    },
    #[error("general.alignment = {value} is not a power of two")]
    BadAlignment { value: u64 },
    #[error("tensor {tensor:?}: offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },
    /// Tensor data (file offsets `start..end`) that does not lie inside the file.
    #[error(
        "tensor {tensor:?}: data at file bytes {start}..{end} lies outside the file ({len} bytes)"
    )]
    TensorOutOfFile {
        tensor: String,
        start: u64,
        end: u64,
        len: u64,
    },
    #[error("tensors {first:?} (data bytes {first_start}..{first_end}) and {second:?} (from {second_start}) overlap")]
    TensorOverlap {
        first: String,
        first_start: u64,
        first_end: u64,
        second: String,
        second_start: u64,
    },
    #[error("tensor {tensor:?}: {got} bytes given, its dims and type need {expected}")]
    TensorSizeMismatch {
        tensor: String,
        expected: u64,
        got: u64,
    },
    #[error("metadata key {key:?} is missing")]
    MissingKey { key: String },
    #[error("metadata key {key:?}: expected {expected}, found {found}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("metadata key {key:?}: value {value} is out of range")]
    ValueOutOfRange { key: String, value: i128 },
    /// A synthetic tensor could not be encoded in its type.
    #[error("tensor {tensor:?}: {reason}")]
    Encode { tensor: String, reason: String },
}

//! trine-gguf: GGUF model files — reading (v2 and v3), writing (v3), ggml's weight block
//! formats with their plain-Rust quantizers and dequantizers ([`quant`]), synthetic models for
//! benchmarks ([`synth`]), and the cache where the real model files are found ([`assets`]).
//! It knows no IR and no backend: everything here is plain Rust over bytes.
//!
//! A GGUF file is a header (magic `GGUF`, version, tensor count, metadata count), the metadata
//! (typed key/value pairs), one record per tensor (name, dims, ggml type, offset), then the data
//! section, which starts at the next multiple of `general.alignment` (default 32). All numbers
//! are little-endian; strings are a u64 length and UTF-8 bytes.
//!
//! [`Gguf::open`] maps the file and validates all of it before returning: every length against
//! the bytes that remain, every tensor's shape, type, alignment and placement. A file that
//! opens can be used without further checks; every malformed one is a [`GgufError`].

pub mod assets;
mod error;
mod layout;
mod parse;
pub mod quant;
mod storage;
pub mod synth;
mod tensor;
mod value;
mod writer;

#[cfg(test)]
mod tests;

pub use error::GgufError;
pub use layout::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT};
pub use tensor::{TensorInfo, TensorType, MAX_DIMS};
pub use value::{Value, MAX_ARRAY_DEPTH};
pub use writer::GgufWriter;

use std::collections::HashMap;
use std::path::Path;
use storage::Storage;

/// An open, validated GGUF file.
pub struct Gguf {
    storage: Storage,
    version: u32,
    metadata: Vec<(String, Value)>,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
    data_offset: u64,
    alignment: u64,
}

impl Gguf {
    /// Maps the file at `path` and validates it.
    pub fn open(path: &Path) -> Result<Gguf, GgufError> {
        Gguf::parse(Storage::map(path)?)
    }

    /// Validates a file held in memory, with the same checks as [`Gguf::open`].
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Gguf, GgufError> {
        Gguf::parse(Storage::Owned(bytes))
    }

    fn parse(storage: Storage) -> Result<Gguf, GgufError> {
        let bytes = storage.bytes();
        let header = parse::header(bytes)?;
        let alignment = layout::alignment(
            header
                .metadata
                .iter()
                .find(|(k, _)| k == ALIGNMENT_KEY)
                .map(|(_, v)| v),
        )?;
        let data_offset = layout::data_offset(header.end, alignment);
        layout::check(&header.tensors, data_offset, alignment, bytes.len() as u64)?;
        let by_name = header
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(Gguf {
            storage,
            version: header.version,
            metadata: header.metadata,
            tensors: header.tensors,
            by_name,
            data_offset,
            alignment,
        })
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    /// `general.alignment`, or 32 when the file does not set it.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Where the data section starts in the file.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Every metadata entry, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_string(),
        })
    }

    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        self.require(key)?.to_str(key)
    }

    /// Any integer type whose value fits in a u32.
    pub fn get_u32(&self, key: &str) -> Result<u32, GgufError> {
        self.require(key)?.to_integer(key)
    }

    /// Any integer type whose value fits in a u64.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.require(key)?.to_integer(key)
    }

    /// An f32, or an f64 rounded to f32.
    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        self.require(key)?.to_f32(key)
    }

    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        self.require(key)?.to_bool(key)
    }

    pub fn get_array(&self, key: &str) -> Result<&[Value], GgufError> {
        self.require(key)?.to_array(key)
    }

    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        self.require(key)?
            .to_vec(key, "array of string", |v| match v {
                Value::String(s) => Some(s.as_str()),
                _ => None,
            })
    }

    /// An array of f32 (or f64, rounded).
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>, GgufError> {
        self.require(key)?
            .to_vec(key, "array of f32", |v| v.to_f32(key).ok())
    }

    /// An array of any integer type whose values fit in an i32.
    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>, GgufError> {
        self.require(key)?
            .to_vec(key, "array of i32", |v| v.to_integer(key).ok())
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The `t.n_bytes` bytes of a tensor of this file (bounds-checked at open). A record that
    /// does not belong to this file and does not fit in it gives an empty slice.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let start = self.data_offset.checked_add(t.offset);
        let end = start.and_then(|s| s.checked_add(t.n_bytes));
        match (start, end) {
            (Some(s), Some(e)) => usize::try_from(s)
                .ok()
                .zip(usize::try_from(e).ok())
                .and_then(|(s, e)| self.storage.bytes().get(s..e))
                .unwrap_or(&[]),
            _ => &[],
        }
    }
}

impl std::fmt::Debug for Gguf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gguf")
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("data_offset", &self.data_offset)
            .field("alignment", &self.alignment)
            .finish()
    }
}

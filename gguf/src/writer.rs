//! Writing GGUF v3 files: metadata and tensors in the order they were added, each tensor's data
//! at the next multiple of the alignment.

use super::error::GgufError;
use super::layout::{self, ALIGNMENT_KEY};
use super::parse::MAGIC;
use super::tensor::{TensorInfo, TensorType};
use super::value::{type_id, Value};
use std::io::{Read, Write};
use std::path::Path;

/// A GGUF file being assembled in memory.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<(TensorInfo, Vec<u8>)>,
}

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    /// Sets `key` (a key added before keeps its place). Fails for a value the format cannot
    /// hold: an array mixing types or nested deeper than [`super::MAX_ARRAY_DEPTH`], or a
    /// `general.alignment` that is not a u32 power of two.
    pub fn add(&mut self, key: impl Into<String>, value: Value) -> Result<(), GgufError> {
        let key = key.into();
        value.check_encodable(&key)?;
        if key == ALIGNMENT_KEY {
            layout::alignment(Some(&value))?;
        }
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.metadata.push((key, value)),
        }
        Ok(())
    }

    /// Takes `key` out of the metadata (a file without it), returning its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let at = self.metadata.iter().position(|(k, _)| k == key)?;
        Some(self.metadata.remove(at).1)
    }

    /// Adds a tensor whose `bytes` are its data in type `ty`: exactly as many as `dims` need.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: TensorType,
        bytes: Vec<u8>,
    ) -> Result<(), GgufError> {
        let name = name.into();
        if self.tensors.iter().any(|(t, _)| t.name == name) {
            return Err(GgufError::DuplicateTensor { name });
        }
        let info = TensorInfo::new(name, dims.to_vec(), ty, 0)?;
        if bytes.len() as u64 != info.n_bytes {
            return Err(GgufError::TensorSizeMismatch {
                tensor: info.name,
                expected: info.n_bytes,
                got: bytes.len() as u64,
            });
        }
        self.tensors.push((info, bytes));
        Ok(())
    }

    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// The tensor records as they will be written (offsets included).
    pub fn tensors(&self) -> Vec<TensorInfo> {
        let alignment = self.alignment();
        let mut offset = 0;
        self.tensors
            .iter()
            .map(|(t, _)| {
                let placed = TensorInfo {
                    offset,
                    ..t.clone()
                };
                offset = (offset + t.n_bytes).next_multiple_of(alignment);
                placed
            })
            .collect()
    }

    /// `general.alignment` if set (`add` checked it), else the default 32.
    pub fn alignment(&self) -> u64 {
        let value = self.metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY);
        layout::alignment(value.map(|(_, v)| v)).unwrap_or(layout::DEFAULT_ALIGNMENT)
    }

    /// The whole file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let alignment = self.alignment();
        let mut out = self.header();
        for (_, bytes) in &self.tensors {
            out.extend_from_slice(bytes);
            out.resize(padded(out.len(), alignment), 0);
        }
        out
    }

    /// Writes the file to `path`, streaming the tensor data rather than copying it.
    pub fn write(&self, path: &Path) -> Result<(), GgufError> {
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut f = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
        let header = self.header();
        f.write_all(&header).map_err(io)?;
        let alignment = self.alignment();
        let mut at = header.len();
        for (_, bytes) in &self.tensors {
            f.write_all(bytes).map_err(io)?;
            at += bytes.len();
            let pad = padded(at, alignment) - at;
            std::io::copy(&mut std::io::repeat(0).take(pad as u64), &mut f).map_err(io)?;
            at += pad;
        }
        f.flush().map_err(io)
    }

    /// Everything before the data section, padded to the alignment.
    fn header(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_kv(&mut out, key, value);
        }
        for t in self.tensors() {
            put_tensor_info(&mut out, &t.name, &t.dims, t.ty.ggml_id(), t.offset);
        }
        out.resize(padded(out.len(), self.alignment()), 0);
        out
    }
}

fn padded(len: usize, alignment: u64) -> usize {
    len.next_multiple_of(alignment as usize)
}

pub(crate) fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

pub(crate) fn put_kv(out: &mut Vec<u8>, key: &str, value: &Value) {
    put_string(out, key);
    out.extend_from_slice(&value.type_id().to_le_bytes());
    put_value(out, value);
}

/// A value without its type tag. An empty array is written as an array of strings: the value
/// model keeps no element type for it, and string lists (merges) are the ones found empty.
pub(crate) fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(s) => put_string(out, s),
        Value::Array(items) => {
            let elem = items.first().map_or(type_id::STRING, Value::type_id);
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            items.iter().for_each(|v| put_value(out, v));
        }
    }
}

pub(crate) fn put_tensor_info(out: &mut Vec<u8>, name: &str, dims: &[u64], ty: u32, offset: u64) {
    put_string(out, name);
    out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
    dims.iter()
        .for_each(|d| out.extend_from_slice(&d.to_le_bytes()));
    out.extend_from_slice(&ty.to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
}

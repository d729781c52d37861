//! Reading the header, the metadata and the tensor records of a GGUF file through a cursor
//! that never reads past the end. Every length is checked against the bytes that remain before
//! anything is allocated for it, so a hostile length costs nothing; and what the decoded
//! metadata takes in memory is bounded by [`decode_limit`], because a valid file can still
//! decode to many times its size (a byte per array element on disk, a 32-byte `Value` in
//! memory).

use super::error::GgufError;
use super::tensor::{TensorInfo, TensorType, MAX_DIMS};
use super::value::{type_id, Value, MAX_ARRAY_DEPTH};
use std::collections::HashSet;

pub(crate) const MAGIC: [u8; 4] = *b"GGUF";
/// Magic, version, tensor count and metadata count (GGUF v2 and later).
pub(crate) const HEADER_BYTES: u64 = 4 + 4 + 8 + 8;
/// The smallest metadata entry: an empty key, a type and a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// The smallest tensor record: an empty name, one dim, a type and an offset.
const MIN_TENSOR_BYTES: u64 = 8 + 4 + 8 + 4 + 8;
/// Bytes one decoded array element takes in memory, whatever its type.
const VALUE_BYTES: u64 = std::mem::size_of::<Value>() as u64;

/// The most memory the decoded header of a `file_len`-byte file may take: 8 times the file,
/// plus 1 MiB so that small files with a few arrays always parse. Models hold their bulk in
/// tensor data, which is never decoded (SmolLM2-135M's header decodes to 0.06 times its file);
/// the 20 tokenizer vocabularies llama.cpp ships (strings, f32 scores, i32 types; metadata
/// only) decode to 2.7 to 5.0 times theirs. An array of single bytes would take 32 times its
/// size, and beyond this limit is refused.
pub(crate) fn decode_limit(file_len: u64) -> u64 {
    file_len.saturating_mul(8).saturating_add(1 << 20)
}

/// What the bytes before the data section say.
pub(crate) struct Header {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    /// Where the tensor records end (the data section starts at the next aligned offset).
    pub end: u64,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Memory the decoded header may still take ([`decode_limit`] less what is taken).
    budget: u64,
}

impl<'a> Cursor<'a> {
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8], GgufError> {
        let truncated = || GgufError::Truncated {
            what: what(),
            offset: self.offset(),
            need: n,
            len: self.bytes.len() as u64,
        };
        let n = usize::try_from(n).map_err(|_| truncated())?;
        let end = self.pos.checked_add(n).ok_or_else(truncated)?;
        let out = self.bytes.get(self.pos..end).ok_or_else(truncated)?;
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], GgufError> {
        let b = self.take(N as u64, what)?;
        let mut out = [0; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// Takes `bytes` of the decode budget for what is about to be allocated.
    fn spend(&mut self, bytes: u64, what: &dyn Fn() -> String) -> Result<(), GgufError> {
        match self.budget.checked_sub(bytes) {
            Some(left) => {
                self.budget = left;
                Ok(())
            }
            None => Err(GgufError::MetadataTooLarge {
                what: what(),
                offset: self.offset(),
                limit: decode_limit(self.bytes.len() as u64),
                file_len: self.bytes.len() as u64,
            }),
        }
    }

    /// A u64 length that must not exceed the rest of the file once multiplied by `unit`, the
    /// fewest bytes one counted item takes.
    fn length(&mut self, unit: u64, what: &dyn Fn() -> String) -> Result<u64, GgufError> {
        let offset = self.offset();
        let len = self.u64(what)?;
        let remaining = self.remaining();
        match len.checked_mul(unit) {
            Some(bytes) if bytes <= remaining => Ok(len),
            _ => Err(GgufError::LengthTooLarge {
                what: what(),
                len,
                offset,
                remaining,
            }),
        }
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len = self.length(1, what)?;
        self.spend(len, what)?;
        let offset = self.offset();
        let b = self.take(len, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| GgufError::InvalidUtf8 {
            what: what(),
            offset,
        })
    }
}

/// Parses everything up to the data section. `bytes` is the whole file.
pub(crate) fn header(bytes: &[u8]) -> Result<Header, GgufError> {
    let too_short = || GgufError::TooShort {
        len: bytes.len() as u64,
        need: HEADER_BYTES,
    };
    let mut c = Cursor {
        bytes,
        pos: 0,
        budget: decode_limit(bytes.len() as u64),
    };
    let magic: [u8; 4] = c.array(&|| "magic".into()).map_err(|_| too_short())?;
    if magic != MAGIC {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = c.u32(&|| "version".into()).map_err(|_| too_short())?;
    if !(2..=3).contains(&version) {
        return Err(GgufError::UnsupportedVersion { version });
    }
    if (bytes.len() as u64) < HEADER_BYTES {
        return Err(too_short());
    }
    let n_tensors = count(&mut c, "tensors", MIN_TENSOR_BYTES)?;
    let n_kv = count(&mut c, "metadata entries", MIN_KV_BYTES)?;

    let mut keys = HashSet::new();
    let mut metadata = Vec::new();
    for i in 0..n_kv {
        let what = || format!("metadata entry {i}");
        c.spend(std::mem::size_of::<(String, Value)>() as u64, &what)?;
        let key = c.string(&|| format!("key of metadata entry {i}"))?;
        if !keys.insert(key.clone()) {
            return Err(GgufError::DuplicateKey { key });
        }
        let ty = c.u32(&|| format!("type of metadata {key:?}"))?;
        let value = value(&mut c, &key, ty, 0)?;
        metadata.push((key, value));
    }

    let mut names = HashSet::new();
    let mut tensors = Vec::new();
    for i in 0..n_tensors {
        c.spend(std::mem::size_of::<TensorInfo>() as u64, &|| {
            format!("tensor {i}")
        })?;
        let name = c.string(&|| format!("name of tensor {i}"))?;
        if !names.insert(name.clone()) {
            return Err(GgufError::DuplicateTensor { name });
        }
        tensors.push(tensor(&mut c, name)?);
    }
    Ok(Header {
        version,
        metadata,
        tensors,
        end: c.offset(),
    })
}

/// A u64 count of items that each take at least `unit` bytes of what remains.
fn count(c: &mut Cursor, what: &'static str, unit: u64) -> Result<u64, GgufError> {
    let offset = c.offset();
    let n = c.u64(&|| format!("count of {what}"))?;
    let remaining = c.remaining();
    match n.checked_mul(unit) {
        Some(bytes) if bytes <= remaining => Ok(n),
        _ => Err(GgufError::CountTooLarge {
            what,
            count: n,
            offset,
            remaining,
        }),
    }
}

/// The fewest bytes a value of type `ty` takes; `None` for an unknown type.
fn min_bytes(ty: u32) -> Option<u64> {
    Some(match ty {
        type_id::U8 | type_id::I8 | type_id::BOOL => 1,
        type_id::U16 | type_id::I16 => 2,
        type_id::U32 | type_id::I32 | type_id::F32 => 4,
        type_id::U64 | type_id::I64 | type_id::F64 | type_id::STRING => 8,
        type_id::ARRAY => 4 + 8,
        _ => return None,
    })
}

fn value(c: &mut Cursor, key: &str, ty: u32, depth: usize) -> Result<Value, GgufError> {
    let what = || format!("value of metadata {key:?}");
    Ok(match ty {
        type_id::U8 => Value::U8(u8::from_le_bytes(c.array(&what)?)),
        type_id::I8 => Value::I8(i8::from_le_bytes(c.array(&what)?)),
        type_id::U16 => Value::U16(u16::from_le_bytes(c.array(&what)?)),
        type_id::I16 => Value::I16(i16::from_le_bytes(c.array(&what)?)),
        type_id::U32 => Value::U32(u32::from_le_bytes(c.array(&what)?)),
        type_id::I32 => Value::I32(i32::from_le_bytes(c.array(&what)?)),
        type_id::U64 => Value::U64(u64::from_le_bytes(c.array(&what)?)),
        type_id::I64 => Value::I64(i64::from_le_bytes(c.array(&what)?)),
        type_id::F32 => Value::F32(f32::from_le_bytes(c.array(&what)?)),
        type_id::F64 => Value::F64(f64::from_le_bytes(c.array(&what)?)),
        type_id::BOOL => match c.array::<1>(&what)?[0] {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            byte => {
                return Err(GgufError::InvalidBool {
                    key: key.to_string(),
                    byte,
                })
            }
        },
        type_id::STRING => Value::String(c.string(&what)?),
        type_id::ARRAY => {
            if depth == MAX_ARRAY_DEPTH {
                return Err(GgufError::ArrayTooDeep {
                    key: key.to_string(),
                    limit: MAX_ARRAY_DEPTH,
                });
            }
            let elem = c.u32(&|| format!("element type of metadata {key:?}"))?;
            let unit = min_bytes(elem).ok_or_else(|| GgufError::UnknownValueType {
                key: key.to_string(),
                type_id: elem,
            })?;
            let what = || format!("array {key:?}");
            let n = c.length(unit, &what)?;
            // `n` is only a claim until its elements parse: reserve no more slots than the
            // bytes left could fill, then double as elements arrive (as `push` would, but
            // never past `n`), taking every slot reserved from the budget before reserving it.
            let mut items: Vec<Value> = Vec::new();
            let mut more = n.min(c.remaining() / VALUE_BYTES);
            for i in 0..n {
                if items.len() == items.capacity() {
                    more = more.max(i).max(1).min(n - i);
                    c.spend(more * VALUE_BYTES, &what)?;
                    items.reserve_exact(more as usize);
                }
                items.push(value(c, key, elem, depth + 1)?);
            }
            Value::Array(items)
        }
        _ => {
            return Err(GgufError::UnknownValueType {
                key: key.to_string(),
                type_id: ty,
            })
        }
    })
}

/// One tensor record after its name: dims, type and offset.
fn tensor(c: &mut Cursor, name: String) -> Result<TensorInfo, GgufError> {
    let n_dims = c.u32(&|| format!("dimension count of tensor {name:?}"))?;
    if n_dims == 0 || n_dims as usize > MAX_DIMS {
        return Err(GgufError::BadDimCount {
            tensor: name,
            n_dims: n_dims.into(),
        });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for axis in 0..n_dims {
        dims.push(c.u64(&|| format!("dimension {axis} of tensor {name:?}"))?);
    }
    let type_id = c.u32(&|| format!("type of tensor {name:?}"))?;
    let Some(ty) = TensorType::from_ggml_id(type_id) else {
        return Err(GgufError::UnknownTensorType {
            tensor: name,
            type_id,
        });
    };
    let offset = c.u64(&|| format!("offset of tensor {name:?}"))?;
    TensorInfo::new(name, dims, ty, offset)
}

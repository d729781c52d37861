//! Tests of the GGUF reader, writer and synthetic models. Files are built with the writer or,
//! where a test needs a file the writer refuses to make, byte by byte with [`Raw`].

mod malformed;
mod mutate;
mod real_file;
mod roundtrip;
mod synth;

use super::value::type_id;
use super::writer::{put_kv, put_string, put_tensor_info};
use super::{GgufWriter, TensorType, Value};

/// A small valid file: one metadata entry of every type and three tensors of different types.
fn small_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    let entries = [
        ("general.architecture", Value::String("llama".into())),
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60_000)),
        ("t.i16", Value::I16(-30_000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.u64", Value::U64(1 << 40)),
        ("t.i64", Value::I64(-(1 << 40))),
        ("t.f32", Value::F32(0.5)),
        ("t.f64", Value::F64(-0.25)),
        ("t.bool", Value::Bool(true)),
        (
            "t.strs",
            Value::Array(vec![Value::String("a".into()), Value::String("bé".into())]),
        ),
        (
            "t.nested",
            Value::Array(vec![
                Value::Array(vec![Value::I32(1), Value::I32(-2)]),
                Value::Array(vec![]),
            ]),
        ),
    ];
    for (k, v) in entries {
        w.add(k, v).unwrap();
    }
    let f32s: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    w.add_tensor("a", &[3, 2], TensorType::F32, f32s).unwrap();
    w.add_tensor("b", &[32], TensorType::Q8_0, (0..34).collect())
        .unwrap();
    w.add_tensor("c", &[5], TensorType::F16, vec![7; 10])
        .unwrap();
    w
}

fn small_file() -> Vec<u8> {
    small_writer().to_bytes()
}

/// A file put together field by field, for shapes the writer refuses to produce (duplicate
/// keys, bad counts, unknown types).
struct Raw(Vec<u8>);

impl Raw {
    fn new(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut out = b"GGUF".to_vec();
        out.extend(version.to_le_bytes());
        out.extend(n_tensors.to_le_bytes());
        out.extend(n_kv.to_le_bytes());
        Raw(out)
    }

    fn kv(mut self, key: &str, value: &Value) -> Raw {
        put_kv(&mut self.0, key, value);
        self
    }

    /// A metadata entry with a raw type tag followed by `body`.
    fn kv_raw(mut self, key: &str, ty: u32, body: &[u8]) -> Raw {
        put_string(&mut self.0, key);
        self.0.extend(ty.to_le_bytes());
        self.0.extend(body);
        self
    }

    fn tensor(mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Raw {
        put_tensor_info(&mut self.0, name, dims, ty, offset);
        self
    }

    /// Pads to 32 bytes and appends `n` data bytes.
    fn data(mut self, n: usize) -> Vec<u8> {
        self.0.resize(self.0.len().next_multiple_of(32) + n, 0);
        self.0
    }
}

/// The body of an array value: element type, count, encoded elements.
fn array_body(elem: u32, n: u64, elems: &[u8]) -> Vec<u8> {
    let mut out = elem.to_le_bytes().to_vec();
    out.extend(n.to_le_bytes());
    out.extend(elems);
    out
}

const F32: u32 = 0;
const ARRAY: u32 = type_id::ARRAY;
const STRING: u32 = type_id::STRING;

//! Every malformed-input error, each from a file that has exactly that one defect.

use super::{array_body, small_file, Raw, ARRAY, F32, STRING};
use crate::value::type_id;
use crate::{Gguf, GgufError, TensorType, Value};

fn open(bytes: Vec<u8>) -> GgufError {
    Gguf::from_bytes(bytes).unwrap_err()
}

/// A file whose one metadata entry is `key` with type tag `ty` and `body`.
fn one_kv(key: &str, ty: u32, body: &[u8]) -> Vec<u8> {
    Raw::new(3, 0, 1).kv_raw(key, ty, body).0
}

/// A file with one f32 tensor `t` of `dims` at `offset` and `data` bytes of data.
fn one_tensor(dims: &[u64], ty: u32, offset: u64, data: usize) -> Vec<u8> {
    Raw::new(3, 1, 0).tensor("t", dims, ty, offset).data(data)
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error() {
    let bytes = small_file();
    let g = Gguf::from_bytes(bytes.clone()).unwrap();
    let last = g.tensors().last().unwrap();
    let data_end = (g.data_offset() + last.offset + last.n_bytes) as usize;
    for len in 0..data_end {
        assert!(
            Gguf::from_bytes(bytes[..len].to_vec()).is_err(),
            "a file cut to {len} of {} bytes opened",
            bytes.len()
        );
    }
    // Only the padding after the last tensor may go.
    for len in data_end..=bytes.len() {
        assert!(Gguf::from_bytes(bytes[..len].to_vec()).is_ok());
    }
}

#[test]
fn shorter_than_the_header() {
    assert!(matches!(
        open(b"GG".to_vec()),
        GgufError::TooShort { len: 2, need: 24 }
    ));
    let mut b = small_file();
    b.truncate(20);
    assert!(matches!(open(b), GgufError::TooShort { len: 20, need: 24 }));
}

#[test]
fn wrong_magic_shows_the_bytes() {
    let mut b = small_file();
    b[3] = b'G';
    assert!(matches!(open(b), GgufError::BadMagic { found } if &found == b"GGUG"));
}

#[test]
fn unsupported_versions() {
    for version in [0, 1, 4, 0x0300_0000] {
        let b = Raw::new(version, 0, 0).0;
        assert!(matches!(open(b), GgufError::UnsupportedVersion { version: v } if v == version));
    }
    assert!(Gguf::from_bytes(Raw::new(2, 0, 0).0).is_ok());
}

#[test]
fn counts_that_cannot_fit() {
    let b = Raw::new(3, 0, 1 << 60).0;
    assert!(matches!(
        open(b),
        GgufError::CountTooLarge {
            what: "metadata entries",
            count: 1_152_921_504_606_846_976,
            offset: 16,
            remaining: 0
        }
    ));
    let b = Raw::new(3, u64::MAX, 0).data(64);
    assert!(matches!(
        open(b),
        GgufError::CountTooLarge {
            what: "tensors",
            count: u64::MAX,
            ..
        }
    ));
}

#[test]
fn hostile_lengths_are_refused_before_allocating() {
    // A key claiming 2^60 bytes.
    let mut b = Raw::new(3, 0, 1).0;
    b.extend((1u64 << 60).to_le_bytes());
    b.extend([0; 16]);
    assert!(matches!(
        open(b),
        GgufError::LengthTooLarge {
            len: 1_152_921_504_606_846_976,
            offset: 24,
            remaining: 16,
            ..
        }
    ));
    // A string value claiming u64::MAX bytes.
    let b = one_kv("k", STRING, &u64::MAX.to_le_bytes());
    assert!(matches!(
        open(b),
        GgufError::LengthTooLarge { len: u64::MAX, .. }
    ));
    // Arrays whose count, times the smallest element, exceeds the file or overflows.
    for (elem, n) in [
        (type_id::U8, 1 << 60),
        (STRING, u64::MAX / 2),
        (ARRAY, 1 << 62),
    ] {
        let b = one_kv("k", ARRAY, &array_body(elem, n, &[0; 32]));
        assert!(
            matches!(open(b), GgufError::LengthTooLarge { len, .. } if len == n),
            "array of type {elem}"
        );
    }
    // A tensor name claiming 2^40 bytes.
    let mut b = Raw::new(3, 1, 0).0;
    b.extend((1u64 << 40).to_le_bytes());
    b.extend([0; 40]);
    assert!(
        matches!(open(b), GgufError::LengthTooLarge { what, .. } if what == "name of tensor 0")
    );
}

#[test]
fn a_field_past_the_end() {
    let b = one_kv("k", type_id::U64, &[1, 2]);
    assert!(matches!(
        open(b),
        GgufError::Truncated { what, offset: 37, need: 8, len: 39 } if what.contains("\"k\"")
    ));
}

#[test]
fn invalid_utf8() {
    let mut b = Raw::new(3, 0, 1).0;
    b.extend(2u64.to_le_bytes());
    b.extend([0xc3, 0x28]);
    b.extend(type_id::U8.to_le_bytes());
    b.push(0);
    assert!(matches!(open(b), GgufError::InvalidUtf8 { offset: 32, .. }));
    let mut body = 1u64.to_le_bytes().to_vec();
    body.push(0xff);
    assert!(matches!(
        open(one_kv("k", STRING, &body)),
        GgufError::InvalidUtf8 { .. }
    ));
}

#[test]
fn unknown_value_types() {
    let b = one_kv("k", 13, &[0; 8]);
    assert!(matches!(open(b), GgufError::UnknownValueType { key, type_id: 13 } if key == "k"));
    let b = one_kv("k", ARRAY, &array_body(99, 1, &[0; 8]));
    assert!(matches!(
        open(b),
        GgufError::UnknownValueType { type_id: 99, .. }
    ));
}

#[test]
fn arrays_nested_too_deep() {
    let mut body = array_body(type_id::U8, 0, &[]);
    for _ in 0..3 {
        body = array_body(ARRAY, 1, &body);
    }
    assert!(matches!(
        open(one_kv("k", ARRAY, &body)),
        GgufError::ArrayTooDeep { limit: 3, .. }
    ));
}

#[test]
fn a_bool_that_is_neither_0_nor_1() {
    let b = one_kv("k", type_id::BOOL, &[2]);
    assert!(matches!(open(b), GgufError::InvalidBool { byte: 2, .. }));
}

#[test]
fn duplicate_keys_and_tensor_names() {
    let b = Raw::new(3, 0, 2)
        .kv("k", &Value::U8(1))
        .kv("k", &Value::U8(2))
        .0;
    assert!(matches!(open(b), GgufError::DuplicateKey { key } if key == "k"));
    let b = Raw::new(3, 2, 0)
        .tensor("t", &[8], F32, 0)
        .tensor("t", &[8], F32, 32)
        .data(64);
    assert!(matches!(open(b), GgufError::DuplicateTensor { name } if name == "t"));
}

#[test]
fn dimension_counts() {
    for n in [0usize, 5] {
        let dims = vec![1; n];
        assert!(matches!(
            open(one_tensor(&dims, F32, 0, 64)),
            GgufError::BadDimCount { n_dims, .. } if n_dims == n as u64
        ));
    }
    // A hostile dimension count is refused before any dim is read.
    let mut b = Raw::new(3, 1, 0).0;
    super::put_string(&mut b, "t");
    b.extend(u32::MAX.to_le_bytes());
    b.extend([0; 32]);
    assert!(matches!(
        open(b),
        GgufError::BadDimCount {
            n_dims: 4_294_967_295,
            ..
        }
    ));
}

#[test]
fn zero_dim_and_overflowing_shapes() {
    assert!(matches!(
        open(one_tensor(&[4, 0, 2], F32, 0, 64)),
        GgufError::ZeroDim { axis: 1, .. }
    ));
    assert!(matches!(
        open(one_tensor(&[1 << 32, 1 << 32], F32, 0, 64)),
        GgufError::ShapeOverflow { dims, .. } if dims == [1 << 32, 1 << 32]
    ));
}

#[test]
fn rows_of_partial_blocks() {
    let q4_0 = TensorType::Q4_0.ggml_id();
    assert!(matches!(
        open(one_tensor(&[48, 2], q4_0, 0, 64)),
        GgufError::NotBlockMultiple {
            ty: TensorType::Q4_0,
            ne0: 48,
            block: 32,
            ..
        }
    ));
    // A row of 32-element blocks is not whole 256-element super-blocks.
    let q4_k = TensorType::Q4_K.ggml_id();
    assert!(matches!(
        open(one_tensor(&[160, 2], q4_k, 0, 512)),
        GgufError::NotBlockMultiple {
            ty: TensorType::Q4_K,
            ne0: 160,
            block: 256,
            ..
        }
    ));
}

#[test]
fn every_type_opens_with_its_block_size() {
    for ty in TensorType::ALL {
        let n_bytes = (512 / ty.block_elems() * ty.block_bytes()) as usize;
        let g = Gguf::from_bytes(one_tensor(&[256, 2], ty.ggml_id(), 0, n_bytes)).unwrap();
        let t = &g.tensors()[0];
        assert_eq!((t.ty, t.n_bytes), (ty, n_bytes as u64), "{ty}");
        // One byte short of the data, and the tensor runs out of the file.
        let short = one_tensor(&[256, 2], ty.ggml_id(), 0, n_bytes - 1);
        assert!(
            matches!(open(short), GgufError::TensorOutOfFile { .. }),
            "{ty}"
        );
    }
}

#[test]
fn unknown_tensor_type_names_the_tensor_and_id() {
    // 16 is ggml's IQ2_XXS, which trine does not read.
    assert!(matches!(
        open(one_tensor(&[256], 16, 0, 256)),
        GgufError::UnknownTensorType { tensor, type_id: 16 } if tensor == "t"
    ));
}

#[test]
fn bad_alignments() {
    for a in [0u32, 3, 48] {
        let b = Raw::new(3, 0, 1).kv("general.alignment", &Value::U32(a)).0;
        assert!(matches!(open(b), GgufError::BadAlignment { value } if value == u64::from(a)));
    }
    let b = Raw::new(3, 0, 1)
        .kv("general.alignment", &Value::F32(32.0))
        .0;
    assert!(matches!(
        open(b),
        GgufError::WrongType {
            expected: "u32",
            ..
        }
    ));
}

#[test]
fn misaligned_tensor() {
    assert!(matches!(
        open(one_tensor(&[4], F32, 16, 64)),
        GgufError::MisalignedTensor {
            offset: 16,
            alignment: 32,
            ..
        }
    ));
}

#[test]
fn tensor_data_outside_the_file() {
    // The data section starts at 64 here; 16 bytes of data are needed, 8 are there.
    let b = one_tensor(&[4], F32, 0, 8);
    assert!(matches!(
        open(b),
        GgufError::TensorOutOfFile {
            start: 64,
            end: 80,
            len: 72,
            ..
        }
    ));
    // An offset near u64::MAX must not wrap around into the file.
    let b = one_tensor(&[4], F32, u64::MAX - 31, 64);
    assert!(matches!(
        open(b),
        GgufError::TensorOutOfFile {
            start: u64::MAX,
            end: u64::MAX,
            len: 128,
            ..
        }
    ));
}

#[test]
fn overlapping_tensors() {
    let b = Raw::new(3, 2, 0)
        .tensor("a", &[16], F32, 32)
        .tensor("b", &[16], F32, 0)
        .data(96);
    assert!(matches!(
        open(b),
        GgufError::TensorOverlap { first, first_start: 0, first_end: 64, second, second_start: 32 }
            if first == "b" && second == "a"
    ));
}

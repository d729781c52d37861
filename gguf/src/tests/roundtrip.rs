//! The writer's output, byte for byte and read back through the reader.

use super::{small_file, small_writer};
use crate::quant::quantize;
use crate::{Gguf, GgufError, GgufWriter, TensorType, Value};

#[test]
fn writer_output_matches_a_hand_encoded_file() {
    let mut w = GgufWriter::new();
    w.add("general.architecture", Value::String("ab".into()))
        .unwrap();
    let data: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    w.add_tensor("w", &[2], TensorType::F32, data).unwrap();

    // The layout of GGUF v3 (ggml/docs/gguf.md), spelled out field by field.
    let mut expected: Vec<u8> = vec![];
    expected.extend(b"GGUF");
    expected.extend([3, 0, 0, 0]);
    expected.extend([1, 0, 0, 0, 0, 0, 0, 0]); // tensors
    expected.extend([1, 0, 0, 0, 0, 0, 0, 0]); // metadata entries
    expected.extend([20, 0, 0, 0, 0, 0, 0, 0]);
    expected.extend(b"general.architecture");
    expected.extend([8, 0, 0, 0]); // GGUF_TYPE_STRING
    expected.extend([2, 0, 0, 0, 0, 0, 0, 0]);
    expected.extend(b"ab");
    expected.extend([1, 0, 0, 0, 0, 0, 0, 0]);
    expected.extend(b"w");
    expected.extend([1, 0, 0, 0]); // n_dims
    expected.extend([2, 0, 0, 0, 0, 0, 0, 0]);
    expected.extend([0, 0, 0, 0]); // GGML_TYPE_F32
    expected.extend([0; 8]); // offset
    assert_eq!(expected.len(), 99);
    expected.resize(128, 0);
    expected.extend([0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40]); // 1.0f32, 2.0f32
    expected.resize(160, 0);
    assert_eq!(w.to_bytes(), expected);

    let g = Gguf::from_bytes(expected).unwrap();
    assert_eq!((g.version(), g.alignment(), g.data_offset()), (3, 32, 128));
    assert_eq!(g.get_str("general.architecture").unwrap(), "ab");
    let t = g.tensor("w").unwrap();
    assert_eq!(
        (t.dims.as_slice(), t.n_elements, t.n_bytes),
        (&[2u64][..], 2, 8)
    );
    assert_eq!(g.tensor_data(t), &[0, 0, 0x80, 0x3f, 0, 0, 0, 0x40]);
}

#[test]
fn round_trip_keeps_metadata_and_tensors_in_order() {
    let w = small_writer();
    let g = Gguf::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(g.metadata(), w.metadata());
    assert_eq!(g.tensors(), w.tensors().as_slice());
    let names: Vec<&str> = g.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let a: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    assert_eq!(g.tensor_data(g.tensor("a").unwrap()), a);
    assert_eq!(
        g.tensor_data(g.tensor("b").unwrap()),
        (0..34).collect::<Vec<u8>>()
    );
    assert_eq!(g.tensor_data(g.tensor("c").unwrap()), [7; 10]);
    // 24 bytes, 32 and 34 rounded up to the alignment.
    let offsets: Vec<u64> = g.tensors().iter().map(|t| t.offset).collect();
    assert_eq!(offsets, [0, 32, 96]);
    assert!(g.tensor("d").is_none());
}

#[test]
fn typed_getters() {
    let g = Gguf::from_bytes(small_file()).unwrap();
    assert_eq!(g.get_u32("t.u8").unwrap(), 200);
    assert_eq!(g.get_u32("t.u32").unwrap(), 4_000_000_000);
    assert_eq!(g.get_u64("t.u64").unwrap(), 1 << 40);
    assert_eq!(g.get_f32("t.f32").unwrap(), 0.5);
    assert_eq!(g.get_f32("t.f64").unwrap(), -0.25);
    assert!(g.get_bool("t.bool").unwrap());
    assert_eq!(g.get_str_array("t.strs").unwrap(), ["a", "bé"]);
    assert_eq!(g.get_array("t.nested").unwrap().len(), 2);
    assert_eq!(g.get("t.i16"), Some(&Value::I16(-30_000)));

    assert!(matches!(
        g.get_u32("t.u64").unwrap_err(),
        GgufError::ValueOutOfRange {
            value: 1_099_511_627_776,
            ..
        }
    ));
    assert!(matches!(
        g.get_u64("t.i8").unwrap_err(),
        GgufError::ValueOutOfRange { value: -100, .. }
    ));
    match g.get_str("t.u8").unwrap_err() {
        GgufError::WrongType {
            key,
            expected,
            found,
        } => {
            assert_eq!(
                (key.as_str(), expected, found.as_str()),
                ("t.u8", "string", "u8")
            )
        }
        e => panic!("unexpected {e}"),
    }
    match g.get_i32_array("t.nested").unwrap_err() {
        GgufError::WrongType { found, .. } => assert_eq!(found, "array holding array of i32"),
        e => panic!("unexpected {e}"),
    }
    assert!(matches!(
        g.get_f32_array("t.strs").unwrap_err(),
        GgufError::WrongType {
            expected: "array of f32",
            ..
        }
    ));
    assert!(matches!(
        g.get_bool("nope").unwrap_err(),
        GgufError::MissingKey { key } if key == "nope"
    ));
}

#[test]
fn integer_arrays_widen_to_i32() {
    let mut w = GgufWriter::new();
    let u8s = Value::Array(vec![Value::U8(1), Value::U8(255)]);
    w.add("u8s", u8s).unwrap();
    w.add("big", Value::Array(vec![Value::U32(1 << 31)]))
        .unwrap();
    let g = Gguf::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(g.get_i32_array("u8s").unwrap(), [1, 255]);
    assert!(g.get_i32_array("big").is_err());
}

#[test]
fn custom_alignment_is_honoured() {
    let mut w = small_writer();
    w.add("general.alignment", Value::U32(64)).unwrap();
    let g = Gguf::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(g.alignment(), 64);
    assert_eq!(g.data_offset() % 64, 0);
    let offsets: Vec<u64> = g.tensors().iter().map(|t| t.offset).collect();
    assert_eq!(offsets, [0, 64, 128]);

    assert!(matches!(
        w.add("general.alignment", Value::U32(48)),
        Err(GgufError::BadAlignment { value: 48 })
    ));
    assert!(matches!(
        w.add("general.alignment", Value::U64(64)),
        Err(GgufError::WrongType {
            expected: "u32",
            ..
        })
    ));
}

#[test]
fn writer_rejects_what_the_format_cannot_hold() {
    let mut w = GgufWriter::new();
    assert!(matches!(
        w.add_tensor("x", &[4], TensorType::F32, vec![0; 15]),
        Err(GgufError::TensorSizeMismatch {
            expected: 16,
            got: 15,
            ..
        })
    ));
    w.add_tensor("x", &[4], TensorType::F32, vec![0; 16])
        .unwrap();
    assert!(matches!(
        w.add_tensor("x", &[4], TensorType::F32, vec![0; 16]),
        Err(GgufError::DuplicateTensor { name }) if name == "x"
    ));
    assert!(matches!(
        w.add("k", Value::Array(vec![Value::U8(1), Value::Bool(true)])),
        Err(GgufError::MixedArray { .. })
    ));
    // A key set twice keeps its first place and its last value.
    w.add("a", Value::U8(1)).unwrap();
    w.add("b", Value::U8(2)).unwrap();
    w.add("a", Value::U8(3)).unwrap();
    assert_eq!(
        w.metadata(),
        [
            ("a".to_string(), Value::U8(3)),
            ("b".to_string(), Value::U8(2))
        ]
    );
}

#[test]
fn an_empty_array_reads_back_empty() {
    let mut w = GgufWriter::new();
    w.add("merges", Value::Array(vec![])).unwrap();
    let g = Gguf::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(g.get_str_array("merges").unwrap(), Vec::<&str>::new());
}

#[test]
fn write_then_open_maps_the_same_file() {
    let path = std::env::temp_dir().join(format!("trine-gguf-rt-{}.gguf", std::process::id()));
    let w = small_writer();
    w.write(&path).unwrap();
    let on_disk = std::fs::read(&path).unwrap();
    let g = Gguf::open(&path);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(on_disk, w.to_bytes());
    let g = g.unwrap();
    assert_eq!(g.metadata(), w.metadata());
    assert_eq!(
        g.tensor_data(g.tensor("b").unwrap()),
        (0..34).collect::<Vec<u8>>()
    );
}

#[test]
fn open_reports_missing_and_empty_files() {
    let dir = std::env::temp_dir();
    let missing = dir.join(format!("trine-gguf-missing-{}.gguf", std::process::id()));
    assert!(matches!(Gguf::open(&missing), Err(GgufError::Io { path, .. }) if path == missing));
    let empty = dir.join(format!("trine-gguf-empty-{}.gguf", std::process::id()));
    std::fs::write(&empty, b"").unwrap();
    let r = Gguf::open(&empty);
    std::fs::remove_file(&empty).unwrap();
    assert!(matches!(r, Err(GgufError::TooShort { len: 0, need: 24 })));
}

#[test]
fn a_foreign_tensor_record_gives_no_bytes() {
    let g = Gguf::from_bytes(small_file()).unwrap();
    let mut t = g.tensor("a").unwrap().clone();
    t.offset = u64::MAX - 4;
    assert!(g.tensor_data(&t).is_empty());
}

#[test]
fn every_weight_type_is_written_and_read_back() {
    let mut w = GgufWriter::new();
    let x: Vec<f32> = (0..512)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
        .collect();
    for ty in TensorType::ALL {
        let Some(wt) = ty.weight_type() else {
            continue;
        };
        let bytes = quantize(wt, &x).unwrap();
        w.add_tensor(ty.name(), &[256, 2], ty, bytes).unwrap();
    }
    let g = Gguf::from_bytes(w.to_bytes()).unwrap();
    for t in g.tensors() {
        let wt = t.ty.weight_type().unwrap();
        assert_eq!(t.name, wt.name());
        assert_eq!(g.tensor_data(t), quantize(wt, &x).unwrap(), "{wt}");
    }
    assert_eq!(g.tensors().len(), TensorType::ALL.len() - 1);
}

//! `trine_gguf::quant::dequantize` against llama.cpp's Python package (gguf-py), bit for bit:
//! for every quantized type, random blocks and the f32 values gguf-py decodes them to
//! (`tests/fixtures/dequant/`, made by `scripts/reference/dequant_fixtures.py`; its README
//! gives the versions, and the independent decoding used for Q8_K, which gguf-py lacks); and
//! real blocks, drawn from SmolLM2-135M's Q4_1 file and the K-quant and IQ4_XS files
//! llama-quantize made from it (`tests/fixtures/dequant/real/`, made by
//! `scripts/reference/quantized.sh`).
//!
//! The crate's values are exact in f64, so rounding each once to f32 must give gguf-py's f32
//! arithmetic exactly: gguf-py's products of an f16 scale and small integers are exact in f32
//! or rounded once, as the one rounding here is.

use std::path::PathBuf;
use trine_gguf::quant::{dequantize, WeightType};

fn fixture(dir: &str, ty: WeightType) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(dir)
        .join(format!("{}.bin", ty.name()));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Checks a fixture's blocks, decoded here, against the f32 values that follow them.
fn decodes_as_gguf_py_does(ty: WeightType, bytes: &[u8]) {
    // A block's bytes, then its elements' f32 values.
    let per_block = ty.block_bytes() + 4 * ty.block_elems();
    assert!(
        !bytes.is_empty() && bytes.len().is_multiple_of(per_block),
        "{ty}: {} bytes is not whole blocks of {per_block}",
        bytes.len()
    );
    let n = bytes.len() / per_block * ty.block_elems();
    let (blocks, values) = bytes.split_at(bytes.len() / per_block * ty.block_bytes());
    let ours = dequantize(ty, blocks, n).unwrap();
    let theirs = values
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    for (e, (ours, theirs)) in ours.iter().zip(theirs).enumerate() {
        assert_eq!(
            (*ours as f32).to_bits(),
            theirs.to_bits(),
            "{ty}: block {}, element {}: ours {ours} ({}), the reference's {theirs}",
            e / ty.block_elems(),
            e % ty.block_elems(),
            *ours as f32,
        );
    }
}

#[test]
fn every_quantized_type_decodes_as_gguf_py_does() {
    for ty in WeightType::ALL.into_iter().filter(|t| t.is_quantized()) {
        decodes_as_gguf_py_does(ty, &fixture("tests/fixtures/dequant", ty));
    }
}

#[test]
fn real_model_blocks_decode_as_gguf_py_does() {
    // Every weight type: llama-quantize's fallbacks for SmolLM2's 576-element rows write the
    // 32-element types, the original file is Q4_1. Q8_K is never a weight in a file.
    for ty in WeightType::ALL
        .into_iter()
        .filter(|t| t.is_quantized() && *t != WeightType::Q8_K)
    {
        decodes_as_gguf_py_does(ty, &fixture("tests/fixtures/dequant/real", ty));
    }
}

//! The real model file, checked against what the Python `gguf` package (0.19.0, gguf-py from
//! llama.cpp) reads from it. Every expected value below comes from
//! `r = gguf.GGUFReader(path); f = lambda k: r.fields[k].contents(); t = {x.name: x for x in r.tensors}`.

use crate::assets::{for_test, SMOLLM2};
use crate::{Gguf, TensorType};

fn open() -> Option<Gguf> {
    for_test(SMOLLM2).map(|p| Gguf::open(&p).unwrap())
}

#[test]
fn header_and_metadata_match_gguf_py() {
    let Some(g) = open() else { return };
    // f('GGUF.version'), len(r.tensors), f('GGUF.kv_count'), r.data_offset, r.alignment
    //   -> 3 272 33 1785664 32
    assert_eq!(g.version(), 3);
    assert_eq!(g.tensors().len(), 272);
    assert_eq!(g.metadata().len(), 33);
    assert_eq!(g.data_offset(), 1_785_664);
    assert_eq!(g.alignment(), 32);
    // f('general.architecture'), f('llama.block_count'), f('llama.rope.freq_base'),
    // f('llama.attention.layer_norm_rms_epsilon') -> llama 30 100000.0 9.999999747378752e-06
    assert_eq!(g.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(g.get_u32("llama.block_count").unwrap(), 30);
    assert_eq!(g.get_f32("llama.rope.freq_base").unwrap(), 100_000.0);
    // (9.999999747378752e-06 is the f32 nearest 1e-5, widened to f64.)
    assert_eq!(
        g.get_f32("llama.attention.layer_norm_rms_epsilon").unwrap(),
        1e-5
    );
    // len(f('tokenizer.ggml.tokens')), f('tokenizer.ggml.tokens')[2],
    // len(f('tokenizer.ggml.merges')), f('tokenizer.ggml.merges')[0] -> 49152 <|im_end|> 48900 Ġ t
    let tokens = g.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!((tokens.len(), tokens[2]), (49_152, "<|im_end|>"));
    let merges = g.get_str_array("tokenizer.ggml.merges").unwrap();
    assert_eq!((merges.len(), merges[0]), (48_900, "Ġ t"));
    // f('tokenizer.ggml.add_bos_token'), f('tokenizer.ggml.token_type')[0] -> False 3
    assert!(!g.get_bool("tokenizer.ggml.add_bos_token").unwrap());
    assert_eq!(g.get_i32_array("tokenizer.ggml.token_type").unwrap()[0], 3);
}

#[test]
fn tensor_table_matches_gguf_py() {
    let Some(g) = open() else { return };
    // for n in names: x = t[n]; x.tensor_type.name, list(x.shape), x.data_offset - r.data_offset,
    // x.n_bytes
    let expected = [
        (
            "token_embd.weight",
            TensorType::Q8_0,
            &[576u64, 49_152][..],
            0,
            30_081_024,
        ),
        (
            "blk.0.ffn_down.weight",
            TensorType::Q4_1,
            &[1536, 576],
            30_083_328,
            552_960,
        ),
        (
            "blk.29.attn_v.weight",
            TensorType::Q4_1,
            &[576, 192],
            80_990_208,
            69_120,
        ),
        (
            "output_norm.weight",
            TensorType::F32,
            &[576],
            96_574_464,
            2304,
        ),
    ];
    for (name, ty, dims, offset, n_bytes) in expected {
        let t = g.tensor(name).unwrap();
        assert_eq!(
            (t.ty, t.dims.as_slice(), t.offset, t.n_bytes),
            (ty, dims, offset, n_bytes),
            "{name}"
        );
    }
    assert_eq!(g.tensors()[0].name, "token_embd.weight");
    assert_eq!(g.tensors()[271].name, "output_norm.weight");
}

#[test]
fn tensor_data_matches_gguf_py() {
    let Some(g) = open() else { return };
    // t['output_norm.weight'].data[:4].tolist() -> [1.7578125, 1.8203125, 1.78125, 1.6015625]
    let norm = g.tensor_data(g.tensor("output_norm.weight").unwrap());
    let first: Vec<f32> = norm[..16]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(first, [1.757_812_5, 1.820_312_5, 1.781_25, 1.601_562_5]);
    // list(bytes(t['blk.29.attn_v.weight'].data)[:8]) -> [94, 45, 32, 183, 103, 82, 41, 232]
    let v = g.tensor_data(g.tensor("blk.29.attn_v.weight").unwrap());
    assert_eq!(v[..8], [94, 45, 32, 183, 103, 82, 41, 232]);
    // int(t['token_embd.weight'].data.view('uint8').astype('uint64').sum()) -> 3670375898
    let embd = g.tensor_data(g.tensor("token_embd.weight").unwrap());
    assert_eq!(
        embd.iter().map(|&b| u64::from(b)).sum::<u64>(),
        3_670_375_898
    );
    // The last tensor ends where the file does (98362432 bytes).
    let last = g.tensors().last().unwrap();
    assert_eq!(g.data_offset() + last.offset + last.n_bytes, 98_362_432);
}

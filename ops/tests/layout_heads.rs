//! Every head size of the layouts `trine synth-model` writes (Phi-3.5's 96, Gemma 3's 256,
//! the 64s and 128s) through each attention-side kernel whose indexing depends on it, on the
//! interpreter against the plain-Rust references: a kernel that assumes a power of two, or a
//! head that fits a workgroup, fails here before a model runs it wrong.

use trine_gguf::synth::SynthShape;
use trine_ops::attention_flash::{self, FlashAttention, FlashOut};
use trine_ops::attention_flash_tiles;
use trine_ops::attention_split::{self, SplitAttention};
use trine_ops::case::Case;
use trine_ops::key_layout::KeyLayout;
use trine_ops::kv_type::KvType;
use trine_ops::rope::RopeMode;
use trine_ops::rope_freqs::RopeFreqs;
use trine_ops::rope_store::{self, RopeStore};
use trine_ops::support::{Float, Reduction};

fn head_sizes() -> Vec<u32> {
    let mut dims: Vec<u32> = SynthShape::PRESETS
        .iter()
        .map(|(_, shape)| shape.head_dim() as u32)
        .collect();
    dims.sort_unstable();
    dims.dedup();
    dims
}

/// A prompt of 19 tokens in two chunks of keys, two query heads over one KV head of `d`.
fn prompt(d: u32) -> FlashAttention {
    FlashAttention {
        tokens: 19,
        heads: 2,
        kv_heads: 1,
        head_dim: d,
        splits: 2,
        window: None,
    }
}

fn agrees(case: Case) {
    if let Err(e) = case.check_reference() {
        panic!("{}: {e}", case.name);
    }
}

#[test]
fn rope_and_the_cache_store_take_every_head_size() {
    let freqs = RopeFreqs::plain(10_000.0);
    for d in head_sizes() {
        for mode in [RopeMode::Normal, RopeMode::Neox] {
            let shape = RopeStore {
                tokens: 3,
                heads: 4,
                kv_heads: 2,
                head_dim: d,
                rot_dim: d,
                context: 9,
                mode,
                keys: KeyLayout::Rows,
                part: None,
            };
            agrees(rope_store::case(shape, &freqs, 4, Float::F16).unwrap());
        }
    }
}

#[test]
fn decode_attention_takes_every_head_size() {
    for d in head_sizes() {
        let shape = SplitAttention {
            tokens: 1,
            heads: 4,
            kv_heads: 2,
            head_dim: d,
            splits: 3,
        };
        for how in [Reduction::Shared, Reduction::Subgroup] {
            let case =
                attention_split::split_case(shape, 37, KvType::F16, (how, KeyLayout::Rows), false);
            agrees(case.unwrap());
        }
        if attention_split::grouped_supports(d, 2, KvType::F16) {
            agrees(attention_split::grouped_case(shape, 37, KvType::F16).unwrap());
        }
    }
}

#[test]
fn prompt_attention_takes_every_head_size() {
    for d in head_sizes()
        .into_iter()
        .filter(|&d| attention_flash::supports(d))
    {
        let shape = prompt(d);
        let case =
            attention_flash::case(shape, 7, KvType::F16, (KeyLayout::Rows, FlashOut::Chunks));
        agrees(case.unwrap());
    }
}

/// The kernel on matrix tiles stages a block's keys and values by invocation: a staging that
/// runs past a head (as at 96 before its rows were padded to a power of two) reads shared
/// memory no invocation wrote, which the interpreter reports.
#[test]
fn prompt_attention_on_tiles_takes_every_head_size() {
    let dims: Vec<u32> = head_sizes()
        .into_iter()
        .filter(|&d| attention_flash_tiles::supports(d))
        .collect();
    assert!(dims.contains(&96) && dims.contains(&256), "{dims:?}");
    for d in dims {
        let shape = prompt(d);
        agrees(attention_flash_tiles::case(shape, 7, Float::F16, FlashOut::Part).unwrap());
    }
}

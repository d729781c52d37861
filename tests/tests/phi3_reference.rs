//! The tiny synthetic Phi-3, Phi-4-mini and Mistral files (`trine synth-model --like
//! phi3-tiny|phi4-tiny|mistral-tiny --seed 5`, built here in memory) on the CPU, Vulkan and wgpu backends, against references
//! committed in `llama/tests/fixtures/` by `scripts/reference/phi3.sh`:
//!
//! - `FAMILY_tiny_f64[_CTX].json`: the family's graph in float64 (`scripts/reference/
//!   llama_numpy.py --ids`), every step's logits. Fed the same ids, trine's logits must be
//!   within [`LOGITS_NMSE`] of them at every step.
//! - `FAMILY_tiny_llama_cpp[_CTX].json`: llama.cpp's CPU greedy ids for text prompts. trine's
//!   prompt ids must be its (a SentencePiece vocabulary with merges and control tokens), and
//!   trine's greedy ids its up to a step where its top two logits nearly tie.
//!
//! Phi-3 and Phi-4-mini run with a KV cache of 512 positions and of 8192, on either side of
//! their original context (4096): LongRoPE's short factors turn their rope in the first, the
//! long ones in the second, in trine as in llama.cpp. Phi-4-mini's rope turns the first 12
//! values of each head of 16 (partial rotary) and its vocabulary is byte-level.

use trine_gguf::synth::SynthShape;
use trine_llama::EngineOptions;
use trine_tests::fixture;
use trine_tests::reference::{backends, follows_float64, greedy_cases, synth};

/// (family, shape, KV cache positions, fixture suffix).
const RUNS: [(&str, SynthShape, u32, &str); 5] = [
    ("phi3", SynthShape::TINY_PHI3, 512, "_512"),
    ("phi3", SynthShape::TINY_PHI3, 8192, "_8192"),
    ("phi4", SynthShape::TINY_PHI4, 512, "_512"),
    ("phi4", SynthShape::TINY_PHI4, 8192, "_8192"),
    ("mistral", SynthShape::TINY_MISTRAL, 512, ""),
];

/// How far trine's logits may be from the float64 ones (NMSE): the Qwen tests' bound, 5
/// times the most they measured on files of this size.
const LOGITS_NMSE: f64 = 5e-4;

/// The top-2 gap (in logits) under which 8-bit activations may flip a greedy choice: the
/// Qwen tests' (llama.cpp's 8-bit activations moved a top logit by at most 0.0029 there).
const FLIP_GAP: f64 = 0.02;

/// An engine of `context` positions, in steps of at most 32 tokens (the prompts are shorter;
/// a larger batch would only prepare more kernels).
fn sizes(context: u32) -> EngineOptions {
    EngineOptions {
        context,
        max_batch: 32,
        record: true,
        cache: None,
    }
}

#[test]
fn tiny_phi3_and_mistral_files_match_the_float64_graph_and_llama_cpp() {
    for (family, shape, context, suffix) in RUNS {
        let model = synth(shape);
        let exact = fixture(&format!("{family}_tiny_f64{suffix}.json"));
        let lcpp = fixture(&format!("{family}_tiny_llama_cpp{suffix}.json"));
        let runs = backends(family);
        assert!(!runs.is_empty(), "{family}: no backend ran");
        for (name, backend) in runs {
            let run = format!("{family} at {context} on {name}");
            let on = (&model, &backend, sizes(context));
            follows_float64(&run, on, &exact, LOGITS_NMSE, None);
            let on = (&model, &backend, Some(sizes(context)));
            greedy_cases(&run, on, &lcpp, FLIP_GAP);
        }
    }
}

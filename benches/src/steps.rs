//! The steps the executor runs, as the benches time them: a synthetic model at a real model's
//! dimensions ([`Layout`]) with few layers, an [`Engine`] on the backend under test, and the
//! nodes of its prompt step and of a decode step after it, each timed with
//! [`Engine::run_timed`]: the kernel the executor compiled for the device, with the buffers,
//! parameters and grid it dispatches. One layer is every kernel a layer runs, small enough for
//! lavapipe and a CPU's memory.

use std::sync::Arc;
use trine_backends::Backend;
use trine_gguf::synth::{synth_llama, Mix, SynthShape};
use trine_gguf::{Gguf, TensorType};
use trine_llama::graph::{Node, Step};
use trine_llama::tuned::Tuned;
use trine_llama::{Engine, EngineOptions, Model, ModelError};

/// A model whose dimensions the bench takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// SmolLM2-135M-Instruct as trine's tests run it: 576 wide, FFN 1536, 9 heads / 3 KV heads
    /// of 64, vocabulary 49152, Q4_1 projections, a Q8_0 embedding tied to the output head.
    SmolLm2,
    /// A 7B/8B-class Llama: 4096 wide, FFN 14336, 32 heads / 8 KV heads of 128, vocabulary
    /// 32000 (Mistral-7B's dimensions; Llama-3-8B's but for the vocabulary), Q4_0 projections
    /// and a Q4_0 embedding tied to the output head (as a Q8_0 one it would pass lavapipe's
    /// 128 MiB binding limit).
    Llama7b,
    /// Llama 3 8B's layout in llama.cpp's Q4_K_M ([`SynthShape::LLAMA_3_8B`]): Q4_K
    /// projections, Q6_K for the value and FFN-down projections of the layers that get more
    /// bits (the first, with one layer) and for the 128,256-row output head.
    Llama3_8b,
    /// Qwen3-30B-A3B's layout in Q4_K_M ([`SynthShape::QWEN3_30B_A3B`]): 2048 wide, 128
    /// experts of 768 rows, 8 a token, its 151,936-row output head.
    Qwen3_30bA3b,
    /// Gemma 3 1B's layout in Q8_0 ([`SynthShape::GEMMA_3_1B`]): 1152 wide, 4 heads of 256
    /// and one of keys and values, a GELU FFN of 6912, the first layer's window of 512
    /// tokens, its 262,144-row output head tied to the embedding.
    Gemma3_1b,
}

impl Layout {
    /// The layouts a bench takes by default.
    pub const ALL: [Layout; 2] = [Layout::SmolLm2, Layout::Llama7b];
    /// Every layout, by name: the K-quant ones only when asked for (their output heads alone
    /// are 255 and 431 MB, long to multiply on a CPU).
    pub const NAMED: [Layout; 5] = [
        Layout::SmolLm2,
        Layout::Llama7b,
        Layout::Llama3_8b,
        Layout::Qwen3_30bA3b,
        Layout::Gemma3_1b,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Layout::SmolLm2 => "smollm2-135m",
            Layout::Llama7b => "llama-7b",
            Layout::Llama3_8b => "llama-3-8b",
            Layout::Qwen3_30bA3b => "qwen3-30b-a3b",
            Layout::Gemma3_1b => "gemma-3-1b",
        }
    }

    pub fn parse(name: &str) -> Option<Layout> {
        Layout::NAMED.into_iter().find(|l| l.name() == name)
    }

    /// Its dimensions with `layers` layers.
    pub fn shape(self, layers: u32) -> SynthShape {
        let n_layer = u64::from(layers.max(1));
        match self {
            Layout::SmolLm2 => SynthShape {
                n_layer,
                ..SynthShape::SMOLLM2_135M
            },
            Layout::Llama7b => SynthShape {
                n_embd: 4096,
                n_ff: 14336,
                n_layer,
                n_head: 32,
                n_head_kv: 8,
                vocab: 32000,
                matrices: TensorType::Q4_0,
                embedding: TensorType::Q4_0,
                output: None,
                mix: Mix::AsGiven,
                ..SynthShape::SMOLLM2_135M
            },
            Layout::Llama3_8b => SynthShape {
                n_layer,
                ..SynthShape::LLAMA_3_8B
            },
            Layout::Qwen3_30bA3b => SynthShape {
                n_layer,
                ..SynthShape::QWEN3_30B_A3B
            },
            Layout::Gemma3_1b => SynthShape {
                n_layer,
                ..SynthShape::GEMMA_3_1B
            },
        }
    }

    /// The model with `layers` layers of random weights (the same every run).
    pub fn model(self, layers: u32) -> Result<Arc<Model>, String> {
        let what = |e: &dyn std::fmt::Display| format!("{}: {e}", self.name());
        let bytes = synth_llama(self.shape(layers), 1)
            .map_err(|e| what(&e))?
            .to_bytes();
        let gguf = Gguf::from_bytes(bytes).map_err(|e| what(&e))?;
        Ok(Arc::new(Model::from_gguf(gguf).map_err(|e| what(&e))?))
    }
}

/// One step the bench times: its name (`tg`, `pp512`), the step, its nodes, and the ids to
/// write before it.
pub struct TimedStep {
    pub name: String,
    pub step: Step,
    pub nodes: Vec<Node>,
    ids: Vec<u32>,
}

/// An executor ready to time its steps: a prompt step of `prompt` tokens into an empty cache,
/// and a decode step at position `prompt`, whose attention reads the prompt's keys and its own.
pub struct Prepared {
    pub engine: Engine,
    /// The decode step, then the prompt step.
    pub steps: Vec<TimedStep>,
}

/// An [`Engine`] on `backend` sized for a prompt of `prompt` tokens and one more token, with
/// the prompt step and the decode step run once each: every kernel compiled, every buffer
/// allocated, the weights uploaded and the KV cache filled.
pub fn prepare(
    model: Arc<Model>,
    backend: Arc<dyn Backend>,
    prompt: u32,
) -> Result<Prepared, ModelError> {
    prepare_with(model, backend, prompt, None)
}

/// [`prepare`] with the kernel choices `tuned` instead of those the cache holds for the
/// device ([`Engine::with_tuned`]), where given.
pub fn prepare_with(
    model: Arc<Model>,
    backend: Arc<dyn Backend>,
    prompt: u32,
    tuned: Option<Arc<Tuned>>,
) -> Result<Prepared, ModelError> {
    let prompt = prompt.max(2);
    let options = EngineOptions {
        context: prompt + 1,
        max_batch: prompt,
        record: false,
        cache: None,
    };
    let vocab = model.config.vocab;
    let mut engine = match tuned {
        Some(t) => Engine::with_tuned(model, backend, options, t)?,
        None => Engine::new(model, backend, options)?,
    };
    engine.prepare()?;
    let ids: Vec<u32> = (0..prompt).map(|i| (i * 7919 + 300) % vocab).collect();
    let pp = Step {
        tokens: prompt,
        pos: 0,
    };
    let tg = Step {
        tokens: 1,
        pos: prompt,
    };
    let steps = vec![
        TimedStep {
            name: "tg".into(),
            step: tg,
            nodes: engine.graph(tg)?,
            ids: vec![ids[0]],
        },
        TimedStep {
            name: format!("pp{prompt}"),
            step: pp,
            nodes: engine.graph(pp)?,
            ids,
        },
    ];
    let mut prepared = Prepared { engine, steps };
    for i in [1, 0] {
        prepared.enter(i)?;
        let s = prepared.steps[i].step;
        prepared.engine.run_step(s)?;
    }
    prepared.engine.synchronize()?;
    Ok(prepared)
}

impl Prepared {
    /// Writes step `i`'s ids and position: its nodes then run as they do in that step.
    pub fn enter(&mut self, i: usize) -> Result<(), ModelError> {
        let t = &self.steps[i];
        self.engine.set_ids(&t.ids, t.step.pos)
    }

    /// Runs node `n` of step `i` (entered) alone and returns its device time.
    pub fn time(&mut self, i: usize, n: usize) -> Result<std::time::Duration, ModelError> {
        let t = &self.steps[i];
        self.engine.run_timed(&t.nodes[n], t.step)
    }
}

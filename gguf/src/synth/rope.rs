//! Llama 3's rope scaling as a GGUF file carries it: the Hugging Face config's
//! `rope_scaling` of type `llama3` is not a GGUF key; llama.cpp's converter
//! (`convert_hf_to_gguf.py`, `LlamaModel.generate_extra_tensors`) bakes it into the F32 tensor
//! `rope_freqs.weight`, one factor per pair of a head, by which ggml divides that pair's
//! angle. Synthetic Llama 3.1/3.2 layouts carry the same tensor, so that what trine runs on
//! them is what it runs on the downloaded files.

use crate::{GgufError, GgufWriter, TensorType, Value};

/// The tensor's name (one for all layers).
pub const ROPE_FREQS: &str = "rope_freqs.weight";

/// The `llama3` rope scaling parameters of a Hugging Face config.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Llama3Rope {
    /// `rope_theta`: the frequency base.
    pub theta: f32,
    pub factor: f32,
    pub low_freq_factor: f32,
    pub high_freq_factor: f32,
    /// `original_max_position_embeddings`.
    pub original_context: u32,
}

impl Llama3Rope {
    /// Llama 3.1 (8B, 70B, 405B).
    pub const LLAMA_3_1: Llama3Rope = Llama3Rope {
        theta: 500_000.0,
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_context: 8192,
    };

    /// Llama 3.2 (1B, 3B).
    pub const LLAMA_3_2: Llama3Rope = Llama3Rope {
        factor: 32.0,
        ..Llama3Rope::LLAMA_3_1
    };

    /// The layouts of `trine synth-model --like` that carry it.
    pub fn of_preset(name: &str) -> Option<Llama3Rope> {
        match name {
            "llama-3.2-1b" => Some(Llama3Rope::LLAMA_3_2),
            "llama-3.1-8b" => Some(Llama3Rope::LLAMA_3_1),
            _ => None,
        }
    }

    /// The factors of a head of `head_dim` values, in the converter's float32 arithmetic:
    /// 1 for the pairs whose wavelength `2π/f` is below `original_context / high_freq_factor`,
    /// `factor` above `original_context / low_freq_factor`, and between them
    /// `1 / ((1 − s)/factor + s)` with `s = (original_context/wavelength − low) / (high − low)`.
    pub fn factors(&self, head_dim: u32) -> Vec<f32> {
        let d = head_dim as f32;
        let ctx = self.original_context as f32;
        let low_wavelen = ctx / self.low_freq_factor;
        let high_wavelen = ctx / self.high_freq_factor;
        (0..head_dim / 2)
            .map(|i| {
                let freq = 1.0 / self.theta.powf((2 * i) as f32 / d);
                let wavelen = std::f32::consts::TAU / freq;
                if wavelen < high_wavelen {
                    1.0
                } else if wavelen > low_wavelen {
                    self.factor
                } else {
                    let smooth = (ctx / wavelen - self.low_freq_factor)
                        / (self.high_freq_factor - self.low_freq_factor);
                    1.0 / ((1.0 - smooth) / self.factor + smooth)
                }
            })
            .collect()
    }

    /// Gives a Llama file in `w` with heads of `head_dim` this scaling: its base as
    /// `llama.rope.freq_base`, its factors as [`ROPE_FREQS`].
    pub fn apply(&self, w: &mut GgufWriter, head_dim: u32) -> Result<(), GgufError> {
        w.add("llama.rope.freq_base", Value::F32(self.theta))?;
        let factors = self.factors(head_dim);
        let bytes = factors.iter().flat_map(|f| f.to_le_bytes()).collect();
        w.add_tensor(
            ROPE_FREQS,
            &[u64::from(head_dim / 2)],
            TensorType::F32,
            bytes,
        )
    }
}

//! Llama 3's rope scaling as a GGUF file carries it: the Hugging Face config's
//! `rope_scaling` of type `llama3` is not a GGUF key; llama.cpp's converter
//! (`convert_hf_to_gguf.py`, `LlamaModel.generate_extra_tensors`) bakes it into the F32 tensor
//! `rope_freqs.weight`, one factor per pair of a head, by which ggml divides that pair's
//! angle. Synthetic Llama 3.1/3.2 layouts carry the same tensor, so that what trine runs on
//! them is what it runs on the downloaded files; [`tiny`] makes the small models with each
//! scaling that the tests check rope by.

use super::{synth_llama, SynthShape};
use crate::{Gguf, GgufError, GgufWriter, TensorType, Value};

/// The tensor's name (one for all layers).
pub const ROPE_FREQS: &str = "rope_freqs.weight";

/// LongRoPE's factors (Phi-3's 128k files), one per pair, for contexts beyond the original
/// one and within it.
pub const ROPE_FACTORS_LONG: &str = "rope_factors_long.weight";
pub const ROPE_FACTORS_SHORT: &str = "rope_factors_short.weight";

/// LongRoPE factors for `pairs` pairs shaped like Phi-3.5-mini's (not its values, which
/// only its file has): the long ones rising from 1 to about 60 over the pairs, the short
/// ones from 1 to 1.1, slowest pairs stretched most.
pub fn longrope_factors(pairs: u32) -> (Vec<f32>, Vec<f32>) {
    let at = |i: u32| i as f32 / (pairs.max(2) - 1) as f32;
    let long = (0..pairs).map(|i| 1.0 + 59.0 * at(i).powi(2)).collect();
    let short = (0..pairs).map(|i| 1.0 + 0.1 * at(i)).collect();
    (long, short)
}

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
    /// `max_position_embeddings`: the context the scaling trains for, the file's
    /// `llama.context_length`.
    pub context: u32,
}

impl Llama3Rope {
    /// Llama 3.1 (8B, 70B, 405B).
    pub const LLAMA_3_1: Llama3Rope = Llama3Rope {
        theta: 500_000.0,
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_context: 8192,
        context: 131_072,
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

/// The rope scalings of [`tiny`]'s models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TinyRope {
    /// Llama 3.2's `rope_freqs.weight` and base.
    Llama3,
    /// `linear` by 4.
    Linear,
    /// `yarn` by 4 from a trained context of 64, with an attention factor of 0.8.
    Yarn,
    /// Phi-4-mini's partial rotary: [`SynthShape::TINY_PHI4`]'s layout (`phi3`, rope on the
    /// first 12 values of each head of 16), LongRoPE's short factors and attention factor.
    Partial,
}

impl TinyRope {
    pub const ALL: [TinyRope; 4] = [
        TinyRope::Llama3,
        TinyRope::Linear,
        TinyRope::Yarn,
        TinyRope::Partial,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TinyRope::Llama3 => "llama3",
            TinyRope::Linear => "linear",
            TinyRope::Yarn => "yarn",
            TinyRope::Partial => "partial",
        }
    }
}

/// A tiny Llama with rope scaling `r` (a tiny Phi-4-mini for [`TinyRope::Partial`]), which
/// the tests hold to llama.cpp and to a float64 reference: [`SynthShape::TINY`]'s layout with
/// F32 weights, so that a reference's arithmetic
/// is exact, and heads of 16 values. The synthetic weights alone attend nearly uniformly and
/// give nearly equal logits, where rope hardly shows and every choice is a near tie, so the
/// attention norms are scaled by 4 and the output norm by 8.
pub fn tiny(r: TinyRope, seed: u64) -> Result<GgufWriter, GgufError> {
    let layout = match r {
        TinyRope::Partial => SynthShape::TINY_PHI4,
        _ => SynthShape::TINY,
    };
    let shape = SynthShape {
        matrices: TensorType::F32,
        embedding: TensorType::F32,
        output: None,
        ..layout
    };
    let g = Gguf::from_bytes(synth_llama(shape, seed)?.to_bytes())?;
    let mut w = GgufWriter::new();
    for (key, value) in g.metadata() {
        w.add(key.clone(), value.clone())?;
    }
    for t in g.tensors() {
        let scale = if t.name.ends_with("attn_norm.weight") {
            4.0
        } else if t.name == "output_norm.weight" {
            8.0
        } else {
            1.0
        };
        let bytes = g
            .tensor_data(t)
            .chunks_exact(4)
            .flat_map(|b| (f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * scale).to_le_bytes())
            .collect();
        w.add_tensor(t.name.clone(), &t.dims, t.ty, bytes)?;
    }
    let head_dim = (shape.n_embd / u64::from(shape.n_head)) as u32;
    let s = |v: &str| Value::String(v.to_string());
    match r {
        TinyRope::Llama3 => Llama3Rope::LLAMA_3_2.apply(&mut w, head_dim)?,
        TinyRope::Linear => {
            w.add("llama.rope.scaling.type", s("linear"))?;
            w.add("llama.rope.scaling.factor", Value::F32(4.0))?;
        }
        TinyRope::Yarn => {
            w.add("llama.rope.scaling.type", s("yarn"))?;
            w.add("llama.rope.scaling.factor", Value::F32(4.0))?;
            w.add("llama.rope.scaling.original_context_length", Value::U32(64))?;
            w.add("llama.rope.scaling.attn_factor", Value::F32(0.8))?;
        }
        TinyRope::Partial => {}
    }
    Ok(w)
}

//! A model's rope frequencies: the scaling its GGUF metadata names (`{arch}.rope.scaling.*`)
//! and its frequency factors (`rope_freqs.weight`), read as llama.cpp reads them
//! (`llama_model::load_hparams`, `llama_context`'s YaRN parameters, `get_rope_factors`) and
//! checked, then reduced to [`RopeFreqs`], the table every rope kernel turns by.
//!
//! llama.cpp's reading, which trine follows:
//! - `rope.scaling.type` is `none`, `linear` (the default) or `yarn`; `rope.scaling.factor`
//!   (or the older `rope.scale_linear`) divides positions, where 0 or no key means 1; `none`
//!   ignores the factor.
//! - YaRN interpolates from `rope.scaling.original_context_length` (default: the context
//!   length) with ggml's ramp between the correction dimensions of β 32 and 1, the values
//!   llama.cpp uses for the Llama architecture, and scales the rotated values by
//!   `1 + 0.1·ln(factor)`.
//! - `rope.scaling.attn_factor` (default 1) scales the rotated values under every type.
//! - `rope_freqs.weight` (F32, one factor per turned pair: `rope.dimension_count / 2`) divides each pair's angle, under every
//!   type: Llama 3.1 and 3.2 files carry their `llama3` scaling this way. A file that names
//!   `llama3` as its type (llama.cpp refuses it) runs only with that tensor, as nothing else
//!   would scale its positions.
//! - LongRoPE (Phi-3's 128k files): `rope_factors_long.weight` and `rope_factors_short.weight`
//!   (F32, one factor per pair) take `rope_freqs.weight`'s place, the long ones where the
//!   context (llama.cpp's `n_ctx_seq`; trine's KV cache) exceeds
//!   `rope.scaling.original_context_length`, else the short ones
//!   (`llama_model::get_rope_factors`), either being none where the file lacks it. Their
//!   magnitude is the file's `rope.scaling.attn_factor` under both (the converter writes
//!   LongRoPE's `√(1 + ln(factor)/ln(original context))` there), and `rope_freqs.weight`
//!   wins where a file has both. Only Phi-3 reads them, as in llama.cpp.

use super::config::{bad, optional, Config};
use super::error::ModelError;
use trine_gguf::{Gguf, GgufError, TensorType};
use trine_ops::rope_freqs::{RopeFreqs, RopeScaling, YARN_BETA_FAST, YARN_BETA_SLOW};

/// The frequency factors' tensor.
pub const ROPE_FREQS: &str = "rope_freqs.weight";
/// LongRoPE's factors for contexts beyond the original one, and within it.
pub const ROPE_FACTORS_LONG: &str = "rope_factors_long.weight";
pub const ROPE_FACTORS_SHORT: &str = "rope_factors_short.weight";

/// A model's rope: one table, or LongRoPE's two, chosen by the context.
#[derive(Clone, Debug, PartialEq)]
pub struct Rope {
    /// The table of every context, or of those up to LongRoPE's original context.
    pub short: RopeFreqs,
    /// LongRoPE's original context and the table of the contexts beyond it.
    pub long: Option<(u32, RopeFreqs)>,
}

impl Rope {
    /// The table a KV cache of `context` positions turns by.
    pub fn for_context(&self, context: u32) -> &RopeFreqs {
        match &self.long {
            Some((original, long)) if context > *original => long,
            _ => &self.short,
        }
    }
}

/// The model's rope, from its metadata and its factor tensors.
pub fn from_gguf(g: &Gguf, c: &Config) -> Result<Rope, ModelError> {
    let freqs = freqs(g, c)?;
    let names = [ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT];
    if !c.arch.extras().fused {
        if let Some(name) = names.into_iter().find(|n| g.tensor(n).is_some()) {
            return Err(ModelError::UnusedTensor {
                name: name.to_string(),
                arch: c.arch.name(),
                what: "LongRoPE's factors",
            });
        }
    }
    if !freqs.factors.is_empty() || names.iter().all(|n| g.tensor(n).is_none()) {
        return Ok(Rope {
            short: freqs,
            long: None,
        });
    }
    let ctx_key = format!("{}.rope.scaling.original_context_length", c.arch.name());
    let original = optional(g.get_u32(&ctx_key), c.context_length)?;
    let long = RopeFreqs {
        factors: factors(g, ROPE_FACTORS_LONG, c.n_rot)?,
        ..freqs.clone()
    };
    let short = RopeFreqs {
        factors: factors(g, ROPE_FACTORS_SHORT, c.n_rot)?,
        ..freqs
    };
    Ok(Rope {
        short,
        long: Some((original, long)),
    })
}

/// The scaling types trine runs, for errors.
const TYPES: &str = "trine runs none, linear, yarn, and llama3 with rope_freqs.weight";

/// The rope frequencies the metadata and `rope_freqs.weight` give.
fn freqs(g: &Gguf, c: &Config) -> Result<RopeFreqs, ModelError> {
    let key = |k: &str| format!("{}.{k}", c.arch.name());
    let factors = factors(g, ROPE_FREQS, c.n_rot)?;
    let type_key = key("rope.scaling.type");
    let kind = match g.get_str(&type_key) {
        Ok(s) => s.to_string(),
        Err(GgufError::MissingKey { .. }) => "linear".to_string(),
        Err(e) => return Err(e.into()),
    };
    let (factor_key, factor) = match g.get_f32(&key("rope.scaling.factor")) {
        Err(GgufError::MissingKey { .. }) => {
            let old = key("rope.scale_linear");
            let f = optional(g.get_f32(&old), 0.0)?;
            (old, f)
        }
        r => (key("rope.scaling.factor"), r?),
    };
    if !(factor.is_finite() && factor >= 0.0) {
        return Err(bad(
            &factor_key,
            factor,
            "must be finite and not negative (0 or no key: no scaling)",
        ));
    }
    let factor = if factor == 0.0 { 1.0 } else { factor };
    let attn_key = key("rope.scaling.attn_factor");
    let attn_factor = optional(g.get_f32(&attn_key), 1.0)?;
    if !(attn_factor.is_finite() && attn_factor > 0.0) {
        return Err(bad(&attn_key, attn_factor, "must be finite and positive"));
    }
    let scaling = match kind.as_str() {
        "none" => RopeScaling::None,
        "linear" if factor == 1.0 => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor },
        "yarn" => {
            let ctx_key = key("rope.scaling.original_context_length");
            let original_context = optional(g.get_u32(&ctx_key), c.context_length)?;
            if original_context == 0 {
                return Err(bad(&ctx_key, original_context, "must be positive"));
            }
            RopeScaling::Yarn {
                factor,
                original_context,
                beta_fast: YARN_BETA_FAST,
                beta_slow: YARN_BETA_SLOW,
            }
        }
        "llama3" if !factors.is_empty() => RopeScaling::None,
        "llama3" => return Err(bad(
            &type_key,
            "llama3",
            "needs rope_freqs.weight, the factors llama.cpp's converter bakes that scaling into",
        )),
        other => return Err(bad(&type_key, other, TYPES)),
    };
    Ok(RopeFreqs {
        base: c.rope_base,
        factors,
        scaling,
        attn_factor,
    })
}

/// The sliding-window layers' rope, where the model has them: base
/// [`crate::config::Swa::base`] with no scaling and no factors (llama.cpp turns them by
/// `rope_freq_base_train_swa` and `rope_freq_scale_train_swa`, 1 for Gemma 3), the magnitude
/// `attn_factor` as the file's rope has it.
pub fn local(c: &Config, rope: &RopeFreqs) -> Option<RopeFreqs> {
    let swa = c.swa.as_ref()?;
    Some(RopeFreqs {
        base: swa.base,
        factors: vec![],
        scaling: RopeScaling::None,
        attn_factor: rope.attn_factor,
    })
}

/// Frequency factors tensor `name`'s, or none where the file has no such tensor.
fn factors(g: &Gguf, name: &str, n_rot: u32) -> Result<Vec<f32>, ModelError> {
    let Some(t) = g.tensor(name) else {
        return Ok(vec![]);
    };
    let half = u64::from(n_rot / 2);
    if t.ty != TensorType::F32 {
        return Err(ModelError::TensorType {
            name: t.name.clone(),
            ty: t.ty,
            role: "rope's frequency factors (trine reads them in F32, as llama.cpp does)".into(),
        });
    }
    if t.dims != [half] {
        return Err(ModelError::TensorShape {
            name: t.name.clone(),
            expected: vec![half],
            found: t.dims.clone(),
        });
    }
    let factors: Vec<f32> = g
        .tensor_data(t)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if let Some((i, f)) = factors
        .iter()
        .enumerate()
        .find(|(_, f)| !(f.is_finite() && **f > 0.0))
    {
        return Err(bad(
            &format!("{name}[{i}]"),
            f,
            "must be finite and positive (each divides a pair's angle)",
        ));
    }
    Ok(factors)
}

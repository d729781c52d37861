//! A model's hyperparameters, read from the GGUF metadata under its architecture's prefix
//! (`llama.*`: the keys llama.cpp's converter writes), with llama.cpp's defaults where a key is
//! optional.

use super::arch::Architecture;
use super::error::ModelError;
use trine_gguf::{Gguf, GgufError};
use trine_ops::attention::MAX_HEAD_DIM;

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub arch: Architecture,
    pub n_embd: u32,
    pub n_layer: u32,
    pub n_head: u32,
    /// Key/value heads; fewer than `n_head` is grouped-query attention.
    pub n_head_kv: u32,
    /// Elements of one attention head (`attention.key_length`, which `value_length` must
    /// equal); `n_embd / n_head` where the file does not say, as llama.cpp defaults it.
    pub n_embd_head: u32,
    pub n_ff: u32,
    pub vocab: u32,
    /// The context the model was trained for: the largest KV cache worth allocating.
    pub context_length: u32,
    /// The values of each query and key head rope turns, from its first
    /// (`rope.dimension_count`, llama.cpp's `n_rot`; the head size where the file does not
    /// say): fewer than the head is partial rotary (Phi-4-mini turns 96 of 128).
    pub n_rot: u32,
    pub rope_base: f32,
    pub rms_eps: f32,
    /// Sliding-window attention on some layers, where the file gives a window (Gemma 3).
    pub swa: Option<Swa>,
    /// The experts of a mixture-of-experts architecture's feed-forward blocks.
    pub experts: Option<Experts>,
}

/// A mixture-of-experts layer's shape (`{arch}.expert_count`, `expert_used_count`,
/// `expert_feed_forward_length`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Experts {
    pub count: u32,
    /// Experts run per token.
    pub used: u32,
    /// Rows of one expert's gate and up projections; llama.cpp's default where the file does
    /// not say: `feed_forward_length / used`.
    pub ff: u32,
}

/// Interleaved local and global layers (llama.cpp's `LLAMA_SWA_TYPE_STANDARD`): a local layer's
/// queries see the last `window` positions and turn by rope of base `base`; a global layer's
/// see the whole cache and turn by the file's rope.
#[derive(Clone, Debug, PartialEq)]
pub struct Swa {
    pub window: u32,
    /// Per layer, whether it is local.
    pub local: Vec<bool>,
    /// `{arch}.rope.freq_base_swa`, llama.cpp's default 10000 where absent.
    pub base: f32,
}

/// llama.cpp's default for Gemma 3's `attention.sliding_window_pattern`: of every 6 layers
/// the first 5 are local and the sixth global.
const SWA_PATTERN: u32 = 6;

impl Config {
    pub fn from_gguf(g: &Gguf) -> Result<Config, ModelError> {
        let arch = Architecture::from_name(g.get_str("general.architecture")?)?;
        let key = |k: &str| format!("{}.{k}", arch.name());
        let n_head = g.get_u32(&key("attention.head_count"))?;
        let vocab = match g.tensor("token_embd.weight") {
            Some(t) if t.dims.len() == 2 => bounded("token_embd.weight dims[1]", t.dims[1])?,
            Some(t) => {
                return Err(ModelError::TensorShape {
                    name: t.name.clone(),
                    expected: vec![0, 0],
                    found: t.dims.clone(),
                })
            }
            None => return Err(ModelError::MissingTensor("token_embd.weight".into())),
        };
        let n_embd = g.get_u32(&key("embedding_length"))?;
        let n_embd_head = match (n_head, g.get_u32(&key("attention.key_length"))) {
            (_, Ok(k)) => k,
            (0, Err(GgufError::MissingKey { .. })) => 0,
            (_, Err(GgufError::MissingKey { .. })) if n_embd.is_multiple_of(n_head) => {
                n_embd / n_head
            }
            (_, Err(GgufError::MissingKey { .. })) => {
                return Err(bad(
                    &key("embedding_length"),
                    n_embd,
                    "must be a multiple of the head count where attention.key_length is absent",
                ))
            }
            (_, Err(e)) => return Err(e.into()),
        };
        let value_key = key("attention.value_length");
        let value_length = optional(g.get_u32(&value_key), n_embd_head)?;
        if value_length != n_embd_head {
            return Err(bad(
                &value_key,
                value_length,
                "must equal attention.key_length (trine's attention has one head size)",
            ));
        }
        let n_ff = g.get_u32(&key("feed_forward_length"))?;
        let experts = if arch.extras().experts {
            let used = g.get_u32(&key("expert_used_count"))?;
            let ff_key = key("expert_feed_forward_length");
            Some(Experts {
                count: g.get_u32(&key("expert_count"))?,
                used,
                ff: optional(g.get_u32(&ff_key), n_ff.checked_div(used).unwrap_or(0))?,
            })
        } else {
            None
        };
        let c = Config {
            arch,
            n_embd,
            n_layer: g.get_u32(&key("block_count"))?,
            n_head,
            n_head_kv: optional(g.get_u32(&key("attention.head_count_kv")), n_head)?,
            n_embd_head,
            n_ff,
            vocab,
            context_length: g.get_u32(&key("context_length"))?,
            n_rot: optional(g.get_u32(&key("rope.dimension_count")), n_embd_head)?,
            rope_base: optional(g.get_f32(&key("rope.freq_base")), 10_000.0)?,
            rms_eps: optional(g.get_f32(&key("attention.layer_norm_rms_epsilon")), 1e-5)?,
            experts,
            swa: None,
        };
        let c = Config {
            swa: swa(g, &c)?,
            ..c
        };
        c.check()?;
        Ok(c)
    }

    /// The window of layer `l`'s attention, where it is a local layer.
    pub fn window(&self, l: u32) -> Option<u32> {
        let s = self.swa.as_ref()?;
        s.local[l as usize].then_some(s.window)
    }

    pub fn head_dim(&self) -> u32 {
        self.n_embd_head
    }

    /// Width of a token's q row, and of attention's output: all query heads. It differs
    /// from `n_embd` where the file gives the head size (Qwen3-0.6B: 16 heads of 128 over a
    /// stream of 1024; Mistral Nemo).
    pub fn q_dim(&self) -> u32 {
        self.n_head * self.head_dim()
    }

    /// Experts run per token (0 without experts).
    pub fn experts_used(&self) -> u32 {
        self.experts.map_or(0, |e| e.used)
    }

    /// Width of a K or V row: all key/value heads of one position.
    pub fn kv_dim(&self) -> u32 {
        self.n_head_kv * self.head_dim()
    }

    fn check(&self) -> Result<(), ModelError> {
        let key = |k: &str| format!("{}.{k}", self.arch.name());
        let positive = [
            (key("embedding_length"), self.n_embd),
            (key("block_count"), self.n_layer),
            (key("attention.head_count"), self.n_head),
            (key("attention.head_count_kv"), self.n_head_kv),
            (key("feed_forward_length"), self.n_ff),
            (key("context_length"), self.context_length),
            ("vocabulary size".to_string(), self.vocab),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(bad(&name, v, "must be positive"));
            }
        }
        if self.n_embd_head == 0 {
            return Err(bad(
                &key("attention.key_length"),
                self.n_embd_head,
                "must be positive (without the key, embedding_length / head_count)",
            ));
        }
        if !self.n_head.is_multiple_of(self.n_head_kv) {
            return Err(bad(
                &key("attention.head_count_kv"),
                self.n_head_kv,
                "must divide the head count",
            ));
        }
        if let Some(e) = self.experts {
            let checks = [
                (key("expert_count"), e.count, "must be positive"),
                (key("expert_used_count"), e.used, "must be positive"),
                (
                    key("expert_feed_forward_length"),
                    e.ff,
                    "must be positive (without the key, feed_forward_length / expert_used_count)",
                ),
            ];
            for (name, v, why) in checks {
                if v == 0 {
                    return Err(bad(&name, v, why));
                }
            }
            if e.used > e.count {
                return Err(bad(
                    &key("expert_used_count"),
                    e.used,
                    "must be at most expert_count",
                ));
            }
            if e.count > trine_ops::moe_route::MAX_EXPERTS {
                return Err(bad(
                    &key("expert_count"),
                    e.count,
                    "must be at most 512 (the routing kernel's limit)",
                ));
            }
        }
        let d = self.head_dim();
        if !d.is_multiple_of(2) || d > MAX_HEAD_DIM {
            return Err(bad(
                &key("attention.key_length"),
                d,
                "must be even and at most 512 (the attention kernel's limit)",
            ));
        }
        if self.n_rot == 0 || !self.n_rot.is_multiple_of(2) || self.n_rot > d {
            return Err(bad(
                &key("rope.dimension_count"),
                self.n_rot,
                "must be even, positive and at most the head size (rope turns pairs of a head's first values)",
            ));
        }
        if self.n_rot != d && !self.arch.partial_rotary() {
            return Err(bad(
                &key("rope.dimension_count"),
                self.n_rot,
                "must equal the head size: llama.cpp turns whole heads for this architecture",
            ));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 1.0) {
            return Err(bad(
                &key("rope.freq_base"),
                self.rope_base,
                "must be finite and > 1",
            ));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps > 0.0) {
            return Err(bad(
                &key("attention.layer_norm_rms_epsilon"),
                self.rms_eps,
                "must be finite and positive",
            ));
        }
        Ok(())
    }
}

/// The sliding windows of an architecture that has them (Gemma 3), read as llama.cpp's
/// `llama_model_gemma3::load_arch_hparams` reads them; what trine does not compute as
/// llama.cpp does is refused: a final logit softcap, and a query scale other than
/// `1/sqrt(head_dim)` (llama.cpp's 27B layout scales by `1/sqrt(n_embd / n_head)`).
fn swa(g: &Gguf, c: &Config) -> Result<Option<Swa>, ModelError> {
    if !c.arch.sliding_windows() {
        return Ok(None);
    }
    let key = |k: &str| format!("{}.{k}", c.arch.name());
    let cap_key = key("final_logit_softcapping");
    let cap = optional(g.get_f32(&cap_key), 0.0)?;
    if cap != 0.0 {
        return Err(bad(
            &cap_key,
            cap,
            "trine's output head has no logit softcap",
        ));
    }
    // llama.cpp takes the 62-layer layout for Gemma 3 27B.
    if c.n_layer == 62 && c.n_embd / c.n_head != c.head_dim() {
        return Err(bad(
            &key("block_count"),
            c.n_layer,
            "is Gemma 3 27B's, whose query scale 1/sqrt(n_embd / n_head) trine's attention does not take",
        ));
    }
    let window = optional(g.get_u32(&key("attention.sliding_window")), 0)?;
    if window == 0 {
        return Ok(None);
    }
    let pattern_key = key("attention.sliding_window_pattern");
    let pattern = optional(g.get_u32(&pattern_key), SWA_PATTERN)?;
    let local = (0..c.n_layer)
        .map(|l| pattern == 0 || l % pattern < pattern - 1)
        .collect();
    let base_key = key("rope.freq_base_swa");
    let base = optional(g.get_f32(&base_key), 10_000.0)?;
    if !(base.is_finite() && base > 1.0) {
        return Err(bad(&base_key, base, "must be finite and > 1"));
    }
    Ok(Some(Swa {
        window,
        local,
        base,
    }))
}

// The limits the hyperparameter errors name in their text.
const _: () = assert!(MAX_HEAD_DIM == 512 && trine_ops::moe_route::MAX_EXPERTS == 512);

pub(crate) fn bad(key: &str, value: impl ToString, why: &'static str) -> ModelError {
    ModelError::Hyperparameter {
        key: key.to_string(),
        value: value.to_string(),
        why,
    }
}

fn bounded(what: &str, v: u64) -> Result<u32, ModelError> {
    u32::try_from(v).map_err(|_| bad(what, v, "must fit in 32 bits"))
}

/// A key's value, or `default` when the file does not have it (any other error stands).
pub(crate) fn optional<T>(r: Result<T, GgufError>, default: T) -> Result<T, ModelError> {
    match r {
        Ok(v) => Ok(v),
        Err(GgufError::MissingKey { .. }) => Ok(default),
        Err(e) => Err(e.into()),
    }
}

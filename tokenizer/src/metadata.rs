//! The tokenizer's GGUF keys, read into plain values. Optional keys that are absent become
//! `None`; a key present with the wrong type is an error, never silently ignored.

use super::error::TokenizerError;
use trine_gguf::{Gguf, GgufError};

const MODEL: &str = "tokenizer.ggml.model";
const PRE: &str = "tokenizer.ggml.pre";
const TOKENS: &str = "tokenizer.ggml.tokens";
pub(crate) const SCORES: &str = "tokenizer.ggml.scores";
pub(crate) const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const MERGES: &str = "tokenizer.ggml.merges";
const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
const NAME: &str = "general.name";

/// The special-id keys that change encoding or end generation (unknown, padding, separator and
/// mask ids do neither here).
pub(crate) const BOS_ID: &str = "tokenizer.ggml.bos_token_id";
pub(crate) const EOS_ID: &str = "tokenizer.ggml.eos_token_id";
pub(crate) const EOT_ID: &str = "tokenizer.ggml.eot_token_id";
pub(crate) const EOM_ID: &str = "tokenizer.ggml.eom_token_id";
pub(crate) const FIM_PRE_ID: &str = "tokenizer.ggml.fim_pre_token_id";
pub(crate) const FIM_SUF_ID: &str = "tokenizer.ggml.fim_suf_token_id";
pub(crate) const FIM_MID_ID: &str = "tokenizer.ggml.fim_mid_token_id";
pub(crate) const FIM_PAD_ID: &str = "tokenizer.ggml.fim_pad_token_id";
pub(crate) const FIM_REP_ID: &str = "tokenizer.ggml.fim_rep_token_id";
pub(crate) const FIM_SEP_ID: &str = "tokenizer.ggml.fim_sep_token_id";

const ID_KEYS: [&str; 10] = [
    BOS_ID, EOS_ID, EOT_ID, EOM_ID, FIM_PRE_ID, FIM_SUF_ID, FIM_MID_ID, FIM_PAD_ID, FIM_REP_ID,
    FIM_SEP_ID,
];

pub(crate) struct Metadata<'g> {
    pub model: String,
    pub pre: Option<String>,
    /// `general.name`: llama.cpp keys one model's quirk on it (Phi-3).
    pub name: Option<String>,
    pub tokens: Vec<&'g str>,
    pub scores: Option<Vec<f32>>,
    pub token_types: Option<Vec<i32>>,
    /// Empty unless the model is BPE (`gpt2`, `gemma4`), where the key is required.
    pub merges: Vec<&'g str>,
    /// The special-id keys present, with their values.
    pub ids: Vec<(&'static str, u32)>,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_space_prefix: Option<bool>,
}

impl<'g> Metadata<'g> {
    pub fn from_gguf(g: &'g Gguf) -> Result<Metadata<'g>, TokenizerError> {
        let model = g.get_str(MODEL)?.to_string();
        let merges = if model == "gpt2" || model == "gemma4" {
            g.get_str_array(MERGES)?
        } else {
            Vec::new()
        };
        let mut ids = Vec::new();
        for key in ID_KEYS {
            if let Some(id) = optional(g.get_u32(key))? {
                ids.push((key, id));
            }
        }
        Ok(Metadata {
            model,
            pre: optional(g.get_str(PRE))?.map(str::to_string),
            name: optional(g.get_str(NAME))?.map(str::to_string),
            tokens: g.get_str_array(TOKENS)?,
            scores: scores(g)?,
            token_types: optional(g.get_i32_array(TOKEN_TYPE))?,
            merges,
            ids,
            add_bos: optional(g.get_bool(ADD_BOS))?,
            add_eos: optional(g.get_bool(ADD_EOS))?,
            add_space_prefix: optional(g.get_bool(ADD_SPACE_PREFIX))?,
        })
    }

    pub fn id(&self, key: &str) -> Option<u32> {
        self.ids.iter().find(|(k, _)| *k == key).map(|&(_, id)| id)
    }
}

/// f32 scores, or i32 ones (llama.cpp accepts both).
fn scores(g: &Gguf) -> Result<Option<Vec<f32>>, GgufError> {
    match optional(g.get_f32_array(SCORES)) {
        Err(GgufError::WrongType { .. }) => {
            let ints = g.get_i32_array(SCORES)?;
            Ok(Some(ints.into_iter().map(|s| s as f32).collect()))
        }
        r => r,
    }
}

fn optional<T>(r: Result<T, GgufError>) -> Result<Option<T>, GgufError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(GgufError::MissingKey { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

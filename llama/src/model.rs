//! A Llama model opened from a GGUF file: the mapped file, its hyperparameters, its weights
//! and its tokenizer, all checked before any device sees them.

use super::config::Config;
use super::error::ModelError;
use super::weights::Weights;
use std::path::Path;
use trine_gguf::Gguf;
use trine_ops::rope_freqs::RopeFreqs;
use trine_tokenizer::Tokenizer;

pub struct Model {
    pub gguf: Gguf,
    pub config: Config,
    pub weights: Weights,
    pub tokenizer: Tokenizer,
    /// What rope turns each pair by ([`crate::rope`]).
    pub rope: crate::rope::Rope,
    /// What the sliding-window layers' rope turns each pair by, where the model has them
    /// ([`crate::rope::local`]).
    pub rope_local: Option<RopeFreqs>,
}

impl Model {
    pub fn open(path: &Path) -> Result<Model, ModelError> {
        Model::from_gguf(Gguf::open(path)?)
    }

    pub fn from_gguf(gguf: Gguf) -> Result<Model, ModelError> {
        let config = Config::from_gguf(&gguf)?;
        let weights = Weights::from_gguf(&gguf, &config)?;
        let rope = crate::rope::from_gguf(&gguf, &config)?;
        let rope_local = crate::rope::local(&config, &rope.short);
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        Ok(Model {
            gguf,
            config,
            weights,
            tokenizer,
            rope,
            rope_local,
        })
    }

    /// Checks that every id is in the vocabulary before a kernel indexes with it.
    pub fn check_ids(&self, ids: &[u32]) -> Result<(), ModelError> {
        let vocab = self.config.vocab;
        match ids.iter().find(|&&id| id >= vocab) {
            Some(&id) => Err(ModelError::TokenOutOfRange { id, vocab }),
            None => Ok(()),
        }
    }
}

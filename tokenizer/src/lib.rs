//! trine-tokenizer: the tokenizer of a GGUF model, read from its `tokenizer.*` metadata, producing the token
//! ids llama.cpp's `llama_tokenize` produces.
//!
//! Three models are supported: byte-level BPE (`tokenizer.ggml.model = "gpt2"`, Llama 3,
//! GPT-2, Qwen, SmolLM2, StarCoder, DeepSeek, Mistral's Tekken …), whose pre-tokenizer
//! `tokenizer.ggml.pre` must be one of those in [`pretokenize`]; Gemma 4's BPE on UTF-8
//! (`"gemma4"`), with byte fallback; and SentencePiece BPE (`"llama"`, Llama 2, Phi-3,
//! Gemma 3 …), with byte fallback. `docs/tokenizer.md` lists the pre-tokenizer names.
//! Encoding first cuts special tokens out of the text ([`special`]), then runs the model on
//! each plain-text run.
//!
//! A model's chat template (`tokenizer.chat_template`) is rendered by [`ChatTemplate`].
//!
//! Any other model or pre-tokenizer name, and any inconsistent metadata (a merge naming a
//! token that does not exist, a special id outside the vocab), is a [`TokenizerError`] at load.

mod attr;
mod bpe;
mod byte_level;
mod chat;
mod error;
mod metadata;
mod piece;
mod pretokenize;
mod special;
mod special_ids;
mod spm;
mod stream;
mod strftime;
mod unicode;
mod vocab;

pub use chat::{ChatTemplate, Message, CHAT_TEMPLATE};
pub use error::TokenizerError;
pub use stream::TextStream;

use bpe::Bpe;
use metadata::Metadata;
use pretokenize::{Bos, PreTokenizer};
use special::{Fragment, SpecialTokens};
use special_ids::SpecialIds;
use spm::Spm;
use trine_gguf::Gguf;
use vocab::Vocab;

enum Model {
    Bpe(Bpe),
    Spm(Spm),
}

/// A model's tokenizer: text to token ids and token ids back to bytes.
pub struct Tokenizer {
    vocab: Vocab,
    model: Model,
    specials: SpecialTokens,
    ids: SpecialIds,
    add_bos: bool,
    add_eos: bool,
    /// SentencePiece only: a space is put before text that starts the input or follows a
    /// special token.
    add_space_prefix: bool,
}

impl Tokenizer {
    /// Reads and checks the `tokenizer.*` metadata of `g`.
    pub fn from_gguf(g: &Gguf) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_metadata(Metadata::from_gguf(g)?)
    }

    fn from_metadata(mut meta: Metadata) -> Result<Tokenizer, TokenizerError> {
        let pre = match meta.model.as_str() {
            "gpt2" => {
                let name = meta
                    .pre
                    .as_deref()
                    .ok_or(TokenizerError::MissingPreTokenizer)?;
                Some(PreTokenizer::for_name(name).ok_or_else(|| {
                    TokenizerError::UnknownPreTokenizer {
                        name: name.to_string(),
                        supported: PreTokenizer::names().collect::<Vec<_>>().join(", "),
                    }
                })?)
            }
            "gemma4" => Some(PreTokenizer::GEMMA4),
            "llama" => None,
            other => {
                return Err(TokenizerError::UnknownModel {
                    name: other.to_string(),
                })
            }
        };
        let mut vocab = Vocab::new(
            std::mem::take(&mut meta.tokens),
            meta.scores.take(),
            meta.token_types.take(),
        )?;
        check_byte_tokens(&vocab)?;
        // llama.cpp's fallbacks when the keys are absent.
        let (model, default_ids, bos, default_prefix) = match pre {
            Some(pre) => {
                let ids = if meta.model == "gemma4" {
                    (None, None)
                } else {
                    (Some(11), Some(11))
                };
                let bos = pre.bos;
                (
                    Model::Bpe(Bpe::new(pre, &meta.merges, &vocab)?),
                    ids,
                    bos,
                    false,
                )
            }
            None => (
                Model::Spm(Spm::new(&vocab)),
                (Some(1), Some(2)),
                Bos::Default(true),
                true,
            ),
        };
        let ids = SpecialIds::resolve(&meta, &mut vocab, default_ids)?;
        let specials = SpecialTokens::new(&vocab, meta.name.as_deref());
        let add_bos = match bos {
            Bos::Default(default) => meta.add_bos.unwrap_or(default),
            Bos::Always => true,
        };
        Ok(Tokenizer {
            vocab,
            model,
            specials,
            ids,
            add_bos,
            add_eos: meta.add_eos.unwrap_or(false),
            add_space_prefix: meta.add_space_prefix.unwrap_or(default_prefix),
        })
    }

    /// Like llama_tokenize: add_special adds BOS/EOS as the metadata says; parse_special turns
    /// special-token text into their ids.
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.push(
                self.ids
                    .bos
                    .ok_or(TokenizerError::MissingSpecialToken { which: "BOS" })?,
            );
        }
        let mut after_special = true;
        for fragment in self.specials.split(text, parse_special) {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(run) => {
                    match &self.model {
                        Model::Bpe(bpe) => bpe.encode(run, &self.vocab, &mut out),
                        Model::Spm(spm) => {
                            let prefix = if self.add_space_prefix && after_special {
                                " "
                            } else {
                                ""
                            };
                            let escaped = format!("{prefix}{run}").replace(' ', "\u{2581}");
                            spm.encode(&escaped, &self.vocab, &mut out)?;
                        }
                    }
                    after_special = false;
                }
            }
        }
        if add_special && self.add_eos {
            out.push(
                self.ids
                    .eos
                    .ok_or(TokenizerError::MissingSpecialToken { which: "EOS" })?,
            );
        }
        Ok(out)
    }

    /// The bytes a token stands for when printed (byte-level BPE decoded back to bytes, SPM ▁ →
    /// space, <0xXX> → the byte); control tokens → empty.
    pub fn token_bytes(&self, id: u32) -> Result<Vec<u8>, TokenizerError> {
        self.check(id)?;
        let byte_level = matches!(&self.model, Model::Bpe(bpe) if bpe.pre().byte_level);
        Ok(piece::token_bytes(&self.vocab, id, byte_level))
    }

    /// The lossy UTF-8 of the tokens' concatenated bytes.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend(self.token_bytes(id)?);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    pub fn bos(&self) -> Option<u32> {
        self.ids.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.ids.eos
    }

    /// Whether encoding with `add_special` puts BOS first.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether encoding with `add_special` puts EOS last.
    pub fn adds_eos(&self) -> bool {
        self.add_eos
    }

    /// The text of the BOS and EOS tokens, as chat templates print them; empty where the
    /// vocab has none.
    pub fn bos_eos_text(&self) -> (String, String) {
        let text =
            |id: Option<u32>| id.map_or_else(String::new, |id| self.vocab.text(id).to_string());
        (text(self.ids.bos), text(self.ids.eos))
    }

    /// EOS, EOT, and the other ids llama.cpp ends generation on (`<|im_end|>`, `<|eot_id|>`,
    /// `<|endoftext|>`, FIM pad/repo/file-separator tokens …).
    pub fn is_end_of_generation(&self, id: u32) -> bool {
        self.ids.eog.binary_search(&id).is_ok()
    }

    fn check(&self, id: u32) -> Result<(), TokenizerError> {
        if (id as usize) < self.vocab.len() {
            Ok(())
        } else {
            Err(TokenizerError::TokenIdOutOfRange {
                id,
                n_tokens: self.vocab.len(),
            })
        }
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let model = match &self.model {
            Model::Bpe(bpe) if bpe.pre().byte_level => {
                format!("byte-level BPE {:?}", bpe.pre().stages)
            }
            Model::Bpe(bpe) => format!("BPE on UTF-8 {:?}", bpe.pre().stages),
            Model::Spm(_) => "SentencePiece".to_string(),
        };
        f.debug_struct("Tokenizer")
            .field("model", &model)
            .field("vocab_size", &self.vocab.len())
            .field("bos", &self.ids.bos)
            .field("eos", &self.ids.eos)
            .field("add_bos", &self.add_bos)
            .field("add_eos", &self.add_eos)
            .finish()
    }
}

/// Byte-typed tokens must spell their byte, since that is what they print.
fn check_byte_tokens(vocab: &Vocab) -> Result<(), TokenizerError> {
    for (id, text) in vocab.iter() {
        if vocab.attr(id).has(attr::Attr::BYTE) && piece::byte_token_value(text).is_none() {
            return Err(TokenizerError::BadByteToken {
                id,
                text: text.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

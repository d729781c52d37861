//! The token table: each id's text, score and attributes, and the lookup from text to id.

use super::attr::Attr;
use super::error::TokenizerError;
use super::metadata::{SCORES, TOKEN_TYPE};
use rustc_hash::FxHashMap;

pub(crate) struct Vocab {
    texts: Vec<String>,
    scores: Vec<f32>,
    attrs: Vec<Attr>,
    ids: FxHashMap<String, u32>,
}

impl Vocab {
    /// Without token types every token is normal; without scores every score is 0. Longer
    /// score or type arrays are cut to the token count, as llama.cpp reads them.
    pub fn new(
        tokens: Vec<&str>,
        scores: Option<Vec<f32>>,
        types: Option<Vec<i32>>,
    ) -> Result<Vocab, TokenizerError> {
        let n = tokens.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocab);
        }
        if u32::try_from(n).is_err() {
            return Err(TokenizerError::VocabTooLarge { len: n });
        }
        let scores = match scores {
            Some(s) => take(s, n, SCORES)?,
            None => vec![0.0; n],
        };
        let attrs = match types {
            Some(t) => take(t, n, TOKEN_TYPE)?
                .into_iter()
                .map(Attr::from_token_type)
                .collect(),
            None => vec![Attr::NORMAL; n],
        };
        let mut texts = Vec::with_capacity(n);
        let mut ids = FxHashMap::default();
        ids.reserve(n);
        for (id, &text) in (0u32..).zip(&tokens) {
            // An empty token could never be matched and would stall the special-token scan;
            // llama.cpp gives it this placeholder text.
            let text = match text {
                "" => format!("[EMPTY_{id}]"),
                t => t.to_string(),
            };
            if let Some(first) = ids.insert(text.clone(), id) {
                return Err(TokenizerError::DuplicateToken {
                    text: text.clone(),
                    first,
                    second: id,
                });
            }
            texts.push(text);
        }
        Ok(Vocab {
            texts,
            scores,
            attrs,
            ids,
        })
    }

    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// `id` must be below [`Vocab::len`], as every id the tokenizer holds is.
    pub fn text(&self, id: u32) -> &str {
        &self.texts[id as usize]
    }

    pub fn score(&self, id: u32) -> f32 {
        self.scores[id as usize]
    }

    pub fn attr(&self, id: u32) -> Attr {
        self.attrs[id as usize]
    }

    pub fn set_attr(&mut self, id: u32, attr: Attr) {
        self.attrs[id as usize] = attr;
    }

    /// Every id with its text, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &str)> {
        (0u32..).zip(self.texts.iter().map(String::as_str))
    }
}

fn take<T>(mut v: Vec<T>, n: usize, key: &'static str) -> Result<Vec<T>, TokenizerError> {
    if v.len() < n {
        return Err(TokenizerError::LengthMismatch {
            key,
            len: v.len(),
            n_tokens: n,
        });
    }
    v.truncate(n);
    Ok(v)
}

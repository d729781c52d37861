//! BOS, EOS and the end-of-generation set. Ids come from the metadata keys where present;
//! otherwise, as in llama.cpp, roles are found by their well-known token texts (conversions
//! often leave the keys out), and every token found so is made a control token.

use super::attr::Attr;
use super::error::TokenizerError;
use super::metadata::{
    Metadata, BOS_ID, EOM_ID, EOS_ID, EOT_ID, FIM_MID_ID, FIM_PAD_ID, FIM_PRE_ID, FIM_REP_ID,
    FIM_SEP_ID, FIM_SUF_ID,
};
use super::vocab::Vocab;

/// A role llama.cpp looks for by text when its key is absent.
struct Role {
    key: &'static str,
    texts: &'static [&'static str],
    /// Whether the token ends generation.
    eog: bool,
}

const ROLES: [Role; 8] = [
    Role {
        key: EOT_ID,
        texts: &[
            "<|eot_id|>",
            "<|im_end|>",
            "<|end|>",
            "<end_of_turn>",
            "<|endoftext|>",
            "<|end_of_text|>",
            "<EOT>",
            "_<EOT>",
            "[EOT]",
            "<｜end▁of▁sentence｜>",
            "<end_of_utterance>",
        ],
        eog: true,
    },
    Role {
        key: EOM_ID,
        texts: &["<|eom_id|>"],
        eog: true,
    },
    Role {
        key: FIM_PRE_ID,
        texts: &[
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<｜fim▁begin｜>",
            "<PRE>",
            "▁<PRE>",
            "<|code_prefix|>",
            "<|prefix|>",
        ],
        eog: false,
    },
    Role {
        key: FIM_SUF_ID,
        texts: &[
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<｜fim▁hole｜>",
            "<SUF>",
            "▁<SUF>",
            "<|code_suffix|>",
            "<|suffix|>",
        ],
        eog: false,
    },
    Role {
        key: FIM_MID_ID,
        texts: &[
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<｜fim▁end｜>",
            "<MID>",
            "▁<MID>",
            "<|code_middle|>",
            "<|middle|>",
        ],
        eog: false,
    },
    Role {
        key: FIM_PAD_ID,
        texts: &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
        eog: true,
    },
    Role {
        key: FIM_REP_ID,
        texts: &[
            "<|fim_repo|>",
            "<|repo_name|>",
            "<fim-repo>",
            "<REPO>",
            "<reponame>",
        ],
        eog: true,
    },
    Role {
        key: FIM_SEP_ID,
        texts: &["<|file_sep|>"],
        eog: true,
    },
];

/// Texts that end generation whichever role they have.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// gpt-oss's channel markers print even though they are control tokens.
const ALWAYS_PRINTED: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

pub(crate) struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// Sorted.
    pub eog: Vec<u32>,
}

impl SpecialIds {
    /// `default_bos_eos` is the model's fallback when the keys are absent (llama.cpp's: 1 and
    /// 2 for SentencePiece, 11 for byte-level BPE, none for Gemma 4); a fallback outside the
    /// vocab means none.
    pub fn resolve(
        meta: &Metadata,
        vocab: &mut Vocab,
        default_bos_eos: (Option<u32>, Option<u32>),
    ) -> Result<SpecialIds, TokenizerError> {
        let n_tokens = vocab.len();
        let in_vocab = |id: u32| (id as usize) < n_tokens;
        let keyed = |key: &'static str| -> Result<Option<u32>, TokenizerError> {
            match meta.id(key) {
                Some(id) if !in_vocab(id) => {
                    Err(TokenizerError::SpecialIdOutOfRange { key, id, n_tokens })
                }
                id => Ok(id),
            }
        };
        let bos = keyed(BOS_ID)?.or(default_bos_eos.0.filter(|&id| in_vocab(id)));
        let eos = keyed(EOS_ID)?.or(default_bos_eos.1.filter(|&id| in_vocab(id)));

        let mut eog: Vec<u32> = eos.into_iter().collect();
        for role in &ROLES {
            let id = match keyed(role.key)? {
                Some(id) => Some(id),
                None => {
                    let found = ids_of(vocab, role.texts).into_iter().min();
                    if let Some(id) = found {
                        mark_control(vocab, id);
                    }
                    found
                }
            };
            if role.eog {
                eog.extend(id);
            }
        }
        for id in ids_of(vocab, EOG_TEXTS) {
            mark_control(vocab, id);
            eog.push(id);
        }
        for id in ids_of(vocab, ALWAYS_PRINTED) {
            vocab.set_attr(id, Attr::USER_DEFINED);
        }
        eog.sort_unstable();
        eog.dedup();
        drop_false_ends(vocab, &mut eog);
        Ok(SpecialIds { bos, eos, eog })
    }
}

fn ids_of(vocab: &Vocab, texts: &[&str]) -> Vec<u32> {
    texts.iter().filter_map(|t| vocab.id(t)).collect()
}

fn mark_control(vocab: &mut Vocab, id: u32) {
    let attr = vocab.attr(id);
    vocab.set_attr(id, attr | Attr::CONTROL);
}

/// Two vocabularies reuse an end-looking text for something else: with gpt-oss's (or
/// solar-open's) call markers, `<|end|>` only ends a message; next to Gemma 4's or PLaMo 2's own
/// end markers, `</s>` is ordinary text.
fn drop_false_ends(vocab: &mut Vocab, eog: &mut Vec<u32>) {
    let find = |text: &str| eog.iter().copied().find(|&id| vocab.text(id) == text);
    let call = find("<|call|>").is_some() || find("<|calls|>").is_some();
    let end = find("<|end|>")
        .filter(|_| call && (find("<|return|>").is_some() || find("<|flush|>").is_some()));
    let plain_s = find("</s>")
        .filter(|_| find("<|tool_response>").is_some() || find("<|plamo:eos|>").is_some());
    if let Some(id) = end {
        eog.retain(|&e| e != id);
        vocab.set_attr(id, Attr::USER_DEFINED);
    }
    if let Some(id) = plain_s {
        eog.retain(|&e| e != id);
        vocab.set_attr(id, Attr::NORMAL);
    }
}

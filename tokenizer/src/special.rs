//! Cutting text around special tokens before the model's tokenizer sees it, as llama.cpp's
//! `parse_special` does. User-defined tokens are always cut out (Hugging Face tokenizers match
//! added tokens before anything else); control and unknown tokens only when asked, so that
//! untrusted text cannot forge them.

use super::attr::Attr;
use super::vocab::Vocab;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fragment<'t> {
    Text(&'t str),
    Token(u32),
}

struct Special {
    id: u32,
    text: String,
    /// Control or unknown: matched only when parsing specials.
    control: bool,
    /// The whitespace after a match is dropped.
    rstrip: bool,
}

pub(crate) struct SpecialTokens {
    /// Longest text first, so that a token containing another wins.
    list: Vec<Special>,
}

impl SpecialTokens {
    /// `model_name` is `general.name`: Phi-3's special tokens swallow the whitespace after
    /// them, except the three its tokenizer config leaves alone.
    pub fn new(vocab: &Vocab, model_name: Option<&str>) -> SpecialTokens {
        let phi3 = model_name.is_some_and(|n| {
            let n = n.to_ascii_lowercase();
            n.contains("phi-3") || n.contains("phi3")
        });
        let mut list: Vec<Special> = vocab
            .iter()
            .filter(|&(id, _)| {
                vocab
                    .attr(id)
                    .has(Attr::CONTROL | Attr::USER_DEFINED | Attr::UNKNOWN)
            })
            .map(|(id, text)| Special {
                id,
                text: text.to_string(),
                control: vocab.attr(id).has(Attr::CONTROL | Attr::UNKNOWN),
                rstrip: phi3 && !["<unk>", "<s>", "<|endoftext|>"].contains(&text),
            })
            .collect();
        list.sort_by_key(|s| std::cmp::Reverse(s.text.len()));
        SpecialTokens { list }
    }

    /// `text` as runs of plain text and special-token ids, in order.
    pub fn split<'t>(&self, text: &'t str, parse_special: bool) -> Vec<Fragment<'t>> {
        let mut fragments = Vec::new();
        if !text.is_empty() {
            fragments.push(Fragment::Text(text));
        }
        for special in &self.list {
            if special.control && !parse_special {
                continue;
            }
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                let Fragment::Text(mut rest) = fragment else {
                    next.push(fragment);
                    continue;
                };
                while let Some(at) = rest.find(special.text.as_str()) {
                    if at > 0 {
                        next.push(Fragment::Text(&rest[..at]));
                    }
                    next.push(Fragment::Token(special.id));
                    rest = &rest[at + special.text.len()..];
                    if special.rstrip {
                        rest = rest.trim_start_matches(is_c_space);
                    }
                }
                if !rest.is_empty() {
                    next.push(Fragment::Text(rest));
                }
            }
            fragments = next;
        }
        fragments
    }
}

/// C's `isspace` in the "C" locale, which llama.cpp strips with.
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r')
}

//! BPE with merge ranks (`tokenizer.ggml.model = "gpt2"`, and `"gemma4"`): each pre-tokenized
//! word starts as one symbol per byte (byte-level vocabs) or per char (Gemma 4), and the
//! adjacent pair with the best (lowest) merge rank is merged until no ranked pair remains; among
//! equal ranks the leftmost goes first. Symbols are token ids, and merges are looked up by id
//! pair.

use super::byte_level::byte_to_char;
use super::error::TokenizerError;
use super::piece::byte_token_text;
use super::pretokenize::{PreTokenizer, WholeWords};
use super::vocab::Vocab;
use rustc_hash::FxHashMap;
use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Range;

#[derive(Clone, Copy)]
struct Merge {
    rank: u32,
    result: u32,
}

pub(crate) struct Bpe {
    pre: PreTokenizer,
    merges: FxHashMap<(u32, u32), Merge>,
    /// The token of each single byte, if the vocab has it: its byte-level char, or `<0xXX>`.
    byte_ids: [Option<u32>; 256],
}

/// A symbol of the word being merged: a token and its neighbours in a linked list.
struct Symbol {
    id: Option<u32>,
    /// The bytes of the word it started as, spelled by byte tokens while `id` is `None`.
    bytes: Range<usize>,
    prev: Option<usize>,
    next: Option<usize>,
    alive: bool,
}

/// A candidate merge of `left` with its right neighbour `right`, valid while both still hold
/// the ids it was made for. Ordered so that the heap's greatest is the best merge.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    key: Reverse<(u32, usize)>,
    right: usize,
    ids: (u32, u32),
    result: u32,
}

impl Bpe {
    /// `merges` are `"left right"` strings, best first; both sides and their concatenation
    /// must be tokens. A pair listed twice keeps its first rank.
    pub fn new(pre: PreTokenizer, merges: &[&str], vocab: &Vocab) -> Result<Bpe, TokenizerError> {
        let mut table = FxHashMap::default();
        table.reserve(merges.len());
        let mut joined = String::new();
        for (index, &merge) in merges.iter().enumerate() {
            // The separator is the first space after the first byte (a merge side is never
            // empty).
            let space = merge
                .bytes()
                .skip(1)
                .position(|b| b == b' ')
                .map(|p| p + 1)
                .ok_or_else(|| TokenizerError::MalformedMerge {
                    index,
                    merge: merge.to_string(),
                })?;
            let (left, right) = (&merge[..space], &merge[space + 1..]);
            let id = |part: &str| {
                vocab
                    .id(part)
                    .ok_or_else(|| TokenizerError::MergeUnknownToken {
                        index,
                        merge: merge.to_string(),
                        part: part.to_string(),
                    })
            };
            let pair = (id(left)?, id(right)?);
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            let result = vocab
                .id(&joined)
                .ok_or_else(|| TokenizerError::MergeResultUnknown {
                    index,
                    merge: merge.to_string(),
                    result: joined.clone(),
                })?;
            let rank = u32::try_from(index).unwrap_or(u32::MAX);
            table.entry(pair).or_insert(Merge { rank, result });
        }
        let mut byte_ids = [None; 256];
        for (b, slot) in (0..=255u8).zip(byte_ids.iter_mut()) {
            *slot = if pre.byte_level {
                vocab.id(byte_to_char(b).encode_utf8(&mut [0; 4]))
            } else {
                vocab.id(&byte_token_text(b))
            };
        }
        Ok(Bpe {
            pre,
            merges: table,
            byte_ids,
        })
    }

    pub fn pre(&self) -> &PreTokenizer {
        &self.pre
    }

    /// Appends the tokens of `text` (plain text, special tokens already cut out).
    pub fn encode(&self, text: &str, vocab: &Vocab, out: &mut Vec<u32>) {
        let text = if self.pre.byte_level {
            Cow::Borrowed(text)
        } else {
            Cow::Owned(text.replace(' ', "\u{2581}"))
        };
        for word in self.pre.split(&text) {
            let whole = match self.pre.whole_words {
                WholeWords::Never => false,
                WholeWords::Always => true,
                WholeWords::Newlines => word.bytes().all(|b| b == b'\n'),
            };
            if whole {
                if let Some(id) = vocab.id(&self.spelled(word)) {
                    out.push(id);
                    continue;
                }
            }
            self.merge_word(word, vocab, out);
        }
    }

    /// `word` as the vocab spells it.
    fn spelled<'w>(&self, word: &'w str) -> Cow<'w, str> {
        if self.pre.byte_level {
            Cow::Owned(word.bytes().map(byte_to_char).collect())
        } else {
            Cow::Borrowed(word)
        }
    }

    fn merge_word(&self, word: &str, vocab: &Vocab, out: &mut Vec<u32>) {
        let units: Vec<(Option<u32>, Range<usize>)> = if self.pre.byte_level {
            (0..word.len())
                .map(|i| (self.byte_ids[usize::from(word.as_bytes()[i])], i..i + 1))
                .collect()
        } else {
            word.char_indices()
                .map(|(i, c)| {
                    let r = i..i + c.len_utf8();
                    (vocab.id(&word[r.clone()]), r)
                })
                .collect()
        };
        let n = units.len();
        let mut symbols: Vec<Symbol> = units
            .into_iter()
            .enumerate()
            .map(|(i, (id, bytes))| Symbol {
                id,
                bytes,
                prev: i.checked_sub(1),
                next: (i + 1 < n).then_some(i + 1),
                alive: true,
            })
            .collect();
        let mut heap = BinaryHeap::new();
        for i in 1..n {
            self.offer(&symbols, i - 1, i, &mut heap);
        }
        while let Some(c) = heap.pop() {
            let Reverse((_, left)) = c.key;
            let (l, r) = (&symbols[left], &symbols[c.right]);
            if !l.alive || !r.alive || (l.id, r.id) != (Some(c.ids.0), Some(c.ids.1)) {
                continue;
            }
            let after = r.next;
            symbols[c.right].alive = false;
            symbols[left].id = Some(c.result);
            symbols[left].next = after;
            if let Some(a) = after {
                symbols[a].prev = Some(left);
            }
            if let Some(p) = symbols[left].prev {
                self.offer(&symbols, p, left, &mut heap);
            }
            if let Some(a) = after {
                self.offer(&symbols, left, a, &mut heap);
            }
        }
        // A symbol without a token is spelled by its bytes' tokens; a byte the vocab lacks is
        // dropped, as in llama.cpp.
        let mut at = (n > 0).then_some(0);
        while let Some(i) = at {
            let s = &symbols[i];
            match s.id {
                Some(id) => out.push(id),
                None => out.extend(
                    word.as_bytes()[s.bytes.clone()]
                        .iter()
                        .filter_map(|&b| self.byte_ids[usize::from(b)]),
                ),
            }
            at = s.next;
        }
    }

    fn offer(
        &self,
        symbols: &[Symbol],
        left: usize,
        right: usize,
        heap: &mut BinaryHeap<Candidate>,
    ) {
        let (Some(a), Some(b)) = (symbols[left].id, symbols[right].id) else {
            return;
        };
        if let Some(m) = self.merges.get(&(a, b)) {
            heap.push(Candidate {
                key: Reverse((m.rank, left)),
                right,
                ids: (a, b),
                result: m.result,
            });
        }
    }
}

//! SentencePiece BPE (`tokenizer.ggml.model = "llama"`): the text (spaces already spelled
//! `▁`) starts as one symbol per char, and the adjacent pair whose concatenation is the
//! highest-scoring token is merged until no pair forms a token; among equal scores the
//! leftmost goes first. What is left that is not a token falls back to byte tokens `<0xXX>`.

use super::error::TokenizerError;
use super::piece::byte_token_text;
use super::vocab::Vocab;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

pub(crate) struct Spm {
    /// The token for each byte: `<0xXX>`, else the byte itself as text.
    byte_ids: [Option<u32>; 256],
}

/// A span of the text, linked to its neighbours.
struct Symbol {
    start: usize,
    end: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// Merging `left` with `right` into a token of `score` spanning `len` bytes; stale once either
/// side has changed length.
struct Candidate {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl Candidate {
    fn key(&self) -> (TotalF32, Reverse<usize>) {
        (TotalF32(self.score), Reverse(self.left))
    }
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

#[derive(PartialEq)]
struct TotalF32(f32);
impl Eq for TotalF32 {}
impl PartialOrd for TotalF32 {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for TotalF32 {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Spm {
    pub fn new(vocab: &Vocab) -> Spm {
        let mut byte_ids = [None; 256];
        for (b, slot) in (0..=255u8).zip(byte_ids.iter_mut()) {
            *slot = vocab.id(&byte_token_text(b)).or_else(|| {
                let single = [b];
                std::str::from_utf8(&single).ok().and_then(|s| vocab.id(s))
            });
        }
        Spm { byte_ids }
    }

    /// Appends the tokens of `text`, whose spaces are already `▁`.
    pub fn encode(
        &self,
        text: &str,
        vocab: &Vocab,
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        let starts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        let n = starts.len();
        let mut symbols: Vec<Symbol> = (0..n)
            .map(|i| Symbol {
                start: starts[i],
                end: starts.get(i + 1).copied().unwrap_or(text.len()),
                prev: i.checked_sub(1),
                next: (i + 1 < n).then_some(i + 1),
            })
            .collect();
        let mut heap = BinaryHeap::new();
        for i in 1..n {
            offer(text, vocab, &symbols, i - 1, i, &mut heap);
        }
        while let Some(c) = heap.pop() {
            let (l, r) = (&symbols[c.left], &symbols[c.right]);
            let (l_len, r_len) = (l.end - l.start, r.end - r.start);
            // A merged-away symbol is empty, so any change shows in the lengths.
            if l_len == 0 || r_len == 0 || l_len + r_len != c.len {
                continue;
            }
            let after = r.next;
            symbols[c.left].end = symbols[c.right].end;
            symbols[c.right].end = symbols[c.right].start;
            symbols[c.left].next = after;
            if let Some(a) = after {
                symbols[a].prev = Some(c.left);
            }
            if let Some(p) = symbols[c.left].prev {
                offer(text, vocab, &symbols, p, c.left, &mut heap);
            }
            if let Some(a) = after {
                offer(text, vocab, &symbols, c.left, a, &mut heap);
            }
        }
        let mut at = (n > 0).then_some(0);
        while let Some(i) = at {
            let piece = &text[symbols[i].start..symbols[i].end];
            match vocab.id(piece) {
                Some(id) => out.push(id),
                None => {
                    for &byte in piece.as_bytes() {
                        let id = self.byte_ids[usize::from(byte)]
                            .ok_or(TokenizerError::NoByteToken { byte })?;
                        out.push(id);
                    }
                }
            }
            at = symbols[i].next;
        }
        Ok(())
    }
}

fn offer(
    text: &str,
    vocab: &Vocab,
    symbols: &[Symbol],
    left: usize,
    right: usize,
    heap: &mut BinaryHeap<Candidate>,
) {
    let (start, end) = (symbols[left].start, symbols[right].end);
    if let Some(id) = vocab.id(&text[start..end]) {
        heap.push(Candidate {
            score: vocab.score(id),
            left,
            right,
            len: end - start,
        });
    }
}

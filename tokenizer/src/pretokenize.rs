//! Pre-tokenizers: they cut text into words before BPE merges inside each word.
//!
//! `tokenizer.ggml.pre` names a list of stages. Each stage cuts every piece the previous one
//! left into smaller pieces, keeping all characters (text a pattern does not match becomes a
//! piece of its own), so the pieces always concatenate back to the input. The stages are
//! hand-written matchers of the regexes llama.cpp uses for each name, with llama.cpp's own
//! readings of their corner cases (which characters `\s`, `\p{L}` and `\p{N}` cover, where
//! `\s+(?!\S)` stops, how `std::regex` reads the patterns llama.cpp has no matcher for), since
//! that is what the reference token ids were made with.

mod case_split;
mod llama3;
mod names;
mod search;

use search::Pattern;

use super::unicode::{class, Class};
use std::ops::Range;

/// One splitting pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// `\p{N}`: each number character becomes a piece by itself.
    Digits,
    /// GPT-2's pattern:
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
    Gpt2,
    /// Llama 3's pattern, with numbers cut into runs of at most `max_digits` (3 for Llama 3,
    /// 1 for Qwen 2):
    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
    /// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
    /// With `marks`, marks (`\p{M}`) join letters and leave the other run (Qwen 3.5):
    /// `…|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|…`.
    Llama3 { max_digits: usize, marks: bool },
    /// GPT-4o's pattern, which also cuts words where lower case turns to upper case
    /// (`camelCase` → `camel`, `Case`); see [`case_split`] for how llama.cpp reads it. With
    /// `contractions` and `max_digits` 3 (GPT-4o):
    /// `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
    /// [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
    /// \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
    /// without contractions and with single digits it is Mistral's Tekken.
    CaseSplit {
        max_digits: usize,
        contractions: bool,
    },
    /// `[^\n]+|[\n]+`: runs of newlines and runs of everything else.
    Newlines,
    /// A pattern searched for, the text between its matches kept as pieces too.
    Search(Pattern),
}

/// What a `tokenizer.ggml.pre` name selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PreTokenizer {
    pub stages: &'static [Stage],
    pub whole_words: WholeWords,
    pub bos: Bos,
    /// Words are spelled in GPT-2's byte-level alphabet, each byte a symbol to merge. Without
    /// it (Gemma 4) words are raw UTF-8 with spaces spelled `▁`, each char a symbol, and a char
    /// that is no token falls back to the `<0xXX>` tokens of its bytes.
    pub byte_level: bool,
}

/// Which words become a token of the same text without merging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WholeWords {
    Never,
    /// Any word that is a token (Llama 3 relies on it: some of its tokens cannot be reached
    /// through its merges).
    Always,
    /// A word of newlines only (Gemma 4's merges do not build its newline-run tokens).
    Newlines,
}

/// Whether encoding with special tokens adds BOS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bos {
    /// As `tokenizer.ggml.add_bos_token` says, this when the file has no such key.
    Default(bool),
    /// Whatever the file says: llama.cpp overrides a Gemma 4 file that asks for none.
    Always,
}

impl PreTokenizer {
    /// Cuts `text` into words; they concatenate back to `text`.
    pub fn split<'t>(&self, text: &'t str) -> Vec<&'t str> {
        let chars = Chars::new(text);
        let mut pieces: Vec<Range<usize>> = Vec::new();
        if chars.len() > 0 {
            pieces.push(0..chars.len());
        }
        for stage in self.stages {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for piece in pieces {
                let mut pos = piece.start;
                while pos < piece.end {
                    let end = match *stage {
                        Stage::Digits => digits_end(&chars, pos, piece.end),
                        Stage::Gpt2 => gpt2_end(&chars, pos, piece.end),
                        Stage::Llama3 { max_digits, marks } => {
                            llama3::end(&chars, pos, piece.end, max_digits, marks)
                        }
                        Stage::CaseSplit {
                            max_digits,
                            contractions,
                        } => case_split::end(&chars, pos, piece.end, max_digits, contractions),
                        Stage::Newlines => newlines_end(&chars, pos, piece.end),
                        Stage::Search(pattern) => search::end(&chars, pos, piece.end, pattern),
                    };
                    // Every matcher consumes at least one character; the guard keeps a
                    // mistake from looping forever.
                    let end = end.max(pos + 1);
                    next.push(pos..end);
                    pos = end;
                }
            }
            pieces = next;
        }
        pieces.into_iter().map(|r| chars.slice(text, r)).collect()
    }
}

/// The text as code points with their classes and byte offsets.
struct Chars {
    chars: Vec<char>,
    classes: Vec<Class>,
    /// Byte offset of each char, then the text's length.
    offsets: Vec<usize>,
}

impl Chars {
    fn new(text: &str) -> Chars {
        let chars: Vec<char> = text.chars().collect();
        let classes = chars.iter().map(|&c| class(c)).collect();
        let offsets = text
            .char_indices()
            .map(|(i, _)| i)
            .chain(std::iter::once(text.len()))
            .collect();
        Chars {
            chars,
            classes,
            offsets,
        }
    }

    fn len(&self) -> usize {
        self.chars.len()
    }

    /// The class at `i`, or `None` past the end of the current piece (`end`).
    fn class(&self, i: usize, end: usize) -> Option<Class> {
        (i < end).then(|| self.classes[i])
    }

    fn char(&self, i: usize, end: usize) -> Option<char> {
        (i < end).then(|| self.chars[i])
    }

    fn slice<'t>(&self, text: &'t str, r: Range<usize>) -> &'t str {
        &text[self.offsets[r.start]..self.offsets[r.end]]
    }

    /// The end of a run of `class` starting at `pos`.
    fn run_end(&self, mut pos: usize, end: usize, class: Class) -> usize {
        while self.class(pos, end) == Some(class) {
            pos += 1;
        }
        pos
    }

    /// The length of an English contraction (`'s`, `'t`, `'m`, `'d`, `'re`, `'ve`, `'ll`) at
    /// `pos`, matched in ASCII lower case when `any_case`.
    fn contraction(&self, pos: usize, end: usize, any_case: bool) -> Option<usize> {
        let at = |i: usize| {
            self.char(i, end)
                .map(|c| if any_case { c.to_ascii_lowercase() } else { c })
        };
        if at(pos) != Some('\'') {
            return None;
        }
        match (at(pos + 1)?, at(pos + 2)) {
            ('s' | 't' | 'm' | 'd', _) => Some(2),
            ('r', Some('e')) | ('v', Some('e')) | ('l', Some('l')) => Some(3),
            _ => None,
        }
    }

    /// `\s*[\r\n]+|\s+(?!\S)|\s+` at `pos`: whitespace up to the last newline of the run, else
    /// as [`Chars::spaces_end`].
    fn whitespace_end(&self, pos: usize, end: usize) -> usize {
        let run_end = self.run_end(pos, end, Class::Whitespace);
        match (pos..run_end)
            .rev()
            .find(|&i| matches!(self.chars[i], '\r' | '\n'))
        {
            Some(last) => last + 1,
            None => self.spaces_end(pos, end),
        }
    }

    /// `\s+(?!\S)|\s+` at `pos` (a whitespace char): a run followed by more text gives up its
    /// last char, so that char can lead the next word (" world" keeps its space).
    fn spaces_end(&self, pos: usize, end: usize) -> usize {
        let run = self.run_end(pos, end, Class::Whitespace) - pos;
        if run > 1 && pos + run < end {
            pos + run - 1
        } else {
            pos + run
        }
    }
}

fn digits_end(t: &Chars, pos: usize, end: usize) -> usize {
    if t.classes[pos] == Class::Number {
        return pos + 1;
    }
    let mut p = pos;
    while p < end && t.classes[p] != Class::Number {
        p += 1;
    }
    p
}

fn newlines_end(t: &Chars, pos: usize, end: usize) -> usize {
    let newline = t.chars[pos] == '\n';
    let mut p = pos + 1;
    while p < end && (t.chars[p] == '\n') == newline {
        p += 1;
    }
    p
}

fn gpt2_end(t: &Chars, pos: usize, end: usize) -> usize {
    if let Some(n) = t.contraction(pos, end, false) {
        return pos + n;
    }
    // An optional leading space joins a letter, number or other-symbol run.
    let lead_space = usize::from(t.chars[pos] == ' ');
    match t.class(pos + lead_space, end) {
        Some(k @ (Class::Letter | Class::Number | Class::Other)) => {
            t.run_end(pos + lead_space, end, k)
        }
        _ => t.spaces_end(pos, end),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(name: &str, text: &str) -> Vec<String> {
        PreTokenizer::for_name(name)
            .unwrap()
            .split(text)
            .into_iter()
            .map(String::from)
            .collect()
    }

    // Expected pieces are what Python's `regex` module gives (`regex.findall`) for the patterns
    // documented on `Stage`; for smollm, `findall` of GPT-2's on the parts of `split(r"(\p{N})")`.
    #[test]
    fn gpt2_pattern() {
        assert_eq!(
            split("gpt-2", "Hello world's  end!!\n\n x"),
            ["Hello", " world", "'s", " ", " end", "!!", "\n\n", " x"]
        );
        assert_eq!(split("gpt-2", "a  "), ["a", "  "]);
        assert_eq!(split("gpt-2", " 123abc"), [" 123", "abc"]);
        assert_eq!(split("gpt-2", "DON'T"), ["DON", "'", "T"]);
    }

    #[test]
    fn llama3_pattern() {
        assert_eq!(
            split("llama-bpe", "Hello world's\n\n  (x) 12345 DON'T"),
            [
                "Hello", " world", "'s", "\n\n", " ", " (", "x", ")", " ", "123", "45", " DON",
                "'T"
            ]
        );
        assert_eq!(split("llama-bpe", "a \n b"), ["a", " \n", " b"]);
        assert_eq!(split("llama-bpe", "x.\r\n"), ["x", ".\r\n"]);
        assert_eq!(split("qwen2", "x123"), ["x", "1", "2", "3"]);
    }

    #[test]
    fn smollm_isolates_every_digit_first() {
        assert_eq!(
            split("smollm", "pi 3.14, x2"),
            ["pi", " ", "3", ".", "1", "4", ",", " x", "2"]
        );
    }

    #[test]
    fn pieces_cover_the_text() {
        let text = "  \t\u{3000}Ünï 日本語\r\n\r\n  ok?! 'LL 🦀🦀 ٣٤ ";
        for name in [
            "gpt-2",
            "llama-bpe",
            "qwen2",
            "qwen35",
            "smollm",
            "gpt-4o",
            "tekken",
            "gemma4",
            "deepseek-llm",
            "deepseek-coder",
            "falcon",
        ] {
            assert_eq!(split(name, text).concat(), text, "{name}");
        }
    }

    #[test]
    fn unknown_names_are_none() {
        assert_eq!(PreTokenizer::for_name("default"), None);
        assert_eq!(PreTokenizer::for_name("bloom"), None);
    }
}

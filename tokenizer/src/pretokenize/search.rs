//! Patterns llama.cpp has no hand-written matcher for, which it runs through `std::regex`: a
//! pattern is searched for from left to right, each match becomes a piece, and so does the text
//! between two matches (or before the first, or after the last). Classes read as llama.cpp's
//! regexes read them: `\s` is whitespace (llama.cpp spells non-ASCII whitespace as a vertical
//! tab first), `\p{L}`, `\p{N}` and `\p{P}` the general categories.

use super::{Chars, Class};
use crate::unicode::is_punctuation;
use std::ops::Range;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// `[\r\n]`
    Newline,
    /// `\s?\p{L}+`
    SpaceLetters,
    /// `\s?\p{P}+`
    SpacePunctuation,
    /// `[一-龥ࠀ-一가-퟿]+`: U+0800–U+9FA5 and U+AC00–U+D7FF.
    Cjk,
    /// `\p{N}+`
    Numbers,
    /// `\s?[A-Za-zµÀ-ÖØ-öø-ƺ…]+`: DeepSeek's list of cased letters, [`CASED_LETTERS`].
    SpaceCasedLetters,
    /// `\s?[!-/:-~！-／：-～‘-‟　-。]+`: ASCII punctuation, symbols and letters, and their
    /// full-width and CJK kin.
    SpaceSymbols,
    /// `\s+$`: the whitespace that ends the piece.
    TrailingSpaces,
    /// `[\p{P}\$\+<=>\^~\|`]+`
    PunctuationAndMath,
    /// `[0-9][0-9][0-9]`
    ThreeDigits,
}

/// The end of the piece starting at `pos`: the match there, or else the text up to the next
/// match.
pub(super) fn end(t: &Chars, pos: usize, end: usize, pattern: Pattern) -> usize {
    match match_at(t, pos, end, pattern) {
        Some(e) => e,
        None => next_match(t, pos + 1, end, pattern).map_or(end, |m| m.start),
    }
}

/// The leftmost match at or after `from`.
fn next_match(t: &Chars, from: usize, end: usize, pattern: Pattern) -> Option<Range<usize>> {
    if pattern == Pattern::TrailingSpaces {
        // Only the run that reaches the end can match, and it matches from its first char.
        let start = (from..end)
            .rev()
            .take_while(|&i| t.classes[i] == Class::Whitespace)
            .last()?;
        return Some(start..end);
    }
    (from..end).find_map(|pos| match_at(t, pos, end, pattern).map(|e| pos..e))
}

/// The end of the match starting at `pos`, if one does; matches are never empty.
fn match_at(t: &Chars, pos: usize, end: usize, pattern: Pattern) -> Option<usize> {
    let is = |i: usize, f: &dyn Fn(char, Class) -> bool| i < end && f(t.chars[i], t.classes[i]);
    let run = |from: usize, f: &dyn Fn(char, Class) -> bool| {
        let mut p = from;
        while is(p, f) {
            p += 1;
        }
        (p > from).then_some(p)
    };
    // `\s?X+`: a whitespace char joins the run after it.
    let space_run = |f: &dyn Fn(char, Class) -> bool| {
        let lead = usize::from(t.classes[pos] == Class::Whitespace && is(pos + 1, f));
        run(pos + lead, f)
    };
    match pattern {
        Pattern::Newline => matches!(t.chars[pos], '\r' | '\n').then_some(pos + 1),
        Pattern::SpaceLetters => space_run(&|_, k| k == Class::Letter),
        Pattern::SpacePunctuation => space_run(&|c, _| is_punctuation(c)),
        Pattern::Cjk => run(pos, &|c, k| {
            k != Class::Whitespace && matches!(u32::from(c), 0x800..=0x9FA5 | 0xAC00..=0xD7FF)
        }),
        Pattern::Numbers => run(pos, &|_, k| k == Class::Number),
        Pattern::SpaceCasedLetters => space_run(&|c, _| cased_letter(c)),
        Pattern::SpaceSymbols => space_run(&|c, k| {
            k != Class::Whitespace
                && matches!(
                    u32::from(c),
                    0x21..=0x2F | 0x3A..=0x7E | 0xFF01..=0xFF0F | 0xFF1A..=0xFF5E
                        | 0x2018..=0x201F | 0x3000..=0x3002
                )
        }),
        Pattern::TrailingSpaces => (t.run_end(pos, end, Class::Whitespace) == end
            && t.classes[pos] == Class::Whitespace)
            .then_some(end),
        Pattern::PunctuationAndMath => run(pos, &|c, _| {
            is_punctuation(c) || matches!(c, '$' | '+' | '<' | '=' | '>' | '^' | '~' | '|' | '`')
        }),
        Pattern::ThreeDigits => (pos + 3 <= end
            && t.chars[pos..pos + 3].iter().all(char::is_ascii_digit))
        .then_some(pos + 3),
    }
}

fn cased_letter(c: char) -> bool {
    let c = u32::from(c);
    CASED_LETTERS
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// The ranges of DeepSeek LLM's letter class, in order, as llama.cpp's pattern lists them.
const CASED_LETTERS: &[(u32, u32)] = &[
    (0x0041, 0x005A),
    (0x0061, 0x007A),
    (0x00B5, 0x00B5),
    (0x00C0, 0x00D6),
    (0x00D8, 0x00F6),
    (0x00F8, 0x01BA),
    (0x01BC, 0x01BF),
    (0x01C4, 0x0293),
    (0x0295, 0x02AF),
    (0x0370, 0x0373),
    (0x0376, 0x0376),
    (0x0377, 0x0377),
    (0x037B, 0x037D),
    (0x037F, 0x037F),
    (0x0386, 0x0386),
    (0x0388, 0x038A),
    (0x038C, 0x038C),
    (0x038E, 0x03A1),
    (0x03A3, 0x03F5),
    (0x03F7, 0x0481),
    (0x048A, 0x052F),
    (0x0531, 0x0556),
    (0x10A0, 0x10C5),
    (0x13A0, 0x13F5),
    (0x13F8, 0x13FD),
    (0x1C90, 0x1CBA),
    (0x1CBD, 0x1CBF),
    (0x1D00, 0x1D2B),
    (0x1D6B, 0x1D77),
    (0x1D79, 0x1D9A),
    (0x1E00, 0x1F15),
    (0x1F18, 0x1F1D),
    (0x1F20, 0x1F45),
    (0x1F48, 0x1F4D),
    (0x1F50, 0x1F57),
    (0x1F59, 0x1F59),
    (0x1F5B, 0x1F5B),
    (0x1F5D, 0x1F5D),
    (0x1F5F, 0x1F7D),
    (0x1F80, 0x1FB4),
    (0x1FB6, 0x1FBC),
    (0x1FBE, 0x1FBE),
    (0x1FC2, 0x1FC4),
    (0x1FC6, 0x1FCC),
    (0x1FD0, 0x1FD3),
    (0x1FD6, 0x1FDB),
    (0x1FE0, 0x1FEC),
    (0x1FF2, 0x1FF4),
    (0x1FF6, 0x1FFC),
    (0x2102, 0x2102),
    (0x2107, 0x2107),
    (0x210A, 0x2113),
    (0x2115, 0x2115),
    (0x2119, 0x211D),
    (0x2124, 0x2124),
    (0x2126, 0x2126),
    (0x2128, 0x2128),
    (0x212A, 0x212D),
    (0x212F, 0x2134),
    (0x2139, 0x2139),
    (0x213C, 0x213F),
    (0x2145, 0x2149),
    (0x214E, 0x214E),
    (0x2183, 0x2183),
    (0x2184, 0x2184),
    (0x2C00, 0x2C7B),
    (0x2C7E, 0x2CE4),
    (0x2CEB, 0x2CEE),
    (0x2CF2, 0x2CF2),
    (0x2CF3, 0x2CF3),
    (0xA640, 0xA66D),
    (0xA680, 0xA69B),
    (0xA722, 0xA76F),
    (0xA771, 0xA787),
    (0xA78B, 0xA78E),
    (0xAB70, 0xABBF),
    (0xFB00, 0xFB06),
    (0xFB13, 0xFB17),
    (0xFF21, 0xFF3A),
    (0xFF41, 0xFF5A),
    (0x10400, 0x1044F),
    (0x104B0, 0x104D3),
    (0x104D8, 0x104FB),
    (0x10C80, 0x10CB2),
    (0x10CC0, 0x10CF2),
    (0x118A0, 0x118DF),
    (0x1E900, 0x1E943),
];

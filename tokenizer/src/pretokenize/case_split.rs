//! The GPT-4o / Tekken pattern as llama.cpp runs it. llama.cpp has no hand-written matcher for
//! it: it runs the pattern through `std::regex` on a copy of the text where every non-ASCII
//! char is replaced by one byte for its class, and rewrites the case classes as
//! `(?=[\p{L}])([^a-z])` ("a letter other than a–z") and `(?=[\p{L}])([^A-Z])` ("a letter other
//! than A–Z"). So every non-ASCII letter counts as both upper and lower case, and marks are
//! not letters; the ids llama.cpp gives follow from that reading, reproduced here with the
//! regex engine's ordered alternation and backtracking.

use super::{Chars, Class};

/// The end of the piece starting at `pos`; the pattern matches at every position, so the
/// text between matches is never left over.
pub(super) fn end(
    t: &Chars,
    pos: usize,
    end: usize,
    max_digits: usize,
    contractions: bool,
) -> usize {
    let c = t.chars[pos];
    let k = t.classes[pos];
    // `[^\r\n\p{L}\p{N}]?` before the letters of the first two alternatives.
    let lead = if k == Class::Letter {
        Some(0)
    } else if !matches!(c, '\r' | '\n')
        && k != Class::Number
        && t.class(pos + 1, end) == Some(Class::Letter)
    {
        Some(1)
    } else {
        None
    };
    if let Some(lead) = lead {
        let mut word = letters_end(t, pos + lead, end);
        if contractions {
            word += t.contraction(word, end, true).unwrap_or(0);
        }
        return word;
    }
    if k == Class::Number {
        let run = t.run_end(pos, end, Class::Number);
        return run.min(pos + max_digits.max(1));
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
    let lead_space = usize::from(c == ' ');
    if t.class(pos + lead_space, end) == Some(Class::Other) {
        let mut p = t.run_end(pos + lead_space, end, Class::Other);
        while matches!(t.char(p, end), Some('\r' | '\n' | '/')) {
            p += 1;
        }
        return p;
    }
    t.whitespace_end(pos, end)
}

/// `U*L+|U+L*` from `start` (a letter), where U is a letter but a–z and L a letter but A–Z.
fn letters_end(t: &Chars, start: usize, end: usize) -> usize {
    let is_letter = |i: usize, excluded: fn(&char) -> bool| {
        t.class(i, end) == Some(Class::Letter) && !excluded(&t.chars[i])
    };
    let upper = |i: usize| is_letter(i, char::is_ascii_lowercase);
    let lower = |i: usize| is_letter(i, char::is_ascii_uppercase);
    let mut u = start;
    while upper(u) {
        u += 1;
    }
    let mut l = u;
    while lower(l) {
        l += 1;
    }
    if l > u {
        return l;
    }
    // `U*` gives back chars until one of them can start `L+`: the last non-ASCII letter of
    // the run, which ends the match since the A–Z after it are not L. Failing that the second
    // alternative takes the whole run.
    (start..u).rev().find(|&i| lower(i)).map_or(u, |i| i + 1)
}

//! Llama 3's pattern and its Qwen variants, as llama.cpp's hand-written matchers read them.

use super::{Chars, Class};
use crate::unicode::is_mark;

/// The end of the piece starting at `pos`. With `marks`, a mark counts as a letter where the
/// pattern reads `[\p{L}\p{M}]` and is kept out of the run of other chars.
pub(super) fn end(t: &Chars, pos: usize, end: usize, max_digits: usize, marks: bool) -> usize {
    if let Some(n) = t.contraction(pos, end, true) {
        return pos + n;
    }
    let c = t.chars[pos];
    let k = t.classes[pos];
    let mark = |i: usize| marks && t.char(i, end).is_some_and(is_mark);
    let wordy = |i: usize| t.class(i, end) == Some(Class::Letter) || mark(i);
    // `[^\r\n\p{L}\p{N}]?\p{L}+`: one char that is no newline or number may lead letters.
    let newline = c == '\r' || c == '\n';
    if !newline && k != Class::Number && (wordy(pos) || wordy(pos + 1)) {
        let mut p = pos + 1;
        while wordy(p) {
            p += 1;
        }
        return p;
    }
    if k == Class::Number {
        let run = t.run_end(pos, end, Class::Number);
        return run.min(pos + max_digits.max(1));
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`; a space at the very end of the piece matches it alone, as in
    // llama.cpp.
    let lead_space = usize::from(c == ' ');
    let other = |i: usize| t.class(i, end) == Some(Class::Other) && !mark(i);
    if other(pos + lead_space) || pos + lead_space == end {
        let mut p = pos + lead_space;
        while other(p) {
            p += 1;
        }
        while matches!(t.char(p, end), Some('\r' | '\n')) {
            p += 1;
        }
        return p;
    }
    t.whitespace_end(pos, end)
}

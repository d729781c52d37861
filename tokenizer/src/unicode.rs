//! The character classes the pre-tokenizers test, with llama.cpp's meanings: a letter is any
//! `L*` general category (`\p{L}`), a number any `N*` (`\p{N}`), whitespace the Unicode
//! White_Space property (`\s`). Marks (`M*`) are not letters, which is why `char::is_alphabetic`
//! (it includes many marks) will not do.

use unicode_general_category::{get_general_category, GeneralCategory as G};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Letter,
    Number,
    Whitespace,
    /// Everything else: punctuation, symbols, marks, controls, unassigned code points.
    Other,
}

/// White_Space chars are all separators or controls, so the classes never overlap.
pub(crate) fn class(c: char) -> Class {
    if c.is_whitespace() {
        return Class::Whitespace;
    }
    match get_general_category(c) {
        G::UppercaseLetter
        | G::LowercaseLetter
        | G::TitlecaseLetter
        | G::ModifierLetter
        | G::OtherLetter => Class::Letter,
        G::DecimalNumber | G::LetterNumber | G::OtherNumber => Class::Number,
        _ => Class::Other,
    }
}

/// `\p{M}`: any `M*` general category (a combining, spacing or enclosing mark).
pub(crate) fn is_mark(c: char) -> bool {
    matches!(
        get_general_category(c),
        G::NonspacingMark | G::SpacingMark | G::EnclosingMark
    )
}

/// `\p{P}`: any `P*` general category.
pub(crate) fn is_punctuation(c: char) -> bool {
    matches!(
        get_general_category(c),
        G::ConnectorPunctuation
            | G::DashPunctuation
            | G::OpenPunctuation
            | G::ClosePunctuation
            | G::InitialPunctuation
            | G::FinalPunctuation
            | G::OtherPunctuation
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_unicode_database() {
        // Facts from UnicodeData.txt: U+0E31 THAI CHARACTER MAI HAN-AKAT is Mn (a mark, though
        // Alphabetic), U+00B2 SUPERSCRIPT TWO is No, U+2167 ROMAN NUMERAL EIGHT is Nl, U+3000
        // IDEOGRAPHIC SPACE and U+0085 NEXT LINE are White_Space, U+02B0 is Lm.
        assert_eq!(class('a'), Class::Letter);
        assert_eq!(class('Ж'), Class::Letter);
        assert_eq!(class('語'), Class::Letter);
        assert_eq!(class('\u{02B0}'), Class::Letter);
        assert_eq!(class('\u{0E31}'), Class::Other);
        assert_eq!(class('7'), Class::Number);
        assert_eq!(class('\u{00B2}'), Class::Number);
        assert_eq!(class('\u{2167}'), Class::Number);
        assert_eq!(class('\u{3000}'), Class::Whitespace);
        assert_eq!(class('\u{0085}'), Class::Whitespace);
        assert_eq!(class('\t'), Class::Whitespace);
        assert_eq!(class('!'), Class::Other);
        assert_eq!(class('🦀'), Class::Other);
        assert_eq!(class('\u{200D}'), Class::Other);
        // U+0301 COMBINING ACUTE ACCENT is Mn, U+0903 DEVANAGARI SIGN VISARGA Mc, U+20DD
        // COMBINING ENCLOSING CIRCLE Me; U+0E31 above is Mn too.
        assert!(is_mark('\u{0301}') && is_mark('\u{0903}') && is_mark('\u{20DD}'));
        assert!(is_mark('\u{0E31}') && !is_mark('a') && !is_mark('\u{200D}'));
    }
}

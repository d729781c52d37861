//! GPT-2's byte-level alphabet: byte-level BPE vocabularies spell every byte as one printable
//! char, so that token strings never hold raw spaces, controls or partial UTF-8. Printable
//! Latin-1 bytes (`!`..=`~`, `¡`..=`¬`, `®`..=`ÿ`) stand for themselves; the other 68 bytes, in
//! ascending order, take the chars U+0100, U+0101, ….

/// How many bytes before `b` are not printable Latin-1, for a byte that is not.
fn unprintable_rank(b: u8) -> Option<u32> {
    match b {
        0x00..=0x20 => Some(u32::from(b)),
        0x7F..=0xA0 => Some(33 + u32::from(b - 0x7F)),
        0xAD => Some(67),
        _ => None,
    }
}

pub(crate) fn byte_to_char(b: u8) -> char {
    match unprintable_rank(b) {
        // 0x100 + rank is at most U+0143, always a valid char.
        Some(rank) => char::from_u32(0x100 + rank).unwrap_or(char::REPLACEMENT_CHARACTER),
        None => char::from(b),
    }
}

pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let code = u32::from(c);
    match code {
        0x100..=0x120 => u8::try_from(code - 0x100).ok(),
        0x121..=0x142 => u8::try_from(code - 0x121 + 0x7F).ok(),
        0x143 => Some(0xAD),
        0..=0xFF => u8::try_from(code)
            .ok()
            .filter(|&b| unprintable_rank(b).is_none()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_spellings() {
        // As in every GPT-2-style vocab.json: "Ġ" is a space, "Ċ" a newline, "ĉ" a tab.
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'\t'), 'ĉ');
        assert_eq!(byte_to_char(0x00), 'Ā');
        assert_eq!(byte_to_char(0xAD), 'Ń');
        assert_eq!(byte_to_char(b'a'), 'a');
        assert_eq!(byte_to_char(0xE9), 'é');
    }

    #[test]
    fn the_alphabet_is_a_bijection() {
        let mut seen = std::collections::HashSet::new();
        for b in 0..=255u8 {
            let c = byte_to_char(b);
            assert!(seen.insert(c), "{c:?} twice");
            assert_eq!(char_to_byte(c), Some(b));
        }
        assert_eq!(char_to_byte(' '), None);
        assert_eq!(char_to_byte('\u{144}'), None);
        assert_eq!(char_to_byte('€'), None);
    }
}

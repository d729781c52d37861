//! Turning a stream of token bytes into text as it arrives. A token can end in the middle of a
//! UTF-8 sequence (byte-level BPE splits emoji and CJK across tokens), so the incomplete tail
//! is held back until the bytes that complete it arrive.

/// Streams text as tokens arrive, holding back an incomplete UTF-8 sequence until it completes.
/// Bytes that can never be valid UTF-8 come out as U+FFFD, as in [`String::from_utf8_lossy`].
#[derive(Debug, Default)]
pub struct TextStream {
    pending: Vec<u8>,
}

impl TextStream {
    pub fn new() -> TextStream {
        TextStream::default()
    }

    /// The text that `bytes` completes.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // The prefix was just checked, so this never replaces anything.
                    out.push_str(&String::from_utf8_lossy(valid));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let drop = self.pending.len() - keep;
        self.pending.drain(..drop);
        out
    }

    /// What is still held back, with an incomplete sequence as U+FFFD.
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_character_waits_for_its_last_byte() {
        // "é" is C3 A9; "🦀" is F0 9F A6 80 (UTF-8 by definition).
        let mut s = TextStream::new();
        assert_eq!(s.push(b"caf\xC3"), "caf");
        assert_eq!(s.push(b"\xA9 \xF0\x9F"), "é ");
        assert_eq!(s.push(b"\xA6"), "");
        assert_eq!(s.push(b"\x80!"), "🦀!");
        assert_eq!(s.finish(), "");
    }

    #[test]
    fn one_byte_at_a_time() {
        let text = "Ünïcödé 日本語 🦀👍🏽";
        let mut s = TextStream::new();
        let out: String = text.bytes().map(|b| s.push(&[b])).collect();
        assert_eq!(out, text);
        assert_eq!(s.finish(), "");
    }

    #[test]
    fn invalid_bytes_are_replaced_at_once() {
        let mut s = TextStream::new();
        // 0xFF never starts a sequence; C3 followed by 'x' can never complete.
        assert_eq!(s.push(b"a\xFFb\xC3x"), "a\u{FFFD}b\u{FFFD}x");
        assert_eq!(s.push(b"\xE6\x97"), "");
        assert_eq!(s.finish(), "\u{FFFD}");
    }
}

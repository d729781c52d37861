//! What a token prints: the bytes it stands for in output text.

use super::attr::Attr;
use super::byte_level::char_to_byte;
use super::vocab::Vocab;

/// The bytes `id` stands for. Control and unknown tokens print nothing; user-defined ones print
/// their text; normal ones their text decoded (byte-level BPE: each char back to its byte;
/// SentencePiece: `▁` back to a space); byte tokens `<0xXX>` the byte. A byte-level token char
/// outside GPT-2's alphabet (hand-added tokens) prints as itself, where llama.cpp prints a
/// bracketed `[UNK_BYTE_…]` marker.
pub(crate) fn token_bytes(vocab: &Vocab, id: u32, byte_level: bool) -> Vec<u8> {
    let attr = vocab.attr(id);
    let text = vocab.text(id);
    if attr.has(Attr::CONTROL | Attr::UNKNOWN) {
        Vec::new()
    } else if attr.has(Attr::USER_DEFINED) {
        text.as_bytes().to_vec()
    } else if attr.has(Attr::NORMAL) {
        if byte_level {
            let mut out = Vec::with_capacity(text.len());
            let mut utf8 = [0u8; 4];
            for c in text.chars() {
                match char_to_byte(c) {
                    Some(b) => out.push(b),
                    None => out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes()),
                }
            }
            out
        } else {
            text.replace('\u{2581}', " ").into_bytes()
        }
    } else if attr.has(Attr::BYTE) {
        byte_token_value(text).into_iter().collect()
    } else {
        Vec::new()
    }
}

/// The byte a `<0xXX>` token spells.
pub(crate) fn byte_token_value(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// The `<0xXX>` spelling of `b`, upper-case as SentencePiece writes it.
pub(crate) fn byte_token_text(b: u8) -> String {
    format!("<0x{b:02X}>")
}

//! Token attributes: how a token is matched in text and how it prints. They start from the GGUF
//! token type and are adjusted by name where conversions mislabel tokens, as llama.cpp does.

use std::ops::BitOr;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Attr(u8);

impl Attr {
    /// No flag: GGUF's "undefined" and "unused" types, which neither match nor print.
    pub const NONE: Attr = Attr(0);
    pub const NORMAL: Attr = Attr(1);
    pub const UNKNOWN: Attr = Attr(1 << 1);
    pub const CONTROL: Attr = Attr(1 << 2);
    pub const USER_DEFINED: Attr = Attr(1 << 3);
    pub const BYTE: Attr = Attr(1 << 4);

    /// From `tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control, 4 user-defined,
    /// 5 unused, 6 byte (llama.cpp's `llama_token_type`).
    pub fn from_token_type(t: i32) -> Attr {
        match t {
            1 => Attr::NORMAL,
            2 => Attr::UNKNOWN,
            3 => Attr::CONTROL,
            4 => Attr::USER_DEFINED,
            6 => Attr::BYTE,
            _ => Attr::NONE,
        }
    }

    /// Whether any flag of `flags` is set.
    pub fn has(self, flags: Attr) -> bool {
        self.0 & flags.0 != 0
    }
}

impl BitOr for Attr {
    type Output = Attr;
    fn bitor(self, rhs: Attr) -> Attr {
        Attr(self.0 | rhs.0)
    }
}

//! Everything that can be wrong with a tokenizer's metadata, or with a request made of it. Each
//! variant names the offending value, so a bad file can be diagnosed from the message alone.

use trine_gguf::GgufError;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A key that is missing or of the wrong type, as the GGUF reader reports it.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(
        "tokenizer.ggml.model = {name:?} is not supported (only \"gpt2\", \"gemma4\" and \"llama\")"
    )]
    UnknownModel { name: String },
    /// `supported` lists the names trine implements.
    #[error("tokenizer.ggml.pre = {name:?} is not a pre-tokenizer trine implements ({supported})")]
    UnknownPreTokenizer { name: String, supported: String },
    #[error("tokenizer.ggml.pre is missing: a byte-level BPE vocab needs its pre-tokenizer named")]
    MissingPreTokenizer,
    #[error("tokenizer.ggml.tokens is empty")]
    EmptyVocab,
    #[error("tokenizer.ggml.tokens has {len} entries, more than token ids can number")]
    VocabTooLarge { len: usize },
    #[error("{key} has {len} entries for {n_tokens} tokens")]
    LengthMismatch {
        key: &'static str,
        len: usize,
        n_tokens: usize,
    },
    #[error("token {text:?} appears twice, as ids {first} and {second}")]
    DuplicateToken {
        text: String,
        first: u32,
        second: u32,
    },
    #[error("merge {index} ({merge:?}) is not two tokens separated by a space")]
    MalformedMerge { index: usize, merge: String },
    #[error("merge {index} ({merge:?}) names {part:?}, which is not a token")]
    MergeUnknownToken {
        index: usize,
        merge: String,
        part: String,
    },
    #[error("merge {index} ({merge:?}) makes {result:?}, which is not a token")]
    MergeResultUnknown {
        index: usize,
        merge: String,
        result: String,
    },
    #[error("{key} = {id} is outside the vocab of {n_tokens} tokens")]
    SpecialIdOutOfRange {
        key: &'static str,
        id: u32,
        n_tokens: usize,
    },
    #[error("token {id} ({text:?}) has the byte type but is not spelled <0xXX>")]
    BadByteToken { id: u32, text: String },
    #[error("token id {id} is outside the vocab of {n_tokens} tokens")]
    TokenIdOutOfRange { id: u32, n_tokens: usize },
    #[error("the metadata asks to add {which} but names no {which} token")]
    MissingSpecialToken { which: &'static str },
    /// A chat template that does not parse, or fails while rendering (its own
    /// `raise_exception` included); `detail` is minijinja's message, which names the construct
    /// and the line.
    #[error("chat template {origin}: {detail}")]
    ChatTemplate { origin: String, detail: String },
    #[error("byte 0x{byte:02X} has no token (neither <0x{byte:02X}> nor the byte itself)")]
    NoByteToken { byte: u8 },
}

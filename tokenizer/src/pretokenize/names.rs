//! Which pre-tokenizer each `tokenizer.ggml.pre` name selects in llama.cpp, for the names trine
//! runs.

use super::{Bos, Pattern, PreTokenizer, Stage, WholeWords};

const GPT2: &[Stage] = &[Stage::Gpt2];
const DIGITS_GPT2: &[Stage] = &[Stage::Digits, Stage::Gpt2];
const LLAMA3: &[Stage] = &[Stage::Llama3 {
    max_digits: 3,
    marks: false,
}];
const QWEN2: &[Stage] = &[Stage::Llama3 {
    max_digits: 1,
    marks: false,
}];
const QWEN35: &[Stage] = &[Stage::Llama3 {
    max_digits: 1,
    marks: true,
}];
const DEEPSEEK_LLM: &[Stage] = &[
    Stage::Search(Pattern::Newline),
    Stage::Search(Pattern::SpaceCasedLetters),
    Stage::Search(Pattern::SpaceSymbols),
    Stage::Search(Pattern::TrailingSpaces),
    Stage::Search(Pattern::Cjk),
    Stage::Search(Pattern::Numbers),
];
const DEEPSEEK_CODER: &[Stage] = &[
    Stage::Search(Pattern::Newline),
    Stage::Search(Pattern::SpaceLetters),
    Stage::Search(Pattern::SpacePunctuation),
    Stage::Search(Pattern::Cjk),
    Stage::Digits,
];
const FALCON: &[Stage] = &[
    Stage::Search(Pattern::PunctuationAndMath),
    Stage::Gpt2,
    Stage::Search(Pattern::ThreeDigits),
];
const GPT4O: &[Stage] = &[Stage::CaseSplit {
    max_digits: 3,
    contractions: true,
}];
const TEKKEN: &[Stage] = &[Stage::CaseSplit {
    max_digits: 1,
    contractions: false,
}];

const fn byte_level(
    stages: &'static [Stage],
    whole_words: WholeWords,
    add_bos: bool,
) -> PreTokenizer {
    PreTokenizer {
        stages,
        whole_words,
        bos: Bos::Default(add_bos),
        byte_level: true,
    }
}

/// Every `tokenizer.ggml.pre` name trine runs, grouped by what llama.cpp selects for it.
const NAMED: &[(&[&str], PreTokenizer)] = &[
    (
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        byte_level(LLAMA3, WholeWords::Always, true),
    ),
    (
        &["dbrx", "smaug-bpe"],
        byte_level(LLAMA3, WholeWords::Never, false),
    ),
    (
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "megrez",
            "stablelm2",
            "hunyuan",
            "solar-open",
        ],
        byte_level(QWEN2, WholeWords::Never, false),
    ),
    (&["qwen35"], byte_level(QWEN35, WholeWords::Never, false)),
    (
        &[
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "exaone4",
            "mpt",
            "olmo",
            "jais",
            "trillion",
            "granite-docling",
        ],
        byte_level(GPT2, WholeWords::Never, false),
    ),
    (
        &[
            "starcoder",
            "refact",
            "command-r",
            "smollm",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        byte_level(DIGITS_GPT2, WholeWords::Never, false),
    ),
    (
        &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        byte_level(GPT4O, WholeWords::Never, false),
    ),
    (&["tekken"], byte_level(TEKKEN, WholeWords::Always, true)),
    (
        &["deepseek-llm"],
        byte_level(DEEPSEEK_LLM, WholeWords::Never, false),
    ),
    (
        &["deepseek-coder"],
        byte_level(DEEPSEEK_CODER, WholeWords::Never, false),
    ),
    (&["falcon"], byte_level(FALCON, WholeWords::Never, false)),
    (
        &["gemma4", "granite-embed-multi-311m"],
        PreTokenizer::GEMMA4,
    ),
];

impl PreTokenizer {
    /// Gemma 4's: runs of newlines and runs of other text, merged as SentencePiece-style BPE.
    /// `tokenizer.ggml.model = "gemma4"` selects it whatever `tokenizer.ggml.pre` says.
    pub const GEMMA4: PreTokenizer = PreTokenizer {
        stages: &[Stage::Newlines],
        whole_words: WholeWords::Newlines,
        bos: Bos::Always,
        byte_level: false,
    };

    /// The pre-tokenizer llama.cpp uses for `name`, for the names whose patterns are written
    /// here; `None` for every other name.
    pub fn for_name(name: &str) -> Option<PreTokenizer> {
        NAMED
            .iter()
            .find(|(names, _)| names.contains(&name))
            .map(|&(_, pre)| pre)
    }

    /// Every name [`PreTokenizer::for_name`] knows.
    pub fn names() -> impl Iterator<Item = &'static str> {
        NAMED.iter().flat_map(|(names, _)| names.iter().copied())
    }
}

//! llama.cpp's vocab test files, shared by the tests that read them: `.inp` holds texts
//! separated by the line `__ggml_vocab_test__`, `.out` the ids llama.cpp gives each text (one
//! line per text, no BOS/EOS, special tokens not parsed).

use trine_tokenizer::Tokenizer;

/// The texts of an `.inp` file, cut as `test-tokenizer-0` cuts them: at each
/// `"\n__ggml_vocab_test__\n"`, with no empty text after the last separator.
pub fn split_texts(raw: &str) -> Vec<&str> {
    const SEP: &str = "\n__ggml_vocab_test__\n";
    let mut texts = Vec::new();
    let mut rest = raw;
    while !rest.is_empty() {
        match rest.find(SEP) {
            Some(at) => {
                texts.push(&rest[..at]);
                rest = &rest[at + SEP.len()..];
            }
            None => {
                texts.push(rest);
                rest = "";
            }
        }
    }
    texts
}

/// The id lines of an `.out` file; `origin` names it in errors.
pub fn parse_ids(raw: &str, origin: &str) -> Vec<Vec<u32>> {
    raw.lines()
        .map(|line| {
            line.split_whitespace()
                .map(|t| t.parse().unwrap_or_else(|e| panic!("{origin}: {t:?}: {e}")))
                .collect()
        })
        .collect()
}

fn pieces(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
    ids.iter()
        .map(|&id| String::from_utf8_lossy(&tok.token_bytes(id).unwrap()).into_owned())
        .collect()
}

/// Every text of `inp` must encode to its line of `out`; with `round_trip` it must also decode
/// back to the text. `name` labels the failure, which shows the first differing text.
pub fn check(name: &str, tok: &Tokenizer, inp: &str, out: &str, round_trip: bool) {
    let texts = split_texts(inp);
    let ids = parse_ids(out, name);
    assert_eq!(
        texts.len(),
        ids.len(),
        "{name}: texts and id lines disagree on the test count"
    );
    assert!(!texts.is_empty(), "{name}: no test texts");
    let mut failures = Vec::new();
    for (text, expected) in texts.iter().zip(&ids) {
        let got = tok.encode(text, false, false).unwrap();
        if &got != expected {
            failures.push(format!(
                "text {text:?}\n  expected {expected:?} {:?}\n  got      {got:?} {:?}",
                pieces(tok, expected),
                pieces(tok, &got)
            ));
        }
        if round_trip {
            assert_eq!(&tok.decode(&got).unwrap(), text, "{name}: round trip");
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} texts differ from llama.cpp; the first:\n{}",
        failures.len(),
        texts.len(),
        failures[0]
    );
}

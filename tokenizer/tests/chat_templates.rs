//! Real models' chat templates rendered by trine against Python's jinja2, byte for byte:
//! `tokenizer/tests/fixtures/chat/rendered.json`, written by
//! `scripts/reference/chat_templates.py` from the `.jinja` files beside it. A conversation the
//! template refuses (its `raise_exception`) must fail here with the same message.

use serde::Deserialize;
use std::collections::BTreeMap;
use trine_gguf::assets;
use trine_gguf::Gguf;
use trine_tokenizer::{ChatTemplate, Message, Tokenizer, TokenizerError};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/chat");

#[derive(Deserialize)]
struct Rendered {
    now: i64,
    tokens: BTreeMap<String, Tokens>,
    conversations: BTreeMap<String, Vec<Turn>>,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Tokens {
    bos: String,
    eos: String,
}

#[derive(Deserialize)]
struct Turn {
    role: String,
    content: String,
}

#[derive(Deserialize)]
struct Case {
    template: String,
    conversation: String,
    add_generation_prompt: bool,
    rendered: Option<String>,
    error: Option<String>,
}

fn source(name: &str) -> String {
    let path = format!("{FIXTURES}/{name}.jinja");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn reference() -> Rendered {
    let path = format!("{FIXTURES}/rendered.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn every_template_renders_what_jinja2_renders() {
    let r = reference();
    let mut templates = BTreeMap::new();
    for (name, t) in &r.tokens {
        let tmpl = ChatTemplate::new(source(name), name, &t.bos, &t.eos)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .at(r.now);
        templates.insert(name.clone(), tmpl);
    }
    assert_eq!(templates.len(), 9);
    assert_eq!(r.cases.len(), 9 * 7 * 2);
    for c in &r.cases {
        let messages: Vec<Message> = r.conversations[&c.conversation]
            .iter()
            .map(|t| Message::new(&t.role, &t.content))
            .collect();
        let what = format!(
            "{} on {} (generation prompt {})",
            c.template, c.conversation, c.add_generation_prompt
        );
        let got = templates[&c.template].render(&messages, c.add_generation_prompt);
        match (&c.rendered, &c.error, got) {
            (Some(want), None, Ok(got)) => assert_eq!(&got, want, "{what}"),
            (None, Some(want), Err(TokenizerError::ChatTemplate { origin, detail })) => {
                assert_eq!(origin, c.template, "{what}");
                assert!(detail.contains(want.as_str()), "{what}: {detail}");
                // minijinja names the line of the template that raised.
                assert!(detail.contains(&format!("(in {}:", c.template)), "{detail}");
            }
            (_, _, got) => panic!(
                "{what}: jinja2 gave {:?} / {:?}, trine {got:?}",
                c.rendered, c.error
            ),
        }
    }
}

#[test]
fn a_template_that_cannot_parse_is_refused_naming_the_line() {
    let e = ChatTemplate::new(
        "{% for m in messages %}\n{{ m.content }\n{% endfor %}".into(),
        "broken.jinja",
        "",
        "",
    )
    .unwrap_err();
    let text = e.to_string();
    assert!(
        text.starts_with("chat template broken.jinja: syntax error"),
        "{text}"
    );
    assert!(text.contains("(in broken.jinja:2)"), "{text}");

    let unknown = ChatTemplate::new("{{ messages | frobnicate }}".into(), "f.jinja", "", "")
        .unwrap()
        .render(&[Message::new("user", "hi")], true)
        .unwrap_err()
        .to_string();
    assert!(unknown.contains("unknown filter"), "{unknown}");
}

/// The SmolLM2 fixture is the model file's own template, and the model's BOS and EOS are the
/// tokens the fixture was rendered with.
#[test]
fn smollm2_fixture_is_the_gguf_template() {
    let Some(model) = assets::for_test(assets::SMOLLM2) else {
        return;
    };
    let g = Gguf::open(&model).unwrap();
    let tok = Tokenizer::from_gguf(&g).unwrap();
    let tmpl = ChatTemplate::from_gguf(&g, &tok).unwrap().unwrap();
    assert_eq!(tmpl.source(), source("smollm2"));
    let r = reference();
    let (bos, eos) = tok.bos_eos_text();
    assert_eq!(
        (bos.as_str(), eos.as_str()),
        (
            r.tokens["smollm2"].bos.as_str(),
            r.tokens["smollm2"].eos.as_str()
        )
    );
}

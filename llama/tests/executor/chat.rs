//! Conversations: a rewound session forgets what it held past the rewind, and a chat's prompt
//! carries one BOS where the template prints it and the vocab adds it too.

use super::common::{cpu, tiny, SIZES};
use std::sync::Arc;
use trine_gguf::synth::{synth_llama, SynthShape};
use trine_gguf::{Gguf, Value};
use trine_llama::{prompt_ids, Engine, Model, Session};
use trine_tokenizer::{ChatTemplate, Message};

/// Two sessions that held different tokens past position 3 and were rewound there give the
/// same logits, to the bit, for what follows: nothing of the forgotten tokens is read.
#[test]
fn a_rewound_session_forgets_what_followed() {
    let model = tiny();
    let after = |forgotten: [u32; 3]| {
        let mut s = Session::new(Engine::new(model.clone(), cpu(), SIZES).unwrap(), None);
        let mut first = vec![17, 90, 200];
        first.extend(forgotten);
        s.feed(&first).unwrap();
        s.rewind(3);
        assert_eq!(s.position(), 3);
        let prompt = s.feed(&[40, 41]).unwrap();
        (prompt, s.feed(&[42]).unwrap())
    };
    let (a, b) = (after([5, 6, 7]), after([250, 3, 99]));
    assert_eq!(a, b);
    // The forgotten tokens did change the logits while they were held.
    let mut s = Session::new(Engine::new(model.clone(), cpu(), SIZES).unwrap(), None);
    let held = s.feed(&[17, 90, 200, 5, 6, 7, 40, 41]).unwrap();
    assert_ne!(held, a.0);
}

/// A template that prints `bos_token` itself, on a vocab that adds BOS: the prompt has one
/// BOS, as llama.cpp's chat takes the template's off before the tokenizer adds its own.
#[test]
fn a_chat_prompt_has_one_bos() {
    let mut w = synth_llama(SynthShape::TINY, 5).unwrap();
    w.add("tokenizer.ggml.add_bos_token", Value::Bool(true))
        .unwrap();
    let model = Arc::new(Model::from_gguf(Gguf::from_bytes(w.to_bytes()).unwrap()).unwrap());
    let tok = &model.tokenizer;
    let bos = tok.bos().unwrap();
    let (bos_text, eos_text) = tok.bos_eos_text();
    let template = ChatTemplate::new(
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}".into(),
        "test",
        &bos_text,
        &eos_text,
    )
    .unwrap();
    let ids = prompt_ids(tok, &template, &[Message::new("user", "hi")], true).unwrap();
    assert_eq!(ids, tok.encode("[user] hi", true, true).unwrap());
    assert_eq!(ids.iter().filter(|&&id| id == bos).count(), 1, "{ids:?}");
    assert_eq!(ids[0], bos);
}

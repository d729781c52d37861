//! Conversations with a model through its chat template: each turn renders the whole
//! conversation, encodes it with special tokens parsed, and feeds the session only what its
//! KV cache does not hold yet. The cache holds the tokens of the earlier turns, the replies'
//! as they were generated; where the new rendering parts from them (a template that rewrites
//! earlier text, a reply whose text encodes to other tokens), the session is rewound to where
//! they part and refilled from there, so a turn computes what a fresh run of the whole
//! rendered conversation computes.

use super::error::ModelError;
use super::generate::{generate_with, GenerateOptions, Report};
use super::sampler::Sampler;
use super::session::Session;
use std::ops::ControlFlow;
use trine_tokenizer::{ChatTemplate, Message, Tokenizer};

/// The ids of `messages` as the model reads them: rendered by `template`, then encoded as
/// llama.cpp encodes a chat: special tokens parsed, BOS (and EOS) added as the vocab says,
/// a BOS or EOS the template printed itself taken off first so that it is not doubled.
pub fn prompt_ids(
    tok: &Tokenizer,
    template: &ChatTemplate,
    messages: &[Message],
    add_generation_prompt: bool,
) -> Result<Vec<u32>, ModelError> {
    let mut text = template.render(messages, add_generation_prompt)?;
    let (bos, eos) = tok.bos_eos_text();
    if tok.adds_bos() && !bos.is_empty() && text.starts_with(&bos) {
        text.drain(..bos.len());
    }
    if tok.adds_eos() && !eos.is_empty() && text.ends_with(&eos) {
        text.truncate(text.len() - eos.len());
    }
    Ok(tok.encode(&text, true, true)?)
}

/// What one turn did.
#[derive(Clone, Debug)]
pub struct Turn {
    /// The reply's text (without the end-of-generation token).
    pub reply: String,
    /// Tokens of the rendered conversation the KV cache held already.
    pub reused: usize,
    pub report: Report,
}

/// A conversation: its messages, and the tokens the session's KV cache holds for them.
pub struct Chat {
    template: ChatTemplate,
    messages: Vec<Message>,
    held: Vec<u32>,
    sampler: Sampler,
}

impl Chat {
    /// A conversation that opens with `system` where given. One sampler serves every turn:
    /// its generator goes on drawing, and its penalties look back over the whole context.
    pub fn new(template: ChatTemplate, system: Option<&str>, sampler: Sampler) -> Chat {
        Chat {
            template,
            messages: system
                .map(|s| vec![Message::new("system", s)])
                .unwrap_or_default(),
            held: vec![],
            sampler,
        }
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The user says `text`; the model's reply is streamed to `on_text` and kept in the
    /// conversation. `session` must be the one every earlier turn ran on.
    pub fn turn(
        &mut self,
        session: &mut Session,
        text: &str,
        opts: GenerateOptions,
        on_text: impl FnMut(&str) -> ControlFlow<()>,
    ) -> Result<Turn, ModelError> {
        let mut messages = self.messages.clone();
        messages.push(Message::new("user", text));
        let tok = &session.engine().model().tokenizer;
        let ids = prompt_ids(tok, &self.template, &messages, true)?;
        // The last token is always fed: its logits choose the reply's first token.
        let reused = common_prefix(&self.held, &ids).min(ids.len().saturating_sub(1));
        session.rewind(reused as u32);
        self.held.truncate(reused);
        self.sampler.forget();
        for &id in &ids[..reused] {
            self.sampler.accept(id);
        }
        let report = generate_with(session, &mut self.sampler, &ids[reused..], opts, on_text)
            .map_err(|i| {
                // What was fed before the failure is in the cache; the turn is not.
                self.held.clear();
                session.rewind(0);
                i.error
            })?;
        // Every generated token but the last was fed back.
        let fed = report.generated_tokens.len().saturating_sub(1);
        self.held = ids;
        self.held.extend_from_slice(&report.generated_tokens[..fed]);
        let reply = report.text.clone();
        messages.push(Message::new("assistant", &reply));
        self.messages = messages;
        Ok(Turn {
            reply,
            reused,
            report,
        })
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::common_prefix;

    #[test]
    fn the_common_prefix_stops_at_the_first_difference() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4, 5]), 2);
        assert_eq!(common_prefix(&[], &[1]), 0);
        assert_eq!(common_prefix(&[1, 2], &[1, 2, 3]), 2);
    }
}

//! Chat templates: the Jinja program a model's `tokenizer.chat_template` holds, rendered the
//! way Hugging Face's transformers renders it with jinja2, so that a conversation becomes the
//! text the model was trained on. The environment matches transformers': blocks trim the
//! newline after them and the indentation before them, loop controls are on, Python's string
//! and dict methods (`.strip()`, `.startswith()`, `.items()` …) work, `raise_exception(msg)`
//! fails the rendering with the template's own message and `strftime_now(fmt)` formats the
//! current instant. The variables are `messages`, `add_generation_prompt`, `bos_token`,
//! `eos_token` and `tools` (none).
//!
//! The rendered text holds the model's special tokens as text (`<|im_start|>`); it is meant to
//! be encoded with special tokens parsed ([`crate::Tokenizer::encode`] with `parse_special`).

use super::error::TokenizerError;
use super::Tokenizer;
use minijinja::value::{Enumerator, Object, Value};
use minijinja::{context, Environment, Error, ErrorKind};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use trine_gguf::{Gguf, GgufError};

/// The GGUF key of the template.
pub const CHAT_TEMPLATE: &str = "tokenizer.chat_template";

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user` or `assistant` (a template decides what it accepts).
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.to_string(),
            content: content.to_string(),
        }
    }
}

/// A message as the template sees it: a mapping with `role` and `content`, in that order, as
/// the dict transformers passes; any other key is undefined.
impl Object for Message {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match key.as_str()? {
            "role" => Some(Value::from(self.role.as_str())),
            "content" => Some(Value::from(self.content.as_str())),
            _ => None,
        }
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Str(&["role", "content"])
    }
}

/// A chat template with the special tokens it is given.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    source: String,
    /// Where the template came from, as errors name it: the GGUF key or a file's path.
    origin: String,
    bos_token: String,
    eos_token: String,
    /// Unix seconds `strftime_now` formats; the system clock where `None`.
    now: Option<i64>,
}

impl ChatTemplate {
    /// `source` from `origin` (a file's path, the GGUF key), checked for syntax now so that a
    /// template that cannot work is refused before a model runs.
    pub fn new(
        source: String,
        origin: &str,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<ChatTemplate, TokenizerError> {
        let t = ChatTemplate {
            source,
            origin: origin.to_string(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            now: None,
        };
        let env = t.environment().map_err(|e| t.error(e))?;
        env.template_from_named_str(&t.origin, &t.source)
            .map_err(|e| t.error(e))?;
        Ok(t)
    }

    /// The model's own template (`tokenizer.chat_template`), with its BOS and EOS tokens' text;
    /// `None` where the file has none.
    pub fn from_gguf(g: &Gguf, tok: &Tokenizer) -> Result<Option<ChatTemplate>, TokenizerError> {
        let source = match g.get_str(CHAT_TEMPLATE) {
            Ok(s) => s.to_string(),
            Err(GgufError::MissingKey { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let (bos, eos) = tok.bos_eos_text();
        ChatTemplate::new(source, CHAT_TEMPLATE, &bos, &eos).map(Some)
    }

    /// The instant `strftime_now` formats, in Unix seconds, instead of the system clock.
    pub fn at(mut self, unix_seconds: i64) -> ChatTemplate {
        self.now = Some(unix_seconds);
        self
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The conversation as the model reads it; with `add_generation_prompt`, followed by what
    /// opens the assistant's reply.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, TokenizerError> {
        let env = self.environment().map_err(|e| self.error(e))?;
        let tmpl = env
            .template_from_named_str(&self.origin, &self.source)
            .map_err(|e| self.error(e))?;
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| Value::from_object(m.clone()))
            .collect();
        let ctx = context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            tools => Value::from(()),
        };
        tmpl.render(ctx).map_err(|e| self.error(e))
    }

    fn environment(&self) -> Result<Environment<'static>, Error> {
        let mut env = Environment::new();
        let mut syntax = minijinja::syntax::SyntaxConfig::builder();
        syntax.trim_blocks(true).lstrip_blocks(true);
        env.set_syntax(syntax.build()?);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        let now = self.now;
        env.add_function("strftime_now", move |fmt: &str| {
            let secs = now.unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64)
            });
            crate::strftime::format(fmt, secs)
                .map_err(|e| Error::new(ErrorKind::InvalidOperation, e))
        });
        Ok(env)
    }

    /// minijinja's message names the construct, and the template and line it failed at.
    fn error(&self, e: Error) -> TokenizerError {
        let mut detail = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            detail.push_str(&format!(": {s}"));
            source = s.source();
        }
        TokenizerError::ChatTemplate {
            origin: self.origin.clone(),
            detail,
        }
    }
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

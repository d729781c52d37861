//! The chat template `trine chat` and `trine generate --chat` format with: the file given by
//! `--chat-template`, else the model's own `tokenizer.chat_template`.

use std::io;
use std::path::{Path, PathBuf};
use thiserror::Error;
use trine_llama::Model;
use trine_tokenizer::{ChatTemplate, TokenizerError};

#[derive(Debug, Error)]
pub enum TemplateError {
    #[error(
        "--model {}: the file has no chat template (tokenizer.chat_template): give one with \
         --chat-template FILE",
        .0.display()
    )]
    Missing(PathBuf),
    #[error("--chat-template {}: {source}", .path.display())]
    File { path: PathBuf, source: io::Error },
    /// The template's own error names where it came from and the line.
    #[error(transparent)]
    Template(#[from] TokenizerError),
}

pub fn chat_template(
    model: &Model,
    model_path: &Path,
    file: Option<&Path>,
) -> Result<ChatTemplate, TemplateError> {
    let Some(path) = file else {
        return ChatTemplate::from_gguf(&model.gguf, &model.tokenizer)?
            .ok_or_else(|| TemplateError::Missing(model_path.to_path_buf()));
    };
    let source = std::fs::read_to_string(path).map_err(|source| TemplateError::File {
        path: path.to_path_buf(),
        source,
    })?;
    let (bos, eos) = model.tokenizer.bos_eos_text();
    Ok(ChatTemplate::new(
        source,
        &path.display().to_string(),
        &bos,
        &eos,
    )?)
}

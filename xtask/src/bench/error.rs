//! What can stop the bench as a whole (a single measurement that fails is recorded, not fatal).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("unknown backend {0:?} (the backends: {known})", known = known_backends())]
    UnknownBackend(String),
    #[error("{0} applies to the node-by-node bench on synthetic layouts, not to --model")]
    NotWithModel(&'static str),
    #[error("{0} applies only with --model: the node-by-node bench times one decode step")]
    NeedsModel(&'static str),
    #[error("-p 0 -n 0 measures nothing: give the pp test or the tg test some tokens")]
    NothingToMeasure,
    #[error("-p {0}: the node-by-node bench's prompt step takes at least 2 tokens")]
    PromptTooShort(u32),
    #[error("--layers 0: a synthetic model has at least one layer")]
    NoLayers,
    #[error("unknown model layout {0:?} ({1})")]
    UnknownModel(String, String),
    #[error("finding this program's path: {0}")]
    Exe(std::io::Error),
    #[error("{0}")]
    Probe(String),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("encoding the JSON records: {0}")]
    Json(#[from] serde_json::Error),
    #[error("drawing {path}: {message}")]
    Chart { path: PathBuf, message: String },
    #[error("{0}")]
    Model(String),
}

fn known_backends() -> String {
    trine_backends::BackendKind::ALL
        .map(trine_backends::BackendKind::name)
        .join(", ")
}

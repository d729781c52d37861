//! What can stop the bench as a whole (a single measurement that fails is recorded, not fatal).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("unknown backend {0:?} (cpu, vulkan, hip, cuda)")]
    UnknownBackend(String),
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

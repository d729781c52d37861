//! The model architectures, one file each, building a step's generic graph from the shared
//! blocks of [`crate::graph::builder`]. Adding one is a file here, a variant of
//! [`Architecture`] and its name; its hyperparameters are read under its name's GGUF prefix
//! ([`crate::config`]).

mod llama;

use super::error::ModelError;
use super::graph::builder::Builder;
use super::graph::{Node, Step};
use super::weights::Weights;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    Llama,
}

impl Architecture {
    pub const ALL: [Architecture; 1] = [Architecture::Llama];

    /// `general.architecture` as GGUF files name it, and the prefix of its keys.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::Llama => "llama",
        }
    }

    pub fn from_name(name: &str) -> Result<Architecture, ModelError> {
        Architecture::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| ModelError::Architecture {
                found: name.to_string(),
                supported: Architecture::ALL.map(Architecture::name).join(", "),
            })
    }

    /// The generic nodes of step `s`.
    pub fn graph(self, w: &Weights, s: Step) -> Vec<Node> {
        let mut b = Builder::new(w, s);
        match self {
            Architecture::Llama => llama::build(&mut b, w),
        }
        b.finish()
    }
}

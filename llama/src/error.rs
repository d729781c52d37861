//! What can go wrong between a GGUF file and generated text.

use thiserror::Error;
use trine_backends::BackendError;
use trine_gguf::quant::BlockError;
use trine_gguf::{GgufError, TensorType};
use trine_ops::shape::ShapeError;
use trine_tokenizer::TokenizerError;

#[derive(Debug, Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// Boxed: a backend error is large, and every result of the executor carries this type.
    #[error("{backend}: {source}")]
    Backend {
        backend: String,
        #[source]
        source: Box<BackendError>,
    },
    #[error("architecture {found:?} is not one this executor runs (it runs {supported})")]
    Architecture { found: String, supported: String },
    /// An add the fusion pass found no product to fold into: an architecture's graph that
    /// the shared blocks did not build.
    #[error("the add {node:?} (layer {layer:?}) does not follow the product it adds to")]
    Unfused {
        node: &'static str,
        layer: Option<u32>,
    },
    #[error("hyperparameter {key} = {value} is invalid: {why}")]
    Hyperparameter {
        key: String,
        value: String,
        why: &'static str,
    },
    #[error("tensor {0} is missing")]
    MissingTensor(String),
    #[error("tensor {name} is not part of trine's {arch} graph ({what}), so the file describes a model trine would run wrong")]
    UnusedTensor {
        name: String,
        arch: &'static str,
        what: &'static str,
    },
    #[error("tensor {name} has dims {found:?}, expected {expected:?}")]
    TensorShape {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    #[error("tensor {name} is {ty}, which {role} cannot take")]
    TensorType {
        name: String,
        ty: TensorType,
        role: String,
    },
    #[error("token id {id} is outside the vocabulary of {vocab}")]
    TokenOutOfRange { id: u32, vocab: u32 },
    #[error("the context holds {max} tokens; this step needs {needed}")]
    ContextFull { needed: usize, max: usize },
    #[error("every logit of the step is NaN: there is no token to choose")]
    NanLogits,
    /// A step's node needs a kernel the executor did not compile when it was made (it
    /// compiles those of the step shapes it expects).
    #[error(
        "node {node} of a {tokens}-token step needs a kernel this executor did not prepare: {key}"
    )]
    Unprepared {
        node: &'static str,
        tokens: u32,
        key: String,
    },
    /// The weights, the KV cache and the activations need more memory than the device has.
    #[error("the model needs {needed} bytes on {device}, which has {available} bytes {what}: the KV cache grows with the prompt and the tokens asked for; fewer of them, or another backend, may fit")]
    DoesNotFit {
        device: String,
        needed: u64,
        available: u64,
        /// "free" (what the runtime reports free now) or "in all" (its memory size).
        what: &'static str,
    },
    #[error("the cross-checking engine keeps its KV cache in {checker}, the checked one in {main}: make it with Engine::checker")]
    CheckerKv {
        main: &'static str,
        checker: &'static str,
    },
    #[error("a {ty} KV cache cannot hold this model's heads: {why}")]
    CacheType { ty: &'static str, why: String },
    #[error("the prompt is empty (no tokens to start from)")]
    EmptyPrompt,
    #[error("no backend could run kernel {kernel}: {reasons}")]
    NoBackendFor { kernel: String, reasons: String },
    #[error("sampling option {what} = {value} is invalid: {why}")]
    Sampling {
        what: &'static str,
        value: String,
        why: &'static str,
    },
}

impl ModelError {
    pub fn backend(name: &str, source: BackendError) -> ModelError {
        ModelError::Backend {
            backend: name.to_string(),
            source: Box::new(source),
        }
    }
}

/// Weights that are not whole blocks of their format are a shape the ops cannot use.
impl From<BlockError> for ModelError {
    fn from(e: BlockError) -> ModelError {
        ModelError::Shape(e.into())
    }
}

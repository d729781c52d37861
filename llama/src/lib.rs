//! trine-llama: Llama-family models from GGUF files: hyperparameters and weights ([`Model`]), the forward
//! step as a graph of op-library kernels ([`graph`]), an executor that places each kernel on a
//! device and keeps tensors resident ([`Engine`]), and generation with an optional
//! cross-check against a second backend ([`Session`], [`generate()`]).

pub mod config;
pub mod engine;
pub mod error;
pub mod generate;
pub mod graph;
pub mod kernels;
pub mod model;
pub mod placement;
pub mod sampler;
pub mod session;
pub mod speed;
pub mod weights;

pub use config::LlamaConfig;
pub use engine::{Engine, EngineOptions};
pub use error::ModelError;
pub use generate::{generate, GenerateOptions, Report};
pub use model::Model;
pub use sampler::{Sampler, Sampling};
pub use session::{NodeDiff, Session, StepCheck};

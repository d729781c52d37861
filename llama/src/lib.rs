//! trine-llama: transformer models from GGUF files: hyperparameters and weights ([`Model`]);
//! each architecture's step as a graph of generic nodes ([`arch`], [`graph`]); the fusion pass
//! that turns it into the nodes a device runs ([`fuse`]); the planner that picks each node's
//! kernel from the device's capabilities and the tuning table ([`planner`], [`tuning`]); an
//! executor that places each kernel on a device and keeps tensors resident ([`Engine`]); and
//! generation with an optional cross-check against a second backend ([`Session`],
//! [`generate()`]); conversations through the model's chat template ([`Chat`]).

pub mod arch;
pub mod chat;
pub mod config;
pub mod engine;
pub mod error;
pub mod fuse;
pub mod generate;
pub mod graph;
pub mod model;
pub mod penalties;
pub mod placement;
pub mod planner;
pub mod rope;
pub mod sampler;
pub mod session;
pub mod speed;
pub mod tuned;
pub mod tuning;
pub mod weights;

pub use arch::Architecture;
pub use chat::{prompt_ids, Chat, Turn};
pub use config::Config;
pub use engine::{Engine, EngineOptions, Footprint};
pub use error::ModelError;
pub use generate::{
    generate, generate_streaming, generate_with, GenerateOptions, Interrupted, Report, Stop,
};
pub use model::Model;
pub use penalties::Penalties;
pub use sampler::{Sampler, Sampling};
pub use session::{Choices, NodeDiff, Session, StepCheck, NEAR_TIE};

//! The `trine` subcommands that run models.

pub mod generate;
pub mod synth;

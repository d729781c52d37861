//! The executor on a tiny synthetic Llama (and Qwen2, Qwen3), on the CPU, the backends present and stand-in
//! devices: placement and memory, the cross-check, and the steps themselves.

mod common;
mod cross_check;
mod formats;
mod kv_cache;
mod placement;
mod qwen;
mod steps;

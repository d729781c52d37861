//! The executor on a tiny synthetic Llama (and Qwen2, Qwen3, Gemma 3, Phi-3, Mistral,
//! Qwen3-MoE), on the CPU, the backends present and stand-in devices: placement and memory,
//! the cross-check, the steps themselves, and a conversation's rewinds.

mod chat;
mod common;
mod cross_check;
mod formats;
mod gemma;
mod grouped;
mod kv_cache;
mod phi3;
mod placement;
mod qwen;
mod qwen3moe;
mod rope_scaling;
mod steps;
mod tuned;

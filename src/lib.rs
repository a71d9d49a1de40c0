//! deepseek: CPU inference for DeepSeek-family GGUF models behind llama.h's C ABI.
//!
//! Layers, top to bottom (imports point down only):
//! `api` (the only `extern "C"`) → engine (`model`, `context`, `kv`, `batch`, `tokenizer`, `sampling`, `chat`, `engine` for serving)
//! → compute (`kernels`, `threads`) → format (`gguf`, `quant`) → sys (`sys`).

pub mod sys;
pub mod quant;
pub mod gguf;
pub mod kernels;
pub mod threads;
pub mod tokenizer;
pub mod model;
pub mod kv;
pub mod batch;
pub mod context;
pub mod state;
pub mod sampling;
pub mod chat;
pub mod engine;
pub mod api;

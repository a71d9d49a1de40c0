//! Chat formats for deepseek's server and CLI: a conversation rendered by the model's Jinja
//! chat template as Hugging Face and llama-server render it, the tool-call formats parsed out
//! of what the model writes, and its reasoning (`<think>`) split from its answer.

mod concat;
pub mod handlers;
pub mod jinja;
pub mod messages;
pub mod reasoning;
pub mod request;
pub mod schema;
pub mod template;
pub mod text;
pub mod pyjson;
pub mod time;
pub mod tools;

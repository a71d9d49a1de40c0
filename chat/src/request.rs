//! A chat request body (OpenAI's fields plus llama-server's) read into template inputs, with
//! llama-server's checks and its error texts; each error names the field it is about.

use serde_json::{Map, Value};

use crate::messages::{parse_messages, parse_tools};
use crate::template::{Continuation, Inputs};

/// A refused request: the field and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub param: &'static str,
    pub message: String,
}

fn err(param: &'static str, message: impl Into<String>) -> FieldError {
    FieldError { param, message: message.into() }
}

/// What the server adds to every request.
#[derive(Debug, Clone, Default)]
pub struct ServerDefaults {
    /// `--chat-template-kwargs`.
    pub kwargs: Map<String, Value>,
    /// A trailing assistant message is continued unless the request says otherwise.
    pub prefill_assistant: bool,
    /// `enable_thinking` unless the request sets it: llama-server's is on only for templates
    /// with a reasoning section (`ChatTemplate::supports_thinking`).
    pub enable_thinking: bool,
}

impl ServerDefaults {
    /// llama-server's: `preserve_reasoning` on unless `--chat-template-kwargs` says otherwise
    /// (so templates keep earlier turns' reasoning), assistant prefill on.
    pub fn llama_server(mut kwargs: Map<String, Value>, prefill_assistant: bool, template: &crate::template::ChatTemplate) -> ServerDefaults {
        kwargs.entry("preserve_reasoning").or_insert(Value::Bool(true));
        ServerDefaults { kwargs, prefill_assistant, enable_thinking: template.supports_thinking() }
    }
}

pub fn inputs(body: &Map<String, Value>, defaults: &ServerDefaults) -> Result<Inputs, FieldError> {
    let get = |k: &str| body.get(k).filter(|v| !v.is_null());
    let Some(mv) = body.get("messages") else { return Err(err("messages", "'messages' is required")) };
    let list = mv.as_array().ok_or_else(|| err("messages", "Expected 'messages' to be an array"))?;
    for m in list {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if role != "assistant" && m.get("content").is_none() {
            return Err(err("messages", "All non-assistant messages must contain 'content'"));
        }
        if role == "assistant" && m.get("content").is_none() && m.get("tool_calls").is_none() {
            return Err(err("messages", "Assistant message must contain either 'content' or 'tool_calls'!"));
        }
        if let Some(c) = m.get("content") {
            if !(c.is_string() || c.is_null() || c.is_array()) {
                return Err(err("messages", "Expected 'content' to be a string or an array"));
            }
        }
    }
    let messages = parse_messages(mv).map_err(|e| err("messages", e))?;
    let tools = match get("tools") {
        Some(v) => parse_tools(v).map_err(|e| err("tools", e))?,
        None => Vec::new(),
    };
    let mut inputs = Inputs { messages, tools, enable_thinking: defaults.enable_thinking, ..Inputs::default() };
    inputs.add_generation_prompt = match get("add_generation_prompt") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(err("add_generation_prompt", "'add_generation_prompt' must be a boolean")),
    };
    let last_is_assistant = inputs.messages.last().is_some_and(|m| m.role == "assistant");
    inputs.continuation = match get("continue_final_message") {
        Some(Value::Bool(true)) => Continuation::Auto,
        Some(Value::Bool(false)) => Continuation::None,
        Some(_) => return Err(err("continue_final_message", "'continue_final_message' must be a boolean")),
        None if defaults.prefill_assistant && last_is_assistant => {
            let n = inputs.messages.len();
            if n >= 2 && inputs.messages[n - 2].role == "assistant" {
                return Err(err("messages", "Cannot have 2 or more assistant messages at the end of the list."));
            }
            inputs.add_generation_prompt = false;
            Continuation::Auto
        }
        None => Continuation::None,
    };
    if inputs.continuation == Continuation::Auto {
        if inputs.add_generation_prompt {
            return Err(err("continue_final_message", "Cannot set both add_generation_prompt and continue_final_message to true."));
        }
        if inputs.messages.last().is_some_and(|m| m.role == "assistant" && !m.tool_calls.is_empty()) {
            return Err(err("messages", "Cannot continue an assistant message that contains tool calls."));
        }
    }
    // Template variables: the server's, then the request's.
    inputs.kwargs = defaults.kwargs.clone();
    match get("chat_template_kwargs") {
        Some(Value::Object(m)) => inputs.kwargs.extend(m.clone()),
        Some(_) => return Err(err("chat_template_kwargs", "'chat_template_kwargs' must be an object")),
        None => {}
    }
    match inputs.kwargs.get("enable_thinking") {
        Some(Value::Bool(b)) => inputs.enable_thinking = *b,
        Some(Value::String(_)) => return Err(err("chat_template_kwargs", "invalid type for \"enable_thinking\" (expected boolean, got string)")),
        _ => {}
    }
    match get("reasoning_effort") {
        Some(Value::String(e)) if e == "none" => {
            inputs.enable_thinking = false;
            inputs.kwargs.remove("reasoning_effort");
        }
        Some(Value::String(e)) if !e.is_empty() => {
            inputs.kwargs.insert("reasoning_effort".into(), Value::String(e.clone()));
        }
        Some(Value::String(_)) => {}
        Some(_) => return Err(err("reasoning_effort", "'reasoning_effort' must be a string")),
        None => {}
    }
    Ok(inputs)
}

//! Anthropic's Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`) as
//! llama-server b11312 serves it: the request is converted into an OpenAI chat completions
//! body (`server_chat_convert_anthropic_to_oai`, tools/server/server-chat.cpp), run as one,
//! and the chat answer converted back (`to_json_anthropic*`, tools/server/server-task.cpp).
//! Everything here is pure JSON to JSON; api.rs runs the chat request in between.
//!
//! Wiring (what the routes must do):
//! - `/v1/messages`: `to_chat(body)`, then the chat completions path with that body. Not
//!   streamed: `from_chat(chat_response, model)`; set `stop_sequence` to the stop string that
//!   ended the answer when the engine can tell it (upstream sets it; its stop_reason stays
//!   `end_turn`). Streamed: an `AnthropicStream`, every chat chunk `push`ed in order, then
//!   `finish()` when the chunk stream ends; each `(event, data)` is sent as
//!   `event: {event}\ndata: {data}\n\n` (`sse_text`) and there is no `[DONE]`, as upstream.
//!   `to_chat` asks for usage in the stream (`stream_options.include_usage`) so the final
//!   `message_delta` has the output token count.
//! - `/v1/messages/count_tokens`: `to_chat(body)` rendered to its prompt exactly as a chat
//!   request is (the template, tools and all), tokenized with special tokens added and parsed,
//!   and `count_tokens_reply(n)`: `{"input_tokens": n}` (upstream's `handle_count_tokens`).
//!   It needs no `max_tokens` (the conversion supplies one, unused there).
//! - Errors: upstream sends its usual `{"error": {"code", "message", "type"}}` on these
//!   routes; `error_body` adds Anthropic's top-level `"type": "error"` (and its `error.type`
//!   is the same field), so both kinds of client read it. In a stream an error is an `error`
//!   event.
//! - Upstream accepts an empty `messages` array here (test_anthropic_empty_messages); the
//!   chat path must not refuse it for these routes.

use axum::http::StatusCode;
use serde_json::{json, Map, Value};

use crate::error::ApiError;

/// A JSON value's kind, for error messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The string at `key`, "" when absent or not a string (nlohmann's `json_value` with a
/// string default, which upstream reads every field with).
fn str_or_empty<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The refusal of an image: the models this server runs read text only. Upstream converts
/// the image and then refuses it with "image input is not supported - hint: …mmproj" as a
/// 500 (a runtime_error in oaicompat_chat_params_parse; test_anthropic_vision_format_accepted
/// asserts the status and the phrase); the same status and phrase, without the mmproj hint,
/// which does not apply here.
pub(crate) fn image_refused(at: &str) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        format!("image input is not supported: this server runs text-only models ({at} is an image)"),
    )
}

/// The `cch=` stamp of a Claude Code "x-anthropic-billing-header:" system prompt overwritten
/// with `fffff`: it changes on every request and would stop the prompt cache at the system
/// prompt (upstream's normalize_anthropic_billing_header, llama.cpp PR 21793). Other text is
/// left alone.
fn normalize_billing_header(text: &mut String) {
    const PREFIX: &str = "x-anthropic-billing-header:";
    if !text.starts_with(PREFIX) {
        return;
    }
    let Some(found) = text[PREFIX.len()..].find("cch=") else { return };
    let start = PREFIX.len() + found + "cch=".len();
    // The five stamp characters end at a ';'; both ends are char boundaries (after the ASCII
    // "cch=" and at the ASCII ';'), so the replacement keeps the string valid UTF-8.
    if text.as_bytes().get(start + 5) == Some(&b';') {
        text.replace_range(start..start + 5, "fffff");
    }
}

/// An Anthropic Messages request as the OpenAI chat completions body upstream makes of it:
/// `system` (a string or text blocks, concatenated) first as a system message; each message's
/// blocks split into the chat message (text parts, `thinking` as `reasoning_content`,
/// `tool_use` as `tool_calls`) followed by one `tool` message per `tool_result`; `tools` with
/// `input_schema` as function tools; `tool_choice`; `stop_sequences` as `stop`; `max_tokens`
/// (4096 when absent, as upstream is permissive); `thinking.budget_tokens` as
/// `thinking_budget_tokens`; temperature, top_p, top_k, stream and chat_template_kwargs as
/// they are. Blocks of other types (documents, server tool results) are dropped, as upstream
/// drops them; images are refused (text-only models).
///
/// Beyond upstream (which maps `any` and `tool` both to `required` and ignores the rest):
/// `tool_choice` `{"type": "tool", "name": N}` forces that tool, `{"type": "none"}` is
/// `"none"`, and `disable_parallel_tool_use: true` is `parallel_tool_calls: false`.
pub fn to_chat(body: &Value) -> Result<Value, ApiError> {
    let Some(b) = body.as_object() else {
        return Err(ApiError::invalid(format!("the request body must be a JSON object, not {}", kind(body))));
    };
    let mut out = Map::new();
    let mut messages = Vec::new();

    match b.get("system") {
        None | Some(Value::Null) => {}
        Some(sys) => {
            let mut text = String::new();
            match sys {
                Value::String(s) => {
                    text = s.clone();
                    normalize_billing_header(&mut text);
                }
                Value::Array(blocks) => {
                    for block in blocks {
                        if str_or_empty(block, "type") == "text" {
                            let mut t = str_or_empty(block, "text").to_string();
                            normalize_billing_header(&mut t);
                            text += &t;
                        }
                    }
                }
                // Upstream reads any other value as an empty system prompt.
                _ => {}
            }
            messages.push(json!({"role": "system", "content": text}));
        }
    }

    let Some(list) = b.get("messages") else { return Err(ApiError::param("messages", "'messages' is required")) };
    match list {
        Value::Array(list) => {
            for (i, msg) in list.iter().enumerate() {
                convert_message(msg, i, &mut messages)?;
            }
        }
        // Upstream reads a null list as no messages.
        Value::Null => {}
        other => return Err(ApiError::param("messages", format!("'messages' must be an array, not {}", kind(other)))),
    }
    out.insert("messages".into(), Value::Array(messages));

    if let Some(Value::Array(tools)) = b.get("tools") {
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": str_or_empty(t, "name"),
                    "description": str_or_empty(t, "description"),
                    "parameters": t.get("input_schema").cloned().unwrap_or_else(|| json!({})),
                }})
            })
            .collect();
        out.insert("tools".into(), Value::Array(tools));
    }

    if let Some(Value::Object(tc)) = b.get("tool_choice") {
        let choice = match tc.get("type").and_then(Value::as_str).unwrap_or("") {
            "auto" => Some(json!("auto")),
            "any" => Some(json!("required")),
            "tool" => match tc.get("name").and_then(Value::as_str) {
                Some(name) if !name.is_empty() => Some(json!({"type": "function", "function": {"name": name}})),
                _ => Some(json!("required")),
            },
            "none" => Some(json!("none")),
            _ => None,
        };
        if let Some(c) = choice {
            out.insert("tool_choice".into(), c);
        }
        if tc.get("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true) {
            out.insert("parallel_tool_calls".into(), json!(false));
        }
    }

    if let Some(stop) = b.get("stop_sequences") {
        out.insert("stop".into(), stop.clone());
    }
    out.insert("max_tokens".into(), b.get("max_tokens").cloned().unwrap_or_else(|| json!(4096)));
    for key in ["temperature", "top_p", "top_k", "stream", "chat_template_kwargs"] {
        if let Some(v) = b.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    // The final message_delta reports the output tokens: ask the chat stream for its usage.
    if b.get("stream").and_then(Value::as_bool) == Some(true) {
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }

    if let Some(thinking) = b.get("thinking") {
        if str_or_empty(thinking, "type") == "enabled" {
            // Upstream's default budget when none (or a non-integer) is given.
            let budget = thinking.get("budget_tokens").and_then(Value::as_i64).unwrap_or(10000);
            out.insert("thinking_budget_tokens".into(), json!(budget));
        }
    }
    Ok(Value::Object(out))
}

/// One Anthropic message appended to `out` as chat messages (upstream's loop body).
fn convert_message(msg: &Value, at: usize, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let role = str_or_empty(msg, "role");
    let content = match msg.get("content") {
        // An assistant message without content is skipped; any other goes on as it is (the
        // chat layer refuses it with its own message).
        None if role == "assistant" => return Ok(()),
        None => {
            out.push(msg.clone());
            return Ok(());
        }
        Some(Value::Array(blocks)) => blocks,
        // A string (or anything the chat layer will refuse) is already a chat message.
        Some(_) => {
            out.push(msg.clone());
            return Ok(());
        }
    };

    let mut parts = Vec::new();
    let mut tool_calls = Vec::new();
    let mut tool_results = Vec::new();
    let mut reasoning = String::new();
    for (j, block) in content.iter().enumerate() {
        match str_or_empty(block, "type") {
            "text" => parts.push(block.clone()),
            "thinking" => reasoning += str_or_empty(block, "thinking"),
            "image" => return Err(image_refused(&format!("messages[{at}].content[{j}]"))),
            "tool_use" => {
                let input = match block.get("input") {
                    None | Some(Value::Null) => "{}".to_string(),
                    Some(v) => v.to_string(),
                };
                tool_calls.push(json!({
                    "id": str_or_empty(block, "id"),
                    "type": "function",
                    "function": {"name": str_or_empty(block, "name"), "arguments": input},
                }));
            }
            "tool_result" => {
                let text = match block.get("content") {
                    Some(Value::String(s)) => s.clone(),
                    // Text blocks joined: a text-only result is a plain string, as upstream
                    // sends it for compatibility; an image in it is refused.
                    Some(Value::Array(items)) => {
                        let mut text = String::new();
                        for (k, c) in items.iter().enumerate() {
                            match str_or_empty(c, "type") {
                                "text" => text += str_or_empty(c, "text"),
                                "image" => return Err(image_refused(&format!("messages[{at}].content[{j}].content[{k}]"))),
                                _ => {}
                            }
                        }
                        text
                    }
                    _ => String::new(),
                };
                tool_results.push(json!({"role": "tool", "tool_call_id": str_or_empty(block, "tool_use_id"), "content": text}));
            }
            // Other blocks (documents, redacted thinking, server tools) are dropped, as
            // upstream drops them.
            _ => {}
        }
    }

    if !parts.is_empty() || !tool_calls.is_empty() || !reasoning.is_empty() {
        let mut m = Map::new();
        m.insert("role".into(), json!(role));
        m.insert("content".into(), if parts.is_empty() { json!("") } else { Value::Array(parts) });
        if !tool_calls.is_empty() {
            m.insert("tool_calls".into(), Value::Array(tool_calls));
        }
        if !reasoning.is_empty() {
            m.insert("reasoning_content".into(), json!(reasoning));
        }
        out.push(Value::Object(m));
    }
    // The results follow the message they came in (its text first), as upstream orders them.
    out.extend(tool_results);
    Ok(())
}

/// `count_tokens`' answer for a prompt of `n_tokens` tokens.
pub fn count_tokens_reply(n_tokens: usize) -> Value {
    json!({"input_tokens": n_tokens})
}

/// A chat completion's token counts: (prompt, cached prompt, completion).
fn usage_counts(usage: Option<&Value>) -> (u64, u64, u64) {
    let n = |p: &str| usage.and_then(|u| u.pointer(p)).and_then(Value::as_u64).unwrap_or(0);
    (n("/prompt_tokens"), n("/prompt_tokens_details/cached_tokens"), n("/completion_tokens"))
}

/// Anthropic's usage: the prompt tokens read from the cache apart from the others, as
/// upstream splits them.
fn usage_json(prompt: u64, cached: u64, output: u64) -> Value {
    json!({"cache_read_input_tokens": cached, "input_tokens": prompt.saturating_sub(cached), "output_tokens": output})
}

/// The stop reason of a chat finish reason (upstream: an answer ended by a stop word or the
/// end of generation is `end_turn`, or `tool_use` when it has calls; anything else
/// `max_tokens`).
fn stop_reason(finish: &str, has_calls: bool) -> &'static str {
    match finish {
        "tool_calls" => "tool_use",
        "stop" if has_calls => "tool_use",
        "stop" => "end_turn",
        _ => "max_tokens",
    }
}

/// A tool call's arguments as the `input` object (upstream: `{}` when they do not parse).
fn parse_input(arguments: &Value) -> Value {
    match arguments {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| json!({})),
        Value::Object(_) => arguments.clone(),
        _ => json!({}),
    }
}

/// A `chat.completion` as Anthropic's `message` (upstream's to_json_anthropic): its id,
/// content blocks (thinking with an empty signature, then text, then one tool_use per call
/// with its arguments parsed as `input`), stop reason and usage. `stop_sequence` is null;
/// the caller sets it to the stop string that ended the answer when it knows it. No timings
/// (test_anthropic_messages_basic asserts there are none).
pub fn from_chat(resp: &Value, model: &str) -> Value {
    let msg = resp.pointer("/choices/0/message");
    let field = |k: &str| msg.and_then(|m| m.get(k));
    let mut content = Vec::new();
    if let Some(r) = field("reasoning_content").and_then(Value::as_str).filter(|r| !r.is_empty()) {
        content.push(json!({"type": "thinking", "thinking": r, "signature": ""}));
    }
    if let Some(t) = field("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": t}));
    }
    let calls = field("tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    for c in calls {
        let f = c.get("function");
        content.push(json!({
            "type": "tool_use",
            "id": str_or_empty(c, "id"),
            "name": f.map_or("", |f| str_or_empty(f, "name")),
            "input": parse_input(f.and_then(|f| f.get("arguments")).unwrap_or(&Value::Null)),
        }));
    }
    let finish = resp.pointer("/choices/0/finish_reason").and_then(Value::as_str).unwrap_or("");
    let (prompt, cached, output) = usage_counts(resp.get("usage"));
    json!({
        "id": str_or_empty(resp, "id"),
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": model,
        "stop_reason": stop_reason(finish, !calls.is_empty()),
        "stop_sequence": null,
        "usage": usage_json(prompt, cached, output),
    })
}

/// An error as these routes send it: upstream's `{"error": {"code", "message", "type"}}` with
/// Anthropic's `"type": "error"` beside it (Anthropic's own shape is `{"type": "error",
/// "error": {"type", "message"}}`), so either kind of client reads it.
pub fn error_body(e: &ApiError) -> Value {
    json!({"type": "error", "error": {"type": e.kind, "message": e.message, "code": e.status.as_u16()}})
}

/// Events as server-sent-event text: `event: NAME\ndata: JSON\n\n` each (upstream's
/// format_anthropic_sse, and format_oai_resp_sse for the Responses API).
pub fn sse_text(events: &[(String, Value)]) -> String {
    let mut out = String::new();
    for (name, data) in events {
        out.push_str("event: ");
        out.push_str(name);
        out.push_str("\ndata: ");
        out.push_str(&data.to_string());
        out.push_str("\n\n");
    }
    out
}

/// The kind of an open content block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
    ToolUse,
}

/// A streamed chat completion as Anthropic's stream events (upstream's
/// server_task_result_cmpl_partial::to_json_anthropic for the chunks and
/// server_task_result_cmpl_final::to_json_anthropic_stream for the end): `message_start`
/// first; a `content_block_start` when reasoning, text or a tool call first appears, then its
/// `thinking_delta` / `text_delta` / `input_json_delta`s; at the end every block closed in
/// index order (the thinking block after an empty `signature_delta`, which Anthropic's API
/// requires), then `message_delta` (stop reason, output tokens) and `message_stop`.
///
/// Blocks are numbered in the order they open: thinking 0, text next, tool calls after, as
/// upstream numbers them for the order a model writes them in. As upstream, blocks stay open
/// until the end (a thinking block is closed after the text that follows it), and no `ping`
/// is sent (upstream's keep-alive is an SSE comment, the transport's business).
/// One addition: a tool_use block starts with `"input": {}`, as Anthropic's own stream does.
#[derive(Debug)]
pub struct AnthropicStream {
    id: String,
    model: String,
    input_tokens: u64,
    cached_tokens: u64,
    /// `stop_sequence` of the final message_delta.
    pub stop_sequence: Option<String>,
    started: bool,
    /// The open blocks, by index.
    blocks: Vec<Block>,
    thinking: Option<usize>,
    text: Option<usize>,
    /// (chat tool call index, block index) of each call.
    calls: Vec<(u64, usize)>,
    finish_reason: Option<String>,
    output_tokens: u64,
    usage_seen: bool,
    done: bool,
}

impl AnthropicStream {
    /// A stream for the chat completion `id` (the message's id, as upstream's), answering as
    /// `model`, whose prompt has `input_tokens` tokens of which `cached_tokens` were cached
    /// (message_start's usage; upstream reports them with the first token).
    pub fn new(id: &str, model: &str, input_tokens: u64, cached_tokens: u64) -> AnthropicStream {
        AnthropicStream {
            id: id.to_string(),
            model: model.to_string(),
            input_tokens,
            cached_tokens,
            stop_sequence: None,
            started: false,
            blocks: Vec::new(),
            thinking: None,
            text: None,
            calls: Vec::new(),
            finish_reason: None,
            output_tokens: 0,
            usage_seen: false,
            done: false,
        }
    }

    fn start(&mut self, ev: &mut Vec<(String, Value)>) {
        if self.started {
            return;
        }
        self.started = true;
        ev.push(event(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "content": [], "model": self.model,
                "stop_reason": null, "stop_sequence": null,
                "usage": usage_json(self.input_tokens, self.cached_tokens, 0),
            }}),
        ));
    }

    fn open(&mut self, kind: Block, content_block: Value, ev: &mut Vec<(String, Value)>) -> usize {
        let index = self.blocks.len();
        self.blocks.push(kind);
        ev.push(event("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": content_block})));
        index
    }

    /// The events one chat completion chunk makes (none for a chunk that adds nothing). An
    /// error chunk (`{"error": …}`) is an `error` event, and ends the stream.
    pub fn push(&mut self, chunk: &Value) -> Vec<(String, Value)> {
        let mut ev = Vec::new();
        if self.done {
            return ev;
        }
        if let Some(err) = chunk.get("error").filter(|e| !e.is_null()) {
            self.done = true;
            let e = ApiError {
                status: StatusCode::from_u16(err.get("code").and_then(Value::as_u64).unwrap_or(500) as u16).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                kind: "server_error",
                message: str_or_empty(err, "message").to_string(),
                param: None,
                extra: None,
            };
            let mut data = error_body(&e);
            // The chunk's own error type (invalid_request_error, unavailable_error, …).
            if let Some(t) = err.get("type").and_then(Value::as_str) {
                data["error"]["type"] = json!(t);
            }
            ev.push(("error".to_string(), data));
            return ev;
        }
        self.start(&mut ev);
        if let Some(choice) = chunk.pointer("/choices/0") {
            if let Some(delta) = choice.get("delta") {
                self.delta(delta, &mut ev);
            }
            if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(f.to_string());
            }
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.output_tokens = usage_counts(Some(u)).2;
            self.usage_seen = true;
        }
        if self.finish_reason.is_some() && self.usage_seen {
            self.close(&mut ev);
        }
        ev
    }

    fn delta(&mut self, delta: &Value, ev: &mut Vec<(String, Value)>) {
        if let Some(r) = delta.get("reasoning_content").and_then(Value::as_str).filter(|r| !r.is_empty()) {
            let index = match self.thinking {
                Some(i) => i,
                None => {
                    let i = self.open(Block::Thinking, json!({"type": "thinking", "thinking": ""}), ev);
                    self.thinking = Some(i);
                    i
                }
            };
            ev.push(event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": r}})));
        }
        if let Some(t) = delta.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            let index = match self.text {
                Some(i) => i,
                None => {
                    let i = self.open(Block::Text, json!({"type": "text", "text": ""}), ev);
                    self.text = Some(i);
                    i
                }
            };
            ev.push(event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": t}})));
        }
        let calls = delta.get("tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
        for (pos, call) in calls.iter().enumerate() {
            let n = call.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
            let f = call.get("function");
            let index = match self.calls.iter().find(|(c, _)| *c == n) {
                Some(&(_, i)) => i,
                None => {
                    let name = f.map_or("", |f| str_or_empty(f, "name"));
                    let i = self.open(Block::ToolUse, json!({"type": "tool_use", "id": str_or_empty(call, "id"), "name": name, "input": {}}), ev);
                    self.calls.push((n, i));
                    i
                }
            };
            if let Some(a) = f.and_then(|f| f.get("arguments")).and_then(Value::as_str).filter(|a| !a.is_empty()) {
                ev.push(event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": a}})));
            }
        }
    }

    fn close(&mut self, ev: &mut Vec<(String, Value)>) {
        if self.done {
            return;
        }
        self.done = true;
        self.start(ev);
        for (index, kind) in self.blocks.iter().enumerate() {
            if *kind == Block::Thinking {
                ev.push(event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": ""}})));
            }
            ev.push(event("content_block_stop", json!({"type": "content_block_stop", "index": index})));
        }
        let reason = stop_reason(self.finish_reason.as_deref().unwrap_or(""), !self.calls.is_empty());
        ev.push(event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": self.stop_sequence}, "usage": {"output_tokens": self.output_tokens}}),
        ));
        ev.push(event("message_stop", json!({"type": "message_stop"})));
    }

    /// The closing events when the chat stream has ended and `push` has not already sent
    /// them (a stream without a usage chunk); nothing after an error or a second time.
    pub fn finish(&mut self) -> Vec<(String, Value)> {
        let mut ev = Vec::new();
        self.close(&mut ev);
        ev
    }
}

fn event(name: &str, data: Value) -> (String, Value) {
    (name.to_string(), data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chat completion chunk as api.rs's stream writes one.
    fn chunk(delta: Value, finish: Option<&str>) -> Value {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "system_fingerprint": "x",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    }

    fn usage_chunk(prompt: u64, cached: u64, completion: u64) -> Value {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
               "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": cached}}})
    }

    /// Every event of a chunk sequence, pushed in order, then finish().
    fn run(s: &mut AnthropicStream, chunks: &[Value]) -> Vec<(String, Value)> {
        let mut all = Vec::new();
        for c in chunks {
            all.extend(s.push(c));
        }
        all.extend(s.finish());
        all
    }

    fn names(ev: &[(String, Value)]) -> Vec<&str> {
        ev.iter().map(|(n, _)| n.as_str()).collect()
    }

    fn conv(body: Value) -> Value {
        to_chat(&body).unwrap()
    }

    fn conv_err(body: Value) -> ApiError {
        to_chat(&body).unwrap_err()
    }

    // --- requests (test_compat_anthropic.py's bodies) ---

    #[test]
    fn basic_request_gets_messages_and_max_tokens() {
        let c = conv(json!({"model": "test", "max_tokens": 50, "messages": [{"role": "user", "content": "Say hello"}]}));
        assert_eq!(c, json!({"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 50}));
        // max_tokens is optional (count_tokens sends none): upstream's 4096
        let c = conv(json!({"model": "test", "messages": [{"role": "user", "content": "Hello world"}]}));
        assert_eq!(c["max_tokens"], json!(4096));
    }

    #[test]
    fn system_prompt_string_or_text_blocks() {
        let c = conv(json!({"max_tokens": 50, "system": "You are a helpful assistant.", "messages": [{"role": "user", "content": "Hello"}]}));
        assert_eq!(c["messages"], json!([{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hello"}]));
        let c = conv(json!({"system": [{"type": "text", "text": "A. "}, {"type": "image"}, {"type": "text", "text": "B.", "cache_control": {"type": "ephemeral"}}], "messages": []}));
        assert_eq!(c["messages"], json!([{"role": "system", "content": "A. B."}]));
        // null is no system prompt; a number an empty one, as upstream reads it
        assert_eq!(conv(json!({"system": null, "messages": []}))["messages"], json!([]));
        assert_eq!(conv(json!({"system": 3, "messages": []}))["messages"], json!([{"role": "system", "content": ""}]));
    }

    #[test]
    fn billing_header_stamp_is_normalized() {
        let sys = "x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=a5145;You are Claude Code.";
        let c = conv(json!({"system": sys, "messages": []}));
        assert_eq!(c["messages"][0]["content"], json!("x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=fffff;You are Claude Code."));
        let c = conv(json!({"system": [{"type": "text", "text": sys}], "messages": []}));
        assert_eq!(c["messages"][0]["content"].as_str().unwrap().contains("cch=fffff;"), true);
        // not the header, or a stamp of another length: unchanged
        for s in ["You are cch=a5145;", "x-anthropic-billing-header: cch=a514;x", "x-anthropic-billing-header: cch=ab", "x-anthropic-billing-header: cch=ééé;"] {
            assert_eq!(conv(json!({"system": s, "messages": []}))["messages"][0]["content"], json!(s), "{s}");
        }
        // multi-byte stamp characters of five bytes: replaced whole, still valid UTF-8
        let c = conv(json!({"system": "x-anthropic-billing-header: cch=éé1;x", "messages": []}));
        assert_eq!(c["messages"][0]["content"], json!("x-anthropic-billing-header: cch=fffff;x"));
    }

    #[test]
    fn multipart_and_conversation() {
        let c = conv(json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": " the answer?"}]}]}));
        assert_eq!(c["messages"], json!([{"role": "user", "content": [{"type": "text", "text": "What is"}, {"type": "text", "text": " the answer?"}]}]));
        let c = conv(json!({"messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"}, {"role": "user", "content": "How are you?"}]}));
        assert_eq!(c["messages"].as_array().unwrap().len(), 3);
        assert_eq!(c["messages"][1], json!({"role": "assistant", "content": "Hi there!"}));
        // an assistant message without content is skipped
        let c = conv(json!({"messages": [{"role": "user", "content": "a"}, {"role": "assistant"}]}));
        assert_eq!(c["messages"], json!([{"role": "user", "content": "a"}]));
        // empty messages are accepted (test_anthropic_empty_messages)
        assert_eq!(conv(json!({"max_tokens": 50, "messages": []}))["messages"], json!([]));
    }

    #[test]
    fn tool_use_and_tool_result_become_calls_and_tool_messages() {
        let c = conv(json!({"messages": [
            {"role": "user", "content": "What's the weather?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "test123", "name": "get_weather", "input": {"location": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "test123", "content": "The weather is sunny, 25°C"}]},
        ]}));
        assert_eq!(c["messages"], json!([
            {"role": "user", "content": "What's the weather?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "test123", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "test123", "content": "The weather is sunny, 25°C"},
        ]));
    }

    #[test]
    fn tool_result_with_text_splits_text_first() {
        let c = conv(json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "Here are the results:"}, {"type": "tool_result", "tool_use_id": "tool_1", "content": "Sunny, 25°C"}]},
        ]}));
        assert_eq!(c["messages"], json!([
            {"role": "user", "content": [{"type": "text", "text": "Here are the results:"}]},
            {"role": "tool", "tool_call_id": "tool_1", "content": "Sunny, 25°C"},
        ]));
        // is_error changes nothing; text blocks of a result are joined; other content is ""
        let c = conv(json!({"messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "is_error": true, "content": "City not found"},
            {"type": "tool_result", "tool_use_id": "b", "content": [{"type": "text", "text": "x"}, {"type": "other"}, {"type": "text", "text": "y"}]},
            {"type": "tool_result", "tool_use_id": "c"},
            {"type": "tool_result", "content": 5},
        ]}]}));
        assert_eq!(c["messages"], json!([
            {"role": "tool", "tool_call_id": "a", "content": "City not found"},
            {"role": "tool", "tool_call_id": "b", "content": "xy"},
            {"role": "tool", "tool_call_id": "c", "content": ""},
            {"role": "tool", "tool_call_id": "", "content": ""},
        ]));
    }

    #[test]
    fn images_are_refused_as_upstream_refuses_them_without_mmproj() {
        let png = "iVBORw0KGgo=";
        let e = conv_err(json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}, {"type": "text", "text": "What is this?"}]}]}));
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(e.message.to_lowercase().contains("image input is not supported"), "{}", e.message);
        assert!(e.message.contains("messages[0].content[0]"), "{}", e.message);
        // inside a tool result (test_anthropic_tool_result_with_image)
        let e = conv_err(json!({"messages": [
            {"role": "user", "content": "What is in this image?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "tool_1", "name": "read", "input": {"file": "test.png"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tool_1", "content": [{"type": "text", "text": "File: test.png"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}]}]},
        ]}));
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(e.message.contains("image input is not supported") && e.message.contains("messages[2].content[0].content[1]"), "{}", e.message);
        assert_eq!(error_body(&e)["error"]["message"], json!(e.message));
    }

    #[test]
    fn thinking_blocks_become_reasoning_content() {
        // test_anthropic_thinking_history_in_count_tokens: the thinking is kept
        let c = conv(json!({"messages": [
            {"role": "user", "content": "Fix the bug"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should check ", "signature": "s"},
                {"type": "thinking", "thinking": "the layout."},
                {"type": "tool_use", "id": "call_1", "name": "list_files", "input": {"path": "."}},
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "main.py"}]},
        ]}));
        assert_eq!(c["messages"][1], json!({"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "list_files", "arguments": "{\"path\":\".\"}"}}], "reasoning_content": "I should check the layout."}));
        // thinking beside text: the text parts are the content
        let c = conv(json!({"messages": [{"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}, {"type": "text", "text": "a"}]}]}));
        assert_eq!(c["messages"][0], json!({"role": "assistant", "content": [{"type": "text", "text": "a"}], "reasoning_content": "t"}));
        // only dropped blocks: no message at all
        let c = conv(json!({"messages": [{"role": "user", "content": [{"type": "document"}, 7, "x"]}]}));
        assert_eq!(c["messages"], json!([]));
    }

    #[test]
    fn tool_use_input_forms() {
        let c = conv(json!({"messages": [{"role": "assistant", "content": [
            {"type": "tool_use", "id": "a", "name": "f"},
            {"type": "tool_use", "id": 5, "name": ["x"], "input": null},
            {"type": "tool_use", "id": "c", "name": "g", "input": [1, "é"]},
        ]}]}));
        let calls = &c["messages"][0]["tool_calls"];
        assert_eq!(calls[0]["function"], json!({"name": "f", "arguments": "{}"}));
        assert_eq!(calls[1], json!({"id": "", "type": "function", "function": {"name": "", "arguments": "{}"}}));
        assert_eq!(calls[2]["function"]["arguments"], json!("[1,\"é\"]"));
    }

    #[test]
    fn tools_and_tool_choice() {
        let tool = json!({"name": "get_weather", "description": "Get the current weather in a location",
            "input_schema": {"type": "object", "properties": {"location": {"type": "string", "description": "City name"}}, "required": ["location"]}});
        let c = conv(json!({"max_tokens": 200, "tools": [tool, {"name": "bare"}], "messages": [{"role": "user", "content": "What's the weather in Paris?"}]}));
        assert_eq!(c["tools"], json!([
            {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a location", "parameters": tool["input_schema"]}},
            {"type": "function", "function": {"name": "bare", "description": "", "parameters": {}}},
        ]));
        assert!(c.get("tool_choice").is_none());
        let choice = |tc: Value| conv(json!({"tool_choice": tc, "messages": []}));
        assert_eq!(choice(json!({"type": "auto"}))["tool_choice"], json!("auto"));
        assert_eq!(choice(json!({"type": "any"}))["tool_choice"], json!("required"));
        assert_eq!(choice(json!({"type": "tool", "name": "get_weather"}))["tool_choice"], json!({"type": "function", "function": {"name": "get_weather"}}));
        assert_eq!(choice(json!({"type": "tool"}))["tool_choice"], json!("required"));
        assert_eq!(choice(json!({"type": "none"}))["tool_choice"], json!("none"));
        assert!(choice(json!({"type": "weird"})).get("tool_choice").is_none());
        assert!(choice(json!("auto")).get("tool_choice").is_none());
        let c = choice(json!({"type": "auto", "disable_parallel_tool_use": true}));
        assert_eq!((c["tool_choice"].clone(), c["parallel_tool_calls"].clone()), (json!("auto"), json!(false)));
        // tools that are not an array are ignored, as upstream
        assert!(conv(json!({"tools": {"name": "x"}, "messages": []})).get("tools").is_none());
    }

    #[test]
    fn sampling_stop_stream_and_thinking_fields() {
        let c = conv(json!({"model": "test", "max_tokens": 100, "stop_sequences": ["\n", "END"], "temperature": 0.5, "top_p": 0.9, "top_k": 40,
            "chat_template_kwargs": {"enable_thinking": false}, "metadata": {"user_id": "test_user_123"}, "messages": []}));
        assert_eq!(c, json!({"messages": [], "stop": ["\n", "END"], "max_tokens": 100, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "chat_template_kwargs": {"enable_thinking": false}}));
        let c = conv(json!({"stream": true, "messages": []}));
        assert_eq!((c["stream"].clone(), c["stream_options"].clone()), (json!(true), json!({"include_usage": true})));
        assert!(conv(json!({"stream": false, "messages": []})).get("stream_options").is_none());
        assert_eq!(conv(json!({"thinking": {"type": "enabled", "budget_tokens": 50}, "messages": []}))["thinking_budget_tokens"], json!(50));
        assert_eq!(conv(json!({"thinking": {"type": "enabled"}, "messages": []}))["thinking_budget_tokens"], json!(10000));
        assert!(conv(json!({"thinking": {"type": "disabled", "budget_tokens": 5}, "messages": []})).get("thinking_budget_tokens").is_none());
        assert!(conv(json!({"thinking": "on", "messages": []})).get("thinking_budget_tokens").is_none());
    }

    #[test]
    fn malformed_requests_are_refused_naming_the_field() {
        let e = conv_err(json!({"model": "test", "max_tokens": 50}));
        assert_eq!((e.status, e.param.as_deref(), e.message.as_str()), (StatusCode::BAD_REQUEST, Some("messages"), "'messages' is required"));
        let e = conv_err(json!({"messages": "hi"}));
        assert_eq!(e.param.as_deref(), Some("messages"));
        assert!(e.message.contains("must be an array, not a string"));
        assert!(conv_err(json!([1])).message.contains("must be a JSON object, not an array"));
        // odd messages go on as they are, for the chat layer to refuse
        assert_eq!(conv(json!({"messages": [5, {"role": "user"}, {"role": "user", "content": 3}]}))["messages"], json!([5, {"role": "user"}, {"role": "user", "content": 3}]));
    }

    /// The converted bodies are requests the chat path takes: the chat layer reads their
    /// messages and tools, the parameters their sampling fields and tool choice.
    #[test]
    fn converted_requests_pass_the_chat_layer() {
        use crate::params::Fields;
        use deepseek_chat::request::{inputs, ServerDefaults};
        use deepseek_chat::tools::ToolChoice;
        let body = json!({"model": "test", "max_tokens": 100, "system": [{"type": "text", "text": "S"}], "stop_sequences": ["END"], "stream": true,
            "thinking": {"type": "enabled", "budget_tokens": 50}, "tool_choice": {"type": "tool", "name": "get_weather"},
            "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}}}],
            "messages": [
                {"role": "user", "content": "What's the weather?"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}, {"type": "text", "text": "Checking."}, {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"location": "Paris"}}]},
                {"role": "user", "content": [{"type": "text", "text": "Here:"}, {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "Sunny"}]}]},
            ]});
        let chat = conv(body);
        let f = Fields::parse(&chat).unwrap();
        let gp = f.gen(true, &crate::args::SamplingArgs::default()).unwrap();
        assert_eq!((gp.max_tokens, gp.stop.clone(), gp.stream, gp.include_usage, gp.reasoning_budget), (Some(100), vec!["END".to_string()], true, true, Some(50)));
        assert_eq!(gp.tool_choice, ToolChoice::Function("get_weather".into()));
        let inp = inputs(chat.as_object().unwrap(), &ServerDefaults::default()).unwrap();
        let roles: Vec<&str> = inp.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user", "tool"]);
        assert_eq!(inp.messages[2].reasoning_content, "t");
        assert_eq!((inp.messages[2].tool_calls[0].name.as_str(), inp.messages[2].tool_calls[0].id.as_str()), ("get_weather", "t1"));
        assert_eq!(inp.messages[4].tool_call_id, "t1");
        assert_eq!(inp.tools[0].name, "get_weather");
    }

    #[test]
    fn count_tokens_reply_has_only_input_tokens() {
        assert_eq!(count_tokens_reply(12), json!({"input_tokens": 12}));
    }

    // --- answers ---

    #[test]
    fn whole_answer_as_message() {
        let resp = json!({"id": "chatcmpl-abc", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello!"}, "logprobs": null, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13, "prompt_tokens_details": {"cached_tokens": 4}},
            "timings": {"prompt_n": 10}});
        let m = from_chat(&resp, "tinyllama-2-anthropic");
        assert_eq!(m, json!({"id": "chatcmpl-abc", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "Hello!"}],
            "model": "tinyllama-2-anthropic", "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"cache_read_input_tokens": 4, "input_tokens": 6, "output_tokens": 3}}));
        assert!(m.get("timings").is_none());
        let mut long = resp.clone();
        long["choices"][0]["finish_reason"] = json!("length");
        assert_eq!(from_chat(&long, "m")["stop_reason"], json!("max_tokens"));
    }

    #[test]
    fn whole_answer_with_thinking_and_tool_calls() {
        let resp = json!({"id": "chatcmpl-abc", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "",
            "reasoning_content": "I need the weather.",
            "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}, "id": "abc123"},
                {"type": "function", "function": {"name": "broken", "arguments": "{\"loc"}, "id": "def456"},
            ]}}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 9}});
        let m = from_chat(&resp, "m");
        assert_eq!(m["content"], json!([
            {"type": "thinking", "thinking": "I need the weather.", "signature": ""},
            {"type": "tool_use", "id": "abc123", "name": "get_weather", "input": {"location": "Paris"}},
            {"type": "tool_use", "id": "def456", "name": "broken", "input": {}},
        ]));
        assert_eq!(m["stop_reason"], json!("tool_use"));
        assert_eq!(m["usage"], json!({"cache_read_input_tokens": 0, "input_tokens": 20, "output_tokens": 9}));
        // a finished answer with calls is tool_use even when the finish reason says stop
        let mut r = resp.clone();
        r["choices"][0]["finish_reason"] = json!("stop");
        assert_eq!(from_chat(&r, "m")["stop_reason"], json!("tool_use"));
    }

    #[test]
    fn whole_answer_from_garbage_does_not_panic() {
        for v in [json!(null), json!([]), json!({"choices": 3}), json!({"choices": [{"message": {"content": 5, "tool_calls": [7, {"function": 1}]}}], "usage": "x"})] {
            let m = from_chat(&v, "m");
            assert_eq!(m["type"], json!("message"));
            assert_eq!(m["stop_reason"], json!("max_tokens"));
        }
    }

    // --- streams ---

    #[test]
    fn text_stream_event_sequence() {
        // test_anthropic_messages_streaming
        let mut s = AnthropicStream::new("chatcmpl-1", "tinyllama-2-anthropic", 12, 2);
        let ev = run(&mut s, &[
            chunk(json!({"role": "assistant", "content": null}), None),
            chunk(json!({"content": "Hel"}), None),
            chunk(json!({"content": "lo"}), None),
            {
                let mut c = chunk(json!({}), Some("stop"));
                c["timings"] = json!({"prompt_n": 12});
                c
            },
            usage_chunk(12, 2, 2),
        ]);
        assert_eq!(names(&ev), ["message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]);
        assert_eq!(ev[0].1, json!({"type": "message_start", "message": {"id": "chatcmpl-1", "type": "message", "role": "assistant", "content": [], "model": "tinyllama-2-anthropic",
            "stop_reason": null, "stop_sequence": null, "usage": {"cache_read_input_tokens": 2, "input_tokens": 10, "output_tokens": 0}}}));
        assert_eq!(ev[1].1, json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}));
        assert_eq!(ev[2].1, json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}));
        assert_eq!(ev[3].1["delta"]["text"], json!("lo"));
        assert_eq!(ev[4].1, json!({"type": "content_block_stop", "index": 0}));
        assert_eq!(ev[5].1, json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 2}}));
        assert_eq!(ev[6].1, json!({"type": "message_stop"}));
        // every event's data names its type; no timings anywhere
        for (n, d) in &ev {
            assert_eq!(d["type"], json!(n));
            assert!(d.get("timings").is_none());
        }
        // nothing more after the end
        assert!(s.finish().is_empty());
        assert!(s.push(&chunk(json!({"content": "x"}), None)).is_empty());
    }

    #[test]
    fn thinking_then_text_stream() {
        // test_anthropic_thinking_with_reasoning_model (stream): thinking at 0 with its
        // signature_delta, text at 1
        let mut s = AnthropicStream::new("chatcmpl-1", "m", 5, 0);
        let ev = run(&mut s, &[
            chunk(json!({"role": "assistant", "content": null}), None),
            chunk(json!({"reasoning_content": "2+2"}), None),
            chunk(json!({"reasoning_content": " is 4"}), None),
            chunk(json!({"content": "4"}), None),
            chunk(json!({}), Some("length")),
            usage_chunk(5, 0, 7),
        ]);
        assert_eq!(names(&ev), ["message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_start", "content_block_delta",
            "content_block_delta", "content_block_stop", "content_block_stop", "message_delta", "message_stop"]);
        assert_eq!(ev[1].1, json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}));
        assert_eq!(ev[2].1, json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "2+2"}}));
        assert_eq!(ev[4].1, json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}));
        assert_eq!(ev[5].1["index"], json!(1));
        assert_eq!(ev[6].1, json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": ""}}));
        assert_eq!((ev[7].1["index"].clone(), ev[8].1["index"].clone()), (json!(0), json!(1)));
        assert_eq!(ev[9].1["delta"]["stop_reason"], json!("max_tokens"));
        assert_eq!(ev[9].1["usage"]["output_tokens"], json!(7));
    }

    #[test]
    fn tool_call_stream_with_text() {
        // test_anthropic_tool_streaming / test_anthropic_streaming_content_block_indices
        let mut s = AnthropicStream::new("chatcmpl-1", "m", 5, 0);
        s.stop_sequence = None;
        let ev = run(&mut s, &[
            chunk(json!({"role": "assistant", "content": null}), None),
            chunk(json!({"content": "Let me check."}), None),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "", "name": "calculator"}, "id": "abc", "type": "function"}]}), None),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"expression\":"}}]}), None),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"2+2\"}"}}]}), None),
            chunk(json!({"tool_calls": [{"index": 1, "function": {"arguments": "{}", "name": "other"}, "id": "def", "type": "function"}]}), None),
            chunk(json!({}), Some("tool_calls")),
            usage_chunk(5, 0, 30),
        ]);
        assert_eq!(names(&ev), ["message_start", "content_block_start", "content_block_delta", "content_block_start", "content_block_delta", "content_block_delta",
            "content_block_start", "content_block_delta", "content_block_stop", "content_block_stop", "content_block_stop", "message_delta", "message_stop"]);
        assert_eq!(ev[3].1, json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "abc", "name": "calculator", "input": {}}}));
        assert_eq!(ev[4].1, json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"expression\":"}}));
        assert_eq!(ev[5].1["delta"]["partial_json"], json!("\"2+2\"}"));
        assert_eq!(ev[6].1["index"], json!(2));
        assert_eq!(ev[6].1["content_block"]["name"], json!("other"));
        assert_eq!(ev[7].1["index"], json!(2));
        let starts: Vec<&Value> = ev.iter().filter(|(n, _)| n == "content_block_start").map(|(_, d)| &d["index"]).collect();
        let stops: Vec<&Value> = ev.iter().filter(|(n, _)| n == "content_block_stop").map(|(_, d)| &d["index"]).collect();
        assert_eq!(starts, [&json!(0), &json!(1), &json!(2)]);
        assert_eq!(stops, starts);
        assert_eq!(ev[11].1["delta"]["stop_reason"], json!("tool_use"));
    }

    #[test]
    fn stream_without_usage_closes_at_finish_with_the_stop_sequence() {
        let mut s = AnthropicStream::new("chatcmpl-1", "m", 5, 0);
        s.stop_sequence = Some("END".into());
        let mut ev = s.push(&chunk(json!({"role": "assistant", "content": null}), None));
        ev.extend(s.push(&chunk(json!({"content": "a"}), None)));
        ev.extend(s.push(&chunk(json!({}), Some("stop"))));
        assert_eq!(names(&ev), ["message_start", "content_block_start", "content_block_delta"]);
        let end = s.finish();
        assert_eq!(names(&end), ["content_block_stop", "message_delta", "message_stop"]);
        assert_eq!(end[1].1["delta"], json!({"stop_reason": "end_turn", "stop_sequence": "END"}));
        assert_eq!(end[1].1["usage"]["output_tokens"], json!(0));
    }

    #[test]
    fn empty_stream_still_starts_and_stops() {
        let mut s = AnthropicStream::new("chatcmpl-1", "m", 5, 0);
        let ev = run(&mut s, &[chunk(json!({"role": "assistant", "content": null}), None), chunk(json!({}), Some("stop")), usage_chunk(5, 0, 0)]);
        assert_eq!(names(&ev), ["message_start", "message_delta", "message_stop"]);
        let mut s = AnthropicStream::new("chatcmpl-1", "m", 5, 0);
        assert_eq!(names(&s.finish()), ["message_start", "message_delta", "message_stop"]);
    }

    #[test]
    fn error_chunk_is_an_error_event_and_ends_the_stream() {
        let mut s = AnthropicStream::new("chatcmpl-1", "m", 5, 0);
        s.push(&chunk(json!({"role": "assistant", "content": null}), None));
        let err = ApiError::unavailable("the request was cancelled: the server is shutting down");
        let ev = s.push(&err.body());
        assert_eq!(ev, vec![("error".to_string(), json!({"type": "error", "error": {"type": "unavailable_error", "message": "the request was cancelled: the server is shutting down", "code": 503}}))]);
        assert!(s.finish().is_empty());
        assert_eq!(error_body(&ApiError::invalid("bad")), json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad", "code": 400}}));
    }

    #[test]
    fn garbage_chunks_do_not_panic() {
        let mut s = AnthropicStream::new("", "", 0, 0);
        for c in [json!(null), json!(5), json!({"choices": "x"}), json!({"choices": [{"delta": {"content": 5, "tool_calls": [3, {"function": 2}]}}]}), json!({"usage": 3}), json!({"error": 5})] {
            s.push(&c);
        }
        assert!(s.finish().is_empty());
    }

    #[test]
    fn sse_text_frames_events() {
        let t = sse_text(&[event("message_stop", json!({"type": "message_stop"})), event("ping", json!({"type": "ping"}))]);
        assert_eq!(t, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n");
    }
}

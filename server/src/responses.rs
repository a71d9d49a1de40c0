//! OpenAI's Responses API (`POST /v1/responses`, `/responses`, and their `/input_tokens`) as
//! llama-server b11312 serves it: the request is converted into a chat completions body
//! (`server_chat_convert_responses_to_chatcmpl`, tools/server/server-chat.cpp), run as one,
//! and the answer converted back (`to_json_oaicompat_resp*`, tools/server/server-task.cpp).
//! Pure JSON to JSON; api.rs runs the chat request in between.
//!
//! Wiring (what the routes must do):
//! - `/v1/responses` and `/responses`: `to_chat(body)`, then the chat completions path with
//!   that body. Not streamed: `from_chat(chat_response, model)`. Streamed: a
//!   `ResponsesStream`, every chat chunk `push`ed in order, then `finish()` when the chunk
//!   stream ends; each `(event, data)` is sent as `event: {event}\ndata: {data}\n\n`
//!   (`crate::anthropic::sse_text`), with no `[DONE]`, as upstream. `to_chat` asks for usage
//!   in the stream so `response.completed` carries it.
//! - `/v1/responses/input_tokens` and `/responses/input_tokens`: `to_chat(body)` rendered to
//!   its prompt as a chat request is, tokenized with special tokens added and parsed, and
//!   `input_tokens_reply(n)`: `{"input_tokens": n, "object": "response.input_tokens"}`
//!   (upstream's `handle_count_tokens`).
//! - Errors are the server's usual OpenAI ones (`ApiError`), as upstream's; in a stream an
//!   error chunk becomes an `error` event (`ResponsesStream::push`).

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{json, Map, Value};

use crate::anthropic::image_refused;
use crate::error::ApiError;

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

fn str_or_empty<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn is_str(v: &Value, key: &str) -> bool {
    v.get(key).is_some_and(Value::is_string)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// 32 random letters and digits, as upstream's `random_string` makes the tails of its `resp_`,
/// `rs_` and `msg_` ids: SipHash under the process's random keys (std's `RandomState`, seeded
/// from the OS) of a counter, so ids are unpredictable and never repeat in a process.
pub fn random_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let keys = std::collections::hash_map::RandomState::new();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    (0..32u64)
        .map(|i| {
            let mut h = keys.build_hasher();
            h.write_u64(n);
            h.write_u64(i);
            ALPHABET[(h.finish() % ALPHABET.len() as u64) as usize] as char
        })
        .collect()
}

/// A Responses request as the chat completions body upstream makes of it: the request's
/// fields as they are, except `input` (a string: one user message; a list of items: messages
/// with `input_text` / `output_text` / `refusal` parts, `function_call`s and the reasoning
/// before them merged into the assistant message they belong to, `function_call_output`s as
/// tool messages), `instructions` (a system message first), `tools` (function tools unflattened
/// to chat's `{"type": "function", "function": {…}}`, `strict` true unless given; other tool
/// types dropped), `max_output_tokens` (`max_tokens`) and `reasoning.effort`
/// (`reasoning_effort`). Refused as upstream refuses them, with its messages: no `input`, a
/// `previous_response_id`, items it cannot classify, `input_file`; images are refused as
/// text-only models cannot read them.
///
/// Beyond upstream: an assistant message item without `"type": "message"` is read as one (the
/// SDKs' easy form; upstream cannot classify it), a `tool_choice` of `{"type": "function",
/// "name": N}` is chat's named choice (upstream reads any object as `auto`, as other objects
/// are here), and non-string `instructions` are refused rather than read as "".
pub fn to_chat(body: &Value) -> Result<Value, ApiError> {
    let Some(b) = body.as_object() else {
        return Err(ApiError::invalid(format!("the request body must be a JSON object, not {}", kind(body))));
    };
    let Some(input) = b.get("input") else { return Err(ApiError::param("input", "'input' is required")) };
    if b.get("previous_response_id").and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::param("previous_response_id", "llama.cpp does not support 'previous_response_id'."));
    }
    let mut out: Map<String, Value> = b.clone();
    out.remove("input");

    let mut messages: Vec<Value> = Vec::new();
    if let Some(instr) = out.remove("instructions") {
        match instr {
            Value::String(s) => messages.push(json!({"role": "system", "content": s})),
            Value::Null => {}
            other => return Err(ApiError::param("instructions", format!("'instructions' must be a string, not {}", kind(&other)))),
        }
    }
    match input {
        Value::String(s) => messages.push(json!({"role": "user", "content": s})),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                convert_item(item, i, &mut messages)?;
            }
        }
        _ => return Err(ApiError::param("input", "'input' must be a string or array of objects")),
    }
    out.insert("messages".into(), Value::Array(messages));

    if let Some(tools) = out.remove("tools") {
        let Value::Array(tools) = tools else { return Err(ApiError::param("tools", "'tools' must be an array of objects")) };
        let mut chat_tools = Vec::new();
        for tool in tools {
            // Non-function tools (web search, file search, …) have no chat equivalent:
            // upstream skips them with a warning.
            let Value::Object(mut f) = tool else { continue };
            if f.get("type").and_then(Value::as_str) != Some("function") {
                continue;
            }
            f.remove("type");
            f.entry("strict").or_insert(json!(true));
            chat_tools.push(json!({"type": "function", "function": f}));
        }
        if !chat_tools.is_empty() {
            out.insert("tools".into(), Value::Array(chat_tools));
        }
    }

    if let Some(tc) = out.get("tool_choice").filter(|t| t.is_object()) {
        let choice = match (tc.get("type").and_then(Value::as_str), tc.get("name").and_then(Value::as_str)) {
            (Some("function"), Some(name)) if !name.is_empty() => json!({"type": "function", "function": {"name": name}}),
            _ => json!("auto"),
        };
        out.insert("tool_choice".into(), choice);
    }

    if let Some(n) = out.remove("max_output_tokens") {
        out.insert("max_tokens".into(), n);
    }
    if let Some(r) = out.remove("reasoning") {
        if let Some(effort) = r.get("effort") {
            out.insert("reasoning_effort".into(), effort.clone());
        }
    }
    // response.completed reports the usage: ask the chat stream for it.
    if out.get("stream").and_then(Value::as_bool) == Some(true) {
        let mut so = match out.remove("stream_options") {
            Some(Value::Object(o)) => o,
            _ => Map::new(),
        };
        so.insert("include_usage".into(), json!(true));
        out.insert("stream_options".into(), Value::Object(so));
    }
    Ok(Value::Object(out))
}

/// One input item appended to `out` as chat messages (upstream's loop body): an item of the
/// assistant's turn (output message, function call, reasoning) joins the assistant message
/// before it when there is one.
fn convert_item(item: &Value, at: usize, out: &mut Vec<Value>) -> Result<(), ApiError> {
    let bad = |m: &str| ApiError::param("input", format!("input[{at}]: {m}"));
    let merge = out.last().is_some_and(|m| str_or_empty(m, "role") == "assistant");
    let mut item = item.clone();
    // A string content is a single input_text part.
    if let Some(s) = item.get("content").and_then(Value::as_str) {
        let text = s.to_string();
        item["content"] = json!([{"text": text, "type": "input_text"}]);
    }
    let role = str_or_empty(&item, "role").to_string();
    let ty = str_or_empty(&item, "type").to_string();
    let content = item.get("content").and_then(Value::as_array).cloned();

    if let (Some(parts), "user" | "system" | "developer") = (&content, role.as_str()) {
        let mut chat_parts = Vec::new();
        for (j, p) in parts.iter().enumerate() {
            match str_or_empty(p, "type") {
                "input_text" => {
                    let Some(text) = p.get("text") else { return Err(bad("'Input text' requires 'text'")) };
                    chat_parts.push(json!({"text": text, "type": "text"}));
                }
                "input_image" => {
                    if p.get("image_url").is_none() {
                        return Err(bad("'image_url' is required"));
                    }
                    return Err(image_refused(&format!("input[{at}].content[{j}]")));
                }
                "input_file" => return Err(bad("'input_file' is not supported by llamacpp at this moment")),
                _ => return Err(bad("'type' must be one of 'input_text', 'input_image', or 'input_file'")),
            }
        }
        let Value::Object(mut m) = item else { return Err(bad("Cannot determine type of 'item'")) };
        m.remove("type");
        m.remove("status");
        m.insert("content".into(), Value::Array(chat_parts));
        out.push(Value::Object(m));
        return Ok(());
    }

    if role == "assistant" && (ty == "message" || (ty.is_empty() && content.is_some())) {
        let mut chat_parts = Vec::new();
        for p in content.as_deref().unwrap_or(&[]) {
            match str_or_empty(p, "type") {
                // input_text: the string content turned into a part above.
                "output_text" | "input_text" => {
                    if !is_str(p, "text") {
                        return Err(bad("'Output text' requires 'text'"));
                    }
                    chat_parts.push(json!({"text": p["text"], "type": "text"}));
                }
                "refusal" => {
                    if !is_str(p, "refusal") {
                        return Err(bad("'Refusal' requires 'refusal'"));
                    }
                    chat_parts.push(json!({"refusal": p["refusal"], "type": "refusal"}));
                }
                _ => return Err(bad("'type' must be one of 'output_text' or 'refusal'")),
            }
        }
        if merge {
            if let Some(prev) = out.last_mut() {
                append(prev, "content", chat_parts);
            }
        } else {
            let Value::Object(mut m) = item else { return Err(bad("Cannot determine type of 'item'")) };
            m.remove("type");
            m.remove("status");
            m.insert("content".into(), Value::Array(chat_parts));
            out.push(Value::Object(m));
        }
        return Ok(());
    }

    if ty == "function_call" && is_str(&item, "arguments") && is_str(&item, "call_id") && is_str(&item, "name") {
        let call = json!({
            "function": {"arguments": item["arguments"], "name": item["name"]},
            "id": item["call_id"],
            "type": "function",
        });
        match out.last_mut() {
            Some(prev) if merge => append(prev, "tool_calls", vec![call]),
            _ => out.push(json!({"role": "assistant", "tool_calls": [call]})),
        }
        return Ok(());
    }

    if ty == "function_call_output" && is_str(&item, "call_id") {
        let content = match item.get("output") {
            Some(Value::String(s)) => json!(s),
            Some(Value::Array(parts)) => {
                let mut chat_parts = Vec::new();
                for (j, p) in parts.iter().enumerate() {
                    let Some(Value::Object(p)) = Some(p).filter(|p| p.get("type").is_some()) else {
                        return Err(bad("Output of tool call missing 'type' field"));
                    };
                    let mut p = p.clone();
                    match p.get("type").and_then(Value::as_str) {
                        Some("input_text") => {
                            p.insert("type".into(), json!("text"));
                        }
                        Some("input_image") => {
                            if p.get("image_url").is_none() {
                                return Err(bad("'image_url' is required"));
                            }
                            return Err(image_refused(&format!("input[{at}].output[{j}]")));
                        }
                        _ => return Err(bad("Output of tool call should be 'Input text' or 'Input image'")),
                    }
                    chat_parts.push(Value::Object(p));
                }
                Value::Array(chat_parts)
            }
            _ => return Err(bad("Cannot determine type of 'item'")),
        };
        out.push(json!({"content": content, "role": "tool", "tool_call_id": item["call_id"]}));
        return Ok(());
    }

    if ty == "reasoning" && item.get("summary").is_some_and(Value::is_array) {
        let Some(parts) = item.get("content").and_then(Value::as_array) else { return Err(bad("item['content'] is not an array")) };
        let Some(first) = parts.first() else { return Err(bad("item['content'] is empty")) };
        let Some(text) = first.get("text").and_then(Value::as_str) else { return Err(bad("item['content']['text'] is not a string")) };
        match out.last_mut() {
            // Upstream sets (not appends) the reasoning of the message before.
            Some(Value::Object(prev)) if merge => {
                prev.insert("reasoning_content".into(), json!(text));
            }
            _ => out.push(json!({"role": "assistant", "content": [], "reasoning_content": text})),
        }
        return Ok(());
    }

    Err(bad("Cannot determine type of 'item'"))
}

/// `values` appended to the array at `key` of `msg` (made an array when it is not one).
fn append(msg: &mut Value, key: &str, values: Vec<Value>) {
    let Value::Object(m) = msg else { return };
    let slot = m.entry(key).or_insert_with(|| json!([]));
    if !slot.is_array() {
        *slot = json!([]);
    }
    if let Value::Array(a) = slot {
        a.extend(values);
    }
}

/// The `input_tokens` endpoint's answer for a prompt of `n_tokens` tokens.
pub fn input_tokens_reply(n_tokens: usize) -> Value {
    json!({"input_tokens": n_tokens, "object": "response.input_tokens"})
}

/// A chat usage object as the Responses API's.
fn usage_json(usage: Option<&Value>) -> Value {
    let n = |p: &str| usage.and_then(|u| u.pointer(p)).and_then(Value::as_u64).unwrap_or(0);
    let (input, output) = (n("/prompt_tokens"), n("/completion_tokens"));
    json!({"input_tokens": input, "output_tokens": output, "total_tokens": input + output, "input_tokens_details": {"cached_tokens": n("/prompt_tokens_details/cached_tokens")}})
}

fn reasoning_item(id: &str, text: &str, status: &str) -> Value {
    let content = if text.is_empty() { json!([]) } else { json!([{"text": text, "type": "reasoning_text"}]) };
    json!({"id": id, "summary": [], "type": "reasoning", "content": content, "encrypted_content": "", "status": status})
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text})
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if text.is_empty() && status != "completed" { json!([]) } else { json!([output_text(text)]) };
    json!({"content": content, "id": id, "role": "assistant", "status": status, "type": "message"})
}

/// A function_call item: upstream's ids are the call's with `fc_` (the item) and `call_`
/// (what the client answers with in `function_call_output`).
fn call_item(id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"id": format!("fc_{id}"), "type": "function_call", "status": status, "arguments": arguments, "call_id": format!("call_{id}"), "name": name})
}

/// A `chat.completion` as a Responses `response` object (upstream's to_json_oaicompat_resp):
/// a new `resp_` id, status completed, output items in order: the reasoning (`rs_`), the
/// message with its output_text (`msg_`; none when the content is empty), one function_call
/// per tool call; usage in Responses' names.
pub fn from_chat(resp: &Value, model: &str) -> Value {
    let msg = resp.pointer("/choices/0/message");
    let field = |k: &str| msg.and_then(|m| m.get(k)).and_then(Value::as_str).unwrap_or("");
    let mut output = Vec::new();
    let reasoning = field("reasoning_content");
    if !reasoning.is_empty() {
        output.push(reasoning_item(&format!("rs_{}", random_id()), reasoning, "completed"));
    }
    let content = field("content");
    if !content.is_empty() {
        output.push(message_item(&format!("msg_{}", random_id()), content, "completed"));
    }
    for c in msg.and_then(|m| m.get("tool_calls")).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]) {
        let f = c.get("function");
        output.push(call_item(str_or_empty(c, "id"), f.map_or("", |f| str_or_empty(f, "name")), f.map_or("", |f| str_or_empty(f, "arguments")), "completed"));
    }
    let now = unix_now();
    json!({
        "completed_at": now,
        "created_at": resp.get("created").and_then(Value::as_u64).unwrap_or(now),
        "id": format!("resp_{}", random_id()),
        "model": model,
        "object": "response",
        "output": output,
        "status": "completed",
        "usage": usage_json(resp.get("usage")),
    })
}

/// An output item of a stream, in the order items appear.
#[derive(Debug)]
enum Item {
    Reasoning { text: String },
    Message { text: String },
    Call { chat_index: u64, id: String, name: String, arguments: String },
}

/// A streamed chat completion as Responses stream events (upstream's
/// server_task_result_cmpl_partial::to_json_oaicompat_resp for the chunks and
/// server_task_result_cmpl_final::to_json_oaicompat_resp_stream for the end):
/// `response.created` and `response.in_progress` first; when reasoning first appears
/// `response.output_item.added` (a reasoning item), then `response.reasoning_text.delta`s;
/// when text first appears `response.output_item.added` (a message) and
/// `response.content_part.added`, then `response.output_text.delta`s; for each tool call
/// `response.output_item.added` (a function_call) and `response.function_call_arguments.delta`s.
/// At the end, per item in order: reasoning `response.output_item.done`; message
/// `response.output_text.done`, `response.content_part.done`, `response.output_item.done`;
/// function call `response.output_item.done`; then `response.completed` with the whole
/// response, its usage and (as upstream) the chunk's `timings` beside it.
///
/// Beyond upstream, which leaves them out: every event has `sequence_number`, item events
/// `output_index`, content events `content_index` (fields of OpenAI's events that the SDKs'
/// stream accumulators read), the created/in-progress response has `created_at`, `model` and
/// an empty `output`, and a done reasoning item has its `status`.
#[derive(Debug)]
pub struct ResponsesStream {
    resp_id: String,
    reasoning_id: String,
    message_id: String,
    model: String,
    created_at: u64,
    seq: u64,
    started: bool,
    items: Vec<Item>,
    finish_reason: Option<String>,
    usage: Option<Value>,
    timings: Option<Value>,
    done: bool,
}

impl ResponsesStream {
    /// A stream answering as `model`, with new `resp_`, `rs_` and `msg_` ids.
    #[cfg(test)]
    pub fn id(&self) -> &str {
        &self.resp_id
    }

    pub fn new(model: &str) -> ResponsesStream {
        ResponsesStream {
            resp_id: format!("resp_{}", random_id()),
            reasoning_id: format!("rs_{}", random_id()),
            message_id: format!("msg_{}", random_id()),
            model: model.to_string(),
            created_at: unix_now(),
            seq: 0,
            started: false,
            items: Vec::new(),
            finish_reason: None,
            usage: None,
            timings: None,
            done: false,
        }
    }

    fn emit(&mut self, ev: &mut Vec<(String, Value)>, name: &str, mut data: Value) {
        data["type"] = json!(name);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        ev.push((name.to_string(), data));
    }

    fn in_progress(&self) -> Value {
        json!({"id": self.resp_id, "object": "response", "created_at": self.created_at, "status": "in_progress", "model": self.model, "output": []})
    }

    fn start(&mut self, ev: &mut Vec<(String, Value)>) {
        if self.started {
            return;
        }
        self.started = true;
        let r = self.in_progress();
        self.emit(ev, "response.created", json!({"response": r.clone()}));
        self.emit(ev, "response.in_progress", json!({"response": r}));
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
            // OpenAI's error event, with the server's error object under "error" too: the
            // SDKs raise from an event whose data has an "error".
            let data = json!({"code": err.get("type").cloned().unwrap_or(Value::Null), "message": err.get("message").cloned().unwrap_or(json!("")), "param": err.get("param").cloned().unwrap_or(Value::Null), "error": err});
            self.emit(&mut ev, "error", data);
            return ev;
        }
        self.start(&mut ev);
        // A prompt-progress chunk (`return_progress`): upstream's response.in_progress with it.
        if let Some(p) = chunk.get("prompt_progress") {
            let mut data = json!({"response": self.in_progress(), "prompt_progress": p});
            if let Some(t) = chunk.get("timings").filter(|t| t.is_object()) {
                data["timings"] = t.clone();
            }
            self.emit(&mut ev, "response.in_progress", data);
            return ev;
        }
        let before = ev.len();
        if let Some(choice) = chunk.pointer("/choices/0") {
            if let Some(delta) = choice.get("delta") {
                self.delta(delta, &mut ev);
            }
            if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(f.to_string());
            }
        }
        if let Some(t) = chunk.get("timings").filter(|t| t.is_object()) {
            // Upstream puts a chunk's timings on the last event it makes, and the final ones
            // on response.completed.
            if ev.len() > before {
                if let Some((_, data)) = ev.last_mut() {
                    data["timings"] = t.clone();
                }
            } else {
                self.timings = Some(t.clone());
            }
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        if self.finish_reason.is_some() && self.usage.is_some() {
            self.close(&mut ev);
        }
        ev
    }

    fn delta(&mut self, delta: &Value, ev: &mut Vec<(String, Value)>) {
        if let Some(r) = delta.get("reasoning_content").and_then(Value::as_str).filter(|r| !r.is_empty()) {
            let index = match self.items.iter().position(|i| matches!(i, Item::Reasoning { .. })) {
                Some(i) => i,
                None => {
                    let i = self.items.len();
                    self.items.push(Item::Reasoning { text: String::new() });
                    let item = reasoning_item(&self.reasoning_id, "", "in_progress");
                    self.emit(ev, "response.output_item.added", json!({"output_index": i, "item": item}));
                    i
                }
            };
            if let Some(Item::Reasoning { text }) = self.items.get_mut(index) {
                text.push_str(r);
            }
            let id = self.reasoning_id.clone();
            self.emit(ev, "response.reasoning_text.delta", json!({"delta": r, "item_id": id, "output_index": index, "content_index": 0}));
        }
        if let Some(t) = delta.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            let id = self.message_id.clone();
            let index = match self.items.iter().position(|i| matches!(i, Item::Message { .. })) {
                Some(i) => i,
                None => {
                    let i = self.items.len();
                    self.items.push(Item::Message { text: String::new() });
                    let item = message_item(&id, "", "in_progress");
                    self.emit(ev, "response.output_item.added", json!({"output_index": i, "item": item}));
                    self.emit(ev, "response.content_part.added", json!({"item_id": id, "output_index": i, "content_index": 0, "part": {"type": "output_text", "annotations": [], "text": ""}}));
                    i
                }
            };
            if let Some(Item::Message { text }) = self.items.get_mut(index) {
                text.push_str(t);
            }
            self.emit(ev, "response.output_text.delta", json!({"item_id": id, "output_index": index, "content_index": 0, "delta": t}));
        }
        let calls = delta.get("tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
        for (pos, call) in calls.iter().enumerate() {
            let n = call.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
            let f = call.get("function");
            let found = self.items.iter().position(|i| matches!(i, Item::Call { chat_index, .. } if *chat_index == n));
            let index = match found {
                Some(i) => i,
                None => {
                    let i = self.items.len();
                    let (id, name) = (str_or_empty(call, "id").to_string(), f.map_or("", |f| str_or_empty(f, "name")).to_string());
                    let item = call_item(&id, &name, "", "in_progress");
                    self.items.push(Item::Call { chat_index: n, id, name, arguments: String::new() });
                    self.emit(ev, "response.output_item.added", json!({"output_index": i, "item": item}));
                    i
                }
            };
            if let Some(a) = f.and_then(|f| f.get("arguments")).and_then(Value::as_str).filter(|a| !a.is_empty()) {
                let mut item_id = String::new();
                if let Some(Item::Call { id, arguments, .. }) = self.items.get_mut(index) {
                    arguments.push_str(a);
                    item_id = format!("fc_{id}");
                }
                self.emit(ev, "response.function_call_arguments.delta", json!({"delta": a, "item_id": item_id, "output_index": index}));
            }
        }
    }

    fn close(&mut self, ev: &mut Vec<(String, Value)>) {
        if self.done {
            return;
        }
        self.done = true;
        self.start(ev);
        let mut output = Vec::new();
        let items = std::mem::take(&mut self.items);
        for (i, item) in items.iter().enumerate() {
            match item {
                Item::Reasoning { text } => {
                    let done = reasoning_item(&self.reasoning_id, text, "completed");
                    self.emit(ev, "response.output_item.done", json!({"output_index": i, "item": done.clone()}));
                    output.push(done);
                }
                Item::Message { text } => {
                    let id = self.message_id.clone();
                    self.emit(ev, "response.output_text.done", json!({"item_id": id, "output_index": i, "content_index": 0, "text": text}));
                    self.emit(ev, "response.content_part.done", json!({"item_id": id, "output_index": i, "content_index": 0, "part": output_text(text)}));
                    let done = message_item(&id, text, "completed");
                    self.emit(ev, "response.output_item.done", json!({"output_index": i, "item": done.clone()}));
                    output.push(done);
                }
                Item::Call { id, name, arguments, .. } => {
                    let done = call_item(id, name, arguments, "completed");
                    self.emit(ev, "response.output_item.done", json!({"output_index": i, "item": done.clone()}));
                    output.push(done);
                }
            }
        }
        self.items = items;
        let response = json!({
            "id": self.resp_id, "object": "response", "created_at": self.created_at, "completed_at": unix_now(), "status": "completed",
            "model": self.model, "output": output, "usage": usage_json(self.usage.as_ref()),
        });
        let mut data = json!({"response": response});
        if let Some(t) = self.timings.take() {
            data["timings"] = t;
        }
        self.emit(ev, "response.completed", data);
    }

    /// The closing events when the chat stream has ended and `push` has not already sent
    /// them (a stream without a usage chunk); nothing after an error or a second time.
    pub fn finish(&mut self) -> Vec<(String, Value)> {
        let mut ev = Vec::new();
        self.close(&mut ev);
        ev
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    fn conv(body: Value) -> Value {
        to_chat(&body).unwrap()
    }

    fn conv_err(body: Value) -> ApiError {
        to_chat(&body).unwrap_err()
    }

    fn chunk(delta: Value, finish: Option<&str>) -> Value {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "system_fingerprint": "x",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    }

    fn usage_chunk(prompt: u64, cached: u64, completion: u64) -> Value {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
               "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": cached}}})
    }

    fn run(s: &mut ResponsesStream, chunks: &[Value]) -> Vec<(String, Value)> {
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

    /// The SDK's `output_text`: the output_text parts of the message items joined.
    fn output_text_of(resp: &Value) -> String {
        let mut s = String::new();
        for item in resp["output"].as_array().unwrap() {
            if item["type"] == "message" {
                for p in item["content"].as_array().unwrap() {
                    if p["type"] == "output_text" {
                        s += p["text"].as_str().unwrap();
                    }
                }
            }
        }
        s
    }

    #[test]
    fn random_ids_are_32_alphanumerics_and_differ() {
        let (a, b) = (random_id(), random_id());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
    }

    // --- requests (test_compat_oai_responses.py's bodies) ---

    #[test]
    fn library_request_becomes_chat_body() {
        let c = conv(json!({"model": "gpt-4.1", "input": [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}],
            "max_output_tokens": 8, "temperature": 0.8}));
        assert_eq!(c, json!({"model": "gpt-4.1", "temperature": 0.8, "messages": [
            {"role": "system", "content": [{"text": "Book", "type": "text"}]},
            {"role": "user", "content": [{"text": "What is the best book", "type": "text"}]},
        ], "max_tokens": 8}));
    }

    #[test]
    fn string_input_instructions_and_stream() {
        let c = conv(json!({"input": "This is a test", "instructions": "Be brief", "max_output_tokens": 8, "stream": true, "timings_per_token": true, "return_progress": true}));
        assert_eq!(c["messages"], json!([{"role": "system", "content": "Be brief"}, {"role": "user", "content": "This is a test"}]));
        assert_eq!(c["stream_options"], json!({"include_usage": true}));
        assert_eq!((c["timings_per_token"].clone(), c["return_progress"].clone(), c["max_tokens"].clone()), (json!(true), json!(true), json!(8)));
        assert!(c.get("instructions").is_none() && c.get("input").is_none() && c.get("max_output_tokens").is_none());
        // a client's own stream_options are kept beside include_usage
        assert_eq!(conv(json!({"input": "x", "stream": true, "stream_options": {"include_obfuscation": false}}))["stream_options"], json!({"include_obfuscation": false, "include_usage": true}));
        assert!(conv(json!({"input": "x"})).get("stream_options").is_none());
        assert_eq!(conv(json!({"input": "x", "instructions": null}))["messages"], json!([{"role": "user", "content": "x"}]));
    }

    #[test]
    fn assistant_turn_items_merge_into_one_message() {
        let c = conv(json!({"input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}], "type": "message"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Need a tool."}]},
            {"type": "message", "role": "assistant", "status": "completed", "id": "msg_1", "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}", "status": "completed"},
            {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
        ]}));
        assert_eq!(c["messages"], json!([
            {"role": "user", "content": [{"text": "Weather in Paris?", "type": "text"}]},
            {"role": "assistant", "content": [{"text": "Checking.", "type": "text"}], "reasoning_content": "Need a tool.", "tool_calls": [
                {"function": {"arguments": "{\"city\":\"Paris\"}", "name": "get_weather"}, "id": "call_1", "type": "function"},
                {"function": {"arguments": "{}", "name": "get_time"}, "id": "call_2", "type": "function"},
            ]},
            {"content": "sunny", "role": "tool", "tool_call_id": "call_1"},
            {"content": [{"type": "text", "text": "noon"}], "role": "tool", "tool_call_id": "call_2"},
        ]));
    }

    #[test]
    fn assistant_items_without_a_previous_assistant_message() {
        let c = conv(json!({"input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "ok"},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "again"},
            {"type": "reasoning", "summary": [], "content": [{"text": "r"}]},
        ]}));
        assert_eq!(c["messages"], json!([
            {"role": "user", "content": [{"text": "hi", "type": "text"}]},
            {"role": "assistant", "tool_calls": [{"function": {"arguments": "{}", "name": "f"}, "id": "c", "type": "function"}]},
            {"content": "ok", "role": "tool", "tool_call_id": "c"},
            {"role": "assistant", "content": [{"text": "Done.", "type": "text"}]},
            {"role": "user", "content": [{"text": "again", "type": "text"}]},
            {"role": "assistant", "content": [], "reasoning_content": "r"},
        ]));
        // refusals are parts too (the chat layer decides what it renders)
        let c = conv(json!({"input": [{"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}]}));
        assert_eq!(c["messages"], json!([{"role": "assistant", "content": [{"refusal": "no", "type": "refusal"}]}]));
    }

    #[test]
    fn tools_tool_choice_and_reasoning() {
        let c = conv(json!({"input": "x", "tools": [
            {"type": "function", "name": "get_weather", "description": "d", "parameters": {"type": "object", "properties": {}}},
            {"type": "function", "name": "loose", "strict": false},
            {"type": "web_search"},
            "junk",
        ], "tool_choice": {"type": "function", "name": "get_weather"}, "reasoning": {"effort": "low", "summary": "auto"}}));
        assert_eq!(c["tools"], json!([
            {"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object", "properties": {}}, "strict": true}},
            {"type": "function", "function": {"name": "loose", "strict": false}},
        ]));
        assert_eq!(c["tool_choice"], json!({"type": "function", "function": {"name": "get_weather"}}));
        assert_eq!(c["reasoning_effort"], json!("low"));
        assert!(c.get("reasoning").is_none());
        // only non-function tools: no tools at all; string choices stay; other objects are auto
        let c = conv(json!({"input": "x", "tools": [{"type": "file_search"}], "tool_choice": "required"}));
        assert!(c.get("tools").is_none());
        assert_eq!(c["tool_choice"], json!("required"));
        assert_eq!(conv(json!({"input": "x", "tool_choice": {"type": "web_search_preview"}}))["tool_choice"], json!("auto"));
        assert!(conv(json!({"input": "x", "reasoning": {"summary": "auto"}})).get("reasoning_effort").is_none());
        let e = conv_err(json!({"input": "x", "tools": {"type": "function"}}));
        assert_eq!((e.param.as_deref(), e.message.as_str()), (Some("tools"), "'tools' must be an array of objects"));
    }

    #[test]
    fn refusals_with_upstreams_messages() {
        let msg = |body: Value| conv_err(body).message;
        assert_eq!(msg(json!({"model": "x"})), "'input' is required");
        assert_eq!(msg(json!({"input": "x", "previous_response_id": "resp_1"})), "llama.cpp does not support 'previous_response_id'.");
        assert!(to_chat(&json!({"input": "x", "previous_response_id": ""})).is_ok());
        assert_eq!(msg(json!({"input": 5})), "'input' must be a string or array of objects");
        assert_eq!(msg(json!({"input": [5]})), "input[0]: Cannot determine type of 'item'");
        assert_eq!(msg(json!({"input": [{"type": "message"}]})), "input[0]: Cannot determine type of 'item'");
        assert_eq!(msg(json!({"input": [{"role": "user", "content": [{"type": "input_text"}]}]})), "input[0]: 'Input text' requires 'text'");
        assert_eq!(msg(json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]})), "input[0]: 'input_file' is not supported by llamacpp at this moment");
        assert_eq!(msg(json!({"input": [{"role": "user", "content": [{"type": "audio"}]}]})), "input[0]: 'type' must be one of 'input_text', 'input_image', or 'input_file'");
        assert_eq!(msg(json!({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})), "input[0]: 'image_url' is required");
        assert_eq!(msg(json!({"input": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": 3}]}]})), "input[0]: 'Output text' requires 'text'");
        assert_eq!(msg(json!({"input": [{"type": "message", "role": "assistant", "content": [{"type": "refusal"}]}]})), "input[0]: 'Refusal' requires 'refusal'");
        assert_eq!(msg(json!({"input": [{"type": "message", "role": "assistant", "content": [{"type": "input_image"}]}]})), "input[0]: 'type' must be one of 'output_text' or 'refusal'");
        assert_eq!(msg(json!({"input": [{"type": "function_call_output", "call_id": "c", "output": [{"text": "x"}]}]})), "input[0]: Output of tool call missing 'type' field");
        assert_eq!(msg(json!({"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "output_text"}]}]})), "input[0]: Output of tool call should be 'Input text' or 'Input image'");
        assert_eq!(msg(json!({"input": [{"type": "reasoning", "summary": []}]})), "input[0]: item['content'] is not an array");
        assert_eq!(msg(json!({"input": [{"type": "reasoning", "summary": [], "content": []}]})), "input[0]: item['content'] is empty");
        assert_eq!(msg(json!({"input": [{"type": "reasoning", "summary": [], "content": [{"text": 1}]}]})), "input[0]: item['content']['text'] is not a string");
        assert_eq!(msg(json!({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]})), "input[0]: Cannot determine type of 'item'");
        assert_eq!(msg(json!({"input": "x", "instructions": 5})), "'instructions' must be a string, not a number");
        assert!(msg(json!([1])).contains("must be a JSON object"));
        let e = conv_err(json!({"input": [{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]}));
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(e.message.contains("image input is not supported") && e.message.contains("input[1].content[0]"), "{}", e.message);
        let e = conv_err(json!({"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image", "image_url": "u"}]}]}));
        assert!(e.message.contains("image input is not supported") && e.message.contains("input[0].output[0]"), "{}", e.message);
    }

    /// The converted bodies are requests the chat path takes.
    #[test]
    fn converted_requests_pass_the_chat_layer() {
        use crate::params::Fields;
        use deepseek_chat::request::{inputs, ServerDefaults};
        use deepseek_chat::tools::ToolChoice;
        let chat = conv(json!({"model": "gpt-4.1", "instructions": "Be brief", "max_output_tokens": 8, "temperature": 0.8, "stream": true, "store": false,
            "text": {"format": {"type": "text"}}, "reasoning": {"effort": "low"}, "tool_choice": {"type": "function", "name": "f"},
            "tools": [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}],
            "input": [
                {"role": "user", "content": "hi"},
                {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "r"}]},
                {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
            ]}));
        let f = Fields::parse(&chat).unwrap();
        let gp = f.gen(true, &crate::args::SamplingArgs::default()).unwrap();
        assert_eq!((gp.max_tokens, gp.stream, gp.include_usage, gp.sampling.temperature), (Some(8), true, true, 0.8));
        assert_eq!(gp.tool_choice, ToolChoice::Function("f".into()));
        let inp = inputs(chat.as_object().unwrap(), &ServerDefaults::default()).unwrap();
        let roles: Vec<&str> = inp.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool"]);
        assert_eq!((inp.messages[2].reasoning_content.as_str(), inp.messages[2].tool_calls[0].id.as_str()), ("r", "call_1"));
        assert_eq!(inp.kwargs.get("reasoning_effort"), Some(&json!("low")));
        assert_eq!(inp.tools[0].name, "f");
    }

    #[test]
    fn input_tokens_reply_shape() {
        assert_eq!(input_tokens_reply(7), json!({"input_tokens": 7, "object": "response.input_tokens"}));
    }

    // --- answers ---

    #[test]
    fn whole_answer_as_response() {
        // test_responses_with_openai_library
        let resp = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 100, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Suddenly Suddenly"}, "logprobs": null, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 8, "total_tokens": 18, "prompt_tokens_details": {"cached_tokens": 3}}, "timings": {}});
        let r = from_chat(&resp, "tinyllama");
        assert!(r["id"].as_str().unwrap().starts_with("resp_") && r["id"].as_str().unwrap().len() == 37);
        assert_eq!(r["object"], json!("response"));
        assert_eq!(r["status"], json!("completed"));
        assert_eq!(r["model"], json!("tinyllama"));
        assert_eq!(r["created_at"], json!(100));
        assert!(r["completed_at"].as_u64().unwrap() >= 100);
        let out = r["output"].as_array().unwrap();
        assert_eq!(out.len(), 1);
        assert!(out[0]["id"].as_str().unwrap().starts_with("msg_"));
        let mut item = out[0].clone();
        item["id"] = json!("msg_x");
        assert_eq!(item, json!({"content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Suddenly Suddenly"}], "id": "msg_x", "role": "assistant", "status": "completed", "type": "message"}));
        assert_eq!(output_text_of(&r), "Suddenly Suddenly");
        assert_eq!(r["usage"], json!({"input_tokens": 10, "output_tokens": 8, "total_tokens": 18, "input_tokens_details": {"cached_tokens": 3}}));
        assert!(r.get("timings").is_none());
    }

    #[test]
    fn whole_answer_with_reasoning_and_calls() {
        let resp = json!({"choices": [{"message": {"role": "assistant", "content": "", "reasoning_content": "think",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}, "id": "abc"}]}, "finish_reason": "tool_calls"}]});
        let r = from_chat(&resp, "m");
        let out = r["output"].as_array().unwrap();
        assert_eq!(out.len(), 2);
        assert!(out[0]["id"].as_str().unwrap().starts_with("rs_"));
        assert_eq!(out[0]["content"], json!([{"text": "think", "type": "reasoning_text"}]));
        assert_eq!((out[0]["type"].clone(), out[0]["summary"].clone(), out[0]["encrypted_content"].clone()), (json!("reasoning"), json!([]), json!("")));
        assert_eq!(out[1], json!({"id": "fc_abc", "type": "function_call", "status": "completed", "arguments": "{\"city\":\"Paris\"}", "call_id": "call_abc", "name": "get_weather"}));
        assert_eq!(r["usage"]["total_tokens"], json!(0));
        for v in [json!(null), json!({"choices": [{"message": {"content": 3, "tool_calls": [1, {"function": []}]}}], "usage": 5})] {
            assert_eq!(from_chat(&v, "m")["object"], json!("response"));
        }
    }

    // --- streams ---

    #[test]
    fn text_stream_event_sequence() {
        // test_responses_stream_with_openai_library and ..._with_llama_telemetry
        let mut s = ResponsesStream::new("tinyllama");
        let resp_id = s.id().to_string();
        let mut fin = chunk(json!({}), Some("length"));
        fin["timings"] = json!({"prompt_per_second": 1.0, "predicted_per_second": 2.0});
        let ev = run(&mut s, &[
            chunk(json!({"role": "assistant", "content": null}), None),
            chunk(json!({"content": "Sud"}), None),
            chunk(json!({"content": "denly"}), None),
            fin,
            usage_chunk(9, 0, 8),
        ]);
        assert_eq!(names(&ev), ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added", "response.output_text.delta",
            "response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"]);
        for (i, (n, d)) in ev.iter().enumerate() {
            assert_eq!(d["type"], json!(n));
            assert_eq!(d["sequence_number"], json!(i));
        }
        assert!(resp_id.starts_with("resp_"));
        assert_eq!(ev[0].1["response"]["id"], json!(resp_id));
        assert_eq!(ev[0].1["response"]["status"], json!("in_progress"));
        assert_eq!(ev[1].1["response"]["id"], json!(resp_id));
        let msg_id = ev[2].1["item"]["id"].as_str().unwrap().to_string();
        assert!(msg_id.starts_with("msg_"));
        assert_eq!(ev[2].1["item"], json!({"content": [], "id": msg_id, "role": "assistant", "status": "in_progress", "type": "message"}));
        assert_eq!(ev[2].1["output_index"], json!(0));
        assert_eq!(ev[3].1["part"], json!({"type": "output_text", "annotations": [], "text": ""}));
        let mut gathered = String::new();
        for (n, d) in &ev[3..9] {
            assert_eq!(d["item_id"].as_str().or(d["item"]["id"].as_str()), Some(msg_id.as_str()), "{n}");
            if n == "response.output_text.delta" {
                gathered += d["delta"].as_str().unwrap();
            }
        }
        assert_eq!(gathered, "Suddenly");
        assert_eq!(ev[6].1["text"], json!("Suddenly"));
        assert_eq!(ev[7].1["part"], json!({"type": "output_text", "annotations": [], "logprobs": [], "text": "Suddenly"}));
        assert_eq!(ev[8].1["item"]["status"], json!("completed"));
        let done = &ev[9].1;
        assert_eq!(done["response"]["id"], json!(resp_id));
        assert_eq!(done["response"]["status"], json!("completed"));
        assert_eq!(done["response"]["output"][0]["id"], json!(msg_id));
        assert_eq!(output_text_of(&done["response"]), gathered);
        assert_eq!(done["response"]["usage"], json!({"input_tokens": 9, "output_tokens": 8, "total_tokens": 17, "input_tokens_details": {"cached_tokens": 0}}));
        assert_eq!(done["timings"]["predicted_per_second"], json!(2.0));
        assert!(s.finish().is_empty());
    }

    #[test]
    fn per_token_timings_go_on_the_chunks_last_event() {
        let mut s = ResponsesStream::new("m");
        s.push(&chunk(json!({"role": "assistant", "content": null}), None));
        let mut c = chunk(json!({"content": "a"}), None);
        c["timings"] = json!({"prompt_per_second": 1.0});
        let ev = s.push(&c);
        assert_eq!(names(&ev), ["response.output_item.added", "response.content_part.added", "response.output_text.delta"]);
        assert!(ev[2].1.get("timings").is_some() && ev[0].1.get("timings").is_none());
    }

    #[test]
    fn reasoning_and_tool_call_stream() {
        let mut s = ResponsesStream::new("m");
        let ev = run(&mut s, &[
            chunk(json!({"role": "assistant", "content": null}), None),
            chunk(json!({"reasoning_content": "Need "}), None),
            chunk(json!({"reasoning_content": "weather."}), None),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "", "name": "get_weather"}, "id": "abc", "type": "function"}]}), None),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}), None),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}), None),
            chunk(json!({}), Some("tool_calls")),
            usage_chunk(9, 1, 20),
        ]);
        assert_eq!(names(&ev), ["response.created", "response.in_progress", "response.output_item.added", "response.reasoning_text.delta", "response.reasoning_text.delta",
            "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
            "response.output_item.done", "response.output_item.done", "response.completed"]);
        let rs_id = ev[2].1["item"]["id"].as_str().unwrap().to_string();
        assert!(rs_id.starts_with("rs_"));
        assert_eq!(ev[2].1["item"], json!({"id": rs_id, "summary": [], "type": "reasoning", "content": [], "encrypted_content": "", "status": "in_progress"}));
        assert_eq!((ev[3].1["delta"].clone(), ev[3].1["item_id"].clone()), (json!("Need "), json!(rs_id)));
        assert_eq!(ev[5].1["item"], json!({"id": "fc_abc", "type": "function_call", "status": "in_progress", "arguments": "", "call_id": "call_abc", "name": "get_weather"}));
        assert_eq!(ev[5].1["output_index"], json!(1));
        assert_eq!((ev[6].1["item_id"].clone(), ev[6].1["delta"].clone(), ev[6].1["output_index"].clone()), (json!("fc_abc"), json!("{\"city\":"), json!(1)));
        assert_eq!(ev[8].1["item"], json!({"id": rs_id, "summary": [], "type": "reasoning", "content": [{"text": "Need weather.", "type": "reasoning_text"}], "encrypted_content": "", "status": "completed"}));
        let call_done = json!({"id": "fc_abc", "type": "function_call", "status": "completed", "arguments": "{\"city\":\"Paris\"}", "call_id": "call_abc", "name": "get_weather"});
        assert_eq!(ev[9].1["item"], call_done);
        let out = &ev[10].1["response"]["output"];
        assert_eq!(out.as_array().unwrap().len(), 2);
        assert_eq!(out[1], call_done);
        assert_eq!(ev[10].1["response"]["usage"]["input_tokens_details"]["cached_tokens"], json!(1));
    }

    #[test]
    fn stream_without_usage_closes_at_finish() {
        let mut s = ResponsesStream::new("m");
        let mut ev = s.push(&chunk(json!({"role": "assistant", "content": null}), None));
        ev.extend(s.push(&chunk(json!({}), Some("stop"))));
        assert_eq!(names(&ev), ["response.created", "response.in_progress"]);
        let end = s.finish();
        assert_eq!(names(&end), ["response.completed"]);
        assert_eq!(end[0].1["response"]["output"], json!([]));
        assert_eq!(end[0].1["sequence_number"], json!(2));
    }

    #[test]
    fn error_chunk_is_an_error_event() {
        let mut s = ResponsesStream::new("m");
        s.push(&chunk(json!({"role": "assistant", "content": null}), None));
        let ev = s.push(&ApiError::internal("generation failed").body());
        assert_eq!(names(&ev), ["error"]);
        assert_eq!(ev[0].1["message"], json!("generation failed"));
        assert_eq!(ev[0].1["code"], json!("server_error"));
        assert_eq!(ev[0].1["error"]["code"], json!(500));
        assert!(s.finish().is_empty());
        let mut s = ResponsesStream::new("m");
        for c in [json!(null), json!(3), json!({"choices": [{"delta": {"content": 1, "tool_calls": [2, {"function": 5}]}}]}), json!({"usage": 1, "timings": 2}), json!({"error": null})] {
            s.push(&c);
        }
        s.finish();
    }
}

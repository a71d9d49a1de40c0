//! A conversation as a chat request gives it (OpenAI's message and tool objects), checked as
//! llama-server checks it, and turned back into the JSON a template is given: what upstream's
//! `common_chat_msgs_parse_oaicompat` / `to_json_oaicompat` accept and produce, so that a
//! template sees the same values from both servers.

use serde_json::{json, Map, Value};

/// One content part (`{"type": "text", "text": …}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub kind: String,
    pub text: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    /// The arguments as JSON text (as the client sent them, or as the model wrote them).
    pub arguments: String,
    pub id: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub content: String,
    pub parts: Vec<Part>,
    pub reasoning_content: String,
    /// `name` (of a tool message).
    pub tool_name: String,
    pub tool_call_id: String,
    pub tool_calls: Vec<ToolCall>,
}

/// A function the model may call.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: String,
    /// Its parameters' JSON schema (as given; `{}` when absent).
    pub parameters: Value,
}

fn dump(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

fn str_field(v: &Value, what: &str) -> Result<String, String> {
    v.as_str().map(str::to_string).ok_or_else(|| format!("Expected {what} to be a string, got {}", dump(v)))
}

/// Parses `messages`; the errors say what upstream's say ("Failed to parse messages: …").
pub fn parse_messages(v: &Value) -> Result<Vec<Message>, String> {
    parse_messages_inner(v).map_err(|e| format!("Failed to parse messages: {e}"))
}

fn parse_messages_inner(v: &Value) -> Result<Vec<Message>, String> {
    let list = v.as_array().ok_or_else(|| format!("Expected 'messages' to be an array, got {}", dump(v)))?;
    let mut out = Vec::with_capacity(list.len());
    for m in list {
        let obj = m.as_object().ok_or_else(|| format!("Expected 'message' to be an object, got {}", dump(m)))?;
        let mut msg = Message::default();
        let role = obj.get("role").ok_or_else(|| format!("Missing 'role' in message: {}", dump(m)))?;
        msg.role = str_field(role, "'role'")?;
        let has_content = obj.contains_key("content");
        let has_calls = obj.contains_key("tool_calls");
        if let Some(c) = obj.get("content") {
            match c {
                Value::String(s) => msg.content = s.clone(),
                Value::Array(parts) => {
                    for p in parts {
                        let kind = p.get("type").ok_or_else(|| format!("Missing content part type: {}", dump(p)))?;
                        let kind = kind.as_str().filter(|k| *k == "text" || *k == "media_marker").ok_or_else(|| format!("Unsupported content part type: {}", dump(kind)))?;
                        let text = p.get("text").ok_or_else(|| format!("Missing 'text' in content part: {}", dump(p)))?;
                        msg.parts.push(Part { kind: kind.to_string(), text: str_field(text, "content part 'text'")? });
                    }
                }
                Value::Null => {}
                other => return Err(format!("Invalid 'content' type: expected string or array, got {} (ref: https://github.com/ggml-org/llama.cpp/issues/8367)", dump(other))),
            }
        }
        if let Some(calls) = obj.get("tool_calls") {
            let calls = match calls {
                Value::Array(a) => a.as_slice(),
                Value::Null => &[],
                other => return Err(format!("Expected 'tool_calls' to be an array, got {}", dump(other))),
            };
            for tc in calls {
                let ty = tc.get("type").ok_or_else(|| format!("Missing tool call type: {}", dump(tc)))?;
                if ty.as_str() != Some("function") {
                    return Err(format!("Unsupported tool call type: {}", dump(tc)));
                }
                let f = tc.get("function").ok_or_else(|| format!("Missing tool call function: {}", dump(tc)))?;
                let name = f.get("name").ok_or_else(|| format!("Missing tool call name: {}", dump(tc)))?;
                let args = f.get("arguments").ok_or_else(|| format!("Missing tool call arguments: {}", dump(tc)))?;
                let arguments = match args {
                    Value::String(s) => s.clone(),
                    other => dump(other),
                };
                let id = match tc.get("id") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(other) => return Err(format!("Expected tool call 'id' to be a string, got {}", dump(other))),
                };
                msg.tool_calls.push(ToolCall { name: str_field(name, "tool call 'name'")?, arguments, id });
            }
        }
        if !has_content && !has_calls {
            return Err("Expected 'content' or 'tool_calls' (ref: https://github.com/ggml-org/llama.cpp/issues/8367 & https://github.com/ggml-org/llama.cpp/issues/12279)".into());
        }
        if let Some(r) = obj.get("reasoning_content").filter(|r| !r.is_null()) {
            msg.reasoning_content = str_field(r, "'reasoning_content'")?;
        }
        if let Some(n) = obj.get("name").filter(|r| !r.is_null()) {
            msg.tool_name = str_field(n, "'name'")?;
        }
        if let Some(n) = obj.get("tool_call_id").filter(|r| !r.is_null()) {
            msg.tool_call_id = str_field(n, "'tool_call_id'")?;
        }
        out.push(msg);
    }
    Ok(out)
}

/// Parses `tools` (OpenAI's `[{"type": "function", "function": {…}}]`).
pub fn parse_tools(v: &Value) -> Result<Vec<Tool>, String> {
    let inner = || -> Result<Vec<Tool>, String> {
        let mut out = Vec::new();
        if v.is_null() {
            return Ok(out);
        }
        let list = v.as_array().ok_or_else(|| format!("Expected 'tools' to be an array, got {}", dump(v)))?;
        for t in list {
            let ty = t.get("type").ok_or_else(|| format!("Missing tool type: {}", dump(t)))?;
            if ty.as_str() != Some("function") {
                return Err(format!("Unsupported tool type: {}", dump(t)));
            }
            let f = t.get("function").ok_or_else(|| format!("Missing tool function: {}", dump(t)))?;
            let name = f.get("name").and_then(Value::as_str).ok_or_else(|| format!("Missing or non-string tool function name: {}", dump(t)))?;
            if name.is_empty() {
                return Err(format!("Empty tool function name: {}", dump(t)));
            }
            let description = match f.get("description") {
                None | Some(Value::Null) => String::new(),
                Some(d) => str_field(d, "tool 'description'")?,
            };
            let parameters = match f.get("parameters") {
                None | Some(Value::Null) => json!({}),
                Some(p @ Value::Object(_)) => p.clone(),
                Some(other) => return Err(format!("Expected tool 'parameters' to be an object, got {}", dump(other))),
            };
            out.push(Tool { name: name.to_string(), description, parameters });
        }
        Ok(out)
    };
    inner().map_err(|e| format!("Failed to parse tools: {e}; tools = {}", serde_json::to_string_pretty(v).unwrap_or_default()))
}

/// The parameters a grammar or a prompt uses: an empty or absent schema is an object with no
/// properties.
pub fn tool_parameters(t: &Tool) -> Value {
    match &t.parameters {
        Value::Object(m) if !m.is_empty() => t.parameters.clone(),
        _ => json!({"type": "object", "properties": {}}),
    }
}

/// Tools as templates are given them.
pub fn tools_json(tools: &[Tool]) -> Value {
    Value::Array(tools.iter().map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}})).collect())
}

/// Text parts joined by newlines, none next to a media marker.
pub fn concat_parts(parts: &[Part]) -> String {
    let mut text = String::new();
    let mut after_media = false;
    for p in parts {
        let newline = match p.kind.as_str() {
            "text" => {
                let nl = !after_media && !text.is_empty();
                after_media = false;
                nl
            }
            "media_marker" => {
                after_media = true;
                false
            }
            _ => continue,
        };
        if newline {
            text.push('\n');
        }
        text.push_str(&p.text);
    }
    text
}

impl Message {
    pub fn new(role: &str, content: &str) -> Message {
        Message { role: role.into(), content: content.into(), ..Message::default() }
    }

    /// The message as a template sees it: content a string (`""` when empty) or parts,
    /// reasoning, name and call id only when set, tool-call arguments as text.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("role".into(), json!(self.role));
        if !self.content.is_empty() {
            m.insert("content".into(), json!(self.content));
        } else if !self.parts.is_empty() {
            if self.parts.iter().any(|p| p.kind == "media_marker") {
                m.insert("content".into(), json!(concat_parts(&self.parts)));
            } else {
                m.insert("content".into(), Value::Array(self.parts.iter().map(|p| json!({"type": p.kind, "text": p.text})).collect()));
            }
        } else {
            m.insert("content".into(), json!(""));
        }
        if !self.reasoning_content.is_empty() {
            m.insert("reasoning_content".into(), json!(self.reasoning_content));
        }
        if !self.tool_name.is_empty() {
            m.insert("name".into(), json!(self.tool_name));
        }
        if !self.tool_call_id.is_empty() {
            m.insert("tool_call_id".into(), json!(self.tool_call_id));
        }
        if !self.tool_calls.is_empty() {
            let calls: Vec<Value> = self
                .tool_calls
                .iter()
                .map(|tc| {
                    let mut c = json!({"type": "function", "function": {"name": tc.name, "arguments": tc.arguments}});
                    if !tc.id.is_empty() {
                        c["id"] = json!(tc.id);
                    }
                    c
                })
                .collect();
            m.insert("tool_calls".into(), Value::Array(calls));
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_as_upstream_reads_them() {
        let v = json!([
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
        ]);
        let m = parse_messages(&v).unwrap();
        assert_eq!(m[1].parts.len(), 2);
        assert_eq!(m[2].tool_calls[0].arguments, r#"{"x":1}"#);
        assert_eq!(m[2].to_json(), json!({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}, "id": "c1"}]}));
        assert_eq!(concat_parts(&m[1].parts), "a\nb");
        for (bad, why) in [
            (json!({}), "Expected 'messages' to be an array"),
            (json!([{"content": "x"}]), "Missing 'role'"),
            (json!([{"role": "user"}]), "Expected 'content' or 'tool_calls'"),
            (json!([{"role": "user", "content": 5}]), "Invalid 'content' type"),
            (json!([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]), "Unsupported content part type"),
            (json!([{"role": "assistant", "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}]), "Missing tool call name"),
        ] {
            let e = parse_messages(&bad).unwrap_err();
            assert!(e.starts_with("Failed to parse messages: ") && e.contains(why), "{e}");
        }
        let e = parse_tools(&json!([{"type": "code_interpreter"}])).unwrap_err();
        assert!(e.contains("Unsupported tool type"), "{e}");
    }
}

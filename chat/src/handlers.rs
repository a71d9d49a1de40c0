//! The templates upstream renders through a handler of their own rather than its differential
//! autoparser (b11312 `common/chat.cpp` `common_chat_try_specialized_template`, detected in its
//! order, and `common/parsers/*.cpp`): whether thinking is on by default, how a continued
//! assistant message is written after the prompt, and the messages some of them adapt first.

use serde_json::{json, Value};

use crate::messages::Message;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handler {
    Ministral3,
    GptOss,
    MuseGlimmer,
    FunctionaryV32,
    KimiK2,
    KimiK3,
    Ling3,
    Cohere2Moe,
    /// LFM2 and LFM2.5.
    Lfm2,
    GigaChatV3,
    MiniMaxM3,
    /// DeepSeek V3.2 / V4 (DSML).
    Dsml { v4: bool },
    /// `legacy`: a Gemma 4 template older than the official one, given tool results inside the
    /// assistant turn (`tool_responses`).
    Gemma4 { legacy: bool },
    MiniCpm5,
    /// Qwen3-Coder's XML calls (also Qwen3.5, Nemotron 3 Nano, StepFun 3.5); `reasoning`: the
    /// template has `<think>`.
    Qwen3Coder { reasoning: bool },
}

impl Handler {
    /// Upstream's detection, in its order.
    pub fn detect(src: &str) -> Option<Handler> {
        let has = |s: &str| src.contains(s);
        if has("[SYSTEM_PROMPT]") && has("[TOOL_CALLS]") && has("[ARGS]") && !has("[CALL_ID]") {
            return Some(Handler::Ministral3);
        }
        if has("<|channel|>") {
            return Some(Handler::GptOss);
        }
        if has("<atem:function_calls>") && has("<|eom|>") {
            return Some(Handler::MuseGlimmer);
        }
        if has(">>>all") && has(">>>${recipient}") {
            return Some(Handler::FunctionaryV32);
        }
        if has("<|tool_calls_section_begin|>") && has("<|tool_call_begin|>") {
            return Some(Handler::KimiK2);
        }
        if has("<|open|>") && has("<|close|>") && has("<|end_of_msg|>") {
            return Some(Handler::KimiK3);
        }
        if has("<role>ASSISTANT</role>") && has("<arg_key>") {
            return Some(Handler::Ling3);
        }
        if has("<|START_TEXT|>") && has("<|START_ACTION|>") {
            return Some(Handler::Cohere2Moe);
        }
        if has("<|tool_list_start|>") && has("<|tool_list_end|>") || has("List of tools: [") {
            return Some(Handler::Lfm2);
        }
        if has("<|role_sep|>") && has("<|message_sep|>") && !has("<|function_call|>") {
            return Some(Handler::GigaChatV3);
        }
        if has("]<]minimax[>[") && has("<tool_call>") && has("<invoke name=") {
            return Some(Handler::MiniMaxM3);
        }
        if has("dsml_token") && has("DSML") && (has("function_calls") || has("tool_calls")) {
            // V3.2 names the call block "function_calls", V4 "tool_calls".
            return Some(Handler::Dsml { v4: !has("function_calls") });
        }
        if has("'<|tool_call>call:'") {
            return Some(Handler::Gemma4 { legacy: !has("{#- OpenAI Chat Completions:") });
        }
        if has("Tool usage guidelines:") && has("<function name=\"") && has("<param name=\"") {
            return Some(Handler::MiniCpm5);
        }
        if has("<tool_call>") && has("<function=") && has("<parameter=") && !has("'<tool_call><function=' ~ tool_call.name ~ '>'") {
            return Some(Handler::Qwen3Coder { reasoning: has("<think>") });
        }
        None
    }

    /// The handler's `supports_thinking`: llama-server turns `enable_thinking` on by default
    /// when it is set.
    pub fn supports_thinking(self) -> bool {
        match self {
            Handler::GigaChatV3 | Handler::FunctionaryV32 => false,
            Handler::Qwen3Coder { reasoning } => reasoning,
            _ => true,
        }
    }

    /// The messages as this handler gives them to its template.
    pub fn adapt(self, messages: &mut Vec<Value>) {
        match self {
            Handler::Lfm2 | Handler::GptOss => {
                for m in messages.iter_mut() {
                    if let Some(r) = m.get("reasoning_content").filter(|r| r.is_string()).cloned() {
                        m["thinking"] = r;
                        let calls = m.get("tool_calls").and_then(Value::as_array).is_some_and(|c| !c.is_empty());
                        if self == Handler::GptOss && calls {
                            if let Some(o) = m.as_object_mut() {
                                o.remove("content");
                            }
                        }
                    }
                }
            }
            Handler::Ministral3 => {
                for m in messages.iter_mut() {
                    let role = m["role"].as_str().unwrap_or("");
                    if role != "system" && role != "assistant" {
                        continue;
                    }
                    let mut blocks = Vec::new();
                    if let Some(r) = m.get("reasoning_content").and_then(Value::as_str) {
                        blocks.push(json!({"type": "thinking", "thinking": r}));
                    }
                    match m.get("content") {
                        Some(Value::String(s)) => blocks.push(json!({"type": "text", "text": s})),
                        Some(Value::Array(parts)) => blocks.extend(parts.iter().cloned()),
                        _ => {}
                    }
                    m["content"] = Value::Array(blocks);
                    if let Some(o) = m.as_object_mut() {
                        o.remove("reasoning_content");
                    }
                }
            }
            Handler::Gemma4 { legacy: true } => gemma4_tool_responses(messages),
            _ => {}
        }
    }

    /// What follows the prompt for a continued assistant message `m` (`prompt`: the
    /// conversation before it; `generation`: the template's own generation prompt): the
    /// handler's opening, `m`'s reasoning, and when `content_mode` its end and `m`'s content.
    pub fn continuation(self, prompt: &str, generation: &str, m: &Message, content_mode: bool) -> String {
        let r = m.reasoning_content.as_str();
        let c = render_content(m);
        let think = |open: &str, start: &str, end: &str| {
            let mut s = format!("{open}{start}{r}");
            if content_mode {
                s.push_str(end);
                s.push_str(&c);
            }
            s
        };
        match self {
            Handler::Ministral3 => think("", "[THINK]", "[/THINK]"),
            Handler::GptOss => think("<|start|>assistant<|channel|>analysis<|message|>", "", "<|end|><|start|>assistant<|channel|>final<|message|>"),
            Handler::MuseGlimmer => think("<|start|>assistant to=self<|message|>", "", "<|eom|><|start|>assistant to=user<|message|>"),
            Handler::FunctionaryV32 => format!("<|start_header_id|>assistant<|end_header_id|>\n\n>>>all\n{c}"),
            Handler::KimiK2 => think("<|im_assistant|>assistant<|im_middle|>", "<think>", "</think>"),
            Handler::KimiK3 => think("<|open|>message role=\"assistant\"<|sep|>", "<|open|>think<|sep|>", "<|close|>think<|sep|><|open|>response<|sep|>"),
            Handler::Ling3 => think("<role>ASSISTANT</role>\n", "<think>", "</think>"),
            Handler::Cohere2Moe => think("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", "<|START_THINKING|>", "<|END_THINKING|><|START_TEXT|>"),
            Handler::Lfm2 => think("<|im_start|>assistant\n", "<think>", "</think>"),
            Handler::GigaChatV3 => format!("assistant<|role_sep|>\n{c}"),
            Handler::MiniMaxM3 => think(generation, "<mm:think>", "</mm:think>"),
            Handler::Dsml { v4: true } if r.is_empty() => format!("<｜Assistant｜></think>{}", if content_mode { c.as_str() } else { "" }),
            Handler::Dsml { .. } => think("<｜Assistant｜>", "<think>", "</think>"),
            Handler::Gemma4 { .. } => think(if prompt.ends_with("<turn|>\n") { "<|turn>model\n" } else { "" }, "<|channel>thought\n", "<channel|>"),
            Handler::MiniCpm5 => think("<|im_start|>assistant\n", "<think>\n", "\n</think>\n\n"),
            Handler::Qwen3Coder { reasoning: true } => think("<|im_start|>assistant\n", "<think>\n", "\n</think>\n\n"),
            Handler::Qwen3Coder { reasoning: false } => format!("<|im_start|>assistant\n{}", if content_mode { c.as_str() } else { "" }),
        }
    }
}

/// Upstream's `common_chat_msg::render_content`: the content, or its text parts joined by a
/// blank line.
pub fn render_content(m: &Message) -> String {
    if !m.content.is_empty() {
        return m.content.clone();
    }
    m.parts.iter().filter(|p| p.kind == "text").map(|p| p.text.as_str()).collect::<Vec<_>>().join("\n\n")
}

fn has_content(m: &Value) -> bool {
    match m.get("content") {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        _ => false,
    }
}

fn has_calls(m: &Value) -> bool {
    m.get("tool_calls").and_then(Value::as_array).is_some_and(|c| !c.is_empty())
}

/// Upstream's `workaround::convert_tool_responses_gemma4`: an assistant turn with calls, the
/// tool results after it and the assistant's answer after those become one assistant message
/// with `tool_calls`, `tool_responses` (`{name, response}`, the result parsed as JSON when it
/// is JSON), `content` and `reasoning_content`.
fn gemma4_tool_responses(messages: &mut Vec<Value>) {
    let mut out = Vec::with_capacity(messages.len());
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        if m["role"] != "assistant" || !has_calls(m) {
            out.push(m.clone());
            i += 1;
            continue;
        }
        let calls = m["tool_calls"].as_array().cloned().unwrap_or_default();
        let reasoning = m.get("reasoning_content").filter(|r| r.is_string()).cloned();
        i += 1;
        let mut responses = Vec::new();
        while i < messages.len() && messages[i]["role"] == "tool" {
            let t = &messages[i];
            let response = match t.get("content") {
                // Parsed into upstream's JSON type, whose objects keep their keys sorted.
                Some(Value::String(s)) => serde_json::from_str::<Value>(s).map(sorted).unwrap_or_else(|_| Value::String(s.clone())),
                Some(v) => v.clone(),
                None => Value::Null,
            };
            let mut name = calls.get(responses.len()).and_then(|c| c.pointer("/function/name")).and_then(Value::as_str).unwrap_or("").to_string();
            if name.is_empty() {
                name = t.get("tool_call_id").and_then(Value::as_str).unwrap_or("").to_string();
            }
            responses.push(json!({"name": name, "response": response}));
            i += 1;
        }
        let mut content = None;
        if i < messages.len() && messages[i]["role"] == "assistant" && !has_calls(&messages[i]) && has_content(&messages[i]) {
            content = Some(messages[i]["content"].clone());
            i += 1;
        }
        let mut msg = json!({"role": "assistant", "tool_calls": calls});
        if !responses.is_empty() {
            msg["tool_responses"] = Value::Array(responses);
        }
        if let Some(c) = content {
            msg["content"] = c;
        }
        if let Some(r) = reasoning {
            msg["reasoning_content"] = r;
        }
        out.push(msg);
    }
    *messages = out;
}

/// `v` with every object's keys in sorted order.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut items: Vec<(String, Value)> = m.into_iter().collect();
            items.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(items.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        v => v,
    }
}

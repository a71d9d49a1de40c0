//! A model's chat template applied to a conversation as llama-server applies it (`--jinja`):
//! what the template can do is probed once (its capabilities), the conversation is adapted to
//! what it cannot (a system message merged into the first user turn, string or typed content,
//! tool-call arguments as objects), and the context holds what Hugging Face templates expect
//! plus upstream's extras (`enable_thinking`, `date_string`, `chat_template_kwargs` spread in).

use serde_json::{json, Map, Value};

use crate::jinja::{Limits, Template, TemplateError};
use crate::handlers::Handler;
use crate::messages::{concat_parts, tools_json, Message, Tool};

/// What a template does with what it is given, found by rendering probe conversations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    pub supports_tools: bool,
    pub supports_tool_calls: bool,
    pub supports_system_role: bool,
    pub supports_parallel_tool_calls: bool,
    pub supports_preserve_reasoning: bool,
    pub supports_reasoning_effort: bool,
    pub supports_string_content: bool,
    pub supports_typed_content: bool,
    pub supports_object_arguments: bool,
}

impl Caps {
    pub fn to_json(&self) -> Value {
        json!({
            "supports_object_arguments": self.supports_object_arguments,
            "supports_parallel_tool_calls": self.supports_parallel_tool_calls,
            "supports_preserve_reasoning": self.supports_preserve_reasoning,
            "supports_reasoning_effort": self.supports_reasoning_effort,
            "supports_string_content": self.supports_string_content,
            "supports_system_role": self.supports_system_role,
            "supports_tool_calls": self.supports_tool_calls,
            "supports_tools": self.supports_tools,
            "supports_typed_content": self.supports_typed_content,
        })
    }
}

/// How a trailing assistant message is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Continuation {
    /// It is a finished turn.
    None,
    /// It is continued: rendered without its end, generation goes on from its text.
    #[default]
    Auto,
}

/// One rendering's inputs.
#[derive(Clone, Debug)]
pub struct Inputs {
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub add_generation_prompt: bool,
    pub enable_thinking: bool,
    /// `chat_template_kwargs` (already JSON values).
    pub kwargs: Map<String, Value>,
    pub reasoning_effort: Option<String>,
    pub continuation: Continuation,
    /// The schema the answer must follow (`response_format` / `json_schema`); DeepSeek V4's
    /// template shows it to the model.
    pub json_schema: Option<Value>,
}

impl Default for Inputs {
    fn default() -> Inputs {
        Inputs { messages: Vec::new(), tools: Vec::new(), add_generation_prompt: true, enable_thinking: true, kwargs: Map::new(), reasoning_effort: None, continuation: Continuation::Auto, json_schema: None }
    }
}

/// The rendered prompt, and what the continuation left to be generated after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    pub prompt: String,
    /// The generation prompt alone: what add_generation_prompt adds to the conversation.
    pub generation_prompt: String,
    /// A continued assistant message: what of it the prompt already holds.
    pub continued: Option<Continued>,
}

/// A trailing assistant message the generation continues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Continued {
    /// Its reasoning, as written into the prompt (empty when the template writes none).
    pub reasoning: String,
    /// The reasoning is closed and its content follows (else generation goes on inside the
    /// reasoning).
    pub content_mode: bool,
    pub content: String,
}

/// llama.cpp's default template when a model has none (chatml).
pub const CHATML: &str = "{%- for message in messages -%}\n  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n  {{- '<|im_start|>assistant\n' -}}\n{%- endif -%}";

/// A template with its special tokens and capabilities.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    pub jinja: Template,
    pub bos_token: String,
    pub eos_token: String,
    /// The model adds BOS / EOS itself: a rendered one at the start / end is removed.
    pub add_bos: bool,
    pub add_eos: bool,
    pub caps: Caps,
    /// The text around an assistant turn's reasoning as the template writes it (e.g.
    /// `"<think>\n"`, `"\n</think>\n\n"`): what a continued turn's reasoning is wrapped in.
    reasoning_markers: Option<(String, String)>,
    tool_format: crate::tools::ToolFormat,
    handler: Option<Handler>,
    /// Upstream's analysis finds a reasoning section (for templates without a handler).
    analyzed_thinking: bool,
}

/// DeepSeek V4's reference renders a run of tool results in the order of the calls they
/// answer (matched by id), not in the order given, as upstream's V4 handler reorders them.
fn sort_tool_results(messages: &mut [Value]) {
    let mut order: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut i = 0;
    while i < messages.len() {
        let role = messages[i]["role"].as_str().unwrap_or("").to_string();
        if role == "assistant" {
            if let Some(calls) = messages[i]["tool_calls"].as_array().filter(|c| !c.is_empty()) {
                order = calls.iter().enumerate().filter_map(|(k, c)| c["id"].as_str().filter(|id| !id.is_empty()).map(|id| (id.to_string(), k))).collect();
            }
            i += 1;
            continue;
        }
        if role != "user" && role != "tool" {
            i += 1;
            continue;
        }
        let mut end = i;
        let mut tools = Vec::new();
        while end < messages.len() {
            match messages[end]["role"].as_str() {
                Some("tool") => tools.push(end),
                Some("user") => {}
                _ => break,
            }
            end += 1;
        }
        if tools.len() > 1 && !order.is_empty() {
            let mut results: Vec<Value> = tools.iter().map(|&k| messages[k].clone()).collect();
            results.sort_by_key(|m| m["tool_call_id"].as_str().and_then(|id| order.get(id)).copied().unwrap_or(0));
            for (k, r) in tools.iter().zip(results) {
                messages[*k] = r;
            }
        }
        i = end.max(i + 1);
    }
}

/// `text` cut into markers (`<…>`, `[…]`; true) and the text between them (false), as
/// upstream's `segmentize_markers`.
fn segments(text: &str) -> Vec<(bool, &str)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let (mut border, mut opener) = (0, None::<u8>);
    for (i, &c) in b.iter().enumerate() {
        match opener {
            None if c == b'<' || c == b'[' => {
                if border < i {
                    out.push((false, &text[border..i]));
                }
                border = i;
                opener = Some(c);
            }
            Some(o) if (o == b'<' && c == b'>') || (o == b'[' && c == b']') => {
                out.push((true, &text[border..=i]));
                border = i + 1;
                opener = None;
            }
            _ => {}
        }
    }
    if border < text.len() {
        out.push((false, &text[border..]));
    }
    out
}

/// What differs between `a` and `b` once their common start and end are taken off (at
/// character boundaries): `a`'s part and `b`'s part.
fn diff_split<'a, 'b>(a: &'a str, b: &'b str) -> (&'a str, &'b str) {
    let mut pre = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    while !a.is_char_boundary(pre) || !b.is_char_boundary(pre) {
        pre -= 1;
    }
    let (ra, rb) = (&a[pre..], &b[pre..]);
    let mut suf = ra.bytes().rev().zip(rb.bytes().rev()).take_while(|(x, y)| x == y).count();
    while !ra.is_char_boundary(ra.len() - suf) || !rb.is_char_boundary(rb.len() - suf) {
        suf -= 1;
    }
    (&ra[..ra.len() - suf], &rb[..rb.len() - suf])
}

/// The end of a marker starting at `s[0]` (`<…>` or `[…]`, up to the first closer), if `s`
/// starts with one.
fn marker_len(s: &str) -> Option<usize> {
    let close = match s.as_bytes().first() {
        Some(b'<') => '>',
        Some(b'[') => ']',
        _ => return None,
    };
    s[1..].find(close).map(|i| i + 2)
}

/// The reasoning's markers in `out` as upstream's tagged parsers find them around `r`: `pre`, a
/// marker and the whitespace after it right before `r`; `post`, what follows `r` up to and with
/// a marker and the whitespace after it (`lead_ws`: with the whitespace before that marker).
fn markers_around(out: &str, r: &str, lead_ws: bool) -> Option<(String, String)> {
    let at = out.find(r)?;
    let before = out[..at].trim_end_matches(char::is_whitespace);
    let mut pre = String::new();
    if before.ends_with('>') || before.ends_with(']') {
        let (open, close) = if before.ends_with('>') { ('<', '>') } else { ('[', ']') };
        let inner = &before[..before.len() - 1];
        // The earliest opener whose first closer is this one.
        let last_close = inner.rfind(close).map_or(0, |i| i + 1);
        if let Some(j) = inner[last_close..].find(open) {
            pre = out[last_close + j..at].to_string();
        }
    }
    let after = &out[at + r.len()..];
    let ws = after.len() - after.trim_start_matches(char::is_whitespace).len();
    let post = marker_len(&after[ws..]).map(|n| {
        let end = ws + n;
        let trail = after[end..].len() - after[end..].trim_start_matches(char::is_whitespace).len();
        after[if lead_ws { 0 } else { ws }..end + trail].to_string()
    });
    Some((pre, post.unwrap_or_default()))
}

/// The reasoning section's opening and end as upstream's differential analysis finds them
/// (b11312 `common/chat-diff-analyzer.cpp`: `compare_reasoning_presence`,
/// `compare_thinking_enabled`, `compare_reasoning_scope`, then its per-template workarounds):
/// whether the template has a reasoning section (llama-server's default for `enable_thinking`)
/// and what a continued assistant message's reasoning is written between (empty when not
/// found).
fn analyzed_markers(t: &Template, caps: &Caps) -> (bool, String, String) {
    const USER_MSG: &str = "U_USER_MSG Hello END_U";
    const ASSISTANT_MSG: &str = "A_ASST_MSG I can help END_A";
    const THINKING: &str = "REASON_PART I am thinking END_R";
    let render = |messages: Value, tools: Option<Value>, gen: bool, thinking: bool| -> Option<String> {
        let mut ctx = json!({"messages": messages, "bos_token": "", "eos_token": "", "enable_thinking": thinking});
        if let Some(tools) = tools {
            ctx["tools"] = tools;
        }
        if gen {
            ctx["add_generation_prompt"] = json!(true);
        }
        t.render(&ctx).ok()
    };
    let user = json!({"role": "user", "content": USER_MSG});
    let (mut start, mut end) = (String::new(), String::new());
    // Upstream's `reasoning_mode` is other than NONE.
    let mut found = false;
    // Presence: the history's reasoning and the markers around it.
    let plain = render(json!([user, {"role": "assistant", "content": ASSISTANT_MSG}]), None, false, true);
    let with = render(json!([user, {"role": "assistant", "content": ASSISTANT_MSG, "reasoning_content": THINKING}]), None, false, true);
    if let (Some(a), Some(b)) = (&plain, &with) {
        if diff_split(a, b).1.contains(THINKING) {
            if let Some((pre, post)) = markers_around(b, THINKING, true) {
                if !pre.is_empty() && !post.is_empty() {
                    (start, end, found) = (pre, post, true);
                } else if let Some((_, post)) = markers_around(b, THINKING, false).filter(|(_, p)| !p.is_empty()) {
                    (end, found) = (post, true);
                }
            }
        }
    }
    // enable_thinking's change to the generation prompt.
    if let (Some(off), Some(on)) = (render(json!([user]), None, true, false), render(json!([user]), None, true, true)) {
        let (left, right) = diff_split(&off, &on);
        let (lt, rt) = (left.trim(), right.trim());
        if lt.is_empty() && !right.is_empty() {
            if !rt.is_empty() && on.ends_with(rt) && start.is_empty() {
                (start, found) = (right.to_string(), true);
            }
        } else if rt.is_empty() && !left.is_empty() {
            if !lt.is_empty() && off.ends_with(lt) && end.is_empty() {
                let segs: Vec<(bool, &str)> = segments(&off).into_iter().filter(|(_, s)| !s.trim().is_empty()).collect();
                if segs.len() >= 2 && segs[segs.len() - 1].1 == lt && segs[segs.len() - 2].0 {
                    start = segs[segs.len() - 2].1.to_string();
                }
                (end, found) = (left.to_string(), true);
            }
        } else if !lt.is_empty() && !rt.is_empty() {
            // One output's tail is in the other, followed by exactly two markers.
            for (base, extended) in [(&on, &off), (&off, &on)] {
                let mut cut = base.len().saturating_sub(64);
                while !base.is_char_boundary(cut) {
                    cut += 1;
                }
                let anchor = &base[cut..];
                let Some(pos) = extended.rfind(anchor) else { continue };
                if pos + anchor.len() >= extended.len() {
                    continue;
                }
                let extra = extended[pos + anchor.len()..].trim();
                let segs: Vec<(bool, &str)> = segments(extra).into_iter().filter(|(_, s)| !s.trim().is_empty()).collect();
                if segs.len() == 2 && segs.iter().all(|(marker, _)| *marker) {
                    if start.is_empty() {
                        start = segs[0].1.to_string();
                    }
                    if end.is_empty() {
                        end = segs[1].1.to_string();
                    }
                    found = true;
                    break;
                }
            }
        }
    }
    // Reasoning written only beside tool calls.
    if caps.supports_tool_calls {
        let tools = json!([{"type": "function", "function": {"name": "FFF_FIRST_FUN_F", "description": "Tool description", "parameters": {"type": "object", "properties": {"AA_ARG_FST_AA": {"type": "string"}, "BB_ARG_SND_BB": {"type": "string"}}, "required": ["AA_ARG_FST_AA"]}}}]);
        let call = json!({"id": "call00001", "type": "function", "function": {"name": "FFF_FIRST_FUN_F", "arguments": {"AA_ARG_FST_AA": "VVVV", "BB_ARG_SND_BB": "XXXX"}}});
        let a = render(json!([user, {"role": "assistant", "content": ASSISTANT_MSG, "reasoning_content": THINKING}]), Some(tools.clone()), false, true);
        let b = render(json!([user, {"role": "assistant", "content": null, "reasoning_content": THINKING, "tool_calls": [call]}]), Some(tools), false, true);
        if let (Some(a), Some(b)) = (a, b) {
            if !a.contains(THINKING) && b.contains(THINKING) {
                // Reasoning only beside calls; without a marker after it, none is known.
                let (pre, post) = markers_around(&b, THINKING, false).unwrap_or_default();
                found = true;
                if !pre.is_empty() && !post.is_empty() {
                    (start, end) = (pre, post);
                } else if !post.is_empty() {
                    end = post;
                }
            }
        }
    }
    // Upstream's workarounds.
    let src = &t.source;
    let think = || ("<think>".to_string(), "</think>".to_string());
    if src.contains("content.split('</think>')") && !src.contains("reasoning_content") && !src.contains("<SPECIAL_12>") && !found {
        (start, end, found) = (think().0, think().1, true);
    }
    if src.contains("Write your thoughts between <think></think> and write your response between <response></response>") {
        (start, end, found) = (think().0, think().1, true);
    }
    if src.contains("<SPECIAL_10>") && src.contains("<SPECIAL_11>") && src.contains("<SPECIAL_12>") && src.contains("<TOOL_RESPONSE>") {
        (start, end, found) = ("<think>\n".into(), "</think>".into(), true);
    }
    if src.contains("laguna_glm_thinking") {
        (start, end) = (start.trim().to_string(), end.trim().to_string());
    }
    (found, start, end)
}

const STRING_MARKER: &str = "STRING_MARKER";
const REASONING_MARKER: &str = "<REASONING_CONTENT_PLACEHOLDER>";

fn probe(t: &Template, messages: Value, tools: Option<Value>, extra: &[(&str, Value)]) -> Option<String> {
    let mut ctx = json!({"messages": messages, "bos_token": "", "eos_token": "", "add_generation_prompt": true, "tools": tools.unwrap_or(json!([]))});
    for (k, v) in extra {
        ctx[*k] = v.clone();
    }
    t.render(&ctx).ok()
}

/// Renders a user message whose content is an empty list of parts: whether that succeeds and
/// the template iterated or indexed the list.
fn list_content_used(t: &Template) -> bool {
    use minijinja::value::Value as J;
    let content = std::sync::Arc::new(crate::jinja::UsageProbe::default());
    let message: std::collections::BTreeMap<&str, J> = [("role", J::from("user")), ("content", J::from_dyn_object(content.clone()))].into_iter().collect();
    let ctx: std::collections::BTreeMap<&str, J> = [
        ("messages", J::from(vec![J::from_object(message)])),
        ("bos_token", J::from("")),
        ("eos_token", J::from("")),
        ("add_generation_prompt", J::from(true)),
        ("tools", J::from(Vec::<J>::new())),
    ]
    .into_iter()
    .collect();
    t.render_value(J::from_object(ctx)).is_ok() && content.used()
}

fn probe_tools() -> Value {
    json!([{"name": "tool", "type": "function", "function": {"name": "tool1", "description": "Tool description", "parameters": {"type": "object", "properties": {"arg": {"type": "string", "description": "Arg description"}}, "required": ["arg"]}}}])
}

fn probe_call_convo(args: Value, calls: usize) -> Value {
    let call = |n: usize| json!({"id": format!("call0000{n}"), "type": "function", "function": {"name": "tool1", "arguments": args.clone()}});
    json!([
        {"role": "user", "content": "User message"},
        {"role": "assistant", "content": "", "tool_calls": (1..=calls).map(call).collect::<Vec<_>>()},
        {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
        {"role": "assistant", "content": "The tool response was 'tool response'"},
        {"role": "user", "content": "User message"},
    ])
}

impl Caps {
    /// Probes `t` with upstream's probe conversations; a value's "use" is judged by its
    /// appearing in the output.
    pub fn probe(t: &Template) -> Caps {
        let mut c = Caps { supports_tools: true, supports_tool_calls: true, supports_system_role: true, supports_parallel_tool_calls: true, supports_preserve_reasoning: false, supports_reasoning_effort: false, supports_string_content: true, supports_typed_content: false, supports_object_arguments: false };
        // Content as a string and as typed parts.
        let s = probe(t, json!([{"role": "user", "content": STRING_MARKER}]), None, &[]);
        let typed = probe(t, json!([{"role": "user", "content": [{"type": "text", "text": STRING_MARKER}]}]), None, &[]);
        let string_ok = s.as_deref().is_some_and(|o| o.contains(STRING_MARKER));
        let typed_ok = typed.as_deref().is_some_and(|o| o.contains(STRING_MARKER));
        // A template that prints a list of parts as its repr "uses" the list without reading it.
        let typed_read = typed_ok && !typed.as_deref().is_some_and(|o| o.contains("'type'") || o.contains("\"type\""));
        if typed_read && s.as_deref().is_some_and(|o| !o.contains(STRING_MARKER)) {
            c.supports_string_content = false;
            c.supports_typed_content = true;
        } else if typed_read && t.source.contains("is string") && list_content_used(t) {
            // Upstream: a template that tests for a string reads parts when it renders a
            // message whose content is a list and uses that list as one.
            c.supports_typed_content = true;
        }
        if s.is_none() {
            c.supports_string_content = false;
        }
        let _ = string_ok;
        // System role.
        let sys = probe(t, json!([{"role": "system", "content": "System message"}, {"role": "user", "content": "User message"}]), None, &[]);
        if !sys.as_deref().is_some_and(|o| o.contains("System message")) {
            c.supports_system_role = false;
        }
        // Tools and tool calls, with arguments as an object.
        let obj = probe(t, probe_call_convo(json!({"arg": "value"}), 1), Some(probe_tools()), &[]);
        if let Some(o) = &obj {
            if !o.contains("tool1") || !o.contains("Tool description") && !o.contains("Arg description") {
                c.supports_tools = o.contains("Tool description") || o.contains("Arg description");
            }
            let calls_rendered = o.matches("tool1").count() > usize::from(c.supports_tools);
            if !calls_rendered {
                c.supports_tool_calls = false;
            } else if o.contains("value") {
                c.supports_object_arguments = !o.contains("{'arg': 'value'}");
            }
        }
        if !c.supports_object_arguments {
            let st = probe(t, probe_call_convo(json!("{\"arg\": \"value\"}"), 1), Some(probe_tools()), &[]);
            if let Some(o) = &st {
                c.supports_tools = o.contains("Tool description") || o.contains("Arg description");
                let calls_rendered = o.matches("tool1").count() > usize::from(c.supports_tools);
                c.supports_tool_calls = calls_rendered;
            } else {
                // As upstream: a template that cannot render a call with string arguments
                // (when object ones were not read) supports neither tools nor calls.
                c.supports_tools = false;
                c.supports_tool_calls = false;
            }
        }
        let args = if c.supports_object_arguments { json!({"arg": "value"}) } else { json!("{\"arg\": \"value\"}") };
        match probe(t, probe_call_convo(args.clone(), 2), Some(probe_tools()), &[]) {
            None => c.supports_parallel_tool_calls = false,
            Some(two) => {
                let one = probe(t, probe_call_convo(args, 1), Some(probe_tools()), &[]).unwrap_or_default();
                if two.matches("tool1").count() <= one.matches("tool1").count() {
                    c.supports_parallel_tool_calls = false;
                }
            }
        }
        // Reasoning kept in the history.
        let hist = json!([
            {"role": "user", "content": "User message"},
            {"role": "assistant", "content": "Assistant message", "reasoning_content": REASONING_MARKER},
            {"role": "user", "content": "User message"},
            {"role": "assistant", "content": "Assistant message", "reasoning_content": "Reasoning content"},
            {"role": "user", "content": "User message"},
        ]);
        let keep = [("enable_thinking", json!(true)), ("preserve_thinking", json!(true)), ("clear_thinking", json!(false)), ("truncate_history_thinking", json!(false)), ("drop_thinking", json!(false))];
        c.supports_preserve_reasoning = probe(t, hist, None, &keep).is_some_and(|o| o.contains(REASONING_MARKER));
        // Reasoning effort: the output changes with it.
        let user = json!([{"role": "user", "content": "User message"}]);
        let low = probe(t, user.clone(), None, &[("enable_thinking", json!(true)), ("reasoning_effort", json!("low")), ("reasoning_strength", json!("low"))]);
        let high = probe(t, user, None, &[("enable_thinking", json!(true)), ("reasoning_effort", json!("high")), ("reasoning_strength", json!("high"))]);
        c.supports_reasoning_effort = low.is_some() && low != high || t.source.contains("reasoning_effort");
        c
    }
}

/// Local time now, formatted by the C library (as upstream's `format_time`).
fn now(fmt: &str) -> String {
    crate::time::strftime_now(fmt).unwrap_or_default()
}

impl ChatTemplate {
    pub fn new(source: &str, bos_token: &str, eos_token: &str, add_bos: bool, add_eos: bool) -> Result<ChatTemplate, TemplateError> {
        Self::with_limits(source, bos_token, eos_token, add_bos, add_eos, Limits::default())
    }

    pub fn with_limits(source: &str, bos_token: &str, eos_token: &str, add_bos: bool, add_eos: bool, limits: Limits) -> Result<ChatTemplate, TemplateError> {
        let jinja = Template::with_limits(source, limits)?;
        let caps = Caps::probe(&jinja);
        let (analyzed_thinking, start, end) = analyzed_markers(&jinja, &caps);
        let reasoning_markers = (!start.is_empty()).then_some((start, end));
        let tool_format = match crate::tools::ToolFormat::detect(&jinja.source) {
            crate::tools::ToolFormat::Generic if !caps.supports_tools => crate::tools::ToolFormat::ContentOnly,
            f => f,
        };
        let handler = Handler::detect(&jinja.source);
        Ok(ChatTemplate { jinja, bos_token: bos_token.into(), eos_token: eos_token.into(), add_bos, add_eos, caps, reasoning_markers, tool_format, handler, analyzed_thinking })
    }

    /// The reasoning section's tags, when the template writes one.
    pub fn think_tags(&self) -> Option<(&'static str, &'static str)> {
        (self.source().contains("<think>") && self.source().contains("</think>")).then_some(("<think>", "</think>"))
    }

    /// Whether the template has a reasoning section to turn on and off (llama-server's default
    /// for `enable_thinking`): its specialized handler says so, else upstream's differential
    /// analysis finds one.
    pub fn supports_thinking(&self) -> bool {
        match self.handler {
            Some(h) => h.supports_thinking(),
            None => self.analyzed_thinking,
        }
    }

    /// Upstream's specialized handler for this template, if it has one.
    pub fn handler(&self) -> Option<Handler> {
        self.handler
    }

    /// The format this template's model writes tool calls in: the one its text renders, the
    /// generic JSON one for templates that render tools their own way, none for templates
    /// that cannot show the model its tools.
    pub fn tool_format(&self) -> crate::tools::ToolFormat {
        self.tool_format
    }

    pub fn source(&self) -> &str {
        &self.jinja.source
    }

    /// The messages as this template is given them.
    fn messages_json(&self, messages: &[Message]) -> Result<Vec<Value>, TemplateError> {
        let only_string = self.caps.supports_string_content && !self.caps.supports_typed_content;
        let only_typed = !self.caps.supports_string_content && self.caps.supports_typed_content;
        let mut out: Vec<Value> = Vec::with_capacity(messages.len());
        for m in messages {
            let mut v = m.to_json();
            if let Some(c) = v.get_mut("content") {
                if only_typed && c.is_string() {
                    *c = json!([{"type": "text", "text": c.as_str().unwrap_or_default()}]);
                } else if only_string && c.is_array() {
                    *c = json!(concat_parts(&m.parts));
                }
            }
            out.push(v);
        }
        if !self.source().contains("<|channel|>") {
            for v in &mut out {
                if v["role"] == "developer" {
                    v["role"] = json!("system");
                }
            }
        }
        if !self.caps.supports_system_role && out.first().is_some_and(|m| m["role"] == "system") {
            let first = out.remove(0);
            if let Some(next) = out.first_mut() {
                let text = |v: &Value| -> Result<String, TemplateError> {
                    v.as_str().map(str::to_string).ok_or_else(|| TemplateError { syntax: false, raised: false, message: "this template has no system role, and a system message or the one after it has content parts, which cannot be merged".into() })
                };
                next["content"] = json!(format!("{}\n{}", text(&first["content"])?, text(&next["content"])?));
            }
        }
        if self.caps.supports_tool_calls {
            for v in &mut out {
                if v.get("tool_calls").is_some() && v.get("content").is_none() {
                    v["content"] = json!("");
                }
            }
        }
        if self.caps.supports_object_arguments {
            for v in &mut out {
                if let Some(Value::Array(calls)) = v.get_mut("tool_calls") {
                    for c in calls {
                        if let Some(a) = c.pointer_mut("/function/arguments") {
                            if let Some(s) = a.as_str() {
                                *a = serde_json::from_str(s).map_err(|e| TemplateError { syntax: false, raised: false, message: format!("Failed to parse tool call arguments as JSON: {e}") })?;
                            }
                        }
                    }
                }
            }
        }
        if self.tool_format() == (crate::tools::ToolFormat::Dsml { v4: true }) {
            sort_tool_results(&mut out);
        }
        if let Some(h) = self.handler {
            h.adapt(&mut out);
        }
        Ok(out)
    }

    fn context(&self, inputs: &Inputs, messages: Vec<Value>, add_generation_prompt: bool) -> Value {
        let mut ctx = Map::new();
        ctx.insert("messages".into(), Value::Array(messages));
        ctx.insert("bos_token".into(), json!(self.bos_token));
        ctx.insert("eos_token".into(), json!(self.eos_token));
        ctx.insert("enable_thinking".into(), json!(inputs.enable_thinking));
        if !inputs.tools.is_empty() {
            ctx.insert("tools".into(), tools_json(&inputs.tools));
        }
        ctx.insert("datetime".into(), json!(now("%b %d %Y")));
        ctx.insert("date_string".into(), json!(now("%d %b %Y")));
        for (k, v) in &inputs.kwargs {
            ctx.insert(k.clone(), v.clone());
        }
        if add_generation_prompt {
            ctx.insert("add_generation_prompt".into(), json!(true));
        }
        if let (crate::tools::ToolFormat::Dsml { v4: true }, Some(schema)) = (self.tool_format(), &inputs.json_schema) {
            if schema.is_object() {
                ctx.insert("response_format".into(), schema.clone());
            }
        }
        if let Some(Value::Bool(keep)) = ctx.get("preserve_reasoning").cloned() {
            ctx.insert("preserve_thinking".into(), json!(keep));
            for k in ["clear_thinking", "truncate_history_thinking", "drop_thinking"] {
                ctx.insert(k.into(), json!(!keep));
            }
        }
        let effort = ctx.get("reasoning_effort").and_then(Value::as_str).map(str::to_string).or_else(|| inputs.reasoning_effort.clone());
        if let Some(e) = effort.filter(|e| !e.is_empty()) {
            ctx.insert("reasoning_effort".into(), json!(e));
            ctx.insert("reasoning_strength".into(), json!(e));
        }
        Value::Object(ctx)
    }

    fn render_raw(&self, inputs: &Inputs, messages: Vec<Value>, add_generation_prompt: bool) -> Result<String, TemplateError> {
        let mut out = self.jinja.render(&self.context(inputs, messages, add_generation_prompt))?;
        if self.add_bos && !self.bos_token.is_empty() && out.starts_with(&self.bos_token) {
            out.drain(..self.bos_token.len());
        }
        if self.add_eos && !self.eos_token.is_empty() && out.ends_with(&self.eos_token) {
            out.truncate(out.len() - self.eos_token.len());
        }
        Ok(out)
    }

    /// Renders a conversation, continuing a trailing assistant message when asked to.
    pub fn apply(&self, inputs: &Inputs) -> Result<Rendered, TemplateError> {
        let mut messages = self.messages_json(&inputs.messages)?;
        let continuing = inputs.continuation == Continuation::Auto && inputs.messages.last().is_some_and(|m| m.role == "assistant");
        let mut continued = None;
        let mut info = None;
        if continuing {
            messages.pop();
            continued = inputs.messages.last().cloned();
        }
        let gen = inputs.add_generation_prompt || continuing;
        let with = self.render_raw(inputs, messages.clone(), gen)?;
        let without = if gen { self.render_raw(inputs, messages, false)? } else { with.clone() };
        let common = with.bytes().zip(without.bytes()).take_while(|(a, b)| a == b).count();
        let mut common = common.min(with.len());
        while !with.is_char_boundary(common) {
            common -= 1;
        }
        let mut generation_prompt = with[common..].to_string();
        let mut prompt = if gen && continued.is_none() { with } else { without };
        if matches!(self.handler, Some(Handler::Gemma4 { .. })) && continued.is_none() && inputs.add_generation_prompt && prompt.ends_with("<turn|>\n") {
            // Upstream's Gemma 4 handler: a conversation ending in a finished model turn (content
            // and calls) gets the model's next turn opened.
            generation_prompt = "<|turn>model\n".to_string();
            prompt.push_str(&generation_prompt);
        }
        if let Some(m) = continued {
            // As upstream: the generation prompt up to the reasoning's opening, the reasoning
            // given, its end when content follows, then the content.
            let content_mode = !(m.content.is_empty() && m.parts.is_empty() && !m.reasoning_content.is_empty());
            let mut reasoning = String::new();
            let content = if m.parts.is_empty() { m.content.clone() } else { concat_parts(&m.parts) };
            if let Some(h) = self.handler {
                let gp = h.continuation(&prompt, &generation_prompt, &m, content_mode);
                let writes_reasoning = !matches!(h, Handler::FunctionaryV32 | Handler::GigaChatV3 | Handler::Qwen3Coder { reasoning: false });
                if writes_reasoning {
                    reasoning = m.reasoning_content.clone();
                }
                prompt.push_str(&gp);
                info = Some(Continued { reasoning, content_mode, content: if content_mode { content } else { String::new() } });
                return Ok(Rendered { prompt, generation_prompt: gp, continued: info });
            }
            if let Some((open, close)) = &self.reasoning_markers {
                reasoning = m.reasoning_content.clone();
                if let Some(at) = generation_prompt.find(open.as_str()) {
                    generation_prompt.truncate(at);
                }
                generation_prompt.push_str(open);
                generation_prompt.push_str(&m.reasoning_content);
                if content_mode {
                    generation_prompt.push_str(close);
                }
            }
            if content_mode {
                generation_prompt.push_str(&content);
            }
            prompt.push_str(&generation_prompt);
            info = Some(Continued { reasoning, content_mode, content: if content_mode { content } else { String::new() } });
        }
        Ok(Rendered { prompt, generation_prompt, continued: info })
    }
}

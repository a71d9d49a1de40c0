//! Tool calls: which format a template's model writes them in, the parser that reads them (and
//! the reasoning before them) out of the model's output as it streams, and the grammar that
//! makes the model write them well-formed.
//!
//! Formats, each named by how the model marks a call:
//! - DeepSeek R1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`
//! - DeepSeek V3.1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`
//! - DeepSeek V3.2 / V4 (DSML): `<｜DSML｜function_calls>` (V4: `tool_calls`), `<｜DSML｜invoke name="N">`,
//!   `<｜DSML｜parameter name="P" string="true|false">VALUE</｜DSML｜parameter>`, closed in turn
//! - Hermes / Qwen2.5: `<tool_call>\n{"name": N, "arguments": ARGS}\n</tool_call>`
//! - Llama 3.x: `{"name": N, "parameters": ARGS}` (after an optional `<|python_tag|>`)
//! - Mistral Nemo: `[TOOL_CALLS][{"name": N, "arguments": ARGS, "id": ID}]`
//! - generic (templates with no format of their own): the whole answer is JSON,
//!   `{"tool_calls": [{"name": N, "arguments": ARGS}]}` or `{"response": TEXT}`.
//!
//! The parser is re-run over the whole output each time it grows (`is_partial`); what it
//! returns only ever grows, so `diff` turns successive parses into OpenAI's streaming deltas.
//! Text that may still become a marker is held back, so no marker, whole or cut, reaches
//! `content`. Reasoning is read first: a call written inside `<think>` is reasoning, not a
//! call (DSML's call block also ends reasoning, as upstream's DeepSeek V3.2 parser has it).

pub mod grammar;
pub mod json;
mod parse;

pub use parse::parse;

use crate::messages::Tool;
use crate::template::{ChatTemplate, Rendered};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    /// No tools offered (or `tool_choice: none`): everything after the reasoning is content.
    ContentOnly,
    DeepSeekR1,
    DeepSeekV31,
    /// `v4`: the block is named `tool_calls`, else `function_calls`.
    Dsml { v4: bool },
    Hermes,
    Llama3,
    MistralNemo,
    Generic,
}

impl ToolFormat {
    /// The format a template's model writes calls in, from the template's text (as upstream
    /// tells DSML templates by `dsml_token` and the others by the markers they render).
    pub fn detect(source: &str) -> ToolFormat {
        if source.contains("dsml_token") && source.contains("DSML") {
            return ToolFormat::Dsml { v4: !source.contains("function_calls") };
        }
        if source.contains("<｜tool▁calls▁begin｜>") || source.contains("<｜tool▁call▁begin｜>") {
            return if source.contains("```json") { ToolFormat::DeepSeekR1 } else { ToolFormat::DeepSeekV31 };
        }
        if source.contains("<tool_call>") {
            return ToolFormat::Hermes;
        }
        if source.contains("[TOOL_CALLS]") {
            return ToolFormat::MistralNemo;
        }
        if source.contains("<|start_header_id|>") && (source.contains("ipython") || source.contains("<|python_tag|>")) {
            return ToolFormat::Llama3;
        }
        ToolFormat::Generic
    }

    pub fn name(&self) -> &'static str {
        match self {
            ToolFormat::ContentOnly => "Content-only",
            ToolFormat::DeepSeekR1 => "DeepSeek R1",
            ToolFormat::DeepSeekV31 => "DeepSeek V3.1",
            ToolFormat::Dsml { v4: false } => "DeepSeek V3.2 (DSML)",
            ToolFormat::Dsml { v4: true } => "DeepSeek V4 (DSML)",
            ToolFormat::Hermes => "Hermes 2 Pro",
            ToolFormat::Llama3 => "Llama 3.x",
            ToolFormat::MistralNemo => "Mistral Nemo",
            ToolFormat::Generic => "Generic",
        }
    }
}

/// The markers of the reasoning and of every tool-call format: where a vocabulary has one as a
/// control token, its text must still reach the parser.
pub const MARKERS: &[&str] = &[
    "<think>",
    "</think>",
    parse::R1_CALLS_BEGIN,
    parse::R1_CALL_BEGIN,
    parse::R1_SEP,
    parse::R1_CALL_END,
    parse::R1_CALLS_END,
    parse::HERMES_OPEN,
    parse::HERMES_CLOSE,
    parse::MISTRAL_CALLS,
    parse::PYTHON_TAG,
    parse::DSML,
];

/// `tool_choice`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum ToolChoice {
    #[default]
    Auto,
    None,
    Required,
    /// One named function, which must be called.
    Function(String),
}

/// `reasoning_format`: upstream b11312 tells only `none` from the others (`deepseek`,
/// `deepseek-legacy` and `auto` all split the reasoning out).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReasoningFormat {
    /// Reasoning stays in `content`, tags and all (from the prompt's opening tag on).
    None,
    /// `reasoning_content` holds the reasoning; `content` the rest.
    #[default]
    DeepSeek,
}

impl ReasoningFormat {
    pub fn parse(s: &str) -> Option<ReasoningFormat> {
        match s {
            "none" => Some(ReasoningFormat::None),
            "deepseek" | "deepseek-legacy" | "auto" => Some(ReasoningFormat::DeepSeek),
            _ => None,
        }
    }
}

/// How one answer is read.
#[derive(Clone, Debug)]
pub struct ParseSpec {
    pub format: ToolFormat,
    pub reasoning_format: ReasoningFormat,
    /// The reasoning section's tags when the template has one.
    pub think: Option<(String, String)>,
    /// The output starts inside the reasoning (the prompt opened it).
    pub in_reasoning: bool,
    /// Text the prompt already wrote of this answer (an assistant prefill): reasoning, then
    /// content; the parse result starts with it.
    pub prefill_reasoning: String,
    pub prefill_content: String,
    /// The answer is JSON under a schema (`response_format`): a ```json fence around it is
    /// not content.
    pub json_response: bool,
}

impl ParseSpec {
    pub fn content_only() -> ParseSpec {
        ParseSpec { format: ToolFormat::ContentOnly, reasoning_format: ReasoningFormat::None, think: None, in_reasoning: false, prefill_reasoning: String::new(), prefill_content: String::new(), json_response: false }
    }
}

impl ParseSpec {
    /// How the answer to a rendered conversation is read: where its reasoning stands when the
    /// output begins, what a continued message already holds, and (when `tools_active`: tools
    /// offered and `tool_choice` not none) the template's call format.
    pub fn new(t: &ChatTemplate, rendered: &Rendered, reasoning_format: ReasoningFormat, tools_active: bool) -> ParseSpec {
        let format = if tools_active { t.tool_format() } else { ToolFormat::ContentOnly };
        let think = t.think_tags().map(|(o, c)| (o.to_string(), c.to_string()));
        let mut spec = ParseSpec { format, reasoning_format, think, in_reasoning: false, prefill_reasoning: String::new(), prefill_content: String::new(), json_response: false };
        let Some((open, close)) = spec.think.clone() else {
            if let Some(c) = &rendered.continued {
                spec.prefill_content = c.content.clone();
            }
            return spec;
        };
        let gp = &rendered.generation_prompt;
        match &rendered.continued {
            Some(c) => {
                let wrote_reasoning = gp.contains(open.trim());
                spec.in_reasoning = wrote_reasoning && !c.content_mode;
                if reasoning_format == ReasoningFormat::None {
                    spec.prefill_content = gp.find(open.trim()).map_or_else(|| c.content.clone(), |at| gp[at..].to_string());
                } else {
                    spec.prefill_reasoning = if wrote_reasoning { c.reasoning.clone() } else { String::new() };
                    spec.prefill_content = c.content.clone();
                }
            }
            None => {
                if let Some(at) = gp.rfind(open.as_str()) {
                    if !gp[at..].contains(close.as_str()) {
                        spec.in_reasoning = true;
                        if reasoning_format == ReasoningFormat::None {
                            // Upstream's content then starts with the prompt's opening tag.
                            spec.prefill_content = gp[at..].to_string();
                        }
                    }
                }
            }
        }
        spec
    }
}

/// A call as parsed: `arguments` is the JSON text of the arguments object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedCall {
    pub name: String,
    pub arguments: String,
    /// The id the model wrote (Mistral), else empty.
    pub id: String,
}

/// An answer as parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedMsg {
    pub content: String,
    pub reasoning_content: String,
    pub tool_calls: Vec<ParsedCall>,
}

/// What changed between two parses of a growing answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    pub reasoning_content: String,
    pub content: String,
    pub tool_call: Option<CallDelta>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallDelta {
    pub index: usize,
    /// (name, id as parsed) in a call's first delta.
    pub new: Option<(String, String)>,
    pub arguments: String,
}

/// Appended text, or None when `new` does not extend `old` (nothing can be taken back from a
/// stream).
fn appended<'a>(old: &str, new: &'a str) -> Option<&'a str> {
    new.strip_prefix(old)
}

/// The deltas from `prev` to `next`, in OpenAI's order: reasoning, content, then each call
/// (a new call's first delta carries its name). Parts that do not extend what was sent are
/// left out.
pub fn diff(prev: &ParsedMsg, next: &ParsedMsg) -> Vec<Delta> {
    let mut out = Vec::new();
    let r = appended(&prev.reasoning_content, &next.reasoning_content).unwrap_or("");
    let c = appended(&prev.content, &next.content).unwrap_or("");
    if !r.is_empty() || !c.is_empty() {
        out.push(Delta { reasoning_content: r.to_string(), content: c.to_string(), tool_call: None });
    }
    for (i, call) in next.tool_calls.iter().enumerate() {
        match prev.tool_calls.get(i) {
            None => out.push(Delta { tool_call: Some(CallDelta { index: i, new: Some((call.name.clone(), call.id.clone())), arguments: call.arguments.clone() }), ..Delta::default() }),
            Some(old) => {
                let a = appended(&old.arguments, &call.arguments).unwrap_or("");
                if !a.is_empty() {
                    out.push(Delta { tool_call: Some(CallDelta { index: i, new: None, arguments: a.to_string() }), ..Delta::default() });
                }
            }
        }
    }
    out
}

/// The tools a request lets the model call, and how.
#[derive(Clone, Debug)]
pub struct ToolSetup<'a> {
    pub tools: &'a [Tool],
    pub choice: &'a ToolChoice,
    pub parallel: bool,
}

impl ToolSetup<'_> {
    /// The tools the model may call (all, one named, or none).
    pub fn callable(&self) -> Vec<&Tool> {
        match self.choice {
            ToolChoice::None => Vec::new(),
            ToolChoice::Function(n) => self.tools.iter().filter(|t| &t.name == n).collect(),
            _ => self.tools.iter().collect(),
        }
    }

    pub fn required(&self) -> bool {
        matches!(self.choice, ToolChoice::Required | ToolChoice::Function(_))
    }
}

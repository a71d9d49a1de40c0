//! The OpenAI request bodies read field by field from JSON: every field the server knows is
//! type- and range-checked (a 400 naming the field otherwise), fields it does not know are
//! ignored as OpenAI's clients send extras, and the features it does not have (n > 1, echo,
//! logit_bias) are refused, never ignored. Structured output (`grammar`, `json_schema`,
//! chat's `response_format`) becomes one GBNF grammar, as llama-server makes it.

use serde_json::{Map, Value};

use crate::error::ApiError;
use deepseek::sampling::chain::CommonParams;
use deepseek_chat::tools::{ReasoningFormat, ToolChoice};

/// A random seed (`LLAMA_DEFAULT_SEED`).
pub const RANDOM_SEED: u32 = 0xFFFF_FFFF;

/// What both endpoints share.
#[derive(Debug)]
pub struct GenParams {
    /// None: the server's `--n-predict`.
    pub max_tokens: Option<i64>,
    pub sampling: CommonParams,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    /// Whether to report log-probabilities, and of how many alternatives per token.
    pub logprobs: bool,
    pub top_logprobs: u32,
    pub ignore_eos: bool,
    /// `reasoning_format`; None: the server's default.
    pub reasoning: Option<ReasoningFormat>,
    /// GBNF (root rule `root`) the output must keep to; None: unconstrained.
    pub grammar: Option<String>,
    /// The schema `grammar` was made from (`json_schema`, `response_format`).
    pub json_schema: Option<Value>,
    pub tool_choice: ToolChoice,
    /// None: as the template can (whether it renders several calls in a turn).
    pub parallel_tool_calls: Option<bool>,
    /// `reasoning_budget_tokens` / `thinking_budget_tokens`; None: the server's.
    pub reasoning_budget: Option<i64>,
}

pub struct Fields<'a>(pub &'a Map<String, Value>);

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

impl<'a> Fields<'a> {
    pub fn parse(body: &'a Value) -> Result<Fields<'a>, ApiError> {
        match body {
            Value::Object(m) => Ok(Fields(m)),
            other => Err(ApiError::invalid(format!("the request body must be a JSON object, not {}", kind(other)))),
        }
    }

    /// The field, None when absent or null.
    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    pub fn f32(&self, name: &str, lo: f32, hi: f32) -> Result<Option<f32>, ApiError> {
        let Some(v) = self.get(name) else { return Ok(None) };
        let x = v.as_f64().ok_or_else(|| ApiError::param(name, format!("'{name}' must be a number, not {}", kind(v))))?;
        if !(lo as f64..=hi as f64).contains(&x) {
            return Err(ApiError::param(name, format!("'{name}' = {x} is outside [{lo}, {hi}]")));
        }
        Ok(Some(x as f32))
    }

    pub fn int(&self, name: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        let Some(v) = self.get(name) else { return Ok(None) };
        let x = match v.as_i64() {
            Some(x) => x,
            // 3.0 is an integer written as a float, which some clients send.
            None => match v.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9e15 => f as i64,
                _ => return Err(ApiError::param(name, format!("'{name}' must be an integer, not {}", kind(v)))),
            },
        };
        if !(lo..=hi).contains(&x) {
            return Err(ApiError::param(name, format!("'{name}' = {x} is outside [{lo}, {hi}]")));
        }
        Ok(Some(x))
    }

    pub fn bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        let Some(v) = self.get(name) else { return Ok(None) };
        v.as_bool().map(Some).ok_or_else(|| ApiError::param(name, format!("'{name}' must be a boolean, not {}", kind(v))))
    }

    pub fn str(&self, name: &str) -> Result<Option<&'a str>, ApiError> {
        let Some(v) = self.get(name) else { return Ok(None) };
        v.as_str().map(Some).ok_or_else(|| ApiError::param(name, format!("'{name}' must be a string, not {}", kind(v))))
    }

    fn refuse_unless(&self, name: &str, fine: impl Fn(&Value) -> bool, why: &str) -> Result<(), ApiError> {
        match self.get(name) {
            Some(v) if !fine(v) => Err(ApiError::param(name, format!("'{name}': {why}"))),
            _ => Ok(()),
        }
    }

    /// The sampling and output fields both endpoints take; `chat` selects the chat form of
    /// `logprobs` (a boolean plus `top_logprobs`) over the completions one (an integer).
    pub fn gen(&self, chat: bool) -> Result<GenParams, ApiError> {
        if let Some(n) = self.int("n", 1, i64::MAX)? {
            if n != 1 {
                return Err(ApiError::param("n", format!("'n' = {n}: only one choice per request is supported")));
            }
        }
        self.refuse_unless("logit_bias", |v| v.as_object().is_some_and(|m| m.is_empty()), "token biases are not supported")?;
        let (tool_choice, parallel_tool_calls) = if chat { self.tool_choice()? } else { (ToolChoice::None, None) };
        if !chat {
            self.refuse_unless("tools", |v| v.as_array().is_some_and(|a| a.is_empty()), "tools are a chat completions field (/v1/chat/completions)")?;
        }
        let (grammar, json_schema) = if chat { self.chat_grammar()? } else { (self.completion_grammar()?, None) };
        let mut max_tokens = None;
        for name in ["max_tokens", "max_completion_tokens", "n_predict"] {
            if let Some(n) = self.int(name, -1, i32::MAX as i64)? {
                if n == 0 {
                    return Err(ApiError::param(name, format!("'{name}' must be at least 1 (or -1: until the context is full)")));
                }
                max_tokens = Some(n);
            }
        }
        let seed = match self.int("seed", i64::MIN, i64::MAX)? {
            None | Some(-1) => RANDOM_SEED,
            Some(s) if s < 0 => return Err(ApiError::param("seed", "'seed' must be non-negative (or -1: random)")),
            // Seeds wider than 32 bits are folded (the sampler's RNG takes 32).
            Some(s) => (s as u64 ^ (s as u64 >> 32)) as u32,
        };
        let sampling = CommonParams {
            temperature: self.f32("temperature", 0.0, 100.0)?.unwrap_or(0.8),
            top_k: self.int("top_k", 0, i32::MAX as i64)?.unwrap_or(40) as i32,
            top_p: self.f32("top_p", 0.0, 1.0)?.unwrap_or(0.95),
            min_p: self.f32("min_p", 0.0, 1.0)?.unwrap_or(0.05),
            repeat_penalty: self.f32("repeat_penalty", f32::MIN_POSITIVE, 100.0)?.unwrap_or(1.0),
            repeat_last_n: self.int("repeat_last_n", -1, i32::MAX as i64)?.unwrap_or(64) as i32,
            seed,
            frequency_penalty: self.f32("frequency_penalty", -2.0, 2.0)?.unwrap_or(0.0),
            presence_penalty: self.f32("presence_penalty", -2.0, 2.0)?.unwrap_or(0.0),
            ..CommonParams::default()
        };
        let stop = match self.get("stop") {
            None => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(str::to_string).ok_or_else(|| ApiError::param("stop", format!("'stop' must hold strings, not {}", kind(v)))))
                .collect::<Result<Vec<_>, _>>()?,
            Some(v) => return Err(ApiError::param("stop", format!("'stop' must be a string or an array of strings, not {}", kind(v)))),
        };
        let stop: Vec<String> = stop.into_iter().filter(|s| !s.is_empty()).collect();
        if stop.len() > deepseek::engine::MAX_STOP_STRINGS {
            return Err(ApiError::param("stop", format!("at most {} stop strings", deepseek::engine::MAX_STOP_STRINGS)));
        }
        if let Some(s) = stop.iter().find(|s| s.len() > deepseek::engine::MAX_STOP_STRING_BYTES) {
            return Err(ApiError::param("stop", format!("a stop string of {} bytes is longer than {}", s.len(), deepseek::engine::MAX_STOP_STRING_BYTES)));
        }
        let stream = self.bool("stream")?.unwrap_or(false);
        let include_usage = match self.get("stream_options") {
            None => false,
            Some(Value::Object(o)) => Fields(o).bool("include_usage")?.unwrap_or(false),
            Some(v) => return Err(ApiError::param("stream_options", format!("'stream_options' must be an object, not {}", kind(v)))),
        };
        let (logprobs, top_logprobs) = if chat {
            let on = self.bool("logprobs")?.unwrap_or(false);
            let top = self.int("top_logprobs", 0, deepseek::engine::MAX_TOP_PROBS as i64)?;
            if top.is_some_and(|t| t > 0) && !on {
                return Err(ApiError::param("top_logprobs", "'top_logprobs' needs 'logprobs': true"));
            }
            (on, top.unwrap_or(0) as u32)
        } else {
            match self.get("logprobs") {
                None | Some(Value::Bool(false)) => (false, 0),
                Some(Value::Bool(true)) => (true, 0),
                Some(_) => {
                    let n = self.int("logprobs", 0, 5)?.unwrap_or(0);
                    (true, n as u32)
                }
            }
        };
        let ignore_eos = self.bool("ignore_eos")?.unwrap_or(false);
        let reasoning = match self.str("reasoning_format")? {
            None => None,
            Some(o) => Some(ReasoningFormat::parse(o).ok_or_else(|| ApiError::param("reasoning_format", format!("Unknown reasoning format: {o}")))?),
        };
        let mut reasoning_budget = None;
        for name in ["reasoning_budget_tokens", "thinking_budget_tokens"] {
            if let Some(n) = self.int(name, -1, i32::MAX as i64)? {
                // -1: the server's --reasoning-budget, as upstream.
                if n >= 0 {
                    reasoning_budget = Some(n);
                }
            }
        }
        Ok(GenParams { max_tokens, sampling, stop, stream, include_usage, logprobs, top_logprobs, ignore_eos, reasoning, grammar, json_schema, tool_choice, parallel_tool_calls, reasoning_budget })
    }

    /// `tool_choice` (`none`, `auto`, `required`, or `{"type": "function", "function":
    /// {"name": …}}`) and `parallel_tool_calls`.
    fn tool_choice(&self) -> Result<(ToolChoice, Option<bool>), ApiError> {
        let choice = match self.get("tool_choice") {
            None => ToolChoice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "auto" => ToolChoice::Auto,
                "none" => ToolChoice::None,
                "required" => ToolChoice::Required,
                other => return Err(ApiError::param("tool_choice", format!("Invalid tool_choice: {other}"))),
            },
            Some(Value::Object(o)) => {
                let name = o.get("function").and_then(|f| f.get("name")).and_then(Value::as_str);
                match (o.get("type").and_then(Value::as_str), name) {
                    (Some("function"), Some(n)) if !n.is_empty() => ToolChoice::Function(n.to_string()),
                    _ => return Err(ApiError::param("tool_choice", "Invalid tool_choice: an object must be {\"type\": \"function\", \"function\": {\"name\": …}}")),
                }
            }
            Some(v) => return Err(ApiError::param("tool_choice", format!("Invalid tool_choice: expected a string or an object, not {}", kind(v)))),
        };
        Ok((choice, self.bool("parallel_tool_calls")?))
    }

    /// Chat's grammar, as llama-server b11312 derives it (`oaicompat_chat_params_parse`, then
    /// the built-in template route of `common_chat_templates_apply`): `json_schema`, or the
    /// schema of `response_format` (`json_object` with an optional `schema`, `json_schema`
    /// with `json_schema.schema`; an absent or empty schema is any JSON object), converted to
    /// GBNF; else `grammar`. A schema and a grammar together are refused.
    fn chat_grammar(&self) -> Result<(Option<String>, Option<Value>), ApiError> {
        let mut schema = self.get("json_schema").cloned();
        let grammar = self.str("grammar")?.unwrap_or("");
        if schema.is_some() && !grammar.is_empty() {
            return Err(ApiError::param("grammar", "Cannot use both json_schema and grammar"));
        }
        let mut from = "json_schema";
        if let Some(rf) = self.get("response_format") {
            let Some(rf) = rf.as_object() else { return Err(ApiError::param("response_format", format!("'response_format' must be an object, not {}", kind(rf)))) };
            let rf = Fields(rf);
            match rf.str("type").map_err(|_| ApiError::param("response_format", "'response_format.type' must be a string"))?.unwrap_or("") {
                "json_object" => {
                    if rf.0.contains_key("schema") || schema.as_ref().is_none_or(empty_json) {
                        schema = Some(rf.get("schema").cloned().unwrap_or_else(|| Value::Object(Map::new())));
                        from = "response_format";
                    }
                }
                "json_schema" => {
                    schema = Some(rf.get("json_schema").and_then(|w| w.get("schema")).filter(|s| !s.is_null()).cloned().unwrap_or_else(|| Value::Object(Map::new())));
                    from = "response_format";
                }
                "" | "text" => {}
                other => return Err(ApiError::param("response_format", format!("response_format type must be one of \"text\" or \"json_object\", but got: {other}"))),
            }
        }
        match schema {
            Some(s) => {
                let g = convert_schema(s.clone()).map_err(|e| ApiError::param(from, e))?;
                Ok((Some(g), Some(s)))
            }
            None => Ok(((!grammar.is_empty()).then(|| grammar.to_string()), None)),
        }
    }

    /// The completions grammar, as llama-server b11312's completion fields give it:
    /// `json_schema` converted to GBNF (a null or empty one is any JSON object), unless
    /// `grammar` is given, which wins. `response_format` is chat's; llama-server ignores it
    /// here, so it is refused rather than silently leaving the output unconstrained.
    fn completion_grammar(&self) -> Result<Option<String>, ApiError> {
        self.refuse_unless("response_format", |v| v.as_object().is_some_and(|o| o.get("type").is_none_or(|t| t.as_str() == Some("text"))), "response_format is a chat completions field (llama-server ignores it on completions); use 'json_schema' or 'grammar' here")?;
        let grammar = self.str("grammar")?;
        if grammar.is_none() {
            if let Some(s) = self.get("json_schema") {
                return convert_schema(s.clone()).map(Some).map_err(|e| ApiError::param("json_schema", format!("\"json_schema\": {e}")));
            }
        }
        Ok(grammar.filter(|g| !g.is_empty()).map(str::to_string))
    }
}

/// nlohmann's `empty()`: null, or an empty object or array.
fn empty_json(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(o) => o.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// A schema as GBNF (an empty object is any JSON object); upstream's warnings (parts it could
/// not constrain) go to the log, as llama-server writes them.
fn convert_schema(mut schema: Value) -> Result<String, String> {
    if schema.as_object().is_some_and(Map::is_empty) {
        schema = serde_json::json!({"type": "object"});
    }
    let c = deepseek_chat::schema::json_schema_to_grammar(&schema)?;
    if !c.warnings.is_empty() {
        eprintln!("deepseek-server: WARNING: JSON schema conversion was incomplete: {}", c.warnings.join("; "));
    }
    Ok(c.grammar)
}

/// A chat message's text: a string, null, or an array of text parts.
pub fn message_text(v: Option<&Value>, at: usize) -> Result<String, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut out = String::new();
            for p in parts {
                match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => out += t,
                    (Some(t), _) if t != "text" => return Err(ApiError::param("messages", format!("messages[{at}]: content parts of type '{t}' are not supported (text only)"))),
                    _ => return Err(ApiError::param("messages", format!("messages[{at}]: a content part needs \"type\": \"text\" and a string \"text\""))),
                }
            }
            Ok(out)
        }
        Some(v) => Err(ApiError::param("messages", format!("messages[{at}].content must be a string or an array of parts, not {}", kind(v)))),
    }
}

/// The conversation of a chat request as (role, text) pairs.
pub fn messages(f: &Fields<'_>) -> Result<Vec<(String, String)>, ApiError> {
    let Some(v) = f.get("messages") else { return Err(ApiError::param("messages", "'messages' is required")) };
    let Some(list) = v.as_array() else { return Err(ApiError::param("messages", format!("'messages' must be an array, not {}", kind(v)))) };
    if list.is_empty() {
        return Err(ApiError::param("messages", "'messages' must not be empty"));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let Some(o) = m.as_object() else { return Err(ApiError::param("messages", format!("messages[{i}] must be an object, not {}", kind(m)))) };
        let role = match o.get("role").and_then(Value::as_str) {
            Some(r @ ("system" | "user" | "assistant" | "tool")) => r.to_string(),
            // OpenAI's newer name for the system role.
            Some("developer") => "system".to_string(),
            Some(r) => return Err(ApiError::param("messages", format!("messages[{i}].role '{r}' is not one of system, developer, user, assistant, tool"))),
            None => return Err(ApiError::param("messages", format!("messages[{i}] needs a string 'role'"))),
        };
        if o.get("tool_calls").is_some_and(|t| !t.is_null() && t.as_array().is_none_or(|a| !a.is_empty())) {
            return Err(ApiError::param("messages", format!("messages[{i}]: tool calls are not supported yet")));
        }
        out.push((role, message_text(o.get("content"), i)?));
    }
    Ok(out)
}

/// What a completions prompt is: text to tokenize, or tokens.
pub enum PromptInput {
    Text(String),
    Tokens(Vec<i32>),
}

pub fn prompt(f: &Fields<'_>, n_vocab: usize) -> Result<PromptInput, ApiError> {
    let tokens = |a: &[Value]| -> Result<Vec<i32>, ApiError> {
        a.iter()
            .map(|t| match t.as_i64() {
                Some(id) if (0..n_vocab as i64).contains(&id) => Ok(id as i32),
                _ => Err(ApiError::param("prompt", format!("prompt token {t} is not a token id of this model (0..{n_vocab})"))),
            })
            .collect()
    };
    match f.get("prompt") {
        None => Err(ApiError::param("prompt", "'prompt' is required")),
        Some(Value::String(s)) => Ok(PromptInput::Text(s.clone())),
        Some(Value::Array(a)) if a.is_empty() => Err(ApiError::param("prompt", "'prompt' must not be empty")),
        Some(Value::Array(a)) if a.iter().all(Value::is_number) => Ok(PromptInput::Tokens(tokens(a)?)),
        Some(Value::Array(a)) if a.len() == 1 => match &a[0] {
            Value::String(s) => Ok(PromptInput::Text(s.clone())),
            Value::Array(t) => Ok(PromptInput::Tokens(tokens(t)?)),
            v => Err(ApiError::param("prompt", format!("'prompt' must be a string, tokens, or one of them in an array, not an array of {}", kind(v)))),
        },
        Some(Value::Array(_)) => Err(ApiError::param("prompt", "several prompts in one request are not supported (send one request per prompt)")),
        Some(v) => Err(ApiError::param("prompt", format!("'prompt' must be a string or an array of tokens, not {}", kind(v)))),
    }
}

#[cfg(test)]
mod tests {
    use super::Fields;
    use serde_json::{json, Value};

    /// The grammar a body gives (chat or completions), or the error's message.
    fn grammar(body: Value, chat: bool) -> Result<Option<String>, String> {
        let f = Fields::parse(&body).unwrap();
        let r = if chat { f.chat_grammar().map(|g| g.0) } else { f.completion_grammar() };
        r.map_err(|e| e.message)
    }

    fn of(schema: Value) -> Option<String> {
        Some(deepseek_chat::schema::json_schema_to_grammar(&schema).unwrap().grammar)
    }

    /// Upstream's precedence (oaicompat_chat_params_parse, the completion fields).
    #[test]
    fn schemas_and_grammars_combine_as_upstream() {
        let s = json!({"type": "integer"});
        let any = json!({"type": "object"});
        let g = "root ::= \"a\"";
        // chat: json_object takes its own schema, else the json_schema field, else any object
        assert_eq!(grammar(json!({"response_format": {"type": "json_object"}}), true), Ok(of(any.clone())));
        assert_eq!(grammar(json!({"response_format": {"type": "json_object"}, "json_schema": s}), true), Ok(of(s.clone())));
        assert_eq!(grammar(json!({"response_format": {"type": "json_object", "schema": {"type": "null"}}, "json_schema": s}), true), Ok(of(json!({"type": "null"}))));
        assert_eq!(grammar(json!({"response_format": {"type": "json_object", "schema": null}, "json_schema": s}), true), Ok(of(any.clone())));
        // json_schema: json_schema.schema always (absent: any object)
        assert_eq!(grammar(json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": s}}}), true), Ok(of(s.clone())));
        assert_eq!(grammar(json!({"response_format": {"type": "json_schema", "json_schema": "odd"}, "json_schema": s}), true), Ok(of(any.clone())));
        assert_eq!(grammar(json!({"response_format": {"type": "text"}, "json_schema": {}}), true), Ok(of(any.clone())));
        assert_eq!(grammar(json!({"response_format": {"type": "text"}}), true), Ok(None));
        // a schema wins over a grammar given with response_format (the built-in template route)
        assert_eq!(grammar(json!({"response_format": {"type": "json_object"}, "grammar": g}), true), Ok(of(any.clone())));
        assert_eq!(grammar(json!({"json_schema": s, "grammar": g}), true), Err("Cannot use both json_schema and grammar".into()));
        assert_eq!(grammar(json!({"grammar": g}), true), Ok(Some(g.into())));
        assert_eq!(grammar(json!({"grammar": ""}), true), Ok(None));
        assert_eq!(grammar(json!({}), true), Ok(None));
        // completions: grammar wins over json_schema; an empty json_schema is any object
        assert_eq!(grammar(json!({"json_schema": s, "grammar": g}), false), Ok(Some(g.into())));
        assert_eq!(grammar(json!({"json_schema": s}), false), Ok(of(s.clone())));
        assert_eq!(grammar(json!({"json_schema": {}}), false), Ok(of(any)));
        assert_eq!(grammar(json!({"response_format": {"type": "text"}, "grammar": g}), false), Ok(Some(g.into())));
        assert!(grammar(json!({"response_format": {"type": "json_object"}}), false).is_err());
        assert!(grammar(json!({"response_format": "json"}), false).is_err());
        assert!(grammar(json!({"grammar": ["x"]}), true).unwrap_err().contains("'grammar' must be a string"));
        assert!(grammar(json!({"response_format": "json"}), true).unwrap_err().contains("must be an object"));
    }
}

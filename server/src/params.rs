//! The OpenAI request bodies read field by field from JSON: every field the server knows is
//! type- and range-checked (a 400 naming the field otherwise), fields it does not know are
//! ignored as OpenAI's clients send extras, and the features it does not have (n > 1, echo,
//! logit_bias) are refused, never ignored. Structured output (`grammar`, `json_schema`,
//! chat's `response_format`) becomes one GBNF grammar, as llama-server makes it.

use serde_json::{Map, Value};

use crate::error::ApiError;
use deepseek::sampling::chain::{CommonParams, SamplerKind};
use deepseek_chat::tools::{ReasoningFormat, ToolChoice};

/// A random seed (`LLAMA_DEFAULT_SEED`).
pub const RANDOM_SEED: u32 = 0xFFFF_FFFF;

/// What both endpoints share.
#[derive(Debug, Clone)]
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
    /// `sse_ping_interval`; None: the server's.
    pub sse_ping_interval: Option<i64>,
    /// `timings_per_token`: timings in every streamed chunk.
    pub timings_per_token: bool,
    /// `verbose`: the `__verbose` debug object in the answer (None: the server's -v).
    pub verbose: Option<bool>,
    /// `cache_prompt`: whether cached prompt prefixes may be reused.
    pub cache_prompt: bool,
    /// `id_slot`: the slot the request must run in (None: -1, the engine chooses).
    pub id_slot: Option<u32>,
    /// `n_cmpl` / `n`: choices to generate (≥ 1; the caller checks it against the slots).
    pub n_cmpl: u32,
    /// `return_progress`: streamed prompt-progress chunks.
    pub return_progress: bool,
    /// With `ignore_eos`: the end-of-generation tokens the sampler biases to -inf (reported in
    /// `generation_settings.logit_bias`, as upstream).
    pub eog_ids: Vec<i32>,
    /// `t_max_predict_ms`: generation ends at the first newline after this long (None: off).
    pub t_max_predict: Option<std::time::Duration>,
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
    pub fn gen(&self, chat: bool, d: &crate::args::SamplingArgs) -> Result<GenParams, ApiError> {
        self.gen_for(chat, d, None)
    }

    /// `gen` with the model's vocabulary, which `logit_bias`'s strings and `ignore_eos` need.
    pub fn gen_for(&self, chat: bool, d: &crate::args::SamplingArgs, vocab: Option<&deepseek::tokenizer::Vocab>) -> Result<GenParams, ApiError> {
        crate::fields::check(self.0)?;
        // `n_cmpl` (alias `n`): choices generated from the prompt, at most one per slot (upstream's limit).
        let n_cmpl = match (self.int("n_cmpl", 1, i64::MAX)?, self.int("n", 1, i64::MAX)?) {
            (Some(n), _) | (None, Some(n)) => n,
            (None, None) => 1,
        };
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
        let seed = match self.int("seed", i64::MIN, i64::MAX)?.or(Some(d.seed)) {
            None | Some(-1) => RANDOM_SEED,
            Some(s) if s < 0 => return Err(ApiError::param("seed", "'seed' must be non-negative (or -1: random)")),
            // Seeds wider than 32 bits are folded (the sampler's RNG takes 32).
            Some(s) => (s as u64 ^ (s as u64 >> 32)) as u32,
        };
        let sampling = self.sampling(d, seed, vocab)?;
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
        let ignore_eos = sampling.ignore_eos;
        let eog_ids = match vocab {
            Some(v) if ignore_eos => v.eog_ids().collect(),
            _ => Vec::new(),
        };
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
        let sse_ping_interval = self.int("sse_ping_interval", -1, i32::MAX as i64)?;
        let timings_per_token = self.bool("timings_per_token")?.unwrap_or(false);
        let verbose = self.bool("verbose")?;
        let cache_prompt = self.bool("cache_prompt")?.unwrap_or(true);
        let return_progress = self.bool("return_progress")?.unwrap_or(false);
        let id_slot = self.int("id_slot", -1, i32::MAX as i64)?.filter(|&v| v >= 0).map(|v| v as u32);
        let t_max_predict = self.f32("t_max_predict_ms", f32::MIN, f32::MAX)?.filter(|&ms| ms > 0.0).map(|ms| std::time::Duration::from_secs_f64(ms as f64 / 1000.0));
        Ok(GenParams { max_tokens, sampling, stop, stream, include_usage, logprobs, top_logprobs, ignore_eos, reasoning, grammar, json_schema, tool_choice, parallel_tool_calls, reasoning_budget, sse_ping_interval, timings_per_token, verbose, cache_prompt, id_slot, t_max_predict, n_cmpl: n_cmpl.min(u32::MAX as i64) as u32, return_progress, eog_ids })
    }

    /// The sampler settings, as llama-server reads them (`server-schema.cpp`): the server's
    /// defaults (its sampling options), each overridden by the request's field.
    fn sampling(&self, d: &crate::args::SamplingArgs, seed: u32, vocab: Option<&deepseek::tokenizer::Vocab>) -> Result<CommonParams, ApiError> {
        let base = d.base().map_err(ApiError::invalid)?;
        let f = |name: &str, lo: f32, hi: f32, dflt: f32| -> Result<f32, ApiError> { Ok(self.f32(name, lo, hi)?.unwrap_or(dflt)) };
        let i = |name: &str, lo: i64, hi: i64, dflt: i32| -> Result<i32, ApiError> { Ok(self.int(name, lo, hi)?.map_or(dflt, |n| n as i32)) };
        let mut s = CommonParams {
            temperature: f("temperature", 0.0, f32::MAX, base.temperature)?,
            top_k: i("top_k", 0, i32::MAX as i64, base.top_k)?,
            top_p: f("top_p", 0.0, 1.0, base.top_p)?,
            min_p: f("min_p", 0.0, 1.0, base.min_p)?,
            repeat_penalty: f("repeat_penalty", f32::MIN_POSITIVE, 100.0, base.repeat_penalty)?,
            repeat_last_n: i("repeat_last_n", -1, i32::MAX as i64, base.repeat_last_n)?,
            seed,
            frequency_penalty: f("frequency_penalty", -2.0, 2.0, base.frequency_penalty)?,
            presence_penalty: f("presence_penalty", -2.0, 2.0, base.presence_penalty)?,
            min_keep: i("min_keep", 0, i32::MAX as i64, base.min_keep)?,
            typ_p: f("typical_p", f32::MIN, f32::MAX, base.typ_p)?,
            top_n_sigma: f("top_n_sigma", f32::MIN, f32::MAX, base.top_n_sigma)?,
            xtc_probability: f("xtc_probability", 0.0, 1.0, base.xtc_probability)?,
            xtc_threshold: f("xtc_threshold", 0.0, 1.0, base.xtc_threshold)?,
            dynatemp_range: f("dynatemp_range", f32::MIN, f32::MAX, base.dynatemp_range)?,
            dynatemp_exponent: f("dynatemp_exponent", f32::MIN, f32::MAX, base.dynatemp_exponent)?,
            dry_multiplier: f("dry_multiplier", f32::MIN, f32::MAX, base.dry_multiplier)?,
            // upstream: a base below 1 means the server's
            dry_base: match self.f32("dry_base", f32::MIN, f32::MAX)? {
                Some(b) if b >= 1.0 => b,
                _ => base.dry_base,
            },
            dry_allowed_length: i("dry_allowed_length", 0, i32::MAX as i64, base.dry_allowed_length)?,
            dry_penalty_last_n: i("dry_penalty_last_n", -1, i32::MAX as i64, base.dry_penalty_last_n)?,
            dry_sequence_breakers: match self.get("dry_sequence_breakers") {
                None => base.dry_sequence_breakers.clone(),
                Some(Value::Array(a)) if !a.is_empty() => a
                    .iter()
                    .map(|v| v.as_str().map(str::to_string).ok_or_else(|| ApiError::param("dry_sequence_breakers", "Error: dry_sequence_breakers must be a non-empty array of strings")))
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err(ApiError::param("dry_sequence_breakers", "Error: dry_sequence_breakers must be a non-empty array of strings")),
            },
            mirostat: i("mirostat", 0, 2, base.mirostat)?,
            mirostat_tau: f("mirostat_tau", f32::MIN, f32::MAX, base.mirostat_tau)?,
            mirostat_eta: f("mirostat_eta", f32::MIN, f32::MAX, base.mirostat_eta)?,
            adaptive_target: f("adaptive_target", f32::MIN, 1.0, base.adaptive_target)?,
            adaptive_decay: f("adaptive_decay", 0.0, 0.99, base.adaptive_decay)?,
            ignore_eos: self.bool("ignore_eos")?.unwrap_or(base.ignore_eos),
            logit_bias: base.logit_bias.clone(),
            samplers: match self.get("samplers") {
                None => base.samplers.clone(),
                Some(Value::Array(a)) => {
                    let names: Vec<&str> = a.iter().map(|v| v.as_str().ok_or_else(|| ApiError::param("samplers", "'samplers' must be an array of names or a string of letters"))).collect::<Result<_, _>>()?;
                    SamplerKind::from_names(&names).map_err(|e| ApiError::param("samplers", e))?
                }
                Some(Value::String(c)) => SamplerKind::from_chars(c).map_err(|e| ApiError::param("samplers", e))?,
                Some(_) => return Err(ApiError::param("samplers", "'samplers' must be an array of names or a string of letters")),
            },
        };
        if let Some(lb) = self.get("logit_bias") {
            s.logit_bias = logit_bias(lb, vocab)?;
        }
        s.check().map_err(|e| ApiError::invalid(e))?;
        Ok(s)
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

/// `generation_settings` as llama-server reports them (`task_params::to_json`), for the
/// settings this server has; the samplers it does not run are reported at their off values.
pub fn settings_json(gp: &GenParams, n_predict: i32) -> Value {
    let s = &gp.sampling;
    // -inf is null, as upstream's JSON writes a non-finite float; the EOG biases of ignore_eos
    // follow the request's.
    let eog = gp.eog_ids.iter().map(|&t| (t, f32::NEG_INFINITY));
    let bias: Vec<Value> = s.logit_bias.iter().copied().chain(eog).map(|(t, b)| serde_json::json!({"bias": if b.is_finite() { serde_json::json!(b) } else { Value::Null }, "token": t})).collect();
    serde_json::json!({
        "seed": s.seed,
        "temperature": s.temperature,
        "dynatemp_range": s.dynatemp_range,
        "dynatemp_exponent": s.dynatemp_exponent,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "min_p": s.min_p,
        "top_n_sigma": s.top_n_sigma,
        "xtc_probability": s.xtc_probability,
        "xtc_threshold": s.xtc_threshold,
        "typical_p": s.typ_p,
        "repeat_last_n": s.repeat_last_n,
        "repeat_penalty": s.repeat_penalty,
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
        "dry_multiplier": s.dry_multiplier,
        "dry_base": s.dry_base,
        "dry_allowed_length": s.dry_allowed_length,
        "dry_penalty_last_n": s.dry_penalty_last_n,
        "dry_sequence_breakers": s.dry_sequence_breakers,
        "mirostat": s.mirostat,
        "mirostat_tau": s.mirostat_tau,
        "mirostat_eta": s.mirostat_eta,
        "adaptive_target": s.adaptive_target,
        "adaptive_decay": s.adaptive_decay,
        "stop": gp.stop,
        "max_tokens": n_predict,
        "n_predict": n_predict,
        "n_keep": 0,
        "n_discard": 0,
        "ignore_eos": gp.ignore_eos,
        "stream": gp.stream,
        "logit_bias": bias,
        "n_probs": if gp.logprobs { gp.top_logprobs } else { 0 },
        "min_keep": s.min_keep,
        "grammar": gp.grammar.clone().unwrap_or_default(),
        "samplers": s.samplers.iter().map(|k| k.name()).collect::<Vec<_>>(),
        "timings_per_token": gp.timings_per_token,
    })
}

/// `logit_bias` in upstream's forms (`[[token or text, bias or false], ...]`, `{"token or text":
/// bias}`; false is -inf; a text means each of its tokens) and OpenAI's (`{"token id": bias}`).
/// A token outside the vocabulary is refused (upstream drops it silently).
fn logit_bias(v: &Value, vocab: Option<&deepseek::tokenizer::Vocab>) -> Result<Vec<(i32, f32)>, ApiError> {
    let bad = |m: String| ApiError::param("logit_bias", m);
    let bias = |b: &Value| -> Result<f32, ApiError> {
        match b {
            Value::Number(n) => n.as_f64().map(|x| x as f32).filter(|x| !x.is_nan()).ok_or_else(|| bad(format!("'logit_bias': bias {b} is not a number"))),
            Value::Bool(false) => Ok(f32::NEG_INFINITY),
            _ => Err(bad(format!("'logit_bias': a bias must be a number or false, not {b}"))),
        }
    };
    let n_vocab = vocab.map_or(i64::MAX, |v| v.n_tokens() as i64);
    let token = |t: i64| -> Result<i32, ApiError> {
        if (0..n_vocab).contains(&t) {
            Ok(t as i32)
        } else {
            Err(bad(format!("'logit_bias': token {t} is not a token id of this model (0..{n_vocab})")))
        }
    };
    let text = |s: &str| -> Result<Vec<i32>, ApiError> {
        let v = vocab.ok_or_else(|| bad("'logit_bias': texts need the model's vocabulary".into()))?;
        let mut t = Vec::new();
        v.tokenize(s.as_bytes(), false, false, &mut t);
        Ok(t)
    };
    let mut out = Vec::new();
    match v {
        Value::Array(a) => {
            for el in a {
                let Some([k, b]) = el.as_array().map(Vec::as_slice).and_then(|s| <&[Value; 2]>::try_from(s).ok()) else {
                    return Err(bad(format!("'logit_bias': each entry must be [token or text, bias], not {el}")));
                };
                let b = bias(b)?;
                match k {
                    Value::Number(n) => out.push((token(n.as_i64().ok_or_else(|| bad(format!("'logit_bias': token {n} is not an integer")))?)?, b)),
                    Value::String(s) => out.extend(text(s)?.into_iter().map(|t| (t, b))),
                    _ => return Err(bad(format!("'logit_bias': a key must be a token id or a text, not {k}"))),
                }
            }
        }
        Value::Object(o) => {
            for (k, b) in o {
                let b = bias(b)?;
                match k.parse::<i64>() {
                    Ok(t) => out.push((token(t)?, b)),
                    Err(_) => out.extend(text(k)?.into_iter().map(|t| (t, b))),
                }
            }
        }
        Value::Null => {}
        _ => return Err(bad("'logit_bias' must be an object or an array".into())),
    }
    Ok(out)
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
    // An empty conversation renders to the template's generation prompt alone, as upstream
    // renders it (with --jinja as without).
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

/// The prompts of a native `/completion` as llama-server reads them (`tokenize_input_prompts`):
/// a string, tokens, tokens mixed with strings (one prompt; only the first string gets the
/// BOS), an object with `prompt_string`, or an array of those (one prompt each).
pub fn native_prompts(f: &Fields<'_>, vocab: &deepseek::tokenizer::Vocab) -> Result<Vec<Vec<i32>>, ApiError> {
    let n_vocab = vocab.n_tokens() as i64;
    let bad = || ApiError::param("prompt", "\"prompt\" elements must be a string, a list of tokens, a JSON object containing a prompt string, or a list of mixed strings & tokens.");
    let token = |v: &Value| -> Result<i32, ApiError> {
        match v.as_i64() {
            Some(id) if (0..n_vocab).contains(&id) => Ok(id as i32),
            _ => Err(ApiError::param("prompt", format!("prompt token {v} is not a token id of this model (0..{n_vocab})"))),
        }
    };
    // One prompt: a string, or an array of numbers and strings.
    let mixed = |v: &Value| -> Result<Vec<i32>, ApiError> {
        let mut out = Vec::new();
        match v {
            Value::String(s) => vocab.tokenize(s.as_bytes(), true, true, &mut out),
            Value::Array(a) => {
                let mut first = true;
                for p in a {
                    match p {
                        Value::String(s) => {
                            let mut t = Vec::new();
                            vocab.tokenize(s.as_bytes(), first, true, &mut t);
                            out.extend(t);
                        }
                        Value::Number(_) => out.push(token(p)?),
                        _ => return Err(bad()),
                    }
                    first = false;
                }
            }
            _ => return Err(bad()),
        }
        Ok(out)
    };
    let sub = |v: &Value| -> Result<Vec<i32>, ApiError> {
        match v {
            Value::String(_) | Value::Array(_) => mixed(v),
            Value::Object(o) => match (o.get("prompt_string"), o.get("multimodal_data")) {
                (_, Some(_)) => Err(ApiError::param("prompt", "Multimodal data provided, but model does not support multimodal requests.")),
                (Some(p), None) => mixed(p),
                (None, None) => Err(bad()),
            },
            _ => Err(bad()),
        }
    };
    let prompts = match f.get("prompt") {
        None => return Err(ApiError::param("prompt", "\"prompt\" is required")),
        // An array that holds a number is one prompt (tokens, or tokens and strings).
        Some(Value::Array(a)) if !a.iter().any(Value::is_number) => a.iter().map(sub).collect::<Result<Vec<_>, _>>()?,
        Some(v) => vec![sub(v)?],
    };
    if prompts.is_empty() {
        return Err(ApiError::param("prompt", "\"prompt\" must not be empty"));
    }
    Ok(prompts)
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

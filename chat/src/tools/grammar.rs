//! The grammar a request's tool calls are written under: each callable tool's call in the
//! format's markup with its arguments held to the tool's JSON schema (`schema.rs`). For
//! `tool_choice: auto` it is lazy, waiting for the format's opening marker (the model may
//! answer in prose instead); for `required` or a named function it holds from the first
//! token, after the reasoning where the prompt opened one (so "required" means a call comes
//! back, whatever the model would rather write).

use serde_json::Value;

use super::parse::{dsml_block, DSML, HERMES_CLOSE, HERMES_OPEN, MISTRAL_CALLS, R1_CALLS_BEGIN, R1_CALLS_END, R1_CALL_BEGIN, R1_CALL_END, R1_SEP};
use super::{ToolFormat, ToolSetup};
use crate::messages::{tool_parameters, Tool};
use crate::schema::{dump, format_literal, GrammarBuilder};

/// A tool-call grammar and, for a lazy one, what sets it off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolGrammar {
    pub grammar: String,
    pub lazy: bool,
    /// Text that starts the constrained part (upstream's trigger words).
    pub trigger_words: Vec<String>,
    /// Regular expressions over the output so far; the constrained part starts at the first
    /// group (or the match).
    pub trigger_patterns: Vec<String>,
    /// The words count only after this text: the reasoning's end tag when the prompt opened
    /// the reasoning (a marker written while thinking is not a call).
    pub trigger_after: Option<String>,
}

/// How the answer's reasoning stands when the grammar starts.
#[derive(Clone, Copy, Debug)]
pub struct Thinking<'a> {
    pub tags: Option<(&'a str, &'a str)>,
    /// The prompt opened the reasoning: the output begins inside it.
    pub open: bool,
}

/// A character inside a GBNF character class.
fn class_char(c: char, out: &mut String) {
    match c {
        ']' | '[' | '\\' | '^' | '-' => {
            out.push('\\');
            out.push(c);
        }
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c => out.push(c),
    }
}

/// GBNF for any text that does not contain `end` (whose first character must not recur in
/// it, as holds for every marker here): each step is a character other than `end`'s first, or
/// a proper prefix of `end` followed by a character that neither continues it nor restarts it.
pub fn text_until(end: &str) -> String {
    let chars: Vec<char> = end.chars().collect();
    let first = chars[0];
    let mut alts = Vec::new();
    let mut class = String::from("[^");
    class_char(first, &mut class);
    class.push(']');
    alts.push(class);
    for k in 1..chars.len() {
        let prefix: String = chars[..k].iter().collect();
        let mut class = String::from("[^");
        class_char(chars[k], &mut class);
        if chars[k] != first {
            class_char(first, &mut class);
        }
        class.push(']');
        alts.push(format!("{} {class}", format_literal(&prefix)));
    }
    format!("( {} )*", alts.join(" | "))
}

fn lit(s: &str) -> String {
    format_literal(s)
}

/// Whether a parameter's value is written as raw text in DSML (`string="true"`): its schema
/// allows a string (upstream's `may_be_string`).
fn may_be_string(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == "string",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "string"),
        _ => {
            if let Some(Value::Array(e)) = schema.get("enum") {
                return e.iter().any(Value::is_string);
            }
            if let Some(c) = schema.get("const") {
                return c.is_string();
            }
            for k in ["anyOf", "oneOf"] {
                if let Some(Value::Array(alts)) = schema.get(k) {
                    return alts.iter().any(may_be_string);
                }
            }
            !(schema.get("properties").is_some() || schema.get("items").is_some())
        }
    }
}

/// A string parameter's raw text in DSML: one of its `enum` / `const` values, text of its
/// `minLength` to `maxLength` characters, else any text up to the parameter's end.
fn dsml_string(b: &mut GrammarBuilder, name: &str, schema: &Value, any: &str) -> String {
    let strings = |v: &Value| -> Option<Vec<String>> { v.as_array().map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect()) };
    let values = schema.get("enum").and_then(strings).filter(|v| !v.is_empty()).or_else(|| schema.get("const").and_then(Value::as_str).map(|c| vec![c.to_string()]));
    if let Some(vals) = values {
        return b.add_rule(&format!("{name}-value"), vals.iter().map(|v| lit(v)).collect::<Vec<_>>().join(" | "));
    }
    let min = schema.get("minLength").and_then(Value::as_u64);
    let max = schema.get("maxLength").and_then(Value::as_u64);
    if min.is_some() || max.is_some() {
        let range = match max {
            Some(m) => format!("{{{},{m}}}", min.unwrap_or(0).min(m)),
            None => format!("{{{},}}", min.unwrap_or(0)),
        };
        return b.add_rule(&format!("{name}-value"), format!("[^<]{range}"));
    }
    any.to_string()
}

/// One tool's call in a JSON format: `{"name": N, "<args_key>": ARGS}` (and a 9-character id
/// for Mistral).
fn json_call(b: &mut GrammarBuilder, t: &Tool, args_key: &str, id: bool) -> Result<String, String> {
    let args = b.add_schema(&format!("{}-args", t.name), &tool_parameters(t))?;
    let mut rule = format!(
        "\"{{\" space {} space \":\" space {} space \",\" space {} space \":\" space {args}",
        lit(&dump(&Value::String("name".into()))),
        lit(&dump(&Value::String(t.name.clone()))),
        lit(&dump(&Value::String(args_key.into()))),
    );
    if id {
        rule.push_str(&format!(" space \",\" space {} space \":\" space \"\\\"\" [a-zA-Z0-9]{{9}} \"\\\"\"", lit("\"id\"")));
    }
    rule.push_str(" space \"}\"");
    Ok(b.add_rule(&format!("{}-call", t.name), rule))
}

fn dsml_call(b: &mut GrammarBuilder, t: &Tool) -> Result<String, String> {
    let params = tool_parameters(t);
    let required: Vec<&str> = params.get("required").and_then(Value::as_array).map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let param_end = format!("</{DSML}parameter>");
    let text = b.add_rule("dsml-text", text_until(&param_end));
    let mut req = Vec::new();
    let mut opt = Vec::new();
    if let Some(props) = params.get("properties").and_then(Value::as_object) {
        for (name, schema) in props {
            let string = may_be_string(schema);
            let value = if string { dsml_string(b, &format!("{}-{}", t.name, name), schema, &text) } else { b.add_schema(&format!("{}-{}", t.name, name), schema)? };
            let rule = format!("{} {value} {} space", lit(&format!("<{DSML}parameter name=\"{name}\" string=\"{string}\">")), lit(&param_end));
            let r = b.add_rule(&format!("{}-param-{}", t.name, name), rule);
            if required.contains(&name.as_str()) {
                req.push(r);
            } else {
                opt.push(r);
            }
        }
    }
    let mut body = req.join(" ");
    if !opt.is_empty() {
        body.push_str(&format!(" ( {} )*", opt.join(" | ")));
    }
    let rule = format!("{} space {body} {} space", lit(&format!("<{DSML}invoke name=\"{}\">", t.name)), lit(&format!("</{DSML}invoke>")));
    Ok(b.add_rule(&format!("{}-call", t.name), rule))
}

/// One call of any callable tool, then the block's rule with one call or (parallel) several.
fn calls_rule(b: &mut GrammarBuilder, format: ToolFormat, tools: &[&Tool], parallel: bool) -> Result<String, String> {
    let mut alts = Vec::new();
    for t in tools {
        alts.push(match format {
            ToolFormat::Hermes => {
                let c = json_call(b, t, "arguments", false)?;
                b.add_rule(&format!("{}-block", t.name), format!("{} space {c} space {}", lit(HERMES_OPEN), lit(HERMES_CLOSE)))
            }
            ToolFormat::DeepSeekR1 => {
                let args = b.add_schema(&format!("{}-args", t.name), &tool_parameters(t))?;
                b.add_rule(&format!("{}-call", t.name), format!("{} {} \"\\n```json\\n\" {args} space \"```\" {}", lit(&format!("{R1_CALL_BEGIN}function{R1_SEP}")), lit(&t.name), lit(R1_CALL_END)))
            }
            ToolFormat::DeepSeekV31 => {
                let args = b.add_schema(&format!("{}-args", t.name), &tool_parameters(t))?;
                b.add_rule(&format!("{}-call", t.name), format!("{} {args} {}", lit(&format!("{R1_CALL_BEGIN}{}{R1_SEP}", t.name)), lit(R1_CALL_END)))
            }
            ToolFormat::Dsml { .. } => dsml_call(b, t)?,
            ToolFormat::MistralNemo => json_call(b, t, "arguments", true)?,
            ToolFormat::Llama3 => json_call(b, t, "parameters", false)?,
            ToolFormat::Generic => json_call(b, t, "arguments", false)?,
            ToolFormat::ContentOnly => return Err("no tool-call format".into()),
        });
    }
    let one = b.add_rule("tool-call", alts.join(" | "));
    let many = |sep: &str| if parallel { format!("{one} ( {sep} {one} )*") } else { one.clone() };
    let block = match format {
        ToolFormat::Hermes => many("space"),
        ToolFormat::DeepSeekR1 | ToolFormat::DeepSeekV31 => format!("{} {} {}", lit(R1_CALLS_BEGIN), many(""), lit(R1_CALLS_END)),
        ToolFormat::Dsml { v4 } => {
            let (open, close) = dsml_block(v4);
            format!("{} space {} {}", lit(&open), many(""), lit(&close))
        }
        ToolFormat::MistralNemo => format!("{} \"[\" {} \"]\"", lit(MISTRAL_CALLS), many("\",\" space")),
        ToolFormat::Llama3 => one.clone(),
        ToolFormat::Generic => format!("\"{{\" space {} space \":\" space \"[\" space {} space \"]\" space \"}}\"", lit("\"tool_calls\""), many("\",\" space")),
        ToolFormat::ContentOnly => unreachable!("refused above"),
    };
    Ok(b.add_rule("tool-calls", block))
}

/// The grammar for a request's tools, None when it has none to call.
pub fn build(format: ToolFormat, setup: &ToolSetup<'_>, thinking: Thinking<'_>) -> Result<Option<ToolGrammar>, String> {
    let tools = setup.callable();
    if tools.is_empty() || format == ToolFormat::ContentOnly {
        return Ok(None);
    }
    let parallel = setup.parallel && !matches!(setup.choice, super::ToolChoice::Function(_));
    let mut b = GrammarBuilder::new();
    let calls = calls_rule(&mut b, format, &tools, parallel)?;
    let required = setup.required();
    if format == ToolFormat::Generic {
        // The whole answer is JSON: calls, or (unless a call is required) a response.
        let root = if required {
            calls
        } else {
            let s = b.add_schema("response", &serde_json::json!({"type": "string"}))?;
            let resp = b.add_rule("response-object", format!("\"{{\" space {} space \":\" space {s} space \"}}\"", lit("\"response\"")));
            format!("{calls} | {resp}")
        };
        let root = with_reasoning(&mut b, root, thinking, format);
        b.add_rule("root", root);
        return Ok(Some(ToolGrammar { grammar: b.finish(), lazy: false, trigger_words: Vec::new(), trigger_patterns: Vec::new(), trigger_after: None }));
    }
    if required {
        let root = with_reasoning(&mut b, format!("space {calls}"), thinking, format);
        b.add_rule("root", root);
        return Ok(Some(ToolGrammar { grammar: b.finish(), lazy: false, trigger_words: Vec::new(), trigger_patterns: Vec::new(), trigger_after: None }));
    }
    b.add_rule("root", calls);
    let (trigger_words, trigger_patterns) = match format {
        ToolFormat::Hermes => (vec![HERMES_OPEN.to_string()], Vec::new()),
        ToolFormat::DeepSeekR1 | ToolFormat::DeepSeekV31 => (vec![R1_CALLS_BEGIN.to_string()], Vec::new()),
        ToolFormat::Dsml { v4 } => (vec![dsml_block(v4).0], Vec::new()),
        ToolFormat::MistralNemo => (vec![MISTRAL_CALLS.to_string()], Vec::new()),
        // A call is an answer that opens with `{"name"` (after whatever reasoning).
        ToolFormat::Llama3 => (Vec::new(), vec![llama3_trigger(thinking)]),
        ToolFormat::Generic | ToolFormat::ContentOnly => unreachable!("handled above"),
    };
    // DSML's call block ends the reasoning itself; the other formats' markers count after it.
    let trigger_after = match (thinking.tags, format) {
        (_, ToolFormat::Dsml { .. }) => None,
        (Some((_, close)), _) if thinking.open && !trigger_words.is_empty() => Some(close.to_string()),
        _ => None,
    };
    Ok(Some(ToolGrammar { grammar: b.finish(), lazy: true, trigger_words, trigger_patterns, trigger_after }))
}

fn llama3_trigger(thinking: Thinking<'_>) -> String {
    match thinking.tags {
        Some((_, close)) if thinking.open => format!(r"^[\s\S]*?{}\s*(\{{\s*(?:\x22type\x22\s*:\s*\x22function\x22\s*,\s*)?\x22name\x22)", regex_escape(close)),
        _ => r"^\s*(?:<\|python_tag\|>\s*)?(\{\s*(?:\x22type\x22\s*:\s*\x22function\x22\s*,\s*)?\x22name\x22)".to_string(),
    }
}

fn regex_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if ".^$|()*+?[]{}\\".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `body` after the reasoning: closed first when the prompt opened it, optional when the
/// model may open it itself. DSML's call block may follow the reasoning without its end tag.
fn with_reasoning(b: &mut GrammarBuilder, body: String, thinking: Thinking<'_>, format: ToolFormat) -> String {
    let Some((open, close)) = thinking.tags else { return body };
    let text = b.add_rule("reasoning-text", text_until(close));
    let end = if matches!(format, ToolFormat::Dsml { .. }) { format!("( {} space )?", lit(close)) } else { format!("{} space", lit(close)) };
    if thinking.open {
        format!("{text} {end} {body}")
    } else {
        format!("( {} {text} {} space )? {body}", lit(open), lit(close))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_until_excludes_exactly_the_marker() {
        assert_eq!(text_until("</think>"), r#"( [^<] | "<" [^/<] | "</" [^t<] | "</t" [^h<] | "</th" [^i<] | "</thi" [^n<] | "</thin" [^k<] | "</think" [^><] )*"#);
    }

    #[test]
    fn strings_are_raw_in_dsml_where_the_schema_allows_one() {
        assert!(may_be_string(&serde_json::json!({"type": "string"})));
        assert!(may_be_string(&serde_json::json!({"type": ["integer", "string"]})));
        assert!(!may_be_string(&serde_json::json!({"type": "integer"})));
        assert!(!may_be_string(&serde_json::json!({"type": "array", "items": {}})));
        assert!(may_be_string(&serde_json::json!({"enum": ["a", "b"]})));
        assert!(may_be_string(&serde_json::json!({})));
    }
}

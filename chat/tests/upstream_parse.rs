//! The tool-call and reasoning parser against llama.cpp b11312's own cases
//! (`tests/data/chat/parse/cases.json`, ported from tests/test-chat.cpp; see its `source`):
//! each answer is rendered and parsed as upstream's harness does (the template's generation
//! prompt, `reasoning_format`, tools, continuation), whole and streamed. Streamed means every
//! prefix of the answer parsed as partial: each parse must extend the one before (nothing a
//! stream sent is taken back), and the deltas added up must be the whole parse. Messages are
//! compared as upstream compares them (content and reasoning trimmed, arguments as JSON).
//! The same file's generation-prompt checks and message-diff cases run here too.

use std::path::PathBuf;

use deepseek_chat::messages::{parse_messages, Message, Tool};
use deepseek_chat::template::{ChatTemplate, Continuation, Inputs};
use deepseek_chat::tools::{diff, parse, CallDelta, Delta, ParseSpec, ParsedCall, ParsedMsg, ReasoningFormat};
use serde_json::{json, Value};

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/chat")
}

fn cases() -> Value {
    serde_json::from_str(&std::fs::read_to_string(data().join("parse/cases.json")).expect("cases.json")).unwrap()
}

fn template(name: &str) -> ChatTemplate {
    let src = std::fs::read_to_string(data().join("upstream-templates").join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    // Loaded without a model, as upstream's harness loads them: no BOS / EOS text.
    ChatTemplate::new(&src, "", "", false, false).unwrap_or_else(|e| panic!("{name}: {}", e.message))
}

fn tools(d: &Value, c: &Value) -> Vec<Tool> {
    c["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| {
                    let name = t.as_str().expect("tool name");
                    let def = &d["tools"][name];
                    Tool { name: name.to_string(), description: def["description"].as_str().unwrap_or("").to_string(), parameters: def["parameters"].clone() }
                })
                .collect()
        })
        .unwrap_or_default()
}

fn inputs(d: &Value, c: &Value) -> Inputs {
    let messages: Vec<Message> = match c.get("messages") {
        Some(m) => parse_messages(m).expect("messages"),
        None => vec![Message::new("user", "Hey there!")],
    };
    let cont = c["continue_final_message"].as_str().unwrap_or("none");
    Inputs {
        messages,
        tools: tools(d, c),
        add_generation_prompt: c["add_generation_prompt"].as_bool().unwrap_or(true),
        enable_thinking: c["enable_thinking"].as_bool().unwrap_or(true),
        continuation: if cont == "none" { Continuation::None } else { Continuation::Auto },
        ..Inputs::default()
    }
}

/// Arguments as upstream compares them: re-dumped JSON (unparsable ones as "").
fn norm_args(a: &str) -> String {
    serde_json::from_str::<Value>(a).map(|v| v.to_string()).unwrap_or_default()
}

fn same(expected: &Value, got: &ParsedMsg) -> Result<(), String> {
    let s = |v: &Value| v.as_str().unwrap_or("").trim().to_string();
    if s(&expected["content"]) != got.content.trim() {
        return Err(format!("content {:?}, expected {:?}", got.content, s(&expected["content"])));
    }
    if s(&expected["reasoning_content"]) != got.reasoning_content.trim() {
        return Err(format!("reasoning {:?}, expected {:?}", got.reasoning_content, s(&expected["reasoning_content"])));
    }
    let calls = expected["tool_calls"].as_array().cloned().unwrap_or_default();
    if calls.len() != got.tool_calls.len() {
        return Err(format!("{} calls {:?}, expected {}", got.tool_calls.len(), got.tool_calls, calls.len()));
    }
    for (e, g) in calls.iter().zip(&got.tool_calls) {
        if e["name"].as_str() != Some(&g.name) || norm_args(e["arguments"].as_str().unwrap_or("")) != norm_args(&g.arguments) || e["id"].as_str().unwrap_or("") != g.id {
            return Err(format!("call {g:?}, expected {e}"));
        }
        if norm_args(&g.arguments).is_empty() {
            return Err(format!("call {g:?}: arguments are not JSON"));
        }
    }
    Ok(())
}

/// `prev` extended by `d`.
fn apply(prev: &mut ParsedMsg, d: &Delta) {
    prev.reasoning_content.push_str(&d.reasoning_content);
    prev.content.push_str(&d.content);
    if let Some(CallDelta { index, new, arguments }) = &d.tool_call {
        if let Some((name, id)) = new {
            assert_eq!(*index, prev.tool_calls.len(), "a new call's index");
            prev.tool_calls.push(ParsedCall { name: name.clone(), arguments: String::new(), id: id.clone() });
        }
        prev.tool_calls[*index].arguments.push_str(arguments);
    }
}

fn extends(prev: &ParsedMsg, next: &ParsedMsg) -> Result<(), String> {
    if !next.content.starts_with(&prev.content) {
        return Err(format!("content {:?} does not extend {:?}", next.content, prev.content));
    }
    if !next.reasoning_content.starts_with(&prev.reasoning_content) {
        return Err(format!("reasoning {:?} does not extend {:?}", next.reasoning_content, prev.reasoning_content));
    }
    if next.tool_calls.len() < prev.tool_calls.len() {
        return Err(format!("calls {:?} after {:?}", next.tool_calls, prev.tool_calls));
    }
    for (a, b) in prev.tool_calls.iter().zip(&next.tool_calls) {
        // An id may come after the arguments (Mistral's): a stream keeps the one it sent first.
        if a.name != b.name || !b.arguments.starts_with(&a.arguments) {
            return Err(format!("call {b:?} does not extend {a:?}"));
        }
    }
    Ok(())
}

#[test]
fn upstream_parse_cases_whole_and_streamed_at_every_split() {
    let d = cases();
    let mut failures = Vec::new();
    let mut n = 0;
    for c in d["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let t = template(c["template"].as_str().unwrap());
        let inp = inputs(&d, c);
        let rendered = match t.apply(&inp) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{name}: render: {}", e.message));
                continue;
            }
        };
        if let Some(gp) = c["derived_generation_prompt"].as_str() {
            if rendered.generation_prompt != gp {
                failures.push(format!("{name}: generation prompt {:?}, upstream's {gp:?}", rendered.generation_prompt));
            }
        }
        let rf = ReasoningFormat::parse(c["reasoning_format"].as_str().unwrap_or("none")).expect("reasoning_format");
        let mut spec = ParseSpec::new(&t, &rendered, rf, c["parse_tool_calls"].as_bool().unwrap_or(false));
        spec.json_response = c.get("json_schema").is_some();
        let input = c["input"].as_str().unwrap();
        let whole = parse(&spec, input, c["is_partial"].as_bool().unwrap_or(false));
        if let Err(e) = same(&c["expected"], &whole) {
            failures.push(format!("{name} (whole, {:?}): {e}", spec.format));
            continue;
        }
        // Streamed: every prefix, then the whole.
        let mut prev = parse(&spec, "", true);
        let mut acc = prev.clone();
        let cuts: Vec<usize> = (1..input.len()).filter(|&i| input.is_char_boundary(i)).collect();
        let mut bad = None;
        for (k, &i) in cuts.iter().chain(std::iter::once(&input.len())).enumerate() {
            let last = k == cuts.len();
            let next = parse(&spec, &input[..i], !last || c["is_partial"].as_bool().unwrap_or(false));
            if let Err(e) = extends(&prev, &next) {
                bad = Some(format!("at byte {i} of {:?}: {e}", input));
                break;
            }
            for delta in diff(&prev, &next) {
                apply(&mut acc, &delta);
            }
            let without_ids = |m: &ParsedMsg| ParsedMsg { tool_calls: m.tool_calls.iter().map(|c| ParsedCall { id: String::new(), ..c.clone() }).collect(), ..m.clone() };
            if without_ids(&acc) != without_ids(&next) {
                bad = Some(format!("at byte {i}: deltas add up to {acc:?}, the parse is {next:?}"));
                break;
            }
            prev = next;
        }
        if let Some(e) = bad {
            failures.push(format!("{name} (streamed): {e}"));
            continue;
        }
        n += 1;
    }
    assert!(failures.is_empty(), "{} of {} cases fail:\n{}", failures.len(), d["cases"].as_array().unwrap().len(), failures.join("\n"));
    assert_eq!(n, d["cases"].as_array().unwrap().len());
}

#[test]
fn upstream_generation_prompt_checks() {
    let d = cases();
    let mut failures = Vec::new();
    for c in d["render_checks"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let t = template(c["template"].as_str().unwrap());
        let mut inp = inputs(&d, c);
        inp.json_schema = c.get("json_schema").and_then(Value::as_str).map(|s| serde_json::from_str(s).expect("json_schema"));
        if let Some(kw) = c.get("chat_template_kwargs").and_then(Value::as_object) {
            for (k, v) in kw {
                let v: Value = v.as_str().and_then(|s| serde_json::from_str(s).ok()).unwrap_or_else(|| v.clone());
                if k == "enable_thinking" {
                    inp.enable_thinking = v.as_bool().unwrap_or(true);
                }
                inp.kwargs.insert(k.clone(), v);
            }
        }
        let r = match t.apply(&inp) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{name}: render: {}", e.message));
                continue;
            }
        };
        let e = &c["expect"];
        if let Some(gp) = e["generation_prompt"].as_str() {
            if r.generation_prompt != gp {
                failures.push(format!("{name}: generation prompt {:?}, expected {gp:?}", r.generation_prompt));
            }
        }
        if let Some(end) = e["prompt_ends_with"].as_str() {
            if !r.prompt.ends_with(end) {
                failures.push(format!("{name}: prompt does not end with {end:?}: ...{:?}", &r.prompt[r.prompt.len().saturating_sub(120)..]));
            }
        }
        for s in e["prompt_contains"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if !r.prompt.contains(s) {
                failures.push(format!("{name}: prompt lacks {s:?}"));
            }
        }
        for s in e["prompt_not_contains"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if r.prompt.contains(s) {
                failures.push(format!("{name}: prompt holds {s:?}"));
            }
        }
        if let Some(order) = e["appear_in_order"].as_array() {
            let mut at = 0;
            for s in order.iter().filter_map(Value::as_str) {
                match r.prompt[at..].find(s) {
                    Some(p) => at += p + s.len(),
                    None => failures.push(format!("{name}: {s:?} not found in order")),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} checks fail:\n{}", failures.len(), failures.join("\n"));
}

fn msg(v: &Value) -> ParsedMsg {
    ParsedMsg {
        content: v["content"].as_str().unwrap_or("").into(),
        reasoning_content: v["reasoning_content"].as_str().unwrap_or("").into(),
        tool_calls: v["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| ParsedCall { name: c["name"].as_str().unwrap_or("").into(), arguments: c["arguments"].as_str().unwrap_or("").into(), id: c["id"].as_str().unwrap_or("").into() })
            .collect(),
    }
}

#[test]
fn upstream_message_diff_cases() {
    let d = cases();
    let mut steps = Vec::new();
    for c in d["diff_cases"].as_array().unwrap() {
        match c.get("steps") {
            Some(s) => steps.extend(s.as_array().unwrap().iter().map(|s| (c["name"].clone(), s.clone()))),
            None => steps.push((c["name"].clone(), c.clone())),
        }
    }
    for (name, c) in &steps {
        let got = diff(&msg(&c["prev"]), &msg(&c["new"]));
        // Upstream's diffs are one per changed field; ours put reasoning and content of one
        // step in one delta. Compared field by field, in order.
        let mut want: Vec<Value> = Vec::new();
        for e in c["diffs"].as_array().unwrap() {
            want.push(e.clone());
        }
        let mut flat: Vec<Value> = Vec::new();
        for g in &got {
            if !g.content.is_empty() {
                flat.push(json!({"content_delta": g.content}));
            }
            if let Some(t) = &g.tool_call {
                let mut delta = json!({"arguments": t.arguments});
                if let Some((name, id)) = &t.new {
                    delta["name"] = json!(name);
                    delta["id"] = json!(id);
                }
                flat.push(json!({"tool_call_index": t.index, "tool_call_delta": delta}));
            }
        }
        let norm = |v: &Vec<Value>| -> Vec<Value> {
            v.iter()
                .map(|e| {
                    let mut e = e.clone();
                    if let Some(o) = e.as_object_mut() {
                        o.remove("reasoning_content_delta");
                        if let Some(t) = o.get_mut("tool_call_delta").and_then(Value::as_object_mut) {
                            t.retain(|_, v| v.as_str() != Some(""));
                        }
                    }
                    e
                })
                .filter(|e| e.as_object().is_some_and(|o| !o.is_empty()))
                .collect()
        };
        assert_eq!(norm(&flat), norm(&want), "{name}");
    }
}

/// Whether `grammar` (GBNF, rule `root`) accepts all of `text`, by the library's matcher.
fn accepts(grammar: &str, text: &str) -> Result<(), String> {
    let g = deepseek::sampling::grammar::Grammar::new(grammar.as_bytes(), b"root", None, Default::default()).map_err(|e| format!("{}\n{grammar}", e.0))?;
    let mut set = g.initial.clone();
    for (at, ch) in text.char_indices() {
        set = g.accept_char(&set, ch as u32)?;
        if set.is_empty() {
            return Err(format!("rejected at byte {at}: {:?} | {:?}", &text[..at], &text[at..]));
        }
    }
    if set.can_end() {
        Ok(())
    } else {
        Err("the text ends where the grammar cannot".into())
    }
}

/// As upstream's harness checks a case's grammar: a lazy one (`auto`) must be set off by the
/// answer and accept it from the trigger on; a forced one (`required`) must accept the whole
/// answer (cases whose answer is calls, after any reasoning).
#[test]
fn tool_grammars_accept_upstream_answers() {
    use deepseek_chat::tools::grammar::{build, Thinking};
    use deepseek_chat::tools::{ToolChoice, ToolSetup};
    let d = cases();
    let mut checked = 0;
    let mut failures = Vec::new();
    for c in d["cases"].as_array().unwrap() {
        let calls = c["expected"]["tool_calls"].as_array().map_or(0, Vec::len);
        if calls == 0 {
            continue;
        }
        let name = c["name"].as_str().unwrap();
        let t = template(c["template"].as_str().unwrap());
        let inp = inputs(&d, c);
        let rendered = t.apply(&inp).unwrap();
        let spec = ParseSpec::new(&t, &rendered, ReasoningFormat::DeepSeek, true);
        let input = c["input"].as_str().unwrap();
        let thinking = Thinking { tags: t.think_tags(), open: spec.in_reasoning };
        let parallel = c["parallel_tool_calls"].as_bool().unwrap_or(false);
        let auto = ToolSetup { tools: &inp.tools, choice: &ToolChoice::Auto, parallel };
        let g = build(spec.format, &auto, thinking).unwrap().expect("a grammar");
        assert!(g.lazy, "{name}: auto is lazy");
        // Words count after the gate (the reasoning's end) when there is one, as the sampler has it.
        let from = match &g.trigger_after {
            Some(gate) => input.find(gate.as_str()).map(|p| p + gate.len()).unwrap_or(input.len()),
            None => 0,
        };
        let start = g.trigger_words.iter().filter_map(|w| input[from..].find(w.as_str()).map(|p| from + p)).min();
        match start {
            None => failures.push(format!("{name}: no trigger of {:?} in the answer", g.trigger_words)),
            Some(at) => {
                if let Err(e) = accepts(&g.grammar, &input[at..]) {
                    failures.push(format!("{name} (auto, from byte {at}): {e}"));
                }
            }
        }
        if c["expected"]["content"].as_str().unwrap_or("").trim().is_empty() {
            let req = ToolSetup { tools: &inp.tools, choice: &ToolChoice::Required, parallel };
            let g = build(spec.format, &req, thinking).unwrap().expect("a grammar");
            assert!(!g.lazy, "{name}: required holds from the start");
            if let Err(e) = accepts(&g.grammar, input) {
                failures.push(format!("{name} (required): {e}"));
            }
            if calls == 1 {
                let one = ToolSetup { tools: &inp.tools, choice: &ToolChoice::Function(c["expected"]["tool_calls"][0]["name"].as_str().unwrap().into()), parallel };
                let g = build(spec.format, &one, thinking).unwrap().expect("a grammar");
                if let Err(e) = accepts(&g.grammar, input) {
                    failures.push(format!("{name} (named): {e}"));
                }
            }
        }
        checked += 1;
    }
    assert!(failures.is_empty(), "{} grammar checks fail:\n{}", failures.len(), failures.join("\n"));
    assert!(checked >= 20, "only {checked} cases with calls");
}

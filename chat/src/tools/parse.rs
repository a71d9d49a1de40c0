//! The parser: reasoning, content and calls read out of an answer, whole or as far as it has
//! been written (see the module above for the formats and the rules for partial text).

use super::json::{self, skip_ws, Scan};
use super::{ParseSpec, ParsedCall, ParsedMsg, ReasoningFormat, ToolFormat};

pub(crate) const R1_CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
pub(crate) const R1_CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
pub(crate) const R1_SEP: &str = "<｜tool▁sep｜>";
pub(crate) const R1_CALL_END: &str = "<｜tool▁call▁end｜>";
pub(crate) const R1_CALLS_END: &str = "<｜tool▁calls▁end｜>";
pub(crate) const DSML: &str = "｜DSML｜";
pub(crate) const HERMES_OPEN: &str = "<tool_call>";
pub(crate) const HERMES_CLOSE: &str = "</tool_call>";
pub(crate) const MISTRAL_CALLS: &str = "[TOOL_CALLS]";
pub(crate) const PYTHON_TAG: &str = "<|python_tag|>";

/// The DSML block's opening and closing tags.
pub(crate) fn dsml_block(v4: bool) -> (String, String) {
    let name = if v4 { "tool_calls" } else { "function_calls" };
    (format!("<{DSML}{name}>"), format!("</{DSML}{name}>"))
}

/// `s[i..]` against a literal.
enum Lit {
    /// It starts with it; the offset after it.
    Match(usize),
    /// The text ends inside it (or at `i`).
    More,
    No,
}

fn lit(s: &str, i: usize, l: &str) -> Lit {
    let rest = &s.as_bytes()[i.min(s.len())..];
    if rest.starts_with(l.as_bytes()) {
        Lit::Match(i + l.len())
    } else if l.as_bytes().starts_with(rest) {
        Lit::More
    } else {
        Lit::No
    }
}

/// Bytes at the end of `s` that begin one of `markers` (a proper prefix of it).
fn held(s: &str, markers: &[&str]) -> usize {
    let b = s.as_bytes();
    let mut best = 0;
    for m in markers {
        let m = m.as_bytes();
        for n in (best + 1..m.len().min(b.len() + 1)).rev() {
            if b.ends_with(&m[..n]) {
                best = n;
                break;
            }
        }
    }
    best
}

/// The first of `markers` in `s` from `from`: (offset, which).
fn find_first(s: &str, from: usize, markers: &[&str]) -> Option<(usize, usize)> {
    markers.iter().enumerate().filter_map(|(k, m)| s[from..].find(m).map(|p| (from + p, k))).min()
}

/// `s` without trailing whitespace.
fn trim_end_ws(s: &str) -> &str {
    s.trim_end_matches([' ', '\t', '\n', '\r'])
}

/// How a tool block ended.
enum Section {
    /// It is whole; parsing goes on from this offset.
    Done(usize),
    /// The text ends inside it.
    More,
    /// It is not well-formed from this offset on.
    Bad(usize),
}

/// Reads `output`: with `is_partial`, as far as it has been written.
pub fn parse(spec: &ParseSpec, output: &str, is_partial: bool) -> ParsedMsg {
    let mut msg = ParsedMsg { content: spec.prefill_content.clone(), reasoning_content: spec.prefill_reasoning.clone(), tool_calls: Vec::new() };
    let text = output;
    let mut i = 0;
    let dsml = match spec.format {
        ToolFormat::Dsml { v4 } => Some(dsml_block(v4).0),
        _ => None,
    };
    let extract = spec.reasoning_format != ReasoningFormat::None;
    if let Some((open, close)) = &spec.think {
        let mut inside = spec.in_reasoning;
        let mut start = 0;
        if !inside && spec.prefill_content.is_empty() {
            let j = skip_ws(text, 0);
            match lit(text, j, open) {
                Lit::Match(e) => {
                    inside = true;
                    start = e;
                }
                Lit::More if is_partial => return msg,
                _ => {}
            }
        }
        if inside {
            let mut ends: Vec<&str> = vec![close];
            if let Some(fc) = &dsml {
                ends.push(fc);
            }
            let (body_end, next) = match find_first(text, start, &ends) {
                Some((p, 0)) => (p, skip_ws(text, p + close.len())),
                Some((p, _)) => (trim_end_ws(&text[..p]).len().max(start), p),
                None if is_partial => {
                    let mut e = text.len() - held(&text[start..], &ends);
                    if dsml.is_some() {
                        // The call block may follow: its blank-line separator is not reasoning.
                        e = trim_end_ws(&text[..e]).len().max(start);
                    }
                    (e, text.len())
                }
                None => (text.len(), text.len()),
            };
            if extract {
                msg.reasoning_content.push_str(&text[start..body_end]);
            } else {
                // Kept in the content as written.
                let upto = if next == text.len() && is_partial { body_end } else { next };
                msg.content.push_str(&text[..upto]);
            }
            i = next;
        }
    }
    content_and_calls(spec, text, i, is_partial, &mut msg);
    msg
}

fn content_and_calls(spec: &ParseSpec, text: &str, mut i: usize, partial: bool, msg: &mut ParsedMsg) {
    let starts: Vec<String> = match spec.format {
        ToolFormat::ContentOnly if spec.json_response => return fenced_json(text, i, partial, msg),
        ToolFormat::ContentOnly => {
            msg.content.push_str(&text[i..]);
            return;
        }
        ToolFormat::Llama3 | ToolFormat::Generic => return json_answer(spec.format, text, i, partial, msg),
        ToolFormat::DeepSeekR1 | ToolFormat::DeepSeekV31 => vec![R1_CALLS_BEGIN.into(), R1_CALL_BEGIN.into()],
        ToolFormat::Dsml { v4 } => vec![dsml_block(v4).0],
        ToolFormat::Hermes => vec![HERMES_OPEN.into()],
        ToolFormat::MistralNemo => vec![MISTRAL_CALLS.into()],
    };
    let starts: Vec<&str> = starts.iter().map(String::as_str).collect();
    loop {
        let Some((p, _)) = find_first(text, i, &starts) else {
            let mut end = text.len();
            if partial {
                end -= held(&text[i..], &starts);
                end = i + trim_end_ws(&text[i..end]).len();
            }
            msg.content.push_str(&text[i..end]);
            return;
        };
        msg.content.push_str(trim_end_ws(&text[i..p]));
        let r = match spec.format {
            ToolFormat::DeepSeekR1 => r1_block(text, p, partial, true, &mut msg.tool_calls),
            ToolFormat::DeepSeekV31 => r1_block(text, p, partial, false, &mut msg.tool_calls),
            ToolFormat::Dsml { v4 } => dsml_calls(text, p, partial, v4, &mut msg.tool_calls),
            ToolFormat::Hermes => hermes_call(text, p, partial, &mut msg.tool_calls),
            ToolFormat::MistralNemo => mistral_calls(text, p, partial, &mut msg.tool_calls),
            _ => unreachable!("handled above"),
        };
        match r {
            Section::Done(e) => i = e,
            // The text ends inside the block: the calls so far (a whole answer cut off by its
        // length limit keeps them; finish_reason tells it was cut).
        Section::More => return,
            Section::Bad(at) => {
                // Not a call after all: in a whole answer the text stays, as content; while
                // streaming it is held (it may be a call being written oddly).
                if !partial {
                    msg.content.push_str(&text[at..]);
                }
                return;
            }
        }
        let j = skip_ws(text, i);
        if j == text.len() {
            return;
        }
    }
}

/// An answer under a schema: the JSON inside a ```json fence when the model wrote one.
fn fenced_json(text: &str, i: usize, partial: bool, msg: &mut ParsedMsg) {
    let j = skip_ws(text, i);
    let start = match lit(text, j, "```json") {
        Lit::Match(e) => skip_ws(text, e),
        Lit::More if partial => return,
        _ => {
            msg.content.push_str(&text[i..]);
            return;
        }
    };
    let body = match text[start..].find("```") {
        Some(p) => trim_end_ws(&text[start..start + p]),
        None if partial => trim_end_ws(&text[start..text.len() - held(&text[start..], &["```"])]),
        None => &text[start..],
    };
    msg.content.push_str(body);
}

/// A call's JSON arguments starting at `j`: the text so far and where it ends when whole.
fn json_args(text: &str, j: usize) -> Result<(String, Option<usize>), ()> {
    match json::value(text, j) {
        Scan::End(e) => Ok((text[j..e].to_string(), Some(e))),
        Scan::Incomplete => Ok((trim_end_ws(&text[j..]).to_string(), None)),
        Scan::Invalid => Err(()),
    }
}

/// DeepSeek R1's (`r1`) and V3.1's block, from `p` (its opening, or a call's).
fn r1_block(text: &str, p: usize, partial: bool, r1: bool, calls: &mut Vec<ParsedCall>) -> Section {
    let mut j = match lit(text, p, R1_CALLS_BEGIN) {
        Lit::Match(e) => e,
        _ => p,
    };
    let mut n = 0;
    loop {
        j = skip_ws(text, j);
        if j == text.len() {
            return if partial { Section::More } else { Section::Done(j) };
        }
        if let Lit::Match(e) = lit(text, j, R1_CALLS_END) {
            return Section::Done(e);
        }
        let mut k = match lit(text, j, R1_CALL_BEGIN) {
            Lit::Match(e) => e,
            Lit::More => return Section::More,
            Lit::No if matches!(lit(text, j, R1_CALLS_END), Lit::More) => return Section::More,
            Lit::No if n > 0 => return Section::Done(j),
            Lit::No => return Section::Bad(p),
        };
        if r1 {
            // The type ("function"), then the name up to the line's end.
            let Some(q) = text[k..].find(R1_SEP) else { return Section::More };
            k += q + R1_SEP.len();
        }
        let name_end = if r1 { text[k..].find('\n') } else { text[k..].find(R1_SEP) };
        let Some(q) = name_end else { return Section::More };
        let name = text[k..k + q].trim().to_string();
        k += q + if r1 { 1 } else { R1_SEP.len() };
        if r1 {
            k = skip_ws(text, k);
            match lit(text, k, "```json") {
                Lit::Match(e) => k = skip_ws(text, e),
                Lit::More if partial => return Section::More,
                _ => {}
            }
        }
        k = skip_ws(text, k);
        let Ok((arguments, end)) = json_args(text, k) else { return Section::Bad(p) };
        calls.push(ParsedCall { name, arguments, id: String::new() });
        n += 1;
        let Some(mut e) = end else { return if partial { Section::More } else { Section::Done(text.len()) } };
        e = skip_ws(text, e);
        if r1 {
            match lit(text, e, "```") {
                Lit::Match(x) => e = skip_ws(text, x),
                Lit::More if partial => return Section::More,
                _ => {}
            }
        }
        match lit(text, e, R1_CALL_END) {
            Lit::Match(x) => j = x,
            Lit::More if partial => return Section::More,
            _ if e == text.len() => return Section::Done(e),
            _ => return Section::Bad(e),
        }
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// V3.2's and V4's DSML block from `p` (its opening tag).
fn dsml_calls(text: &str, p: usize, partial: bool, v4: bool, calls: &mut Vec<ParsedCall>) -> Section {
    let (open, close) = dsml_block(v4);
    let invoke = format!("<{DSML}invoke name=\"");
    let invoke_end = format!("</{DSML}invoke>");
    let param = format!("<{DSML}parameter name=\"");
    let param_end = format!("</{DSML}parameter>");
    let mut j = p + open.len();
    loop {
        j = skip_ws(text, j);
        if let Lit::Match(e) = lit(text, j, &close) {
            return Section::Done(e);
        }
        let k = match lit(text, j, &invoke) {
            Lit::Match(e) => e,
            Lit::More => return Section::More,
            Lit::No if matches!(lit(text, j, &close), Lit::More) => return Section::More,
            Lit::No => return Section::Bad(p),
        };
        let Some(q) = text[k..].find('"') else { return Section::More };
        let name = text[k..k + q].to_string();
        let mut k = match lit(text, k + q + 1, ">") {
            Lit::Match(e) => e,
            Lit::More => return Section::More,
            Lit::No => return Section::Bad(p),
        };
        let at = calls.len();
        calls.push(ParsedCall { name, arguments: "{".into(), id: String::new() });
        let mut first = true;
        loop {
            k = skip_ws(text, k);
            if let Lit::Match(e) = lit(text, k, &invoke_end) {
                calls[at].arguments.push('}');
                j = e;
                break;
            }
            let v = match lit(text, k, &param) {
                Lit::Match(e) => e,
                Lit::More => return Section::More,
                Lit::No if matches!(lit(text, k, &invoke_end), Lit::More) => return Section::More,
                Lit::No => return Section::Bad(p),
            };
            let Some(q) = text[v..].find('"') else { return Section::More };
            let pname = &text[v..v + q];
            let mut v = v + q + 1;
            let string = match (lit(text, v, " string=\"true\">"), lit(text, v, " string=\"false\">")) {
                (Lit::Match(e), _) => {
                    v = e;
                    true
                }
                (_, Lit::Match(e)) => {
                    v = e;
                    false
                }
                (Lit::More, _) | (_, Lit::More) => return Section::More,
                _ => return Section::Bad(p),
            };
            let args = &mut calls[at].arguments;
            if !first {
                args.push_str(", ");
            }
            first = false;
            args.push_str(&json_str(pname));
            args.push_str(": ");
            let (value, whole) = match text[v..].find(&param_end) {
                Some(q) => (&text[v..v + q], Some(v + q + param_end.len())),
                None if partial => (&text[v..text.len() - held(&text[v..], &[&param_end])], None),
                None => (&text[v..], None),
            };
            if string {
                let quoted = json_str(value);
                // While it is written, the string without its closing quote.
                args.push_str(if whole.is_some() { &quoted } else { &quoted[..quoted.len() - 1] });
            } else if whole.is_some() {
                args.push_str(value.trim());
            } else {
                args.push_str(value.trim_start().trim_end_matches([' ', '\t', '\n', '\r']));
            }
            match whole {
                Some(e) => k = e,
                None => return Section::More,
            }
        }
    }
}

/// The name and arguments of a `{"name": …, "arguments": …}` object read so far; None until
/// its name is whole.
fn named_call(text: &str, o: &json::PartialObject, args_keys: &[&str]) -> Option<ParsedCall> {
    let name = o.get("name")?;
    let end = name.end?;
    let name: String = serde_json::from_str(&text[name.start..end]).ok()?;
    let mut arguments = String::new();
    if let Some(a) = args_keys.iter().find_map(|k| o.get(k)) {
        match a.end {
            Some(e) if text.as_bytes()[a.start] == b'"' => arguments = serde_json::from_str(&text[a.start..e]).unwrap_or_default(),
            Some(e) => arguments = text[a.start..e].to_string(),
            None if text.as_bytes().get(a.start) == Some(&b'"') => arguments = json::partial_string(text, a.start),
            None => arguments = trim_end_ws(&text[a.start..]).to_string(),
        }
    } else if o.end.is_some() {
        arguments = "{}".into();
    }
    let id = o.get("id").and_then(|m| m.end.map(|e| &text[m.start..e])).and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok()).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string)).unwrap_or_default();
    Some(ParsedCall { name, arguments, id })
}

/// One Hermes `<tool_call>` from `p`.
fn hermes_call(text: &str, p: usize, partial: bool, calls: &mut Vec<ParsedCall>) -> Section {
    let k = skip_ws(text, p + HERMES_OPEN.len());
    if k == text.len() {
        return Section::More;
    }
    let Some(o) = json::object(text, k) else { return Section::Bad(p) };
    let named = named_call(text, &o, &["arguments", "parameters"]);
    let found = named.is_some();
    if let Some(c) = named {
        calls.push(c);
    }
    let Some(e) = o.end else { return Section::More };
    if !found {
        return Section::Bad(p);
    }
    let e = skip_ws(text, e);
    match lit(text, e, HERMES_CLOSE) {
        Lit::Match(x) => Section::Done(x),
        Lit::More if partial => Section::More,
        _ if e == text.len() => Section::Done(e),
        _ => Section::Bad(e),
    }
}

/// Objects of a JSON array from `j` (its `[`), each a call.
fn call_array(text: &str, j: usize, partial: bool, args_keys: &[&str], calls: &mut Vec<ParsedCall>) -> Section {
    let mut j = skip_ws(text, j + 1);
    if let Lit::Match(e) = lit(text, j, "]") {
        return Section::Done(e);
    }
    loop {
        if j == text.len() {
            return if partial { Section::More } else { Section::Done(j) };
        }
        let Some(o) = json::object(text, j) else { return Section::Bad(j) };
        match named_call(text, &o, args_keys) {
            Some(c) => calls.push(c),
            None if o.end.is_some() => return Section::Bad(j),
            None => {}
        }
        let Some(e) = o.end else { return if partial { Section::More } else { Section::Done(text.len()) } };
        j = skip_ws(text, e);
        match text.as_bytes().get(j) {
            None => return if partial { Section::More } else { Section::Done(j) },
            Some(b']') => return Section::Done(j + 1),
            Some(b',') => j = skip_ws(text, j + 1),
            Some(_) => return Section::Bad(j),
        }
    }
}

fn mistral_calls(text: &str, p: usize, partial: bool, calls: &mut Vec<ParsedCall>) -> Section {
    let j = skip_ws(text, p + MISTRAL_CALLS.len());
    match text.as_bytes().get(j) {
        None => Section::More,
        Some(b'[') => call_array(text, j, partial, &["arguments", "parameters"], calls),
        Some(_) => Section::Bad(p),
    }
}

/// Llama 3.x and the generic format: the answer (after reasoning) is a JSON object, or it is
/// plain content.
fn json_answer(format: ToolFormat, text: &str, i: usize, partial: bool, msg: &mut ParsedMsg) {
    let mut j = skip_ws(text, i);
    if format == ToolFormat::Llama3 {
        match lit(text, j, PYTHON_TAG) {
            Lit::Match(e) => j = skip_ws(text, e),
            Lit::More if partial => return,
            _ => {}
        }
    }
    if j == text.len() {
        if !partial {
            msg.content.push_str(&text[i..]);
        }
        return;
    }
    let plain = |msg: &mut ParsedMsg| msg.content.push_str(&text[i..]);
    let Some(o) = json::object(text, j) else { return plain(msg) };
    let Some(first) = o.members.first() else {
        if o.end.is_some() || !partial {
            plain(msg);
        }
        return;
    };
    if format == ToolFormat::Llama3 {
        if first.key != "name" && first.key != "type" {
            return plain(msg);
        }
        match named_call(text, &o, &["parameters", "arguments"]) {
            Some(c) => msg.tool_calls.push(c),
            None if o.end.is_some() || !partial => return plain(msg),
            None => return,
        }
        if let Some(e) = o.end {
            let rest = skip_ws(text, e);
            msg.content.push_str(&text[rest..]);
        }
        return;
    }
    // Generic: {"tool_calls": [...]}, {"tool_call": {...}} or {"response": ...}.
    match first.key.as_str() {
        "tool_calls" => {
            let b = text.as_bytes();
            if b.get(first.start) == Some(&b'[') {
                if let Section::Bad(_) = call_array(text, first.start, partial, &["arguments", "parameters"], &mut msg.tool_calls) {
                    if !partial {
                        msg.tool_calls.clear();
                        plain(msg);
                    }
                }
            } else if first.end.is_some() || !partial {
                plain(msg);
            }
        }
        "tool_call" => match json::object(text, first.start).and_then(|c| named_call(text, &c, &["arguments", "parameters"])) {
            Some(c) => msg.tool_calls.push(c),
            None if first.end.is_some() || !partial => plain(msg),
            None => {}
        },
        "response" => {
            let b = text.as_bytes();
            match (b.get(first.start), first.end) {
                (Some(b'"'), _) => msg.content.push_str(&json::partial_string(text, first.start)),
                (_, Some(e)) => msg.content.push_str(&text[first.start..e]),
                (_, None) if partial => {}
                (_, None) => msg.content.push_str(&text[first.start..]),
            }
        }
        _ => plain(msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_is_the_longest_marker_prefix_at_the_end() {
        assert_eq!(held("abc <tool", &["<tool_call>"]), 5);
        assert_eq!(held("abc <", &["<tool_call>", "[TOOL_CALLS]"]), 1);
        assert_eq!(held("abc", &["<tool_call>"]), 0);
        assert_eq!(held("<tool_call>", &["<tool_call>"]), 0);
    }
}

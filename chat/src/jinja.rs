//! Jinja chat templates as Hugging Face renders them (`apply_chat_template`): minijinja with
//! Python's string, list and dict methods, `trim_blocks` and `lstrip_blocks`, `tojson` with
//! Python's separators, `raise_exception` and `strftime_now`. A template is untrusted input
//! (it comes inside a downloaded file): it cannot reach files or the environment (no loader,
//! no such functions), and every render is bounded in work (minijinja's fuel), recursion and
//! output size, each failing with an error that says which.

use std::sync::Arc;

use minijinja::value::{Kwargs, Rest, Value, ValueKind};
use minijinja::{Environment, Error as JError, ErrorKind, State};

use crate::pyjson;

/// What one render may use at most.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// minijinja's fuel: about one unit per instruction and per 64 bytes of data made.
    pub fuel: u64,
    /// Nesting of calls, loops and blocks.
    pub recursion: usize,
    /// Bytes of rendered text.
    pub max_output: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        // A 100-turn conversation with 50 tools renders in well under 1% of this fuel.
        Limits { fuel: 50_000_000, recursion: 200, max_output: 32 << 20 }
    }
}

/// Why a template could not be used or rendered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateError {
    /// The template itself is malformed (it cannot be parsed), as opposed to failing on an input.
    pub syntax: bool,
    /// The template called `raise_exception` (the conversation is one it refuses).
    pub raised: bool,
    pub message: String,
}

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TemplateError {}

const RAISED: &str = "raise_exception: ";

fn describe(e: &JError) -> String {
    let mut msg = match e.kind() {
        ErrorKind::OutOfFuel => "the template did too much work (its render ran out of fuel)".to_string(),
        _ => e.to_string(),
    };
    if let Some(line) = e.line() {
        if !msg.contains("line ") {
            msg.push_str(&format!(" (line {line})"));
        }
    }
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}

fn from_jinja(e: JError, syntax: bool) -> TemplateError {
    let detail = e.detail().unwrap_or("").to_string();
    if let Some(m) = detail.strip_prefix(RAISED) {
        return TemplateError { syntax: false, raised: true, message: m.to_string() };
    }
    TemplateError { syntax, raised: false, message: describe(&e) }
}

/// Output that refuses to grow past a limit.
struct Capped {
    buf: String,
    max: usize,
    overflowed: bool,
}

impl std::fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.buf.len() + s.len() > self.max {
            self.overflowed = true;
            return Err(std::fmt::Error);
        }
        self.buf.push_str(s);
        Ok(())
    }
}

struct CappedIo(Capped);

impl std::io::Write for CappedIo {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        // minijinja writes whole UTF-8 strings.
        let s = std::str::from_utf8(b).map_err(|_| std::io::Error::other("not UTF-8"))?;
        std::fmt::Write::write_str(&mut self.0, s).map_err(|_| std::io::Error::other("output limit"))?;
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A compiled chat template.
#[derive(Clone)]
pub struct Template {
    env: Arc<Environment<'static>>,
    limits: Limits,
    pub source: Arc<str>,
}

impl std::fmt::Debug for Template {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Template").field("bytes", &self.source.len()).finish()
    }
}

fn tojson(state: &State, v: Value, kwargs: Kwargs) -> Result<Value, JError> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let mut style = match indent {
        None => pyjson::Style::default(),
        Some(i) if i.is_none() => pyjson::Style::default(),
        Some(i) => match (i.as_i64(), i.as_str()) {
            (Some(n), _) => pyjson::Style::indented(" ".repeat(n.clamp(0, 64) as usize)),
            (None, Some(s)) => pyjson::Style::indented(s.chars().take(64).collect()),
            _ => return Err(JError::new(ErrorKind::InvalidOperation, "tojson: indent must be an integer or a string")),
        },
    };
    if let Some(seps) = kwargs.get::<Option<Value>>("separators")?.filter(|s| !s.is_none()) {
        let parts: Vec<Value> = seps.try_iter()?.collect();
        match parts.as_slice() {
            [a, b] if a.as_str().is_some() && b.as_str().is_some() => {
                style.item_sep = a.as_str().unwrap_or_default().to_string();
                style.key_sep = b.as_str().unwrap_or_default().to_string();
            }
            _ => return Err(JError::new(ErrorKind::InvalidOperation, "tojson: separators must be two strings")),
        }
    }
    if let Some(s) = kwargs.get::<Option<bool>>("sort_keys")? {
        style.sort_keys = s;
    }
    if let Some(a) = kwargs.get::<Option<bool>>("ensure_ascii")? {
        style.ensure_ascii = a;
    }
    kwargs.assert_all_used()?;
    let mut out = String::new();
    pyjson::write(&mut out, &v, &style, 0).map_err(|m| JError::new(ErrorKind::InvalidOperation, m))?;
    state.consume_fuel(out.len() as u64 / 64)?;
    Ok(Value::from_safe_string(out))
}

/// `indent(width=4, first=false, blank=false)` as llama.cpp's engine does it (b11312
/// `common/jinja/value.cpp`): a trailing newline is kept, as in Python's Jinja (minijinja drops
/// it); `width` is a count of spaces or the indentation itself.
fn indent(v: Value, width: Option<Value>, first: Option<bool>, blank: Option<bool>, kwargs: Kwargs) -> Result<Value, JError> {
    let width = match width {
        Some(w) => Some(w),
        None => kwargs.get::<Option<Value>>("width")?,
    };
    let first = match first {
        Some(f) => f,
        None => kwargs.get::<Option<bool>>("first")?.unwrap_or(false),
    };
    let blank = match blank {
        Some(b) => b,
        None => kwargs.get::<Option<bool>>("blank")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let Some(input) = v.as_str() else { return Err(JError::new(ErrorKind::InvalidOperation, "indent() first argument must be a string")) };
    let pad = match width {
        Some(w) if w.is_integer() => " ".repeat(w.as_i64().unwrap_or(0).clamp(0, 1 << 16) as usize),
        Some(w) if w.as_str().is_some() => w.as_str().unwrap_or_default().to_string(),
        _ => "    ".to_string(),
    };
    let mut out = String::with_capacity(input.len() + pad.len() * 4);
    let body = input.strip_suffix('\n').unwrap_or(input);
    if !input.is_empty() {
        for line in body.split('\n') {
            // Upstream's order: the separator only once something was written.
            if !out.is_empty() {
                out.push('\n');
            }
            if if out.is_empty() { first } else { !line.is_empty() || blank } {
                out.push_str(&pad);
            }
            out.push_str(line);
        }
    }
    if input.ends_with('\n') {
        out.push('\n');
        if blank {
            out.push_str(&pad);
        }
    }
    Ok(Value::from(out))
}

fn raise_exception(msg: Option<String>) -> Result<Value, JError> {
    Err(JError::new(ErrorKind::InvalidOperation, format!("{RAISED}{}", msg.unwrap_or_default())))
}

/// `strftime_now(format)`: the local time now, through the C library's strftime (as Python's
/// `datetime.now().strftime` and upstream's std::strftime do).
fn strftime_now(fmt: String) -> Result<Value, JError> {
    Ok(Value::from(crate::time::strftime_now(&fmt).map_err(|m| JError::new(ErrorKind::InvalidOperation, m))?))
}

/// Printing as Python prints: True / False / None; floats in `repr`.
fn python_formatter(out: &mut minijinja::Output, state: &mut State, v: &Value) -> Result<(), JError> {
    match v.kind() {
        ValueKind::Bool => out.write_str(if v.is_true() { "True" } else { "False" }).map_err(JError::from),
        ValueKind::None => out.write_str("None").map_err(JError::from),
        ValueKind::Number if !v.is_integer() => {
            let f = f64::try_from(v.clone())?;
            out.write_str(&pyjson::float_repr(f)).map_err(JError::from)
        }
        _ => minijinja::escape_formatter(out, state, v),
    }
}

/// An empty list of content parts that records whether the template used it as a list
/// (iterated it or took an item by index), as upstream's capability probe records a value's
/// `array_access` (b11312 `common/jinja/caps.cpp`); its length and truth do not count.
#[derive(Debug, Default)]
pub struct UsageProbe(std::sync::atomic::AtomicBool);

impl UsageProbe {
    pub fn used(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn mark(&self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl minijinja::value::Object for UsageProbe {
    fn repr(self: &Arc<Self>) -> minijinja::value::ObjectRepr {
        minijinja::value::ObjectRepr::Seq
    }
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        if key.is_integer() {
            self.mark();
        }
        None
    }
    fn enumerate(self: &Arc<Self>) -> minijinja::value::Enumerator {
        self.mark();
        minijinja::value::Enumerator::Seq(0)
    }
    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(0)
    }
    fn is_true(self: &Arc<Self>) -> bool {
        false
    }
}

/// `x is string` and its friends exist in minijinja; these are the Python spellings some
/// templates use on values (`items()` pairs, `namespace`).
fn add_python_globals(env: &mut Environment<'static>) {
    env.add_filter("tojson", tojson);
    env.add_filter("indent", indent);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_function(crate::concat::ADD_FN, crate::concat::add);
    env.add_function(crate::concat::LIST_FN, crate::concat::list);
    // Python's `{{ x | string }}` of a list or dict is its repr; minijinja's is JSON-like.
    env.add_filter("items", |v: Value| -> Result<Value, JError> {
        let keys: Vec<Value> = v.try_iter()?.collect();
        let pairs: Result<Vec<Value>, JError> = keys.into_iter().map(|k| Ok(Value::from(vec![k.clone(), v.get_item(&k)?]))).collect();
        Ok(Value::from(pairs?))
    });
    env.add_function("len", |v: Value| -> Result<Value, JError> { v.len().map(Value::from).ok_or_else(|| JError::new(ErrorKind::InvalidOperation, "len() of a value without length")) });
    env.add_filter("unique", |v: Value, _rest: Rest<Value>| -> Result<Value, JError> {
        let mut seen: Vec<Value> = Vec::new();
        for item in v.try_iter()? {
            if !seen.contains(&item) {
                seen.push(item);
            }
        }
        Ok(Value::from(seen))
    });
}

/// Hugging Face's `{% generation %}…{% endgeneration %}` (it marks the assistant's tokens for
/// training masks and renders its body unchanged) as an `if true` block with the same
/// whitespace controls, so the output is the same.
fn rewrite_generation_tags(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at..];
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (lead, body) = inner.strip_prefix(['-', '+']).map_or(("", inner), |b| (&inner[..1], b));
        let (body, trail) = body.strip_suffix(['-', '+']).map_or((body, ""), |b| (b, &inner[inner.len() - 1..]));
        match body.trim() {
            "generation" => out.push_str(&format!("{{%{lead} if true {trail}%}}")),
            "endgeneration" => out.push_str(&format!("{{%{lead} endif {trail}%}}")),
            _ => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

impl Template {
    pub fn new(source: &str) -> Result<Template, TemplateError> {
        Self::with_limits(source, Limits::default())
    }

    pub fn with_limits(source: &str, limits: Limits) -> Result<Template, TemplateError> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).keep_trailing_newline(false).build().expect("the default delimiters");
        env.set_syntax(syntax.clone());
        env.set_fuel(Some(limits.fuel));
        env.set_recursion_limit(limits.recursion);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(python_formatter);
        add_python_globals(&mut env);
        let text = rewrite_generation_tags(source);
        let text = crate::concat::rewrite(&text, syntax).unwrap_or(text);
        env.add_template_owned("chat_template", text).map_err(|e| from_jinja(e, true))?;
        Ok(Template { env: Arc::new(env), limits, source: Arc::from(source) })
    }

    /// Renders with `ctx` (a JSON object: messages, tools, add_generation_prompt, bos_token, …).
    pub fn render(&self, ctx: &serde_json::Value) -> Result<String, TemplateError> {
        self.render_value(Value::from(minijinja::value::Serde(ctx)))
    }

    /// Renders with a context built from minijinja values (the capability probes give a
    /// template objects that record how they are used).
    pub fn render_value(&self, ctx: Value) -> Result<String, TemplateError> {
        let t = self.env.get_template("chat_template").map_err(|e| from_jinja(e, true))?;
        let mut out = CappedIo(Capped { buf: String::new(), max: self.limits.max_output, overflowed: false });
        match t.render_captured_to(ctx, &mut out) {
            Ok(_) => Ok(out.0.buf),
            Err(_) if out.0.overflowed => {
                Err(TemplateError { syntax: false, raised: false, message: format!("the rendered prompt is larger than {} bytes", self.limits.max_output) })
            }
            Err(e) => Err(from_jinja(e, false)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(src: &str, ctx: serde_json::Value) -> Result<String, TemplateError> {
        Template::new(src)?.render(&ctx)
    }

    #[test]
    fn hugging_face_environment() {
        let ctx = json!({"messages": [{"role": "user", "content": "  hi  "}], "x": {"a": [1, 2.0, true, null]}});
        assert_eq!(render("{% for m in messages %}{{ m.role.upper() }}:{{ m.content.strip() }}\n{% endfor %}", ctx.clone()).unwrap(), "USER:hi\n");
        assert_eq!(render("{{ x | tojson }}", ctx.clone()).unwrap(), r#"{"a": [1, 2.0, true, null]}"#);
        assert_eq!(render("{{ x.a[2] }} {{ x.a[3] }} {{ x.a[1] }}", ctx.clone()).unwrap(), "True None 2.0");
        // Lists are Python's: changed in place.
        assert_eq!(render("{% set ns = namespace(q=[]) %}{% set _ = ns.q.append(1) %}{% set _ = ns.q.append(2) %}{{ ns.q.pop(0) }}{{ ns.q | tojson }}{{ ns.q | length }}", ctx.clone()).unwrap(), "1[2]1");
        // indent keeps a trailing newline (Python's Jinja and upstream do).
        assert_eq!(render("[{{ '{\\n'|indent(4, first=true) }}]", ctx.clone()).unwrap(), "[    {\n]");
        assert_eq!(render("[{{ 'a\\n\\nb'|indent(2) }}|{{ 'a\\nb'|indent('> ', true) }}]", ctx.clone()).unwrap(), "[a\n\n  b|> a\n> b]");
        assert_eq!(render("{% for k, v in x.items() %}{{ k }}={{ v | length }}{% endfor %}", ctx.clone()).unwrap(), "a=4");
        // trim_blocks + lstrip_blocks
        assert_eq!(render("a\n  {% if true %}\nb\n  {% endif %}\nc", ctx.clone()).unwrap(), "a\nb\nc");
        let e = render("{{ raise_exception('no system role') }}", ctx.clone()).unwrap_err();
        assert!(e.raised && e.message == "no system role", "{e:?}");
        let e = render("{% if %}", ctx.clone()).unwrap_err();
        assert!(e.syntax, "{e:?}");
    }

    #[test]
    fn hostile_templates_are_bounded() {
        let ctx = json!({});
        let tight = Limits { fuel: 1_000_000, recursion: 50, max_output: 1 << 20 };
        let e = Template::with_limits("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", tight).unwrap().render(&ctx).unwrap_err();
        assert!(e.message.contains("fuel"), "{e:?}");
        let e = Template::with_limits("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", tight).unwrap().render(&ctx).unwrap_err();
        assert!(e.message.contains("recursion"), "{e:?}");
        let e = Template::with_limits("{% for i in range(5000) %}{{ 'x' * 1000 }}{% endfor %}", Limits { fuel: u64::MAX / 2, ..tight }).unwrap().render(&ctx).unwrap_err();
        assert!(e.message.contains("larger than"), "{e:?}");
        assert_eq!(render("{%- generation -%}\n  a{% endgeneration %}b", ctx.clone()).unwrap(), "ab");
        // No loader: nothing outside the template can be read.
        let e = Template::new("{% include '/etc/passwd' %}").unwrap().render(&ctx).unwrap_err();
        assert!(e.message.contains("not found") || e.message.contains("template"), "{e:?}");
    }
}

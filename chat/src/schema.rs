//! JSON schema → GBNF grammar, as llama-server b11312 converts `response_format` and
//! `json_schema`: a port of `common/json-schema.cpp` (the schema read into a typed tree, whatever
//! falls outside the supported subset refused with upstream's message) and of
//! `common/json-schema-to-grammar.cpp` (the tree turned into rules). Rule names, their order
//! (sorted, as upstream's `std::map`) and every rule's text are upstream's, so a schema gives the
//! grammar llama-server would give, byte for byte; `server/tests/json_schema_to_grammar.rs`
//! holds upstream's test cases to that.
//!
//! Differences, all where upstream would crash, hang or emit a grammar its own parser refuses:
//! - nesting (schemas inside schemas, `$ref` chains included) is bounded by `MAX_DEPTH`, and the
//!   work of naming rules by `MAX_PROBES`: beyond either the schema is refused, never a stack
//!   overflow or minutes of CPU in a request handler;
//! - a `$ref` cycle inside `allOf` (`{"$ref": "#/a"}` pointing at itself) adds nothing, where
//!   upstream recurses until its stack ends;
//! - a `pattern` is read by characters, not bytes: a non-ASCII character before a quantifier is
//!   repeated whole (upstream repeats its last byte, which gives invalid UTF-8 in the grammar);
//! - optional properties' `-rest` rules are built once per suffix (upstream rebuilds them for
//!   every alternative, quadratic in the number of properties; the rules are the same).
//!
//! Nothing here is global; it runs on the request's thread, never on the decode path.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value};

/// Schemas nested in schemas (through properties, items, alternatives and `$ref`s) at most.
const MAX_DEPTH: usize = 256;
/// Rule-name lookups the conversion may make (a name taken by another rule is retried with
/// a number, as upstream does; adversarial schemas could make that quadratic).
const MAX_PROBES: usize = 4_000_000;

/// A converted schema: the grammar (root rule `root`) and upstream's warnings (unsupported
/// patterns that fell back to any string).
pub struct Converted {
    pub grammar: String,
    pub warnings: Vec<String>,
}

/// llama.cpp's `json_schema_to_grammar(schema, force_gbnf = true)`: the error is upstream's
/// message ("JSON schema conversion failed:\n...").
pub fn json_schema_to_grammar(schema: &Value) -> Result<Converted, String> {
    let doc = Doc::from_json(schema).map_err(|e| format!("JSON schema conversion failed:\n{e}"))?;
    doc.to_grammar()
}

// ---- the schema as a typed tree (common/json-schema.cpp) ----

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Format {
    None,
    Uuid,
    Date,
    Time,
    DateTime,
}

#[derive(Debug)]
pub enum Node {
    Any,
    /// Only references into the same document ("#/..."); the target is in `Doc::refs`.
    Ref(String),
    /// oneOf / anyOf, or a "type" array expanded to one alternative per type.
    AnyOf(Vec<Node>),
    AllOf(Vec<Node>),
    Const(Value),
    Enum(Vec<Value>),
    Null,
    Boolean,
    Number,
    /// Inclusive bounds, i64::MIN / i64::MAX for none (exclusive bounds folded in).
    Integer { min: i64, max: i64 },
    /// `max_len` -1: unbounded; an empty pattern is none.
    Str { pattern: String, format: Format, min_len: i32, max_len: i32 },
    /// `max` -1: unbounded.
    Array { items: Box<Node>, min: i32, max: i32 },
    Tuple(Vec<Node>),
    /// Properties in schema order; `additional` None when not allowed.
    Object { props: Vec<Prop>, additional: Option<Box<Node>> },
}

#[derive(Debug)]
pub struct Prop {
    pub name: String,
    pub schema: Node,
    pub required: bool,
}

/// A schema read whole: its root and the target of every `$ref` it holds.
pub struct Doc {
    pub root: Node,
    pub refs: BTreeMap<String, Node>,
}

fn fail<T>(path: &str, msg: impl std::fmt::Display) -> Result<T, String> {
    Err(format!("JSON schema error at {path}: {msg}"))
}

/// C++'s `std::stoull` as `resolve_ref` uses it: leading blanks, a sign (a minus wraps), decimal
/// digits up to the first other character; None where it throws.
fn stoull(s: &str) -> Option<u64> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let v: u64 = t[..digits].parse().ok()?;
    Some(if neg { v.wrapping_neg() } else { v })
}

/// nlohmann's `is_number_integer` then `get<int>()` (a C++ narrowing cast).
fn as_int(v: &Value) -> Option<i32> {
    v.as_i64().map(|i| i as i32).or_else(|| v.as_u64().map(|u| u as i32))
}

struct Builder<'a> {
    root: &'a Value,
    /// Targets built so far (None while one is being built: a cycle back to it stops there).
    refs: BTreeMap<String, Option<Node>>,
    depth: usize,
}

impl<'a> Builder<'a> {
    fn count(schema: &Map<String, Value>, key: &str, path: &str, def: i32) -> Result<i32, String> {
        let Some(v) = schema.get(key) else { return Ok(def) };
        match as_int(v) {
            Some(n) if n >= 0 => Ok(n),
            _ => fail(path, format!("{key} must be a non-negative integer")),
        }
    }

    /// A fractional bound is rounded inwards, towards the integers it still admits.
    fn bound(schema: &Map<String, Value>, key: &str, path: &str, round_up: bool) -> Result<i64, String> {
        let v = &schema[key];
        if let Some(i) = v.as_i64() {
            return Ok(i);
        }
        if let Some(u) = v.as_u64() {
            return Ok(u as i64);
        }
        let Some(d) = v.as_f64() else { return fail(path, format!("{key} must be a number")) };
        Ok(if round_up { d.ceil() } else { d.floor() } as i64)
    }

    fn format(schema: &Map<String, Value>, path: &str) -> Result<Format, String> {
        let Some(v) = schema.get("format") else { return Ok(Format::None) };
        let Some(f) = v.as_str() else { return fail(path, "format must be a string") };
        Ok(match f {
            "date" => Format::Date,
            "time" => Format::Time,
            "date-time" => Format::DateTime,
            "uuid" | "uuid1" | "uuid2" | "uuid3" | "uuid4" | "uuid5" => Format::Uuid,
            _ => Format::None,
        })
    }

    fn resolve(&self, r: &str, path: &str) -> Result<&'a Value, String> {
        let mut target = self.root;
        for sel in r[1..].split('/').skip(1) {
            if let Some(t) = target.as_object().and_then(|o| o.get(sel)) {
                target = t;
            } else if let Some(a) = target.as_array() {
                let idx = stoull(sel).unwrap_or(a.len() as u64);
                match a.get(idx as usize).filter(|_| idx < a.len() as u64) {
                    Some(t) => target = t,
                    None => return fail(path, format!("cannot resolve $ref {r}, {sel} is out of range")),
                }
            } else {
                return fail(path, format!("cannot resolve $ref {r}, {sel} not found"));
            }
        }
        Ok(target)
    }

    fn reference(&mut self, v: &Value, path: &str) -> Result<Node, String> {
        let Some(r) = v.as_str() else { return fail(path, "$ref must be a string") };
        if !r.starts_with("#/") {
            return fail(path, format!("unsupported $ref {r}, only references into the same document are supported"));
        }
        if !self.refs.contains_key(r) {
            self.refs.insert(r.to_string(), None);
            let target = self.resolve(r, path)?;
            let node = self.node(target, r)?;
            self.refs.insert(r.to_string(), Some(node));
        }
        Ok(Node::Ref(r.to_string()))
    }

    fn alternatives(&mut self, alts: &Value, path: &str) -> Result<Vec<Node>, String> {
        let Some(a) = alts.as_array() else { return fail(path, "must be an array of schemas") };
        if a.is_empty() {
            return fail(path, "must not be empty");
        }
        a.iter().enumerate().map(|(i, alt)| self.node(alt, &format!("{path}/{i}"))).collect()
    }

    fn object(&mut self, schema: &Map<String, Value>, path: &str) -> Result<Node, String> {
        let required: HashSet<&str> = match schema.get("required") {
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => HashSet::new(),
        };
        let mut props = Vec::new();
        if let Some(p) = schema.get("properties") {
            let Some(p) = p.as_object() else { return fail(path, "properties must be an object") };
            for (name, prop) in p {
                let schema = self.node(prop, &format!("{path}/properties/{name}"))?;
                props.push(Prop { name: name.clone(), schema, required: required.contains(name.as_str()) });
            }
        }
        let additional = match schema.get("additionalProperties") {
            Some(Value::Bool(true)) => Some(Box::new(Node::Any)),
            Some(Value::Bool(false)) => None,
            Some(a @ Value::Object(_)) => Some(Box::new(self.node(a, &format!("{path}/additionalProperties"))?)),
            Some(_) => return fail(path, "additionalProperties must be a boolean or a schema"),
            // {"type": "object"} on its own accepts any object
            None if !schema.contains_key("properties") => Some(Box::new(Node::Any)),
            None => None,
        };
        Ok(Node::Object { props, additional })
    }

    fn array(&mut self, schema: &Map<String, Value>, path: &str) -> Result<Node, String> {
        // "items" wins over "prefixItems"; a schema instead of an array is the item schema
        let key = if schema.contains_key("items") { "items" } else { "prefixItems" };
        let items = match schema.get(key) {
            Some(Value::Array(list)) => {
                let items = list.iter().enumerate().map(|(i, item)| self.node(item, &format!("{path}/{key}/{i}"))).collect::<Result<_, _>>()?;
                return Ok(Node::Tuple(items));
            }
            Some(item) => self.node(item, &format!("{path}/{key}"))?,
            None => Node::Any,
        };
        let min = Self::count(schema, "minItems", path, 0)?;
        let max = Self::count(schema, "maxItems", path, -1)?;
        Ok(Node::Array { items: Box::new(items), min, max })
    }

    fn string(schema: &Map<String, Value>, path: &str) -> Result<Node, String> {
        let pattern = match schema.get("pattern") {
            None => String::new(),
            Some(Value::String(p)) => p.clone(),
            Some(_) => return fail(path, "pattern must be a string"),
        };
        let format = Self::format(schema, path)?;
        let min_len = Self::count(schema, "minLength", path, 0)?;
        let max_len = Self::count(schema, "maxLength", path, -1)?;
        Ok(Node::Str { pattern, format, min_len, max_len })
    }

    fn integer(schema: &Map<String, Value>, path: &str) -> Result<Node, String> {
        let mut min = i64::MIN;
        let mut max = i64::MAX;
        if schema.contains_key("minimum") {
            min = Self::bound(schema, "minimum", path, true)?;
        } else if schema.contains_key("exclusiveMinimum") {
            min = Self::bound(schema, "exclusiveMinimum", path, false)?.wrapping_add(1);
        }
        if schema.contains_key("maximum") {
            max = Self::bound(schema, "maximum", path, false)?;
        } else if schema.contains_key("exclusiveMaximum") {
            max = Self::bound(schema, "exclusiveMaximum", path, true)?.wrapping_sub(1);
        }
        Ok(Node::Integer { min, max })
    }

    fn node(&mut self, schema: &Value, path: &str) -> Result<Node, String> {
        if self.depth >= MAX_DEPTH {
            return fail(path, format!("schemas nested more than {MAX_DEPTH} deep (through $ref included)"));
        }
        self.depth += 1;
        let r = self.node_inner(schema, path);
        self.depth -= 1;
        r
    }

    fn node_inner(&mut self, schema: &Value, path: &str) -> Result<Node, String> {
        let Some(s) = schema.as_object() else { return fail(path, "schema must be an object") };
        if let Some(r) = s.get("$ref") {
            return self.reference(r, path);
        }
        if s.contains_key("oneOf") || s.contains_key("anyOf") {
            let key = if s.contains_key("oneOf") { "oneOf" } else { "anyOf" };
            return Ok(Node::AnyOf(self.alternatives(&s[key], &format!("{path}/{key}"))?));
        }
        let ty = s.get("type").unwrap_or(&Value::Null);
        if let Value::Array(types) = ty {
            // {"type": ["a", "b"], ...} is {"anyOf": [{"type": "a", ...}, {"type": "b", ...}]}
            if types.is_empty() {
                return fail(path, "type must not be empty");
            }
            let mut alts = Vec::with_capacity(types.len());
            for (i, t) in types.iter().enumerate() {
                let mut alt = s.clone();
                alt.insert("type".into(), t.clone());
                alts.push(self.node(&Value::Object(alt), &format!("{path}/type/{i}"))?);
            }
            return Ok(Node::AnyOf(alts));
        }
        if let Some(c) = s.get("const") {
            return Ok(Node::Const(c.clone()));
        }
        if let Some(e) = s.get("enum") {
            return match e.as_array() {
                Some(values) if !values.is_empty() => Ok(Node::Enum(values.clone())),
                _ => fail(path, "enum must be a non-empty array"),
            };
        }
        let type_name = match ty {
            Value::Null => "",
            Value::String(t) => t.as_str(),
            _ => return fail(path, "type must be a string or an array of strings"),
        };
        let has_properties = s.contains_key("properties") || s.get("additionalProperties").is_some_and(|a| *a != Value::Bool(true));
        match type_name {
            // without a type the structural keywords decide, in the converter's order
            "" => {
                if has_properties {
                    self.object(s, path)
                } else if let Some(all) = s.get("allOf") {
                    Ok(Node::AllOf(self.alternatives(all, &format!("{path}/allOf"))?))
                } else if s.contains_key("items") || s.contains_key("prefixItems") {
                    self.array(s, path)
                } else if s.contains_key("pattern") || s.contains_key("minLength") || s.contains_key("maxLength") || Self::format(s, path)? != Format::None {
                    Self::string(s, path)
                } else {
                    Ok(Node::Any)
                }
            }
            "object" => match s.get("allOf") {
                Some(all) if !has_properties => Ok(Node::AllOf(self.alternatives(all, &format!("{path}/allOf"))?)),
                _ => self.object(s, path),
            },
            "string" => match s.get("allOf") {
                Some(all) => Ok(Node::AllOf(self.alternatives(all, &format!("{path}/allOf"))?)),
                None => Self::string(s, path),
            },
            "array" => self.array(s, path),
            "integer" => Self::integer(s, path),
            "number" => Ok(Node::Number),
            "boolean" => Ok(Node::Boolean),
            "null" => Ok(Node::Null),
            other => fail(path, format!("unrecognized type {other}")),
        }
    }
}

impl Doc {
    /// `common_chat_schema_from_json`: the error is "JSON schema error at PATH: reason".
    pub fn from_json(schema: &Value) -> Result<Doc, String> {
        let mut b = Builder { root: schema, refs: BTreeMap::new(), depth: 0 };
        let root = b.node(schema, "#")?;
        let refs = b.refs.into_iter().map(|(k, v)| (k, v.expect("every $ref target is built before the document is"))).collect();
        Ok(Doc { root, refs })
    }

    /// The grammar of the whole document (upstream's `json_schema_to_grammar(document)`).
    pub fn to_grammar(&self) -> Result<Converted, String> {
        self.grammar_of(&self.root)
    }

    /// The grammar whose root is `node`, a schema inside this document (its `$ref`s resolve
    /// against the document), as upstream's `build_grammar` with `add_schema("root", node)`.
    pub fn grammar_of(&self, node: &Node) -> Result<Converted, String> {
        let mut c = Converter::new(self);
        c.visit(node, "");
        c.finish()
    }
}

/// Several schemas and hand-written rules in one grammar, as upstream's
/// `common_grammar_builder` makes a tool-call grammar: each `add_schema` converts a schema into
/// rules named from `name` and gives the rule to refer to; `add_rule` adds a rule of GBNF
/// text. Names are shared, so a rule two schemas make alike is written once.
pub struct GrammarBuilder {
    rules: BTreeMap<String, String>,
    warnings: Vec<String>,
    probes: usize,
}

impl Default for GrammarBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl GrammarBuilder {
    pub fn new() -> GrammarBuilder {
        let mut rules = BTreeMap::new();
        rules.insert("space".to_string(), SPACE_RULE.to_string());
        GrammarBuilder { rules, warnings: Vec::new(), probes: 0 }
    }

    fn with<T>(&mut self, doc: &Doc, f: impl FnOnce(&mut Converter<'_>) -> T) -> Result<T, String> {
        let mut c = Converter::new(doc);
        c.rules = std::mem::take(&mut self.rules);
        c.probes = self.probes;
        let out = f(&mut c);
        self.rules = std::mem::take(&mut c.rules);
        self.probes = c.probes;
        self.warnings.append(&mut c.warnings);
        if let Some(e) = c.fatal {
            return Err(format!("JSON schema conversion failed:\n{e}"));
        }
        if !c.errors.is_empty() {
            return Err(format!("JSON schema conversion failed:\n{}", c.errors.join("\n")));
        }
        Ok(out)
    }

    /// A rule of GBNF text named from `name` (a number appended when another rule has it).
    pub fn add_rule(&mut self, name: &str, text: String) -> String {
        let doc = Doc { root: Node::Any, refs: BTreeMap::new() };
        self.with(&doc, |c| c.add_rule(name, text)).unwrap_or_default()
    }

    /// The rules of `schema` (its `$ref`s resolved in itself), the top one named from `name`.
    pub fn add_schema(&mut self, name: &str, schema: &Value) -> Result<String, String> {
        let doc = Doc::from_json(schema).map_err(|e| format!("JSON schema conversion failed:\n{e}"))?;
        self.with(&doc, |c| c.visit(&doc.root, name))
    }

    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The grammar, rules in name order.
    pub fn finish(self) -> String {
        let mut grammar = String::new();
        for (k, v) in &self.rules {
            grammar.push_str(k);
            grammar.push_str(" ::= ");
            grammar.push_str(v);
            grammar.push('\n');
        }
        grammar
    }
}

// ---- the converter (common/json-schema-to-grammar.cpp) ----

const SPACE_RULE: &str = r#"| " " | "\n"{1,2} [ \t]{0,20}"#;

/// A built-in rule and the built-in rules it refers to.
struct Builtin {
    content: &'static str,
    deps: &'static [&'static str],
}

fn primitive(name: &str) -> Option<&'static Builtin> {
    const fn b(content: &'static str, deps: &'static [&'static str]) -> Builtin {
        Builtin { content, deps }
    }
    static BOOLEAN: Builtin = b(r#"("true" | "false")"#, &[]);
    static DECIMAL_PART: Builtin = b("[0-9]{1,16}", &[]);
    static INTEGRAL_PART: Builtin = b("[0] | [1-9] [0-9]{0,15}", &[]);
    static NUMBER: Builtin = b(r#"("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?"#, &["integral-part", "decimal-part"]);
    static INTEGER: Builtin = b(r#"("-"? integral-part)"#, &["integral-part"]);
    static VALUE: Builtin = b("object | array | string | number | boolean | null", &["object", "array", "string", "number", "boolean", "null"]);
    static OBJECT: Builtin = b(r#""{" space ( string ":" space value ("," space string ":" space value)* )? space "}""#, &["string", "value"]);
    static ARRAY: Builtin = b(r#""[" space ( value ("," space value)* )? space "]""#, &["value"]);
    static UUID: Builtin = b(r#""\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"""#, &[]);
    static CHAR: Builtin = b(r#"[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})"#, &[]);
    static STRING: Builtin = b(r#""\"" char* "\"""#, &["char"]);
    static NULL: Builtin = b(r#""null""#, &[]);
    Some(match name {
        "boolean" => &BOOLEAN,
        "decimal-part" => &DECIMAL_PART,
        "integral-part" => &INTEGRAL_PART,
        "number" => &NUMBER,
        "integer" => &INTEGER,
        "value" => &VALUE,
        "object" => &OBJECT,
        "array" => &ARRAY,
        "uuid" => &UUID,
        "char" => &CHAR,
        "string" => &STRING,
        "null" => &NULL,
        _ => return None,
    })
}

fn string_format(name: &str) -> Option<&'static Builtin> {
    const fn b(content: &'static str, deps: &'static [&'static str]) -> Builtin {
        Builtin { content, deps }
    }
    static DATE: Builtin = b(r#"[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )"#, &[]);
    static TIME: Builtin = b(r#"([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )"#, &[]);
    static DATE_TIME: Builtin = b(r#"date "T" time"#, &["date", "time"]);
    static DATE_STRING: Builtin = b(r#""\"" date "\"""#, &["date"]);
    static TIME_STRING: Builtin = b(r#""\"" time "\"""#, &["time"]);
    static DATE_TIME_STRING: Builtin = b(r#""\"" date-time "\"""#, &["date-time"]);
    Some(match name {
        "date" => &DATE,
        "time" => &TIME,
        "date-time" => &DATE_TIME,
        "date-string" => &DATE_STRING,
        "time-string" => &TIME_STRING,
        "date-time-string" => &DATE_TIME_STRING,
        _ => return None,
    })
}

fn is_reserved_name(name: &str) -> bool {
    name == "root" || primitive(name).is_some() || string_format(name).is_some()
}

/// Every run of characters outside [a-zA-Z0-9-] becomes one '-' (upstream's
/// INVALID_RULE_CHARS_RE).
fn rule_chars(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_run = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    out
}

/// A GBNF string literal of `s`: `"`, `\`, CR and LF escaped.
pub fn format_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `value.dump()` of nlohmann's json: compact, object keys in document order (serde_json's
/// `preserve_order`), strings escaped alike, and floating-point numbers in nlohmann's form
/// (shortest digits; "1.0", "0.001", "1e-05", "1.5e+300").
pub fn dump(v: &Value) -> String {
    let mut out = String::new();
    dump_into(v, &mut out);
    out
}

fn dump_into(v: &Value, out: &mut String) {
    match v {
        Value::Number(n) if n.is_f64() => dump_float(n.as_f64().unwrap_or(0.0), out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                dump_into(x, out);
            }
            out.push(']');
        }
        Value::Object(o) => {
            out.push('{');
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                dump_into(x, out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// nlohmann's `dump_float` (grisu2 digits, then `format_buffer` with exponents -4 < n ≤ 15
/// written out); Rust's shortest round-trip digits stand in for grisu2's.
fn dump_float(x: f64, out: &mut String) {
    if x.is_sign_negative() {
        out.push('-');
    }
    let x = x.abs();
    if x == 0.0 {
        out.push_str("0.0");
        return;
    }
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exp: i32 = exp.parse().unwrap_or(0);
    let k = digits.len() as i32;
    // value = 0.digits × 10^n
    let n = exp + 1;
    const MIN_EXP: i32 = -4;
    const MAX_EXP: i32 = 15;
    if k <= n && n <= MAX_EXP {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
        out.push_str(".0");
    } else if 0 < n && n <= MAX_EXP {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if MIN_EXP < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = n - 1;
        out.push('e');
        out.push(if e < 0 { '-' } else { '+' });
        let e = e.unsigned_abs();
        if e < 10 {
            out.push('0');
        }
        out.push_str(&e.to_string());
    }
}

/// How many characters of `p` from `pos` form an escape the GBNF parser reads the same way
/// (\x.., \u...., \U........, \t \r \n \\ \" \[ \] \-); 0 for any other.
fn gbnf_escape_length(p: &[char], pos: usize) -> usize {
    if pos + 1 >= p.len() || p[pos] != '\\' {
        return 0;
    }
    let n_hex = match p[pos + 1] {
        'x' => 2,
        'u' => 4,
        'U' => 8,
        't' | 'r' | 'n' | '\\' | '"' | '[' | ']' | '-' => return 2,
        _ => return 0,
    };
    if pos + 2 + n_hex > p.len() {
        return 0;
    }
    if p[pos + 2..pos + 2 + n_hex].iter().all(char::is_ascii_hexdigit) {
        2 + n_hex
    } else {
        0
    }
}

fn build_repetition(item: &str, min: i32, max: i32, sep: &str) -> String {
    let has_max = max != i32::MAX;
    if max == 0 {
        return String::new();
    }
    if min == 0 && max == 1 {
        return format!("{item}?");
    }
    if sep.is_empty() {
        if min == 1 && !has_max {
            return format!("{item}+");
        }
        if min == 0 && !has_max {
            return format!("{item}*");
        }
        return format!("{item}{{{min},{}}}", if has_max { max.to_string() } else { String::new() });
    }
    let inner = build_repetition(&format!("({sep} {item})"), if min == 0 { 0 } else { min - 1 }, if has_max { max - 1 } else { max }, "");
    let result = format!("{item} {inner}");
    if min == 0 {
        format!("({result})?")
    } else {
        result
    }
}

/// Integers in [min, max] (i64::MIN / i64::MAX: unbounded), upstream's `build_min_max_int`;
/// its exception (neither bound, which a negative bound of -i64::MAX leads to) is the error.
fn build_min_max_int(mut min: i64, max: i64, out: &mut String, decimals_left: i32, top_level: bool) -> Result<(), String> {
    let has_min = min != i64::MIN;
    let has_max = max != i64::MAX;
    fn digit_range(out: &mut String, from: u8, to: u8) {
        out.push('[');
        out.push(from as char);
        if from != to {
            out.push('-');
            out.push(to as char);
        }
        out.push(']');
    }
    fn more_digits(out: &mut String, min: i32, max: i32) {
        out.push_str("[0-9]");
        if min == max && min == 1 {
            return;
        }
        out.push('{');
        out.push_str(&min.to_string());
        if max != min {
            out.push(',');
            if max != i32::MAX {
                out.push_str(&max.to_string());
            }
        }
        out.push('}');
    }
    fn uniform_range(out: &mut String, from: &[u8], to: &[u8]) {
        let mut i = 0;
        while i < from.len() && i < to.len() && from[i] == to[i] {
            i += 1;
        }
        if i > 0 {
            out.push('"');
            out.push_str(std::str::from_utf8(&from[..i]).unwrap_or(""));
            out.push('"');
        }
        if i < from.len() && i < to.len() {
            if i > 0 {
                out.push(' ');
            }
            let sub_len = from.len() - i - 1;
            if sub_len > 0 {
                let from_sub = &from[i + 1..];
                let to_sub = &to[i + 1..];
                let zeros = vec![b'0'; sub_len];
                let nines = vec![b'9'; sub_len];
                let mut to_reached = false;
                out.push('(');
                if from_sub == &zeros[..] {
                    digit_range(out, from[i], to[i] - 1);
                    out.push(' ');
                    more_digits(out, sub_len as i32, sub_len as i32);
                } else {
                    out.push('[');
                    out.push(from[i] as char);
                    out.push_str("] (");
                    uniform_range(out, from_sub, &nines);
                    out.push(')');
                    if from[i] < to[i] - 1 {
                        out.push_str(" | ");
                        if to_sub == &nines[..] {
                            digit_range(out, from[i] + 1, to[i]);
                            to_reached = true;
                        } else {
                            digit_range(out, from[i] + 1, to[i] - 1);
                        }
                        out.push(' ');
                        more_digits(out, sub_len as i32, sub_len as i32);
                    }
                }
                if !to_reached {
                    out.push_str(" | ");
                    digit_range(out, to[i], to[i]);
                    out.push(' ');
                    uniform_range(out, &zeros, to_sub);
                }
                out.push(')');
            } else {
                out.push('[');
                out.push(from[i] as char);
                out.push('-');
                out.push(to[i] as char);
                out.push(']');
            }
        }
    }

    if has_min && has_max {
        if min < 0 && max < 0 {
            out.push_str("\"-\" (");
            build_min_max_int(max.wrapping_neg(), min.wrapping_neg(), out, decimals_left, true)?;
            out.push(')');
            return Ok(());
        }
        if min < 0 {
            out.push_str("\"-\" (");
            build_min_max_int(0, min.wrapping_neg(), out, decimals_left, true)?;
            out.push_str(") | ");
            min = 0;
        }
        let mut min_s = min.to_string().into_bytes();
        let max_s = max.to_string().into_bytes();
        for digits in min_s.len()..max_s.len() {
            uniform_range(out, &min_s, &vec![b'9'; digits]);
            min_s = format!("1{}", "0".repeat(digits)).into_bytes();
            out.push_str(" | ");
        }
        uniform_range(out, &min_s, &max_s);
        return Ok(());
    }

    let less_decimals = (decimals_left - 1).max(1);

    if has_min {
        if min < 0 {
            out.push_str("\"-\" (");
            build_min_max_int(i64::MIN, min.wrapping_neg(), out, decimals_left, false)?;
            out.push_str(") | [0] | [1-9] ");
            more_digits(out, 0, decimals_left - 1);
        } else if min == 0 {
            if top_level {
                out.push_str("[0] | [1-9] ");
                more_digits(out, 0, less_decimals);
            } else {
                more_digits(out, 1, decimals_left);
            }
        } else if min <= 9 {
            let c = b'0' + min as u8;
            let range_start = if top_level { b'1' } else { b'0' };
            if c > range_start {
                digit_range(out, range_start, c - 1);
                out.push(' ');
                more_digits(out, 1, less_decimals);
                out.push_str(" | ");
            }
            digit_range(out, c, b'9');
            out.push(' ');
            more_digits(out, 0, less_decimals);
        } else {
            let min_s = min.to_string().into_bytes();
            let len = min_s.len() as i32;
            let c = min_s[0];
            if c > b'1' {
                digit_range(out, if top_level { b'1' } else { b'0' }, c - 1);
                out.push(' ');
                more_digits(out, len, less_decimals);
                out.push_str(" | ");
            }
            digit_range(out, c, c);
            out.push_str(" (");
            let rest: i64 = std::str::from_utf8(&min_s[1..]).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
            build_min_max_int(rest, i64::MAX, out, less_decimals, false)?;
            out.push(')');
            if c < b'9' {
                out.push_str(" | ");
                digit_range(out, c + 1, b'9');
                out.push(' ');
                more_digits(out, len - 1, less_decimals);
            }
        }
        return Ok(());
    }

    if has_max {
        if max >= 0 {
            if top_level {
                out.push_str("\"-\" [1-9] ");
                more_digits(out, 0, less_decimals);
                out.push_str(" | ");
            }
            build_min_max_int(0, max, out, decimals_left, true)?;
        } else {
            out.push_str("\"-\" (");
            build_min_max_int(max.wrapping_neg(), i64::MAX, out, decimals_left, false)?;
            out.push(')');
        }
        return Ok(());
    }
    Err("At least one of min_value or max_value must be set".into())
}

/// Why a pattern was not converted: a valid regex with no grammar equivalent (the string is
/// then unconstrained, with a warning) or an invalid one (an error).
enum PatternError {
    Unsupported(String),
    Invalid(String),
}

const MAX_PATTERN_DEPTH: usize = 100;

fn is_non_literal(c: char) -> bool {
    matches!(c, '|' | '.' | '(' | ')' | '[' | ']' | '{' | '}' | '*' | '+' | '?' | '^' | '$')
}

/// A piece of a pattern's sequence: literal text, or a rule expression.
type Piece = (String, bool);

fn to_rule(p: &Piece) -> String {
    if p.1 {
        format!("\"{}\"", p.0)
    } else {
        p.0.clone()
    }
}

struct Converter<'d> {
    doc: &'d Doc,
    dotall: bool,
    rules: BTreeMap<String, String>,
    refs_being_resolved: HashSet<String>,
    errors: Vec<String>,
    /// An error upstream throws (the conversion stops there, whatever `errors` holds).
    fatal: Option<String>,
    warnings: Vec<String>,
    depth: usize,
    probes: usize,
}

impl<'d> Converter<'d> {
    fn new(doc: &'d Doc) -> Converter<'d> {
        let mut rules = BTreeMap::new();
        rules.insert("space".to_string(), SPACE_RULE.to_string());
        Converter { doc, dotall: false, rules, refs_being_resolved: HashSet::new(), errors: Vec::new(), fatal: None, warnings: Vec::new(), depth: 0, probes: 0 }
    }

    fn finish(self) -> Result<Converted, String> {
        if let Some(e) = self.fatal {
            return Err(format!("JSON schema conversion failed:\n{e}"));
        }
        if !self.errors.is_empty() {
            return Err(format!("JSON schema conversion failed:\n{}", self.errors.join("\n")));
        }
        let mut grammar = String::new();
        for (k, v) in &self.rules {
            grammar.push_str(k);
            grammar.push_str(" ::= ");
            grammar.push_str(v);
            grammar.push('\n');
        }
        Ok(Converted { grammar, warnings: self.warnings })
    }

    fn probe(&mut self) -> bool {
        self.probes += 1;
        if self.probes == MAX_PROBES {
            self.errors.push(format!("the schema needs more than {MAX_PROBES} rule-name lookups to convert"));
        }
        self.probes < MAX_PROBES
    }

    fn add_rule(&mut self, name: &str, rule: String) -> String {
        let esc = rule_chars(name);
        if !self.probe() {
            return esc;
        }
        match self.rules.get(&esc) {
            Some(r) if *r != rule => {}
            _ => {
                self.rules.insert(esc.clone(), rule);
                return esc;
            }
        }
        let mut i = 0;
        loop {
            let key = format!("{esc}{i}");
            if !self.probe() {
                return key;
            }
            match self.rules.get(&key) {
                Some(r) if *r != rule => i += 1,
                _ => {
                    self.rules.insert(key.clone(), rule);
                    return key;
                }
            }
        }
    }

    fn add_primitive(&mut self, name: &str, rule: &Builtin) -> String {
        let n = self.add_rule(name, rule.content.to_string());
        for &dep in rule.deps {
            let Some(dep_rule) = primitive(dep).or_else(|| string_format(dep)) else {
                self.errors.push(format!("Rule {dep} not known"));
                continue;
            };
            if !self.rules.contains_key(dep) {
                self.add_primitive(dep, dep_rule);
            }
        }
        n
    }

    fn prim(&mut self, name: &str) -> String {
        let rule = primitive(name).expect("a built-in rule");
        self.add_primitive(name, rule)
    }

    fn visit_primitive(&mut self, rule_name: &str, ty: &str) -> String {
        let rule = primitive(ty).expect("a built-in rule");
        self.add_primitive(if rule_name == "root" { "root" } else { ty }, rule)
    }

    fn constant(v: &Value) -> String {
        format_literal(&dump(v))
    }

    fn union(&mut self, name: &str, alts: &[Node]) -> String {
        let mut rules = Vec::with_capacity(alts.len());
        for (i, alt) in alts.iter().enumerate() {
            let sub = if name.is_empty() { format!("alternative-{i}") } else { format!("{name}-{i}") };
            rules.push(self.visit(alt, &sub));
        }
        rules.join(" | ")
    }

    fn visit_pattern(&mut self, pattern: &str, name: &str) -> String {
        let snapshot = self.rules.clone();
        match self.pattern_to_rule(pattern, name) {
            Ok(r) => r,
            Err(PatternError::Unsupported(why)) => {
                self.rules = snapshot;
                self.warnings.push(format!("pattern {pattern} is not supported ({why}), accepting any string"));
                let s = self.prim("string");
                self.add_rule(name, s)
            }
            Err(PatternError::Invalid(why)) => {
                self.rules = snapshot;
                self.errors.push(format!("Invalid pattern {pattern}: {why}"));
                String::new()
            }
        }
    }

    fn pattern_to_rule(&mut self, pattern: &str, name: &str) -> Result<String, PatternError> {
        use PatternError::{Invalid, Unsupported};
        let chars: Vec<char> = pattern.chars().collect();
        if chars.len() < 2 || chars[0] != '^' || chars[chars.len() - 1] != '$' {
            return Err(Unsupported("not anchored with '^' and '$'".into()));
        }
        let mut p = PatternState { sub: &chars[1..chars.len() - 1], i: 0, depth: 0, name, sub_rule_ids: HashMap::new() };
        let rule = to_rule(&p.transform(self)?);
        if p.depth != 0 {
            return Err(Invalid("unbalanced parentheses".into()));
        }
        Ok(self.add_rule(name, format!("\"\\\"\" ({rule}) \"\\\"\"")))
    }

    /// A rule matching a JSON string that is none of `strings` (the keys of an object's other
    /// properties), e.g. {"a"} → `["] ( [a] char+ | [^"a] char* )? ["]`.
    fn not_strings(&mut self, strings: &[&str]) -> String {
        // the trie of the strings, children in code point order
        let mut trie: Vec<(BTreeMap<char, usize>, bool)> = vec![(BTreeMap::new(), false)];
        for s in strings {
            let mut cur = 0;
            for c in s.chars() {
                cur = match trie[cur].0.get(&c) {
                    Some(&n) => n,
                    None => {
                        trie.push((BTreeMap::new(), false));
                        let n = trie.len() - 1;
                        trie[cur].0.insert(c, n);
                        n
                    }
                };
            }
            trie[cur].1 = true;
        }
        let children: Vec<Vec<(char, usize)>> = trie.iter().map(|(c, _)| c.iter().map(|(&k, &v)| (k, v)).collect()).collect();
        let char_rule = self.prim("char");
        let mut out = String::from("[\"] ( ");
        // Upstream recurses; here an explicit stack (a key may be long): each frame is a node
        // and the index of its next child, and its rejected characters so far.
        let mut stack: Vec<(usize, usize, String)> = vec![(0, 0, String::new())];
        while let Some((node, next, rejects)) = stack.last_mut() {
            let (node, child_ix) = (*node, *next);
            if let Some(&(c, child)) = children[node].get(child_ix) {
                *next += 1;
                rejects.push(c);
                if child_ix > 0 {
                    out.push_str(" | ");
                }
                out.push('[');
                out.push(c);
                out.push(']');
                if !children[child].is_empty() {
                    out.push_str(" (");
                    stack.push((child, 0, String::new()));
                } else {
                    out.push(' ');
                    out.push_str(&char_rule);
                    out.push('+');
                }
                continue;
            }
            if !children[node].is_empty() {
                out.push_str(" | [^\"");
                out.push_str(rejects);
                out.push_str("] ");
                out.push_str(&char_rule);
                out.push('*');
            }
            stack.pop();
            if !stack.is_empty() {
                out.push(')');
            }
        }
        out.push_str(" )");
        if !trie[0].1 {
            out.push('?');
        }
        out.push_str(" [\"]");
        out
    }

    fn resolve_ref(&mut self, r: &str) -> String {
        let fragment = r.find('#').map_or(r, |i| &r[i + 1..]);
        let mut ref_name = format!("ref{}", rule_chars(fragment));
        if !self.rules.contains_key(&ref_name) && !self.refs_being_resolved.contains(r) {
            let doc = self.doc;
            let Some(target) = doc.refs.get(r) else {
                self.errors.push(format!("Unresolved $ref {r}"));
                return String::new();
            };
            self.refs_being_resolved.insert(r.to_string());
            ref_name = self.visit(target, &ref_name);
            self.refs_being_resolved.remove(r);
        }
        ref_name
    }

    fn object_rule(&mut self, props: &[(&str, &Node)], required: &HashSet<&str>, name: &str, additional: Option<&Node>) -> String {
        let dash = if name.is_empty() { "" } else { "-" };
        let mut required_props: Vec<&str> = Vec::new();
        let mut optional_props: Vec<&str> = Vec::new();
        let mut kv_names: HashMap<&str, String> = HashMap::new();
        let mut prop_names: Vec<&str> = Vec::new();
        for &(prop_name, prop_schema) in props {
            let prop_rule = self.visit(prop_schema, &format!("{name}{dash}{prop_name}"));
            let kv = self.add_rule(&format!("{name}{dash}{prop_name}-kv"), format!("{} space \":\" space {prop_rule}", format_literal(&dump(&Value::String(prop_name.to_string())))));
            kv_names.insert(prop_name, kv);
            if required.contains(prop_name) {
                required_props.push(prop_name);
            } else {
                optional_props.push(prop_name);
            }
            prop_names.push(prop_name);
        }
        if let Some(add) = additional {
            let sub_name = format!("{name}{dash}additional");
            let value_rule = if matches!(add, Node::Any) { self.prim("value") } else { self.visit(add, &format!("{sub_name}-value")) };
            let key_rule = if prop_names.is_empty() {
                self.prim("string")
            } else {
                let k = self.not_strings(&prop_names);
                self.add_rule(&format!("{sub_name}-k"), k)
            };
            let kv = self.add_rule(&format!("{sub_name}-kv"), format!("{key_rule} \":\" space {value_rule}"));
            kv_names.insert("*", kv);
            optional_props.push("*");
        }
        if required_props.is_empty() && optional_props.is_empty() {
            return "\"{\" space \"}\"".to_string();
        }
        let mut rule = String::from("\"{\" space ");
        for (i, p) in required_props.iter().enumerate() {
            if i > 0 {
                rule.push_str(" \",\" space ");
            }
            rule.push_str(&kv_names[p]);
        }
        if !optional_props.is_empty() {
            rule.push_str(" (");
            if !required_props.is_empty() {
                rule.push_str(" \",\" space ( ");
            }
            // Upstream's get_recursive_refs(optional[i..], false) for each i: the key-value of
            // optional[i], then the rule for what may follow it, "-rest", which chains the
            // later ones as optional. The rest rules depend only on the suffix, so each is made
            // once, the innermost first, in the order upstream first makes them.
            let n = optional_props.len();
            let comma_ref = |k: &str| format!("( \",\" space {} )", kv_names[k]);
            let mut rest: Vec<String> = vec![String::new(); n];
            for j in (0..n.saturating_sub(1)).rev() {
                let next = optional_props[j + 1];
                let mut content = comma_ref(next) + if next == "*" { "*" } else { "?" };
                if j + 2 < n {
                    content.push(' ');
                    content.push_str(&rest[j + 1]);
                }
                let k = optional_props[j];
                rest[j] = self.add_rule(&format!("{name}{dash}{k}-rest"), content);
            }
            for (i, &k) in optional_props.iter().enumerate() {
                if i > 0 {
                    rule.push_str(" | ");
                }
                rule.push_str(&kv_names[k]);
                if k == "*" {
                    rule.push(' ');
                    rule.push_str(&comma_ref(k));
                    rule.push('*');
                }
                if i + 1 < n {
                    rule.push(' ');
                    rule.push_str(&rest[i]);
                }
            }
            if !required_props.is_empty() {
                rule.push_str(" )");
            }
            rule.push_str(" )?");
        }
        rule.push_str(" space \"}\"");
        rule
    }

    fn visit_all_of(&mut self, children: &[Node], name: &str, rule_name: &str) -> String {
        let doc = self.doc;
        let mut required: HashSet<&str> = HashSet::new();
        let mut props: Vec<(&str, &Node)> = Vec::new();
        let mut enum_values: BTreeMap<String, usize> = BTreeMap::new();
        // (component, required); `following` holds the $refs being followed (a cycle of
        // references adds nothing)
        fn add<'n>(doc: &'n Doc, comp: &'n Node, is_required: bool, following: &mut Vec<&'n str>, required: &mut HashSet<&'n str>, props: &mut Vec<(&'n str, &'n Node)>, enum_values: &mut BTreeMap<String, usize>) {
            match comp {
                Node::Ref(r) => {
                    if following.contains(&r.as_str()) {
                        return;
                    }
                    if let Some(target) = doc.refs.get(r) {
                        following.push(r);
                        add(doc, target, is_required, following, required, props, enum_values);
                        following.pop();
                    }
                }
                Node::Object { props: p, .. } => {
                    for prop in p {
                        props.push((&prop.name, &prop.schema));
                        if is_required {
                            required.insert(&prop.name);
                        }
                    }
                }
                Node::Enum(values) => {
                    for v in values {
                        *enum_values.entry(Converter::constant(v)).or_insert(0) += 1;
                    }
                }
                _ => {}
            }
        }
        let mut following = Vec::new();
        for child in children {
            match child {
                Node::AnyOf(alts) => {
                    for alt in alts {
                        add(doc, alt, false, &mut following, &mut required, &mut props, &mut enum_values);
                    }
                }
                other => add(doc, other, true, &mut following, &mut required, &mut props, &mut enum_values),
            }
        }
        if !enum_values.is_empty() {
            let common: Vec<&str> = enum_values.iter().filter(|&(_, &n)| n == children.len()).map(|(v, _)| v.as_str()).collect();
            if !common.is_empty() {
                let rule = format!("({})", common.join(" | "));
                return self.add_rule(rule_name, rule);
            }
        }
        let rule = self.object_rule(&props, &required, name, None);
        self.add_rule(rule_name, rule)
    }

    fn visit(&mut self, schema: &Node, name: &str) -> String {
        if self.depth >= MAX_DEPTH {
            if self.depth == MAX_DEPTH {
                self.errors.push(format!("schemas nested more than {MAX_DEPTH} deep (through $ref included)"));
                self.depth += 1;
            }
            return String::new();
        }
        self.depth += 1;
        let r = self.visit_inner(schema, name);
        self.depth -= 1;
        r
    }

    fn visit_inner(&mut self, schema: &Node, name: &str) -> String {
        let rule_name = if is_reserved_name(name) {
            format!("{name}-")
        } else if name.is_empty() {
            "root".to_string()
        } else {
            name.to_string()
        };
        let sub_name = if name.is_empty() { String::new() } else { format!("{name}-") };
        match schema {
            Node::Ref(r) => {
                let target = self.resolve_ref(r);
                self.add_rule(&rule_name, target)
            }
            Node::AnyOf(alts) => {
                let u = self.union(name, alts);
                self.add_rule(&rule_name, u)
            }
            Node::AllOf(children) => self.visit_all_of(children, name, &rule_name),
            Node::Const(v) => self.add_rule(&rule_name, Self::constant(v)),
            Node::Enum(values) => {
                let alts: Vec<String> = values.iter().map(Self::constant).collect();
                self.add_rule(&rule_name, format!("({})", alts.join(" | ")))
            }
            Node::Object { props, additional } => {
                if props.is_empty() && matches!(additional.as_deref(), Some(Node::Any)) {
                    let o = self.prim("object");
                    return self.add_rule(&rule_name, o);
                }
                let list: Vec<(&str, &Node)> = props.iter().map(|p| (p.name.as_str(), &p.schema)).collect();
                let required: HashSet<&str> = props.iter().filter(|p| p.required).map(|p| p.name.as_str()).collect();
                let rule = self.object_rule(&list, &required, name, additional.as_deref());
                self.add_rule(&rule_name, rule)
            }
            Node::Tuple(items) => {
                let mut rule = String::from("\"[\" space ");
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        rule.push_str(" \",\" space ");
                    }
                    let r = self.visit(item, &format!("{sub_name}tuple-{i}"));
                    rule.push_str(&r);
                }
                rule.push_str(" space \"]\"");
                self.add_rule(&rule_name, rule)
            }
            Node::Array { items, min, max } => {
                if matches!(**items, Node::Any) && *min == 0 && *max < 0 {
                    return self.visit_primitive(&rule_name, "array");
                }
                let item_rule = self.visit(items, &format!("{sub_name}item"));
                let max = if *max < 0 { i32::MAX } else { *max };
                let rule = format!("\"[\" space {} space \"]\"", build_repetition(&item_rule, *min, max, "\",\" space"));
                self.add_rule(&rule_name, rule)
            }
            Node::Str { pattern, format, min_len, max_len } => {
                if !pattern.is_empty() {
                    return self.visit_pattern(pattern, &rule_name);
                }
                match format {
                    Format::Uuid => return self.visit_primitive(&rule_name, "uuid"),
                    Format::None => {}
                    f => {
                        let prim = match f {
                            Format::Date => "date-string",
                            Format::Time => "time-string",
                            _ => "date-time-string",
                        };
                        let p = self.add_primitive(prim, string_format(prim).expect("a string format"));
                        return self.add_rule(&rule_name, p);
                    }
                }
                if *min_len > 0 || *max_len >= 0 {
                    let char_rule = self.prim("char");
                    let max = if *max_len < 0 { i32::MAX } else { *max_len };
                    let rule = format!("\"\\\"\" {} \"\\\"\"", build_repetition(&char_rule, *min_len, max, ""));
                    return self.add_rule(&rule_name, rule);
                }
                self.visit_primitive(&rule_name, "string")
            }
            Node::Integer { min, max } => {
                if *min == i64::MIN && *max == i64::MAX {
                    return self.visit_primitive(&rule_name, "integer");
                }
                let mut out = String::from("(");
                if let Err(e) = build_min_max_int(*min, *max, &mut out, 16, true) {
                    // upstream throws: the conversion fails whatever else it found
                    self.fatal.get_or_insert(e);
                }
                out.push(')');
                self.add_rule(&rule_name, out)
            }
            Node::Number => self.visit_primitive(&rule_name, "number"),
            Node::Boolean => self.visit_primitive(&rule_name, "boolean"),
            Node::Null => self.visit_primitive(&rule_name, "null"),
            Node::Any => {
                let v = self.prim("value");
                self.add_rule(&rule_name, v)
            }
        }
    }
}

/// The state of one pattern's conversion (upstream's `transform` closure and what it captures).
struct PatternState<'p> {
    sub: &'p [char],
    i: usize,
    depth: usize,
    name: &'p str,
    /// Rules made for repeated sub-expressions, by expression.
    sub_rule_ids: HashMap<String, String>,
}

impl PatternState<'_> {
    fn dot(&self, c: &mut Converter<'_>) -> String {
        let rule = if c.dotall { "[\\U00000000-\\U0010FFFF]" } else { "[^\\x0A\\x0D]" };
        c.add_rule("dot", rule.to_string())
    }

    /// Joins a sequence, merging consecutive literals.
    fn join_seq(seq: Vec<Piece>) -> Piece {
        let mut ret: Vec<Piece> = Vec::new();
        let mut literal = String::new();
        for item in seq {
            if item.1 {
                literal.push_str(&item.0);
            } else {
                if !literal.is_empty() {
                    ret.push((std::mem::take(&mut literal), true));
                }
                ret.push(item);
            }
        }
        if !literal.is_empty() {
            ret.push((literal, true));
        }
        (ret.iter().map(to_rule).collect::<Vec<_>>().join(" "), false)
    }

    fn transform(&mut self, c: &mut Converter<'_>) -> Result<Piece, PatternError> {
        use PatternError::{Invalid, Unsupported};
        let sub = self.sub;
        let len = sub.len();
        let mut seq: Vec<Piece> = Vec::new();
        while self.i < len {
            let ch = sub[self.i];
            match ch {
                '.' => {
                    seq.push((self.dot(c), false));
                    self.i += 1;
                }
                '(' => {
                    self.i += 1;
                    if self.i < len && sub[self.i] == '?' {
                        if self.i + 1 < len && sub[self.i + 1] == ':' {
                            // a non-capturing group is a group
                            self.i += 2;
                        } else {
                            return Err(Unsupported("unsupported group syntax".into()));
                        }
                    }
                    self.depth += 1;
                    if self.depth > MAX_PATTERN_DEPTH {
                        return Err(Unsupported("pattern nesting too deep".into()));
                    }
                    let inner = self.transform(c)?;
                    seq.push((format!("({})", to_rule(&inner)), false));
                }
                ')' => {
                    self.i += 1;
                    if self.depth == 0 {
                        return Err(Invalid("unbalanced parentheses".into()));
                    }
                    self.depth -= 1;
                    return Ok(Self::join_seq(seq));
                }
                '^' | '$' => return Err(Unsupported("anchor inside the pattern".into())),
                '[' => {
                    let mut class = String::from("[");
                    self.i += 1;
                    while self.i < len && sub[self.i] != ']' {
                        if sub[self.i] == '\\' {
                            let n = gbnf_escape_length(sub, self.i);
                            if n == 0 {
                                let e: String = sub[self.i..(self.i + 2).min(len)].iter().collect();
                                return Err(Unsupported(format!("unsupported escape in character class: {e}")));
                            }
                            class.extend(&sub[self.i..self.i + n]);
                            self.i += n;
                        } else {
                            class.push(sub[self.i]);
                            self.i += 1;
                        }
                    }
                    if self.i >= len {
                        return Err(Invalid("unterminated character class".into()));
                    }
                    class.push(']');
                    self.i += 1;
                    seq.push((class, false));
                }
                '|' => {
                    seq.push(("|".into(), false));
                    self.i += 1;
                }
                '*' | '+' | '?' => {
                    let Some(last) = seq.last_mut() else { return Err(Invalid("nothing to repeat".into())) };
                    *last = (format!("{}{ch}", to_rule(last)), false);
                    self.i += 1;
                }
                '{' => {
                    let mut curly = String::from("{");
                    self.i += 1;
                    while self.i < len && sub[self.i] != '}' {
                        curly.push(sub[self.i]);
                        self.i += 1;
                    }
                    if self.i >= len {
                        return Err(Unsupported("unterminated curly brackets".into()));
                    }
                    curly.push('}');
                    self.i += 1;
                    let nums: Vec<&str> = curly[1..curly.len() - 1].split(',').collect();
                    let (min, max) = match nums.as_slice() {
                        [n] => {
                            let n = stoi(n).ok_or_else(|| Unsupported("invalid number in curly brackets".into()))?;
                            (n, n)
                        }
                        [a, b] => {
                            let min = if a.is_empty() { 0 } else { stoi(a).ok_or_else(|| Unsupported("invalid number in curly brackets".into()))? };
                            let max = if b.is_empty() { i32::MAX } else { stoi(b).ok_or_else(|| Unsupported("invalid number in curly brackets".into()))? };
                            (min, max)
                        }
                        _ => return Err(Unsupported("wrong number of values in curly brackets".into())),
                    };
                    let Some(last) = seq.last_mut() else { return Err(Invalid("nothing to repeat".into())) };
                    let item = if last.1 {
                        format!("\"{}\"", last.0)
                    } else {
                        let next_id = self.sub_rule_ids.len() + 1;
                        let id = match self.sub_rule_ids.get(&last.0) {
                            Some(id) => id.clone(),
                            None => {
                                let id = c.add_rule(&format!("{}-{next_id}", self.name), last.0.clone());
                                self.sub_rule_ids.insert(last.0.clone(), id.clone());
                                id
                            }
                        };
                        id
                    };
                    *last = (build_repetition(&item, min, max, ""), false);
                }
                _ => {
                    let mut literal = String::new();
                    while self.i < len {
                        let x = sub[self.i];
                        if x == '\\' {
                            if self.i == len - 1 {
                                return Err(Invalid("trailing backslash".into()));
                            }
                            let next = sub[self.i + 1];
                            if matches!(next, '^' | '$' | '.' | '[' | ']' | '(' | ')' | '|' | '{' | '}' | '*' | '+' | '?') {
                                literal.push(next);
                                self.i += 2;
                            } else {
                                let n = gbnf_escape_length(sub, self.i);
                                if n == 0 {
                                    let e: String = sub[self.i..self.i + 2].iter().collect();
                                    return Err(Unsupported(format!("unsupported escape: {e}")));
                                }
                                literal.extend(&sub[self.i..self.i + n]);
                                self.i += n;
                            }
                        } else if x == '"' {
                            literal.push_str("\\\"");
                            self.i += 1;
                        } else if !is_non_literal(x) && (self.i == len - 1 || literal.is_empty() || sub[self.i + 1] == '.' || !is_non_literal(sub[self.i + 1])) {
                            literal.push(x);
                            self.i += 1;
                        } else {
                            break;
                        }
                    }
                    if literal.is_empty() {
                        // nothing was consumed, e.g. a stray ']' or '}'
                        return Err(Unsupported(format!("unsupported character: {ch}")));
                    }
                    seq.push((literal, true));
                }
            }
        }
        Ok(Self::join_seq(seq))
    }
}

/// C++'s `std::stoi`: leading blanks, a sign, decimal digits up to the first other character;
/// None where it throws (no digits, out of int's range).
fn stoi(s: &str) -> Option<i32> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let v: i64 = t[..digits].parse().ok()?;
    i32::try_from(if neg { -v } else { v }).ok()
}

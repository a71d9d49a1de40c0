//! What templates rely on that minijinja does differently, made upstream's by rewriting the
//! template's source before it is compiled:
//! - `+` as llama.cpp's Jinja engine evaluates it (b11312 `common/jinja/runtime.cpp`, binary
//!   `+`): a string joined with an undefined or null operand as if that were the empty string,
//!   with any other value as its text; minijinja (and Python's Jinja) refuse both.
//!   firefunction-v2 adds an undefined `functions` to its system prompt, Command R+ a
//!   parameter's missing `description`. Every binary `+` becomes `__pyadd__(left, right)`.
//! - List literals as Python lists, changed in place by `append`, `pop`, …; minijinja's lists
//!   are immutable (Kimi K2 queues call ids in a list). Every `[…]` becomes `__pylist__([…])`.
//!
//! Operands and literals are located by minijinja's own parser (its `unstable_machinery`
//! AST, serialized), so precedence and parentheses are kept exactly.

use std::sync::Arc;

use minijinja::machinery::{parse, tokenize, Token};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Enumerator, Object, ObjectRepr, Value, ValueKind};
use minijinja::{Error as JError, ErrorKind, State};
use serde_json::Value as Json;

/// The function every `a + b` becomes.
pub const ADD_FN: &str = "__pyadd__";

/// The function every list literal `[…]` becomes: Python's lists are mutable (Kimi K2's
/// templates `append` to one and `pop` from it), minijinja's are not.
pub const LIST_FN: &str = "__pylist__";

/// Byte ranges of one `+` (the whole expression and its operator) or of one list literal.
struct AddNode {
    start: usize,
    end: usize,
    /// The `+`; `None` for a list literal.
    op: Option<usize>,
}

/// Finds the `Add` operations in minijinja's serialized AST: a `Spanned` node serializes as
/// `{"inner": [node, span]}`.
fn collect(ast: &Json, plus: &[usize], out: &mut Vec<AddNode>) {
    match ast {
        Json::Array(items) => items.iter().for_each(|i| collect(i, plus, out)),
        Json::Object(map) => {
            if map.get("expr").and_then(Json::as_str) == Some("List") {
                let off = |k: &str| map.get("inner").and_then(Json::as_array).and_then(|a| a.get(1)).and_then(|s| s.get(k)).and_then(Json::as_u64).map(|n| n as usize);
                if let (Some(start), Some(end)) = (off("start_offset"), off("end_offset")) {
                    out.push(AddNode { start, end, op: None });
                }
            }
            if let Some(Json::Array(inner)) = map.get("inner") {
                if let [node, span] = inner.as_slice() {
                    if node.get("op").and_then(Json::as_str) == Some("Add") {
                        let off = |v: &Json, k: &str| v.get(k).and_then(Json::as_u64).map(|n| n as usize);
                        let left_end = node.get("left").and_then(expr_span).and_then(|s| off(s, "end_offset"));
                        if let (Some(start), Some(end), Some(left_end)) = (off(span, "start_offset"), off(span, "end_offset"), left_end) {
                            // The operator is the first `+` token after the left operand (only
                            // closing parentheses can come between).
                            if let Some(&op) = plus.iter().find(|&&p| p >= left_end && p < end) {
                                out.push(AddNode { start, end, op: Some(op) });
                            }
                        }
                    }
                }
            }
            // Assignment targets (`for a, b in …`, `set a, b = …`) are lists of names, not values.
            map.iter().filter(|(k, _)| k.as_str() != "target").for_each(|(_, v)| collect(v, plus, out));
        }
        _ => {}
    }
}

/// The span of a serialized expression (`{"expr": "Var", "inner": [node, span]}`).
fn expr_span(e: &Json) -> Option<&Json> {
    e.get("inner").and_then(Json::as_array).and_then(|a| a.get(1))
}

/// `source` with each binary `+` turned into `__pyadd__(a, b)` and each list literal into
/// `__pylist__([…])`; `None` when it has neither or cannot be parsed (the compile then reports
/// the error on the original).
pub fn rewrite(source: &str, syntax: SyntaxConfig) -> Option<String> {
    let mut plus = Vec::new();
    let mut brackets = false;
    for t in tokenize(source, false, syntax.clone()) {
        let (tok, span) = t.ok()?;
        match tok {
            Token::Plus => plus.push(span.start_offset as usize),
            Token::BracketOpen => brackets = true,
            _ => {}
        }
    }
    if plus.is_empty() && !brackets {
        return None;
    }
    let ast = parse(source, "chat_template", syntax).ok()?;
    let ast = serde_json::to_value(&ast).ok()?;
    let mut nodes = Vec::new();
    collect(&ast, &plus, &mut nodes);
    if nodes.is_empty() {
        return None;
    }
    // Edits by position; at one position closing parentheses come first (innermost first), then
    // the operator, then openings (outermost first).
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    enum Edit {
        Close(usize),
        Op,
        Open(std::cmp::Reverse<usize>, &'static str),
    }
    let mut edits: Vec<(usize, Edit)> = Vec::with_capacity(nodes.len() * 3);
    for n in &nodes {
        let len = n.end - n.start;
        edits.push((n.start, Edit::Open(std::cmp::Reverse(len), if n.op.is_some() { ADD_FN } else { LIST_FN })));
        if let Some(op) = n.op {
            edits.push((op, Edit::Op));
        }
        edits.push((n.end, Edit::Close(len)));
    }
    edits.sort();
    let mut out = String::with_capacity(source.len() + nodes.len() * 16);
    let mut at = 0;
    for (pos, e) in edits {
        out.push_str(source.get(at..pos)?);
        at = pos;
        match e {
            Edit::Open(_, f) => {
                out.push_str(f);
                out.push('(');
            }
            Edit::Op => {
                out.push(',');
                at = pos + 1;
            }
            Edit::Close(_) => out.push(')'),
        }
    }
    out.push_str(source.get(at..)?);
    Some(out)
}

/// A Python list: a sequence that `append`, `pop`, `extend`, `insert` and `remove` change in
/// place. The lock is never contended: a render runs on one thread (minijinja's own
/// `namespace` holds its fields the same way).
#[derive(Debug, Default)]
pub struct PyList(std::sync::Mutex<Vec<Value>>);

impl PyList {
    fn items(&self) -> std::sync::MutexGuard<'_, Vec<Value>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Object for PyList {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let items = self.items();
        let i = key.as_i64()?;
        let i = if i < 0 { items.len() as i64 + i } else { i };
        usize::try_from(i).ok().and_then(|i| items.get(i).cloned())
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Values(self.items().clone())
    }

    fn call_method(self: &Arc<Self>, state: &mut State<'_, '_>, method: &str, args: &[Value]) -> Result<Value, JError> {
        let mut items = self.items();
        let bad = |m: &str| JError::new(ErrorKind::InvalidOperation, m.to_string());
        match (method, args) {
            ("append", [v]) => items.push(v.clone()),
            ("extend", [v]) => {
                let more: Vec<Value> = v.try_iter()?.collect();
                items.extend(more);
            }
            ("insert", [i, v]) => {
                let n = items.len() as i64;
                let i = i.as_i64().ok_or_else(|| bad("list.insert: the index must be an integer"))?;
                let i = if i < 0 { (n + i).max(0) } else { i.min(n) };
                items.insert(i as usize, v.clone());
            }
            ("pop", []) | ("pop", [_]) => {
                let n = items.len() as i64;
                let i = match args.first() {
                    Some(i) => i.as_i64().ok_or_else(|| bad("list.pop: the index must be an integer"))?,
                    None => -1,
                };
                let i = if i < 0 { n + i } else { i };
                if i < 0 || i >= n {
                    return Err(bad("pop index out of range"));
                }
                return Ok(items.remove(i as usize));
            }
            ("remove", [v]) => {
                let at = items.iter().position(|x| x == v).ok_or_else(|| bad("list.remove(x): x not in list"))?;
                items.remove(at);
            }
            _ => {
                let _ = state;
                return Err(JError::from(ErrorKind::UnknownMethod));
            }
        }
        state.consume_fuel(1)?;
        Ok(Value::from(()))
    }
}

/// `[…]` as a Python list.
pub fn list(items: Value) -> Result<Value, JError> {
    Ok(Value::from_object(PyList(std::sync::Mutex::new(items.try_iter()?.collect()))))
}

/// Python's `str()` of a number or boolean as upstream prints it in a concatenation.
fn as_text(v: &Value) -> String {
    match v.kind() {
        ValueKind::Bool => (if v.is_true() { "True" } else { "False" }).to_string(),
        ValueKind::Number if !v.is_integer() => f64::try_from(v.clone()).map(crate::pyjson::float_repr).unwrap_or_else(|_| v.to_string()),
        _ => v.to_string(),
    }
}

/// `a + b` with upstream's rules.
pub fn add(a: Value, b: Value) -> Result<Value, JError> {
    let nullish = |v: &Value| v.is_undefined() || v.is_none();
    let is_str = |v: &Value| v.kind() == ValueKind::String;
    if nullish(&a) || nullish(&b) {
        return match (is_str(&a), is_str(&b)) {
            (true, _) => Ok(a),
            (_, true) => Ok(b),
            _ => Err(JError::new(ErrorKind::InvalidOperation, format!("tried to use + operator on unsupported types {} and {}", a.kind(), b.kind()))),
        };
    }
    match (a.kind(), b.kind()) {
        (ValueKind::Number, ValueKind::Number) => {
            if let (Some(x), Some(y)) = (a.as_i64().filter(|_| a.is_integer()), b.as_i64().filter(|_| b.is_integer())) {
                if let Some(s) = x.checked_add(y) {
                    return Ok(Value::from(s));
                }
            }
            let f = |v: &Value| f64::try_from(v.clone()).map_err(|_| JError::new(ErrorKind::InvalidOperation, "number out of range"));
            Ok(Value::from(f(&a)? + f(&b)?))
        }
        (ValueKind::String, ValueKind::String) => Ok(Value::from(format!("{}{}", a.as_str().unwrap_or_default(), b.as_str().unwrap_or_default()))),
        (ValueKind::String, _) | (_, ValueKind::String) => Ok(Value::from(format!("{}{}", as_text(&a), as_text(&b)))),
        (ValueKind::Seq | ValueKind::Iterable, ValueKind::Seq | ValueKind::Iterable) => {
            let mut items: Vec<Value> = a.try_iter()?.collect();
            items.extend(b.try_iter()?);
            Ok(Value::from(items))
        }
        _ => Err(JError::new(ErrorKind::InvalidOperation, format!("tried to use + operator on unsupported types {} and {}", a.kind(), b.kind()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rw(s: &str) -> String {
        rewrite(s, SyntaxConfig::default()).unwrap_or_else(|| s.to_string())
    }

    #[test]
    fn operands_are_the_parsers() {
        assert_eq!(rw("{{ a + b }}"), "{{ __pyadd__(a , b) }}");
        assert_eq!(rw("{{ a + b + c }}"), "{{ __pyadd__(__pyadd__(a , b) , c) }}");
        assert_eq!(rw("{{ (a + b) * c + 'x' }}"), "{{ __pyadd__((__pyadd__(a , b)) * c , 'x') }}");
        assert_eq!(rw("{{ a+b|trim }}"), "{{ __pyadd__(a,b|trim) }}");
        assert_eq!(rw("{% set x = f(a + 1, '+') %}{{ '+' }}"), "{% set x = f(__pyadd__(a , 1), '+') %}{{ '+' }}");
        assert_eq!(rw("{{ x - -y }}"), "{{ x - -y }}");
        assert_eq!(rw("{{ a + (b + c) }}"), "{{ __pyadd__(a , (__pyadd__(b , c))) }}");
        assert_eq!(rw("{% set ns = namespace(ids=[]) %}{{ x + [1, [2]] }}"), "{% set ns = namespace(ids=__pylist__([])) %}{{ __pyadd__(x , __pylist__([1, __pylist__([2])])) }}");
        assert_eq!(rw("{{ x[0] }}"), "{{ x[0] }}");
        assert_eq!(rw("{% for k, v in [(1, 2)] %}{% set a, b = [k, v] %}{% endfor %}"), "{% for k, v in __pylist__([(1, 2)]) %}{% set a, b = __pylist__([k, v]) %}{% endfor %}");
    }
}

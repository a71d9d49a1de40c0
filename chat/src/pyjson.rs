//! JSON as Python's `json.dumps` writes it (what Hugging Face's `tojson` filter calls): `", "`
//! and `": "` between items unless indented, non-ASCII characters as they are
//! (`ensure_ascii=False`), floats in Python's `repr`.

use std::fmt::Write;

use minijinja::value::{Value, ValueKind};

/// How `tojson` lays the text out.
#[derive(Clone, Debug)]
pub struct Style {
    pub indent: Option<String>,
    pub item_sep: String,
    pub key_sep: String,
    pub sort_keys: bool,
    pub ensure_ascii: bool,
}

impl Default for Style {
    fn default() -> Style {
        Style { indent: None, item_sep: ", ".into(), key_sep: ": ".into(), sort_keys: false, ensure_ascii: false }
    }
}

impl Style {
    /// Python's rule: with an indent, items end lines and the item separator loses its space.
    pub fn indented(indent: String) -> Style {
        Style { indent: Some(indent), item_sep: ",".into(), ..Style::default() }
    }
}

/// Python's `repr` of a float: the shortest text that reads back, positional for exponents
/// in [-4, 16), otherwise `d.ddde+XX`.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    // `{:e}` gives the shortest round-trip digits: "1.2345e3", "-5e-7".
    let e = format!("{x:e}");
    let (mant, exp) = e.split_once('e').expect("exponent");
    let exp: i32 = exp.parse().expect("exponent");
    let (sign, mant) = mant.strip_prefix('-').map_or(("", mant), |m| ("-", m));
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let mut s = String::from(sign);
        if exp < 0 {
            s.push_str("0.");
            for _ in 0..(-exp - 1) {
                s.push('0');
            }
            s.push_str(&digits);
        } else {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                s.push_str(&digits);
                for _ in digits.len()..int_len {
                    s.push('0');
                }
                s.push_str(".0");
            } else {
                s.push_str(&digits[..int_len]);
                s.push('.');
                s.push_str(&digits[int_len..]);
            }
        }
        s
    } else {
        let mut s = String::from(sign);
        s.push_str(&digits[..1]);
        if digits.len() > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        let _ = write!(s, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
        s
    }
}

/// A JSON string literal with Python's escapes.
pub fn write_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{:04x}", u);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn newline(out: &mut String, style: &Style, depth: usize) {
    if let Some(ind) = &style.indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(ind);
        }
    }
}

/// Writes `v`; errors on values JSON has no form for (functions, macros).
pub fn write(out: &mut String, v: &Value, style: &Style, depth: usize) -> Result<(), String> {
    if depth > 512 {
        return Err("tojson: the value is nested too deeply".into());
    }
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if v.is_integer() {
                out.push_str(&v.to_string());
            } else {
                out.push_str(&float_repr(f64::try_from(v.clone()).map_err(|e| e.to_string())?));
            }
        }
        ValueKind::String => write_str(out, v.as_str().unwrap_or(""), style.ensure_ascii),
        ValueKind::Bytes => write_str(out, &String::from_utf8_lossy(v.as_bytes().unwrap_or(&[])), style.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter().map_err(|e| e.to_string())?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline(out, style, depth + 1);
                write(out, item, style, depth + 1)?;
            }
            newline(out, style, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter().map_err(|e| e.to_string())?.collect();
            if style.sort_keys {
                keys.sort();
            }
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline(out, style, depth + 1);
                let val = v.get_item(k).map_err(|e| e.to_string())?;
                match k.as_str() {
                    Some(s) => write_str(out, s, style.ensure_ascii),
                    // Python writes non-string keys as strings: 1 -> "1", True -> "true".
                    None => {
                        let mut t = String::new();
                        write(&mut t, k, style, depth + 1)?;
                        write_str(out, t.trim_matches('"'), style.ensure_ascii);
                    }
                }
                out.push_str(&style.key_sep);
                write(out, &val, style, depth + 1)?;
            }
            newline(out, style, depth);
            out.push('}');
        }
        ValueKind::Plain | ValueKind::Invalid => return Err(format!("tojson: a {} cannot be written as JSON", v.kind())),
        _ => return Err(format!("tojson: a {} cannot be written as JSON", v.kind())),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_as_python_repr() {
        // Each expected text is what CPython 3.11 prints for repr(x).
        for (x, want) in [(1.0, "1.0"), (0.5, "0.5"), (-2.25, "-2.25"), (1e16, "1e+16"), (1234567890123456.0, "1234567890123456.0"), (0.0001, "0.0001"), (0.00001, "1e-05"), (1.5e-7, "1.5e-07"), (123.456, "123.456"), (1e100, "1e+100"), (0.1 + 0.2, "0.30000000000000004")] {
            assert_eq!(float_repr(x), want, "{x}");
        }
    }

    #[test]
    fn python_separators_and_escapes() {
        let v = Value::from(minijinja::value::Serde(serde_json::json!({"b": [1, 2.5, "x\"y\n"], "a": {"é": null, "t": true}})));
        let mut s = String::new();
        write(&mut s, &v, &Style::default(), 0).unwrap();
        assert_eq!(s, r#"{"b": [1, 2.5, "x\"y\n"], "a": {"é": null, "t": true}}"#);
        let mut s = String::new();
        write(&mut s, &v, &Style { ensure_ascii: true, sort_keys: true, ..Style::default() }, 0).unwrap();
        assert_eq!(s, r#"{"a": {"t": true, "\u00e9": null}, "b": [1, 2.5, "x\"y\n"]}"#);
        let mut s = String::new();
        write(&mut s, &v, &Style::indented("  ".into()), 0).unwrap();
        assert_eq!(s, "{\n  \"b\": [\n    1,\n    2.5,\n    \"x\\\"y\\n\"\n  ],\n  \"a\": {\n    \"é\": null,\n    \"t\": true\n  }\n}");
    }
}

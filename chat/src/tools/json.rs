//! A JSON scanner for text a model is still writing: where a value ends, or that the text ends
//! inside it (so a parser can wait for more), or that it is not JSON. Values are located, not
//! built: a tool call's arguments are returned as the text the model wrote.

/// Nesting the scanner follows at most; deeper text is treated as not JSON.
const MAX_DEPTH: usize = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    /// The value ends at this byte offset.
    End(usize),
    /// The text ends inside the value (every byte so far could begin one).
    Incomplete,
    Invalid,
}

fn ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// Skips whitespace from `i`.
pub fn skip_ws(s: &str, i: usize) -> usize {
    ws(s.as_bytes(), i)
}

/// Scans the JSON value starting at `i` (no leading whitespace).
pub fn value(s: &str, i: usize) -> Scan {
    value_at(s.as_bytes(), i, 0)
}

fn value_at(s: &[u8], i: usize, depth: usize) -> Scan {
    if depth > MAX_DEPTH {
        return Scan::Invalid;
    }
    let Some(&c) = s.get(i) else { return Scan::Incomplete };
    match c {
        b'"' => string(s, i),
        b'{' => container(s, i, depth, true),
        b'[' => container(s, i, depth, false),
        b't' => literal(s, i, b"true"),
        b'f' => literal(s, i, b"false"),
        b'n' => literal(s, i, b"null"),
        b'-' | b'0'..=b'9' => number(s, i),
        _ => Scan::Invalid,
    }
}

fn literal(s: &[u8], i: usize, word: &[u8]) -> Scan {
    let have = &s[i..];
    if have.len() < word.len() {
        return if word.starts_with(have) { Scan::Incomplete } else { Scan::Invalid };
    }
    if &have[..word.len()] == word {
        Scan::End(i + word.len())
    } else {
        Scan::Invalid
    }
}

fn number(s: &[u8], i: usize) -> Scan {
    let mut j = i;
    if s[j] == b'-' {
        j += 1;
    }
    let digits = |j: &mut usize| {
        let start = *j;
        while *j < s.len() && s[*j].is_ascii_digit() {
            *j += 1;
        }
        *j - start
    };
    let n = digits(&mut j);
    if n == 0 {
        return if j == s.len() { Scan::Incomplete } else { Scan::Invalid };
    }
    if s[j - n] == b'0' && n > 1 {
        return Scan::Invalid;
    }
    if j < s.len() && s[j] == b'.' {
        j += 1;
        if digits(&mut j) == 0 {
            return if j == s.len() { Scan::Incomplete } else { Scan::Invalid };
        }
    }
    if j < s.len() && (s[j] == b'e' || s[j] == b'E') {
        j += 1;
        if j < s.len() && (s[j] == b'+' || s[j] == b'-') {
            j += 1;
        }
        if digits(&mut j) == 0 {
            return if j == s.len() { Scan::Incomplete } else { Scan::Invalid };
        }
    }
    // A number at the very end may go on.
    if j == s.len() {
        Scan::Incomplete
    } else {
        Scan::End(j)
    }
}

fn string(s: &[u8], i: usize) -> Scan {
    let mut j = i + 1;
    while j < s.len() {
        match s[j] {
            b'"' => return Scan::End(j + 1),
            b'\\' => {
                let Some(&e) = s.get(j + 1) else { return Scan::Incomplete };
                match e {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => j += 2,
                    b'u' => {
                        for k in 0..4 {
                            match s.get(j + 2 + k) {
                                None => return Scan::Incomplete,
                                Some(h) if h.is_ascii_hexdigit() => {}
                                Some(_) => return Scan::Invalid,
                            }
                        }
                        j += 6;
                    }
                    _ => return Scan::Invalid,
                }
            }
            c if c < 0x20 => return Scan::Invalid,
            _ => j += 1,
        }
    }
    Scan::Incomplete
}

fn container(s: &[u8], i: usize, depth: usize, object: bool) -> Scan {
    let close = if object { b'}' } else { b']' };
    let mut j = ws(s, i + 1);
    if j == s.len() {
        return Scan::Incomplete;
    }
    if s[j] == close {
        return Scan::End(j + 1);
    }
    loop {
        if object {
            match string(s, j) {
                Scan::End(e) if s[j] == b'"' => j = ws(s, e),
                Scan::Incomplete if s.get(j) == Some(&b'"') => return Scan::Incomplete,
                _ => return if j == s.len() { Scan::Incomplete } else { Scan::Invalid },
            }
            match s.get(j) {
                None => return Scan::Incomplete,
                Some(b':') => j = ws(s, j + 1),
                Some(_) => return Scan::Invalid,
            }
        }
        match value_at(s, j, depth + 1) {
            Scan::End(e) => j = ws(s, e),
            other => return other,
        }
        match s.get(j) {
            None => return Scan::Incomplete,
            Some(&c) if c == close => return Scan::End(j + 1),
            Some(b',') => j = ws(s, j + 1),
            Some(_) => return Scan::Invalid,
        }
        if j == s.len() {
            return Scan::Incomplete;
        }
    }
}

/// One member of an object being written: its key, and its value's text (to `end` when the
/// value is complete, to the end of the text otherwise).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub key: String,
    pub start: usize,
    /// None: the value is still being written (it runs to the end of the text).
    pub end: Option<usize>,
}

/// An object being written, read member by member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartialObject {
    pub members: Vec<Member>,
    /// Where the object ends (after its `}`), None while it is being written.
    pub end: Option<usize>,
}

impl PartialObject {
    pub fn get(&self, key: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.key == key)
    }
}

/// Reads the object starting at `i` (a `{`) as far as the text goes; None when it is not
/// (the beginning of) a JSON object. A member appears once its key is complete.
pub fn object(s: &str, i: usize) -> Option<PartialObject> {
    let b = s.as_bytes();
    if b.get(i) != Some(&b'{') {
        return None;
    }
    let mut out = PartialObject { members: Vec::new(), end: None };
    let mut j = ws(b, i + 1);
    if j == b.len() {
        return Some(out);
    }
    if b[j] == b'}' {
        out.end = Some(j + 1);
        return Some(out);
    }
    loop {
        if b.get(j) != Some(&b'"') {
            return (j == b.len()).then_some(out);
        }
        let key_end = match string(b, j) {
            Scan::End(e) => e,
            Scan::Incomplete => return Some(out),
            Scan::Invalid => return None,
        };
        let key: String = serde_json::from_str(&s[j..key_end]).ok()?;
        j = ws(b, key_end);
        match b.get(j) {
            None => return Some(out),
            Some(b':') => j = ws(b, j + 1),
            Some(_) => return None,
        }
        if j == b.len() {
            out.members.push(Member { key, start: j, end: None });
            return Some(out);
        }
        match value_at(b, j, 1) {
            Scan::End(e) => {
                out.members.push(Member { key, start: j, end: Some(e) });
                j = ws(b, e);
            }
            Scan::Incomplete => {
                out.members.push(Member { key, start: j, end: None });
                return Some(out);
            }
            Scan::Invalid => return None,
        }
        match b.get(j) {
            None => return Some(out),
            Some(b'}') => {
                out.end = Some(j + 1);
                return Some(out);
            }
            Some(b',') => j = ws(b, j + 1),
            Some(_) => return None,
        }
        if j == b.len() {
            return Some(out);
        }
    }
}

/// The decoded text of a JSON string value being written (`s[i]` is its `"`): as much as is
/// certain (an escape cut off is left out).
pub fn partial_string(s: &str, i: usize) -> String {
    match string(s.as_bytes(), i) {
        Scan::End(e) => serde_json::from_str(&s[i..e]).unwrap_or_default(),
        Scan::Invalid => String::new(),
        Scan::Incomplete => {
            // Cut before a trailing incomplete escape, then close the string.
            let b = s.as_bytes();
            let mut cut = b.len();
            let mut j = i + 1;
            while j < b.len() {
                if b[j] == b'\\' {
                    let need = if b.get(j + 1) == Some(&b'u') { 6 } else { 2 };
                    if j + need > b.len() {
                        cut = j;
                        break;
                    }
                    j += need;
                } else {
                    j += 1;
                }
            }
            let mut text = s[i..cut].to_string();
            text.push('"');
            // A \uD83D high surrogate waiting for its pair does not decode alone: drop it.
            serde_json::from_str(&text).unwrap_or_else(|_| {
                let t = &s[i..cut.saturating_sub(6).max(i + 1)];
                serde_json::from_str(&format!("{t}\"")).unwrap_or_default()
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_end_wait_or_fail() {
        assert_eq!(value(r#"{"a": [1, 2.5e3, "x\"y"], "b": null} tail"#, 0), Scan::End(36));
        assert_eq!(value(r#"{"a": [1, 2"#, 0), Scan::Incomplete);
        assert_eq!(value(r#"{"a" 1}"#, 0), Scan::Invalid);
        assert_eq!(value("12", 0), Scan::Incomplete);
        assert_eq!(value("12,", 0), Scan::End(2));
        assert_eq!(value("tru", 0), Scan::Incomplete);
        assert_eq!(value("trux", 0), Scan::Invalid);
        assert_eq!(value(r#""\u00"#, 0), Scan::Incomplete);
        assert_eq!(value("01", 0), Scan::Invalid);
        // Every prefix of a valid document is incomplete or ends it.
        let doc = r#"{"name": "f", "arguments": {"x": [true, false, null, -0.5, "é\n"]}}"#;
        for n in 0..doc.len() {
            if doc.is_char_boundary(n) {
                assert_eq!(value(&doc[..n], 0), Scan::Incomplete, "prefix {n}");
            }
        }
        assert_eq!(value(doc, 0), Scan::End(doc.len()));
    }

    #[test]
    fn objects_read_member_by_member() {
        let s = r#"{"name": "get_time", "arguments": {"city": "To"#;
        let o = object(s, 0).unwrap();
        assert_eq!(o.members.len(), 2);
        assert_eq!(&s[o.members[0].start..o.members[0].end.unwrap()], "\"get_time\"");
        assert_eq!(o.members[1].key, "arguments");
        assert_eq!(o.members[1].end, None);
        assert_eq!(o.end, None);
        assert!(object(r#"{"a": 1 x"#, 0).is_none());
        let whole = r#"{"a": 1}"#;
        assert_eq!(object(whole, 0).unwrap().end, Some(whole.len()));
    }

    #[test]
    fn partial_strings_decode_what_is_certain() {
        assert_eq!(partial_string(r#""ab\"c"#, 0), "ab\"c");
        assert_eq!(partial_string(r#""ab\"#, 0), "ab");
        assert_eq!(partial_string(r#""ab\u00e"#, 0), "ab");
        assert_eq!(partial_string(r#""ab\u00e9""#, 0), "abé");
    }
}

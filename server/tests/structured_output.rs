//! Structured output end to end: deepseek-server on the tiny random qwen2 model
//! (tests/data/tiny), whose text is noise, so whatever structure the output has is the
//! grammar's doing. JSON-object and JSON-schema requests (chat `response_format`, `json_schema`
//! on both endpoints, whole and streamed, greedy and sampled) must give JSON — whole when the
//! request stopped by itself, a valid prefix when max_tokens cut it — and values the schema
//! allows; `grammar` must give exactly its language; and the same requests without a grammar
//! must give text that is not JSON (so the checks could fail). Bad grammars and schemas are
//! refused with a 400 that names the reason, at submission.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start() -> Server {
    let model = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/tiny/tiny-qwen2-f32.gguf");
    assert!(model.is_file(), "{}", model.display());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(env!("CARGO_BIN_EXE_deepseek-server"))
        .args(["-m", model.to_str().unwrap(), "--port", &port.to_string(), "-t", "1", "-np", "2", "-c", "2048"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server");
    let srv = Server { child, port };
    let t0 = Instant::now();
    loop {
        if let Ok((200, _)) = request(&srv, "GET", "/health", None) {
            return srv;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the server did not get ready");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One HTTP/1.1 exchange (Connection: close): the status and the body (chunked bodies joined).
fn request(srv: &Server, method: &str, path: &str, body: Option<&Value>) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", srv.port))?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let raw = String::from_utf8(raw).expect("UTF-8 response");
    let (head, rest) = raw.split_once("\r\n\r\n").expect("headers");
    let status: u16 = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("status");
    if !head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        return Ok((status, rest.to_string()));
    }
    let (mut out, mut rest) = (String::new(), rest);
    loop {
        let (size, tail) = rest.split_once("\r\n").expect("chunk size");
        let n = usize::from_str_radix(size.trim(), 16).expect("hex chunk size");
        if n == 0 {
            return Ok((status, out));
        }
        out.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
}

fn post(srv: &Server, path: &str, body: Value) -> (u16, Value) {
    let (status, text) = request(srv, "POST", path, Some(&body)).expect("the request");
    (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}")))
}

/// (text, finish_reason) of a whole chat or completions response.
fn output(resp: &Value) -> (String, String) {
    let c = &resp["choices"][0];
    let text = c["message"]["content"].as_str().or_else(|| c["text"].as_str()).unwrap_or_else(|| panic!("no text in {resp}"));
    (text.to_string(), c["finish_reason"].as_str().unwrap().to_string())
}

/// Whether `s` is one JSON value (Ok(true)), a proper prefix of one (Ok(false)), or neither.
fn json_prefix(s: &str) -> Result<bool, String> {
    struct P<'a> {
        s: &'a [u8],
        i: usize,
    }
    impl P<'_> {
        fn eof(&self) -> bool {
            self.i >= self.s.len()
        }
        fn ws(&mut self) {
            while !self.eof() && b" \t\n\r".contains(&self.s[self.i]) {
                self.i += 1;
            }
        }
        fn err<T>(&self, what: &str) -> Result<T, String> {
            Err(format!("{what} at byte {}", self.i))
        }
        /// Ok(true): a whole value was read; Ok(false): the input ended inside it.
        fn value(&mut self) -> Result<bool, String> {
            self.ws();
            if self.eof() {
                return Ok(false);
            }
            match self.s[self.i] {
                b'{' => self.container(b'}', true),
                b'[' => self.container(b']', false),
                b'"' => self.string(),
                b't' => self.literal(b"true"),
                b'f' => self.literal(b"false"),
                b'n' => self.literal(b"null"),
                b'-' | b'0'..=b'9' => self.number(),
                _ => self.err("not a value"),
            }
        }
        fn container(&mut self, close: u8, object: bool) -> Result<bool, String> {
            self.i += 1;
            self.ws();
            if self.eof() {
                return Ok(false);
            }
            if self.s[self.i] == close {
                self.i += 1;
                return Ok(true);
            }
            loop {
                if object {
                    self.ws();
                    if self.eof() {
                        return Ok(false);
                    }
                    if self.s[self.i] != b'"' {
                        return self.err("a key must be a string");
                    }
                    if !self.string()? {
                        return Ok(false);
                    }
                    self.ws();
                    if self.eof() {
                        return Ok(false);
                    }
                    if self.s[self.i] != b':' {
                        return self.err("':' expected");
                    }
                    self.i += 1;
                }
                if !self.value()? {
                    return Ok(false);
                }
                self.ws();
                if self.eof() {
                    return Ok(false);
                }
                match self.s[self.i] {
                    b',' => self.i += 1,
                    c if c == close => {
                        self.i += 1;
                        return Ok(true);
                    }
                    _ => return self.err("',' or the closing bracket expected"),
                }
            }
        }
        fn string(&mut self) -> Result<bool, String> {
            self.i += 1;
            while !self.eof() {
                match self.s[self.i] {
                    b'"' => {
                        self.i += 1;
                        return Ok(true);
                    }
                    b'\\' => {
                        self.i += 1;
                        if self.eof() {
                            return Ok(false);
                        }
                        match self.s[self.i] {
                            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                            b'u' => {
                                for _ in 0..4 {
                                    self.i += 1;
                                    if self.eof() {
                                        return Ok(false);
                                    }
                                    if !self.s[self.i].is_ascii_hexdigit() {
                                        return self.err("bad \\u escape");
                                    }
                                }
                                self.i += 1;
                            }
                            _ => return self.err("bad escape"),
                        }
                    }
                    c if c < 0x20 => return self.err("control character in a string"),
                    _ => self.i += 1,
                }
            }
            Ok(false)
        }
        fn literal(&mut self, lit: &[u8]) -> Result<bool, String> {
            let n = lit.len().min(self.s.len() - self.i);
            if self.s[self.i..self.i + n] != lit[..n] {
                return self.err("bad literal");
            }
            self.i += n;
            Ok(n == lit.len())
        }
        fn digits(&mut self) -> usize {
            let start = self.i;
            while !self.eof() && self.s[self.i].is_ascii_digit() {
                self.i += 1;
            }
            self.i - start
        }
        /// A number the input ends in could go on, so it counts as unfinished.
        fn number(&mut self) -> Result<bool, String> {
            if self.s[self.i] == b'-' {
                self.i += 1;
            }
            if self.eof() {
                return Ok(false);
            }
            if self.s[self.i] == b'0' {
                self.i += 1;
            } else if self.digits() == 0 {
                return self.err("digit expected");
            }
            if !self.eof() && self.s[self.i] == b'.' {
                self.i += 1;
                if self.digits() == 0 {
                    return if self.eof() { Ok(false) } else { self.err("digit expected after '.'") };
                }
            }
            if !self.eof() && (self.s[self.i] == b'e' || self.s[self.i] == b'E') {
                self.i += 1;
                if !self.eof() && (self.s[self.i] == b'+' || self.s[self.i] == b'-') {
                    self.i += 1;
                }
                if self.digits() == 0 {
                    return if self.eof() { Ok(false) } else { self.err("digit expected in the exponent") };
                }
            }
            Ok(!self.eof())
        }
    }
    let mut p = P { s: s.as_bytes(), i: 0 };
    let whole = p.value()?;
    p.ws();
    if !p.eof() {
        return p.err("text after the value");
    }
    Ok(whole)
}

#[test]
fn the_prefix_checker_decides() {
    assert_eq!(json_prefix(r#"{"a": [1, -2.5e3, "x\"y", true, null], "b": {}}"#), Ok(true));
    assert_eq!(json_prefix(r#"{"a": [1, -2.5e"#), Ok(false));
    assert_eq!(json_prefix(r#"{"a": tr"#), Ok(false));
    assert_eq!(json_prefix("{\n\t  \"k\\u00"), Ok(false));
    assert!(json_prefix(r#"{"a" 1}"#).is_err());
    assert!(json_prefix(r#"{"a": 01}"#).is_err());
    assert!(json_prefix(r#"{"a": 1} x"#).is_err());
    assert!(json_prefix("x{").is_err());
    assert!(json_prefix(r#"{"a": fals}"#).is_err());
}

/// The output of a JSON-constrained request: a whole JSON value if it stopped by itself, a
/// prefix of one if max_tokens cut it. Returns the value when whole.
fn check_json(text: &str, finish: &str, what: &str) -> Option<Value> {
    match finish {
        "stop" => Some(serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: stopped, but {text:?} is not one JSON value: {e}"))),
        // (the cut may also fall just where the value is whole)
        "length" => {
            assert!(json_prefix(text).is_ok(), "{what}: cut by max_tokens, {text:?} must be a prefix of JSON: {:?}", json_prefix(text));
            None
        }
        other => panic!("{what}: finish_reason {other}"),
    }
}

fn chat(content: &str, extra: Value) -> Value {
    let mut body = json!({"messages": [{"role": "user", "content": content}]});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

/// The settings each check runs under: greedy, and sampled with several seeds (the tiny
/// model's sampled text wanders far from anything JSON-like).
fn settings() -> Vec<Value> {
    let mut v = vec![json!({"temperature": 0.0})];
    for seed in 1..=5 {
        v.push(json!({"temperature": 1.0, "seed": seed}));
        v.push(json!({"temperature": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": seed + 100}));
    }
    v
}

fn merged(a: &Value, b: &Value) -> Value {
    let mut m = a.as_object().unwrap().clone();
    m.extend(b.as_object().unwrap().clone());
    Value::Object(m)
}

#[test]
fn structured_output_end_to_end() {
    let srv = start();

    // Without a grammar the noise is not JSON: what the checks below see is the grammar's.
    let mut not_json = 0;
    for s in settings() {
        let (status, r) = post(&srv, "/v1/chat/completions", chat("Reply in JSON.", merged(&s, &json!({"max_tokens": 40}))));
        assert_eq!(status, 200, "{r}");
        let (text, _) = output(&r);
        not_json += json_prefix(&text).is_err() as usize;
    }
    assert!(not_json >= 10, "only {not_json} of 11 unconstrained outputs are not JSON");

    // response_format json_object: any JSON object.
    let mut whole = 0;
    for s in settings() {
        let (status, r) = post(&srv, "/v1/chat/completions", chat("Reply in JSON.", merged(&s, &json!({"max_tokens": 120, "response_format": {"type": "json_object"}}))));
        assert_eq!(status, 200, "{r}");
        let (text, finish) = output(&r);
        if let Some(v) = check_json(&text, &finish, &format!("json_object {s}")) {
            assert!(v.is_object(), "{text:?}");
            whole += 1;
        }
    }
    assert!(whole >= 3, "only {whole} json_object outputs ended by themselves");

    // A bounded schema: every output must end within max_tokens and keep to the schema.
    let person = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3}
        },
        "required": ["name", "age"],
        "additionalProperties": false
    });
    let check_person = |v: &Value, what: &str| {
        let o = v.as_object().unwrap_or_else(|| panic!("{what}: {v} is not an object"));
        assert!(o.keys().all(|k| ["name", "age", "tags"].contains(&k.as_str())), "{what}: {v}");
        let name = o["name"].as_str().unwrap_or_else(|| panic!("{what}: {v}"));
        assert!((1..=8).contains(&name.chars().count()), "{what}: {v}");
        let age = o["age"].as_i64().unwrap_or_else(|| panic!("{what}: {v}"));
        assert!((0..=120).contains(&age), "{what}: {v}");
        if let Some(tags) = o.get("tags") {
            let tags = tags.as_array().unwrap_or_else(|| panic!("{what}: {v}"));
            assert!(tags.len() <= 3 && tags.iter().all(|t| ["red", "green", "blue"].contains(&t.as_str().unwrap_or(""))), "{what}: {v}");
        }
    };
    for (i, s) in settings().iter().enumerate() {
        // the OpenAI form, and llama-server's json_schema field
        let extra = if i % 2 == 0 { json!({"response_format": {"type": "json_schema", "json_schema": {"name": "person", "strict": true, "schema": person}}}) } else { json!({"json_schema": person}) };
        let (status, r) = post(&srv, "/v1/chat/completions", chat("Who?", merged(&merged(s, &extra), &json!({"max_tokens": 400}))));
        assert_eq!(status, 200, "{r}");
        let (text, finish) = output(&r);
        assert_eq!(finish, "stop", "person {s}: a bounded schema ends within 400 tokens: {text:?}");
        check_person(&check_json(&text, &finish, "person").unwrap(), &format!("person {s}"));
    }

    // json_object with a schema, streamed: the deltas join into the same kind of output.
    for s in settings().iter().take(5) {
        let body = chat("List.", merged(s, &json!({"max_tokens": 200, "stream": true, "response_format": {"type": "json_object", "schema": {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 4}}})));
        let (status, sse) = request(&srv, "POST", "/v1/chat/completions", Some(&body)).unwrap();
        assert_eq!(status, 200, "{sse}");
        let (mut text, mut finish) = (String::new(), String::new());
        for line in sse.lines().filter_map(|l| l.strip_prefix("data: ")).filter(|l| *l != "[DONE]") {
            let v: Value = serde_json::from_str(line).unwrap();
            let c = &v["choices"][0];
            text += c["delta"]["content"].as_str().unwrap_or("");
            if let Some(f) = c["finish_reason"].as_str() {
                finish = f.to_string();
            }
        }
        assert_eq!(finish, "stop", "{text:?}");
        let v = check_json(&text, &finish, "streamed array").unwrap();
        let a = v.as_array().unwrap_or_else(|| panic!("{v}"));
        assert!((1..=4).contains(&a.len()) && a.iter().all(Value::is_boolean), "{v}");
    }

    // Completions: json_schema, and a GBNF grammar whose language is small enough to list.
    for s in settings() {
        let (status, r) = post(&srv, "/v1/completions", merged(&s, &json!({"prompt": "The answer:", "max_tokens": 100, "json_schema": {"enum": ["yes", "no", 42, null]}})));
        assert_eq!(status, 200, "{r}");
        let (text, finish) = output(&r);
        let v = check_json(&text, &finish, "enum").expect("an enum ends by itself");
        assert!([json!("yes"), json!("no"), json!(42), Value::Null].contains(&v), "{text:?}");

        let (status, r) = post(&srv, "/v1/completions", merged(&s, &json!({"prompt": "Say:", "max_tokens": 100, "grammar": "root ::= (\"yes\" | \"no\") \" \" [a-c]{1,3} \"!\""})));
        assert_eq!(status, 200, "{r}");
        let (text, finish) = output(&r);
        assert_eq!(finish, "stop", "{text:?}");
        let rest = text.strip_prefix("yes ").or_else(|| text.strip_prefix("no ")).unwrap_or_else(|| panic!("{text:?}"));
        let word = rest.strip_suffix('!').unwrap_or_else(|| panic!("{text:?}"));
        assert!((1..=3).contains(&word.len()) && word.bytes().all(|b| (b'a'..=b'c').contains(&b)), "{text:?}");
    }

    // Refused with the reason, before anything is generated.
    let refused = |path: &str, body: Value, words: &[&str]| {
        let (status, r) = post(&srv, path, body.clone());
        assert_eq!(status, 400, "{body} → {r}");
        let msg = r["error"]["message"].as_str().unwrap_or_default();
        for w in words {
            assert!(msg.contains(w), "{body}: {w:?} not in {msg:?}");
        }
    };
    refused("/v1/chat/completions", chat("x", json!({"grammar": "root ::= foo"})), &["failed to parse grammar", "Undefined rule identifier 'foo'"]);
    refused("/v1/completions", json!({"prompt": "x", "grammar": "root ::= \"a"}), &["failed to parse grammar", "unexpected end of input"]);
    refused("/v1/completions", json!({"prompt": "x", "grammar": "start ::= \"a\""}), &["grammar does not contain a 'root' symbol"]);
    refused("/v1/completions", json!({"prompt": "x", "grammar": "root ::= root \"a\""}), &["left recursion"]);
    refused("/v1/chat/completions", chat("x", json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "kaboom"}}}})), &["JSON schema conversion failed:\nJSON schema error at #: unrecognized type kaboom"]);
    refused("/v1/chat/completions", chat("x", json!({"response_format": {"type": "xml"}})), &["response_format type must be one of \"text\" or \"json_object\", but got: xml"]);
    refused("/v1/chat/completions", chat("x", json!({"json_schema": {}, "grammar": "root ::= \"a\""})), &["Cannot use both json_schema and grammar"]);
    refused("/v1/completions", json!({"prompt": "x", "json_schema": {"type": "string", "pattern": "^(a$"}}), &["\"json_schema\": JSON schema conversion failed:\nInvalid pattern ^(a$: unbalanced parentheses"]);
    refused("/v1/completions", json!({"prompt": "x", "response_format": {"type": "json_object"}}), &["response_format", "json_schema"]);
    refused("/v1/chat/completions", chat("x", json!({"grammar": 5})), &["'grammar' must be a string"]);
    refused("/v1/chat/completions", chat("x", json!({"tools": [{"type": "function", "function": {"name": "f"}}], "grammar": "root ::= \"a\""})), &["Cannot use custom grammar constraints with tools."]);
    // and the server still serves
    let (status, r) = post(&srv, "/v1/chat/completions", chat("x", json!({"max_tokens": 3})));
    assert_eq!(status, 200, "{r}");
}

//! llama_chat_apply_template against llama.cpp b11312's own output, byte for byte, through the
//! C API: tests/data/chat/chat-templates.jsonl (tests/data/gen/chat_golden.c: the DeepSeek, Qwen
//! and Llama templates on two conversations) and tests/data/chat/builtin-templates.json
//! (`chat_golden --all`: every built-in name and upstream's list of them, the template strings of
//! upstream's tests/test-chat-template.cpp and strings of each family's detection markers, on
//! conversations that exercise system messages, trims, odd roles and non-UTF-8 bytes).

mod common;

use std::ffi::{CStr, CString};

use common::json::Json;
use deepseek::api::chat::{llama_chat_apply_template, llama_chat_builtin_templates};
use deepseek::api::types::llama_chat_message;
use deepseek::chat;
use deepseek::gguf::GgufFile;

/// The two conversations of chat_golden.c.
fn conversation(i: usize) -> Vec<(&'static str, &'static str)> {
    match i {
        0 => vec![("system", "You are a helpful assistant."), ("user", "Hello!"), ("assistant", "Hi, how can I help?"), ("user", "What is 2+2?")],
        _ => vec![("user", "写一首关于内存的诗"), ("assistant", "<think>\nshort\n</think>\n\n内存如水"), ("user", "Thanks")],
    }
}

/// The template text a fixture line names: a built-in name, @FILE, or a GGUF's own template.
fn template_text(name: &str) -> String {
    if let Some(file) = name.strip_prefix('@') {
        std::fs::read_to_string(common::data("chat/templates").join(file)).unwrap()
    } else if name.ends_with(".gguf") {
        let f = GgufFile::open(&common::data(name), true).unwrap();
        f.get_str("tokenizer.chat_template").expect("the GGUF has a chat template").to_string()
    } else {
        name.to_string()
    }
}

/// Runs llama_chat_apply_template with a buffer of `cap` bytes; returns (result, buffer).
fn apply(tmpl: &str, conv: &[(&str, &str)], add_ass: bool, cap: usize) -> (i32, Vec<u8>) {
    let conv: Vec<(&[u8], &[u8])> = conv.iter().map(|(r, c)| (r.as_bytes(), c.as_bytes())).collect();
    apply_bytes(tmpl.as_bytes(), &conv, add_ass, cap)
}

/// `apply` for strings of any bytes (without NULs).
fn apply_bytes(tmpl: &[u8], conv: &[(&[u8], &[u8])], add_ass: bool, cap: usize) -> (i32, Vec<u8>) {
    let owned: Vec<(CString, CString)> = conv.iter().map(|(r, c)| (CString::new(*r).unwrap(), CString::new(*c).unwrap())).collect();
    let msgs: Vec<llama_chat_message> = owned.iter().map(|(r, c)| llama_chat_message { role: r.as_ptr(), content: c.as_ptr() }).collect();
    let t = CString::new(tmpl).unwrap();
    let mut buf = vec![0u8; cap];
    // SAFETY: messages and buffer are live for the call, cap bytes writable.
    let n = unsafe { llama_chat_apply_template(t.as_ptr(), msgs.as_ptr(), msgs.len(), add_ass, buf.as_mut_ptr().cast(), cap as i32) };
    (n, buf)
}

#[test]
fn every_fixture_line_is_byte_exact() {
    let text = std::fs::read_to_string(common::data("chat/chat-templates.jsonl")).unwrap();
    let mut checked = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let j = Json::parse(line);
        let name = j.get("template").str();
        let conv = conversation(j.get("conversation").num() as usize);
        let add = j.get("add_assistant").num() != 0.0;
        let expect_n = j.get("result").num() as i32;
        let (n, buf) = apply(&template_text(name), &conv, add, 8192);
        assert_eq!(n, expect_n, "{name} conv {} add {add}: length", j.get("conversation").num());
        if expect_n >= 0 {
            let expect = j.get("text").str();
            assert_eq!(std::str::from_utf8(&buf[..n as usize]).unwrap(), expect, "{name}: text");
        }
        checked += 1;
    }
    assert_eq!(checked, 44);
}

#[test]
fn small_buffer_gets_the_needed_length_and_a_prefix() {
    let conv = conversation(0);
    let (full, whole) = apply("chatml", &conv, true, 8192);
    let (n, part) = apply("chatml", &conv, true, 10);
    assert_eq!(n, full);
    assert_eq!(&part[..10], &whole[..10]);
}

#[test]
fn unknown_template_is_minus_one() {
    assert_eq!(apply("{% for m in messages %}{{ m.content }}{% endfor %}", &conversation(0), true, 256).0, -1);
}

/// llama_chat_builtin_templates' names, through the C API.
fn builtin_names() -> Vec<String> {
    // SAFETY: NULL output with len 0 only asks for the count.
    let n = unsafe { llama_chat_builtin_templates(std::ptr::null_mut(), 0) };
    let mut names = vec![std::ptr::null(); n as usize];
    // SAFETY: names has n writable slots.
    assert_eq!(unsafe { llama_chat_builtin_templates(names.as_mut_ptr(), names.len()) }, n);
    // SAFETY: the library's names are static NUL-terminated strings.
    names.iter().map(|&p| unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string()).collect()
}

#[test]
fn builtin_list_names_templates_that_format() {
    let names = builtin_names();
    for name in &names {
        assert!(apply(name, &conversation(0), true, 4096).0 > 0, "{name} is listed but does not format");
    }
    // a short `len` gets the first names and the whole count
    let mut two = [std::ptr::null(); 2];
    // SAFETY: two writable slots.
    assert_eq!(unsafe { llama_chat_builtin_templates(two.as_mut_ptr(), 2) } as usize, names.len());
    // SAFETY: static NUL-terminated strings.
    assert_eq!(unsafe { CStr::from_ptr(two[1]) }.to_str().unwrap(), names[1]);
}

/// A fixture string: JSON text, or {"hex": ...} for bytes that are not UTF-8.
fn bytes_of(j: &Json) -> Vec<u8> {
    match j {
        Json::Str(s) => s.as_bytes().to_vec(),
        _ => {
            let hex = j.get("hex").str();
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
        }
    }
}

fn builtin_fixture() -> Json {
    Json::parse(&std::fs::read_to_string(common::data("chat/builtin-templates.json")).unwrap())
}

#[test]
fn builtin_list_is_upstreams() {
    let fixture = builtin_fixture();
    let upstream: Vec<&str> = fixture.get("builtin_names").arr().iter().map(Json::str).collect();
    assert_eq!(builtin_names(), upstream);
}

#[test]
fn every_builtin_and_template_string_matches_upstream() {
    let fixture = builtin_fixture();
    let convs: Vec<Vec<(Vec<u8>, Vec<u8>)>> = fixture.get("conversations").arr().iter().map(|c| c.arr().iter().map(|m| (bytes_of(&m.arr()[0]), bytes_of(&m.arr()[1]))).collect()).collect();
    let (mut checked, mut failures) = (0, Vec::new());
    for case in fixture.get("cases").arr() {
        let name = case.get("name").str();
        let tmpl = case.opt("template").map_or(name, Json::str);
        for run in case.get("runs").arr() {
            let r = run.arr();
            let c = r[0].num() as usize;
            let conv: Vec<(&[u8], &[u8])> = convs[c].iter().map(|(r, c)| (&r[..], &c[..])).collect();
            let (without, with) = (r[1].num() as i32, r[2].num() as i32);
            let mut expect_with = Vec::new();
            for (add, expect_n) in [(false, without), (true, with)] {
                let expect: Vec<u8> = match (expect_n >= 0, add) {
                    (false, _) => Vec::new(),
                    (true, false) => bytes_of(&r[3]),
                    (true, true) => [expect_with.clone(), bytes_of(&r[4])].concat(),
                };
                let (n, buf) = apply_bytes(tmpl.as_bytes(), &conv, add, 1 << 16);
                if n != expect_n || (n >= 0 && buf[..n as usize] != expect[..]) {
                    failures.push(format!(
                        "{name:?} conversation {c} add_ass {add}: {n} bytes {:?}, upstream {expect_n} bytes {:?}",
                        String::from_utf8_lossy(&buf[..n.max(0) as usize]),
                        String::from_utf8_lossy(&expect)
                    ));
                }
                expect_with = expect;
                checked += 1;
            }
        }
    }
    assert!(failures.is_empty(), "{} of {checked} differ from upstream:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(checked, 54 * 8 * 2 + 71 * 2 + 36 * 4);
}

/// The fixture's strings reach every family (so the comparison above covers each branch of
/// upstream's detection and formatting, dots1 included, which has no built-in name).
#[test]
fn fixture_covers_every_family() {
    let fixture = builtin_fixture();
    let mut families: Vec<String> = fixture.get("cases").arr().iter().filter_map(|c| chat::detect(c.opt("template").map_or(c.get("name").str(), Json::str))).map(|t| t.name().to_string()).collect();
    families.sort();
    families.dedup();
    let mut all: Vec<String> = builtin_names();
    all.push("dots1".into());
    all.sort();
    assert_eq!(families, all);
}

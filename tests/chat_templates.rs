//! llama_chat_apply_template against llama.cpp b11312's own output
//! (tests/data/chat/chat-templates.jsonl, made by tests/data/gen/chat_golden.c): every line,
//! byte for byte, through the C API.

mod common;

use std::ffi::{CStr, CString};

use common::json::Json;
use deepseek::api::chat::{llama_chat_apply_template, llama_chat_builtin_templates};
use deepseek::api::types::llama_chat_message;
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

#[test]
fn builtin_list_names_templates_that_format() {
    // SAFETY: NULL output with len 0 only asks for the count.
    let n = unsafe { llama_chat_builtin_templates(std::ptr::null_mut(), 0) };
    assert!(n >= 5);
    let mut names = vec![std::ptr::null(); n as usize];
    // SAFETY: names has n writable slots.
    assert_eq!(unsafe { llama_chat_builtin_templates(names.as_mut_ptr(), names.len()) }, n);
    let names: Vec<String> = names.iter().map(|&p| unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string()).collect();
    for required in ["deepseek", "deepseek2", "deepseek3", "chatml", "llama3"] {
        assert!(names.iter().any(|n| n == required), "{required} missing from {names:?}");
    }
    for name in &names {
        assert!(apply(name, &conversation(0), true, 4096).0 > 0, "{name} is listed but does not format");
    }
}

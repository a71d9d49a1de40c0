//! Tool calls and thinking through deepseek-server with the real `openai` client and LangChain
//! (tests/python/test_tools.py): Qwen2.5-Coder-0.5B with its GGUF's Jinja template for forced,
//! named, streamed and round-trip calls, and tiny DeepSeek fixtures with upstream's V3.1, V3.2
//! and V4 templates for a forced call generated and parsed back. The client's virtualenv is
//! scripts/server-venv.sh's; the model comes from scripts/fetch-models.sh qwen05.

mod common;

use std::path::PathBuf;
use std::process::Command;

#[test]
fn tool_calls_with_the_openai_client_and_langchain() {
    let root = common::root();
    let server = PathBuf::from(env!("CARGO_BIN_EXE_deepseek-server"));
    let model = common::model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen05");
    let python = common::python();
    let out = Command::new(&python).arg(root.join("server/tests/python/test_tools.py")).arg(&server).arg(&model).arg(root.join("tests/data")).output().expect("python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(out.status.success(), "tool checks failed:\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("all tool checks passed"), "{stdout}");
}

//! Tool calls and thinking through deepseek-server with the real `openai` client and LangChain
//! (tests/python/test_tools.py): Qwen2.5-Coder-0.5B with its GGUF's Jinja template for forced,
//! named, streamed and round-trip calls, and tiny DeepSeek fixtures with upstream's V3.1, V3.2
//! and V4 templates for a forced call generated and parsed back. The client's virtualenv is
//! scripts/server-venv.sh's; the model comes from scripts/fetch-models.sh qwen05.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn tool_calls_with_the_openai_client_and_langchain() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let server = PathBuf::from(env!("CARGO_BIN_EXE_deepseek-server"));
    let models = std::env::var_os("DEEPSEEK_MODELS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/deepseek/models"));
    let model = models.join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    assert!(model.is_file(), "{} is missing: scripts/fetch-models.sh qwen05", model.display());
    let venv = Command::new(root.join("scripts/server-venv.sh")).output().expect("scripts/server-venv.sh");
    assert!(venv.status.success(), "cannot make the client's virtualenv: {}", String::from_utf8_lossy(&venv.stderr));
    let python = String::from_utf8(venv.stdout).unwrap().trim().to_string();
    let out = Command::new(&python).arg(root.join("server/tests/python/test_tools.py")).arg(&server).arg(&model).arg(root.join("tests/data")).output().expect("python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(out.status.success(), "tool checks failed:\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("all tool checks passed"), "{stdout}");
}

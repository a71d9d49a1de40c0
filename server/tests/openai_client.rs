//! deepseek-server driven by the real `openai` Python client: tests/python/test_server.py
//! starts the server on loopback ports with SmolLM2-135M and checks every endpoint, streaming,
//! usage, stop strings, seeds, log-probabilities, disconnects, the API key, every bad request
//! and graceful shutdown, and that greedy output equals deepseek-cli's. The pinned client
//! lives in a virtualenv that scripts/server-venv.sh makes (PyPI on first use; .ci/run makes
//! it before the tests). Needs `cargo build --release` first (deepseek-cli, the model fetched).

mod common;

use std::path::PathBuf;
use std::process::Command;

#[test]
fn openai_client_against_the_server() {
    let root = common::root();
    let server = PathBuf::from(env!("CARGO_BIN_EXE_deepseek-server"));
    let cli = server.parent().unwrap().join("deepseek-cli");
    assert!(cli.is_file(), "{} is missing: run cargo build --release first", cli.display());
    let model = common::model("smollm2-135m-instruct-q4_1.gguf", "smollm2");
    let python = common::python();
    let out = Command::new(&python).arg(root.join("server/tests/python/test_server.py")).arg(&server).arg(&model).arg(&cli).output().expect("python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(out.status.success(), "server checks failed:\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("all server checks passed"), "{stdout}");
}

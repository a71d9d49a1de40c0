//! deepseek-server's web UI in a real browser: tests/python/test_webui.py drives Debian's
//! headless chromium (chromedriver, the pinned selenium of scripts/server-venv.sh) against the
//! server on SmolLM2-135M: the page streams an answer equal to the API's greedy one, stops
//! mid-stream, keeps the conversation across a reload, folds reasoning_content, says when the
//! model is loading, asks for the API key and shows the server's errors; and --no-webui,
//! --path, --api-prefix, --ui-config(-file). A missing chromium fails the test (.ci/run
//! installs it). Screenshots go to target/webui-test/.

mod common;

use std::path::PathBuf;
use std::process::Command;

#[test]
fn web_ui_in_chromium() {
    let root = common::root();
    let server = PathBuf::from(env!("CARGO_BIN_EXE_deepseek-server"));
    let model = common::model("smollm2-135m-instruct-q4_1.gguf", "smollm2");
    let python = common::python();
    let shots = root.join("target/webui-test");
    let out = Command::new(&python).arg(root.join("server/tests/python/test_webui.py")).arg(&server).arg(&model).arg(&shots).output().expect("python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(out.status.success(), "web UI checks failed:\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("all web UI checks passed"), "{stdout}");
}

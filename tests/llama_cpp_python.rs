//! llama-cpp-python 0.3.36 on libdeepseek: scripts/test-llama-cpp-python.sh installs the package
//! without its bundled llama.cpp (network on first use; the virtualenv is cached under target/)
//! and runs tests/python/test_llama_cpp_python.py on the real 0.5B model: import, tokenize,
//! greedy/streamed/seeded completion, chat completion, state save/load, embeddings; then
//! tests/python/test_grammar.py: JSON mode, a JSON schema, LlamaGrammar.from_string and
//! chatml-function-calling with a forced tool, each output parsed and validated.
//! Needs `cargo build --release` first (the library and deepseek-cli).

use std::path::PathBuf;
use std::process::Command;

#[test]
fn llama_cpp_python_runs_on_libdeepseek() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let cli = PathBuf::from(env!("CARGO_BIN_EXE_deepseek-cli"));
    // the library `cargo build --release` made (the one users load), this test build's CLI
    let out = Command::new(root.join("scripts/test-llama-cpp-python.sh"))
        .env("DEEPSEEK_LIB_DIR", root.join("target/release"))
        .env("DEEPSEEK_CLI", &cli)
        .output()
        .expect("scripts/test-llama-cpp-python.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(out.status.success(), "llama-cpp-python checks failed:\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("all llama-cpp-python checks passed"), "{stdout}");
    assert!(stdout.contains("all grammar checks passed"), "{stdout}");
}

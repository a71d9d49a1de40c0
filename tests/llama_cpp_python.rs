//! llama-cpp-python 0.3.36 on libdeepseek: scripts/test-llama-cpp-python.sh installs the package
//! without its bundled llama.cpp (network on first use; the virtualenv is cached under target/)
//! and runs tests/python/test_llama_cpp_python.py on the real 0.5B model: import, tokenize,
//! greedy/streamed/seeded completion, chat completion, state save/load, embeddings; then
//! tests/python/test_grammar.py: JSON mode, a JSON schema, LlamaGrammar.from_string and
//! chatml-function-calling with a forced tool, each output parsed and validated.
//! Needs `cargo build --release` first (the library), and deepseek-cli built in this test's
//! profile (`cargo build -p deepseek-cli --profile ci` for `cargo test --profile ci`: it is its
//! own workspace crate, so this package's tests do not build it).

use std::path::PathBuf;
use std::process::Command;

#[test]
fn llama_cpp_python_runs_on_libdeepseek() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // the library `cargo build --release` made (the one users load), the CLI of this test
    // build's profile (target/<profile>/, two levels above target/<profile>/deps/<this test>)
    let exe = std::env::current_exe().unwrap();
    let cli = exe.parent().and_then(|d| d.parent()).unwrap().join("deepseek-cli");
    assert!(cli.is_file(), "{} is missing: build it with cargo build -p deepseek-cli in this test's profile", cli.display());
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

//! Grammar sampling against llama.cpp b11312 through the C API: tests/data/grammar/gen/trace.c,
//! built against include/llama.h and the release library, replays the cases of
//! tests/data/grammar/cases.txt (upstream's grammars/*.gbnf, grammars generated from JSON schemas,
//! token references, tool calls, lazy triggers by words, patterns and tokens, clone, reset) on the
//! DeepSeek-R1 vocabulary; every step's allowed set (count, hash, and the whole set when small),
//! choice and end must equal the trace the same program wrote against upstream's libllama.so
//! (tests/data/grammar/traces/). Then the malformed-grammar corpus: the same accept/reject
//! decision for each of its grammars; a few short cases again under valgrind memcheck. Needs
//! `cargo build --release` (and `cargo build --profile memcheck --no-default-features`) first.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The program, compiled once for both tests (they run in parallel).
fn build_trace() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(compile).clone()
}

fn compile() -> PathBuf {
    let lib = root().join("target/release");
    assert!(lib.join("libdeepseek.so").exists(), "target/release/libdeepseek.so is missing: run `cargo build --release` first");
    let so0 = lib.join("libdeepseek.so.0");
    if !so0.exists() {
        let _ = std::os::unix::fs::symlink("libdeepseek.so", &so0);
    }
    let out = root().join("target/c_tests");
    std::fs::create_dir_all(&out).unwrap();
    let exe = out.join("grammar_trace");
    let status = Command::new("cc")
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-deprecated-declarations"])
        .arg("-I")
        .arg(root().join("include"))
        .arg(root().join("tests/data/grammar/gen/trace.c"))
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&lib)
        .args(["-ldeepseek", "-lm"])
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .status()
        .expect("cc");
    assert!(status.success(), "compiling trace.c failed");
    exe
}

fn vocab() -> PathBuf {
    root().join("tests/data/vocab/deepseek-r1-qwen.gguf")
}

/// Runs the trace program and compares its output with the reference, line by line.
fn compare(args: &[&str], reference: &str) {
    compare_with(Command::new(build_trace()), args, reference)
}

fn compare_with(mut cmd: Command, args: &[&str], reference: &str) {
    let dir = root().join("tests/data/grammar");
    let out = cmd.arg(vocab()).args(args).current_dir(&dir).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "trace failed:\n{stderr}");
    assert!(!stderr.contains("internal error"), "a panic was caught:\n{stderr}");
    let ours = String::from_utf8(out.stdout).unwrap();
    let expected = std::fs::read_to_string(dir.join("traces").join(reference)).unwrap();
    let mut case = "";
    for (i, (a, b)) in ours.lines().zip(expected.lines()).enumerate() {
        if b.starts_with("case ") {
            case = b;
        }
        assert_eq!(a, b, "line {} ({case}) differs from llama.cpp's trace", i + 1);
    }
    assert_eq!(ours.lines().count(), expected.lines().count(), "the traces differ in length");
}

#[test]
fn allowed_sets_equal_llama_cpp() {
    compare(&["cases.txt", "."], "cases.txt");
}

#[test]
fn malformed_grammars_decided_as_llama_cpp() {
    compare(&["--parse", "malformed.txt"], "malformed.txt");
}

/// A few short cases under valgrind memcheck against the memcheck build (the system allocator):
/// no memory error, nothing lost, and still llama.cpp's trace. Needs `cargo build --profile
/// memcheck --no-default-features` first (scripts/test.sh does).
#[test]
fn short_cases_under_memcheck() {
    let lib = root().join("target/memcheck");
    assert!(lib.join("libdeepseek.so").exists(), "target/memcheck/libdeepseek.so is missing: run `cargo build --profile memcheck --no-default-features` first");
    let so0 = lib.join("libdeepseek.so.0");
    if !so0.exists() {
        let _ = std::os::unix::fs::symlink("libdeepseek.so", &so0);
    }
    let mut cmd = Command::new("valgrind");
    cmd.args(["--tool=memcheck", "--leak-check=full", "--show-leak-kinds=definite,indirect,possible", "--errors-for-leak-kinds=definite,indirect,possible", "--error-exitcode=99", "--quiet"])
        .arg(build_trace())
        .env("LD_LIBRARY_PATH", &lib);
    compare_with(cmd, &["cases_memcheck.txt", "."], "cases_memcheck.txt");
}

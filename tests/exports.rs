//! Every function declared by the pinned upstream llama.h (b11312, as vendored by
//! llama-cpp-python 0.3.36) is declared by include/deepseek.h with the same signature and
//! exported by target/release/libdeepseek.so. Runs scripts/check-exports.py, which reads the
//! upstream header from tests/data/llama-b11312.h (a copy of the pinned header).

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn check(args: &[PathBuf]) -> (bool, String) {
    let out = Command::new("python3").arg(root().join("scripts/check-exports.py")).args(args).output().expect("python3");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn every_upstream_function_is_declared_and_exported() {
    let lib = root().join("target/release/libdeepseek.so");
    assert!(lib.exists(), "target/release/libdeepseek.so is missing: run `cargo build --release` first");
    let (ok, text) = check(&[root().join("tests/data/llama-b11312.h"), root().join("include/deepseek.h"), lib]);
    assert!(ok, "{text}");
    // About 255 declarations: a parse that finds far fewer would pass vacuously.
    let n: usize = text.lines().last().and_then(|l| l.split_whitespace().next()).and_then(|n| n.parse().ok()).unwrap_or(0);
    assert!(n >= 250, "only {n} upstream functions parsed:\n{text}");
}

#[test]
fn the_checker_reports_a_missing_function_and_a_changed_signature() {
    let dir = root().join("target/exports_test");
    std::fs::create_dir_all(&dir).unwrap();
    let ours = std::fs::read_to_string(root().join("include/deepseek.h")).unwrap();
    let broken = ours
        .replace("int32_t llama_split_path(", "int32_t llama_split_path_renamed(")
        .replace("void llama_batch_free(struct llama_batch batch)", "void llama_batch_free(struct llama_batch *batch)");
    assert_ne!(broken, ours, "the header changed: update this test's replacements");
    let path = dir.join("broken.h");
    std::fs::write(&path, broken).unwrap();
    let (ok, text) = check(&[root().join("tests/data/llama-b11312.h"), path]);
    assert!(!ok);
    assert!(text.contains("missing: llama_split_path\n"), "{text}");
    assert!(text.contains("signature differs: llama_batch_free"), "{text}");
}

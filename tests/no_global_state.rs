//! The grep-able rules of the concurrency and memory model, checked over the library's source:
//! no `static mut`, no thread-local storage, no blocking lock (mutex, read-write lock,
//! condition variable) anywhere in the library, and no `static` that holds growable data (a
//! process-wide cache). Fixed tables computed once (CPU features, Unicode flags) and atomics
//! are allowed. The command-line tool (cli/, whose fetch.rs the server shares) is a program, not
//! the library, and is exempt.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().unwrap() != "bin" {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_global_mutable_caches_or_locks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let growable = ["Vec", "String", "HashMap", "BTreeMap", "VecDeque", "RefCell", "HashSet"];
    let mut violations = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let mut in_tests = false;
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap().trim();
            if line.trim_start().starts_with("#[cfg(test)]") {
                in_tests = true;
            }
            if in_tests {
                continue;
            }
            let at = format!("{}:{}: {}", f.strip_prefix(root).unwrap().display(), i + 1, line.trim());
            if code.contains("static mut ") {
                violations.push(format!("static mut: {at}"));
            }
            if code.contains("thread_local!") {
                violations.push(format!("thread-local storage: {at}"));
            }
            if ["Mutex", "RwLock", "Condvar"].iter().any(|l| code.contains(l)) {
                violations.push(format!("blocking lock: {at}"));
            }
            let is_static = code.starts_with("static ") || code.starts_with("pub static ") || code.starts_with("pub(crate) static ");
            let names: Vec<&str> = code.split(|c: char| !c.is_alphanumeric() && c != '_').collect();
            if is_static && growable.iter().any(|g| names.contains(g)) {
                violations.push(format!("static holding growable data: {at}"));
            }
        }
    }
    assert!(files.len() > 50, "source files not found");
    assert!(violations.is_empty(), "{} violations:\n{}", violations.len(), violations.join("\n"));
}

/// Every test keeps the log guard that fails it on a caught panic ("internal error"): no Rust
/// test installs a log sink of its own (tests/common/log.rs installs the guard before `main` in
/// every binary with `mod common`, and every test that calls the C API has it), and every C test
/// program installs c_tests/log_guard.h's sink.
#[test]
fn every_test_keeps_the_log_guard() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut violations = Vec::new();
    for e in std::fs::read_dir(root.join("tests")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let name = p.file_name().unwrap().to_str().unwrap();
        if name != "no_global_state.rs" && text.contains("llama_log_set(") {
            violations.push(format!("{name} sets its own log sink"));
        }
        if text.contains("deepseek::api::") && !text.contains("mod common;") {
            violations.push(format!("{name} calls the C API without tests/common (and its log guard)"));
        }
    }
    let mut c_files = 0;
    for dir in ["c_tests", "c_tests/cmake_consumer"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if !p.extension().is_some_and(|x| x == "c" || x == "cpp") {
                continue;
            }
            c_files += 1;
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.strip_prefix(root).unwrap().display().to_string();
            // The ABI checks log nothing (the harness also fails on "internal error" in any
            // program's output); the CMake consumer is an installed-package example, not a test.
            let exempt = ["c_tests/abi.c", "c_tests/abi_generated.c", "c_tests/cmake_consumer/main.cpp"].contains(&name.as_str());
            if !exempt && (text.contains("llama_log_set(") || !text.contains("ds_log_guard_install()")) {
                violations.push(format!("{name} does not log through c_tests/log_guard.h"));
            }
        }
    }
    assert!(c_files >= 8, "C test programs not found");
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

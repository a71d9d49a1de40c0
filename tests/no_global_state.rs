//! The grep-able rules of the concurrency and memory model, checked over the library's source:
//! no `static mut`, no thread-local storage, no blocking lock (mutex, read-write lock,
//! condition variable) anywhere in the library, and no `static` that holds growable data (a
//! process-wide cache). Fixed tables computed once (CPU features, Unicode flags) and atomics
//! are allowed. The command-line tool (src/bin) is a program, not the library, and is exempt.

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

//! Builds the C programs of c_tests/ against include/llama.h and the release library, runs them,
//! and runs them again under valgrind memcheck (no errors; nothing definitely, indirectly or
//! possibly lost) against the memcheck build of the library: the same code with the system
//! allocator instead of jemalloc, whose arenas memcheck cannot see into. Both libraries must
//! have been built first (`cargo build --release` and `cargo build --profile memcheck
//! --no-default-features`, which the test command does).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use deepseek::api::model::{llama_model_default_params, llama_model_free, llama_model_load_from_file};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn lib_dir() -> PathBuf {
    let dir = root().join("target/release");
    assert!(dir.join("libdeepseek.so").exists(), "target/release/libdeepseek.so is missing: run `cargo build --release` first");
    // The library's SONAME is libdeepseek.so.0: programs linked with -ldeepseek load that name.
    let so0 = dir.join("libdeepseek.so.0");
    if !so0.exists() {
        let _ = std::os::unix::fs::symlink("libdeepseek.so", &so0);
    }
    dir
}

fn build(name: &str) -> PathBuf {
    compile(name, "c", "cc", "-std=c11")
}

/// c_tests/NAME.cpp, compiled as C++17 against the same header and library.
fn build_cxx(name: &str) -> PathBuf {
    compile(name, "cpp", "c++", "-std=c++17")
}

fn compile(name: &str, ext: &str, compiler: &str, std: &str) -> PathBuf {
    let out_dir = root().join("target/c_tests");
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join(name);
    let status = Command::new(compiler)
        .arg(std)
        .args(["-O1", "-g", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"])
        .arg("-I").arg(root().join("include"))
        .arg(root().join(format!("c_tests/{name}.{ext}")))
        .arg("-o").arg(&exe)
        .arg("-L").arg(lib_dir())
        .arg("-ldeepseek").arg("-lm")
        .arg(format!("-Wl,-rpath,{}", lib_dir().display()))
        .status()
        .expect("cc");
    assert!(status.success(), "compiling c_tests/{name}.{ext} failed");
    exe
}

/// Runs a program; returns its stdout. It fails on a non-zero exit or, for a program that
/// leaves the library's default log sink in place, on a logged "internal error" (a panic caught
/// at the boundary; the others abort on one themselves: c_tests/log_guard.h).
fn run(exe: &Path, args: &[&str]) -> String {
    let out = Command::new(exe).args(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{} failed:\n{text}", exe.display());
    assert!(!text.contains("internal error"), "{}: a panic was caught at the boundary:\n{text}", exe.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The memcheck build's directory (it holds libdeepseek.so.0, which the programs load first
/// through LD_LIBRARY_PATH: their RUNPATH points at the release build).
fn memcheck_lib_dir() -> PathBuf {
    let dir = root().join("target/memcheck");
    assert!(dir.join("libdeepseek.so").exists(), "target/memcheck/libdeepseek.so is missing: run `cargo build --profile memcheck --no-default-features` first");
    let so0 = dir.join("libdeepseek.so.0");
    if !so0.exists() {
        let _ = std::os::unix::fs::symlink("libdeepseek.so", &so0);
    }
    dir
}

fn valgrind(exe: &Path, args: &[&str]) -> String {
    let have = Command::new("valgrind").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(have, "valgrind is required for the C harness (the CI script installs it)");
    let out = Command::new("valgrind")
        .args(["--tool=memcheck", "--leak-check=full", "--show-leak-kinds=definite,indirect,possible", "--errors-for-leak-kinds=definite,indirect,possible", "--error-exitcode=99", "--quiet"])
        .arg(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", memcheck_lib_dir())
        .env("DEEPSEEK_VALGRIND", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "valgrind reported problems in {}:\n{text}", exe.display());
    assert!(!text.contains("internal error"), "{}: a panic was caught at the boundary:\n{text}", exe.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn abi_layout_and_defaults() {
    let exe = build("abi");
    run(&exe, &[]);
    valgrind(&exe, &[]);
}

/// c_tests/abi_generated.c (scripts/gen-abi-test.py) holds upstream's value of every struct
/// size, field offset, enum value and #define of llama.h as _Static_asserts: compiling it
/// against our header is the test.
#[test]
fn abi_matches_upstream_header() {
    let exe = build("abi_generated");
    run(&exe, &[]);
}

#[test]
fn malformed_gguf_files_are_rejected() {
    let exe = build("malformed");
    run(&exe, &[]);
    valgrind(&exe, &[]);
}

#[test]
fn extended_batch_api_decodes_like_llama_decode() {
    let exe = build("batch_ext");
    let model = root().join("tests/data/tiny/tiny-qwen2-q8_0.gguf");
    run(&exe, &[model.to_str().unwrap()]);
    valgrind(&exe, &[model.to_str().unwrap()]);
}

/// Upstream's staging C++ API (llama-ext.h) that upstream's libllama-common calls, under its
/// C++ names; the memory breakdown is a real libstdc++ std::map the caller can use and destroy.
#[test]
fn upstream_staging_cxx_api() {
    let exe = build_cxx("ext_api");
    let dense = root().join("tests/data/tiny/tiny-qwen2-q8_0.gguf");
    let moe = root().join("tests/data/deepseek2/tiny-deepseek2-lite-q4_k_m.gguf");
    let args = [dense.to_str().unwrap(), moe.to_str().unwrap()];
    run(&exe, &args);
    valgrind(&exe, &args);
}

#[test]
fn api_walkthrough() {
    let exe = build("walkthrough");
    let model = root().join("tests/data/tiny/tiny-qwen2-q8_0.gguf");
    run(&exe, &[model.to_str().unwrap()]);
    valgrind(&exe, &[model.to_str().unwrap()]);
    run(&exe, &[root().join("tests/data/tiny/tiny-llama-q4_k_m.gguf").to_str().unwrap()]);
    run(&exe, &[root().join("tests/data/deepseek2/tiny-deepseek2-lite-q4_k_m.gguf").to_str().unwrap()]);
}

#[test]
fn create_free_loop_under_memcheck() {
    let exe = build("lifecycle");
    let model = root().join("tests/data/tiny/tiny-qwen2-q8_0.gguf");
    run(&exe, &[model.to_str().unwrap(), "40"]);
    valgrind(&exe, &[model.to_str().unwrap(), "10"]);
    valgrind(&exe, &[root().join("tests/data/deepseek2/tiny-deepseek2-lite-q4_k_m.gguf").to_str().unwrap(), "3"]);
}

/// A sample of the malformed-GGUF generator's variants from every fixture it starts from
/// (tests/common/malformed.rs): of each, `PER_FIXTURE` spread evenly over its variants (most of
/// which the loader refuses) and `LOADING_PER_FIXTURE` that load (from evenly spread starting
/// points, the first variant the library loads here), so that the decode of defective models
/// of every architecture runs under memcheck too. Through c_tests/load_each.c: each file loaded
/// mapped and read into memory, decoded when it loads. The program's answer for each file and
/// mode must be the library's in this process (the same reason when rejected), and the same
/// again under memcheck, which must report no error and no leak.
#[test]
fn malformed_generator_sample_under_memcheck() {
    use deepseek::api::types::llama_load_mode;
    const PER_FIXTURE: usize = 10;
    const LOADING_PER_FIXTURE: usize = 4;
    let dir = root().join("target/malformed-sample");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let loads = |p: &Path| {
        let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path; the model is freed at once.
        let (m, _) = common::log::logged(|| unsafe { llama_model_load_from_file(c.as_ptr(), llama_model_default_params()) });
        // SAFETY: NULL or a model loaded above, freed once.
        unsafe { llama_model_free(m) };
        !m.is_null()
    };
    let mut paths = Vec::new();
    for (rel, n) in common::malformed::FIXTURES {
        let original = std::fs::read(root().join(rel)).unwrap();
        let stem = Path::new(rel).file_stem().unwrap().to_str().unwrap().to_string();
        let (step, load_step, mut i) = (n / PER_FIXTURE, n / LOADING_PER_FIXTURE, 0);
        let mut loading = 0;
        let made = common::malformed::variants(&original, |_, bytes| {
            if i % step == 0 && i / step < PER_FIXTURE {
                let p = dir.join(format!("{stem}-{i:04}.gguf"));
                std::fs::write(&p, &bytes).unwrap();
                paths.push(p.to_str().unwrap().to_string());
            } else if loading < LOADING_PER_FIXTURE && i >= loading * load_step {
                let p = dir.join(format!("{stem}-{i:04}-loads.gguf"));
                std::fs::write(&p, &bytes).unwrap();
                if loads(&p) {
                    paths.push(p.to_str().unwrap().to_string());
                    loading += 1;
                } else {
                    std::fs::remove_file(&p).unwrap();
                }
            }
            i += 1;
        });
        assert_eq!(made, n, "{rel}: the generator's count changed (tests/common/malformed.rs FIXTURES)");
        assert_eq!(loading, LOADING_PER_FIXTURE, "{rel}: too few variants load for the sample");
    }
    assert_eq!(paths.len(), (PER_FIXTURE + LOADING_PER_FIXTURE) * common::malformed::FIXTURES.len());
    let exe = build("load_each");
    let args: Vec<&str> = paths.iter().map(|s| s.as_str()).collect();
    let report = run(&exe, &args);
    // The program's report says, for each file and load mode, what the library answers in this
    // process: loaded or rejected, with the same reason.
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines.len(), 2 * paths.len() + 1, "one report line per file and mode, and a summary:\n{report}");
    let modes = [("mmap", llama_load_mode::LLAMA_LOAD_MODE_MMAP), ("none", llama_load_mode::LLAMA_LOAD_MODE_NONE)];
    let (mut loaded, mut rejected) = (0, 0);
    for (k, line) in lines[..2 * paths.len()].iter().enumerate() {
        let (p, (mode_name, mode)) = (&paths[k / 2], modes[k % 2]);
        let c = std::ffi::CString::new(p.as_str()).unwrap();
        let mut mp = llama_model_default_params();
        mp.load_mode = mode;
        // SAFETY: a NUL-terminated path.
        let (m, log) = common::log::logged(|| unsafe { llama_model_load_from_file(c.as_ptr(), mp) });
        let got = line.strip_prefix(&format!("{p} ({mode_name}): ")).unwrap_or_else(|| panic!("report line for another file or mode ({p}, {mode_name}): {line}"));
        if m.is_null() {
            let reason = log.lines().find(|l| l.starts_with("llama_model_load_from_file: ")).unwrap_or_else(|| panic!("{p}: rejected without a reason: {log:?}"));
            assert_eq!(got, format!("rejected: {reason}"), "{p} ({mode_name})");
            rejected += 1;
        } else {
            // SAFETY: freed once.
            unsafe { llama_model_free(m) };
            assert!(got.starts_with("loaded; "), "{p} ({mode_name}): loads here, but the C program reports: {got}");
            loaded += 1;
        }
    }
    assert_eq!(lines[2 * paths.len()], format!("load_each: {loaded} of {} loads succeeded", 2 * paths.len()));
    assert!(rejected > 0 && loaded > 0, "the sample should hold variants the loader refuses and variants it loads: {rejected} rejected, {loaded} loaded");
    eprintln!("load_each: {} files of {} fixtures, mapped and read: {loaded} loads succeeded, {rejected} rejected, each with its reason", paths.len(), common::malformed::FIXTURES.len());
    // Under memcheck (the system allocator), the same answers.
    assert_eq!(valgrind(&exe, &args), report, "the memcheck build answers differently");
}

/// The serving engine from C (c_tests/engine_walkthrough.c): callbacks, polling, cancel, stop
/// tokens and strings, prefix reuse, backpressure, errors, free with requests in flight, each
/// greedy request equal to the same prompt alone; on dense, deepseek2 and a real model, and
/// under memcheck.
#[test]
fn engine_walkthrough() {
    let exe = build("engine_walkthrough");
    let tiny = root().join("tests/data/tiny/tiny-qwen2-q8_0.gguf");
    run(&exe, &[tiny.to_str().unwrap()]);
    valgrind(&exe, &[tiny.to_str().unwrap()]);
    run(&exe, &[root().join("tests/data/tiny/tiny-llama-q4_k_m.gguf").to_str().unwrap()]);
    run(&exe, &[root().join("tests/data/deepseek2/tiny-deepseek2-lite-q4_k_m.gguf").to_str().unwrap()]);
    run(&exe, &[common::models_dir().join("smollm2-135m-instruct-q4_1.gguf").to_str().unwrap()]);
}

/// 16 client threads × 8 requests on a real model (c_tests/engine_stress.c): prompts of 1–600
/// tokens (a third sharing a prefix), random max tokens, callbacks and polling, random
/// cancellations; every request ends once with its events in order and none lost, every greedy
/// request matches the same prompt alone (teacher-forced), a watchdog fails stalls. A smaller
/// run under memcheck.
#[test]
fn engine_many_clients() {
    let exe = build("engine_stress");
    let model = common::models_dir().join("smollm2-135m-instruct-q4_1.gguf");
    run_print(&exe, &[model.to_str().unwrap(), "16", "8", "600", "48", "2"]);
    let tiny = root().join("tests/data/tiny/tiny-qwen2-q8_0.gguf");
    valgrind(&exe, &[tiny.to_str().unwrap(), "4", "4", "60", "12", "2"]);
}

fn run_print(exe: &Path, args: &[&str]) {
    let out = Command::new(exe).args(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    assert!(out.status.success(), "{} failed:\n{text}", exe.display());
    assert!(!text.contains("internal error"), "{}: a panic was caught at the boundary:\n{text}", exe.display());
}

/// docs/USING.md's ds_engine example, compiled as written (inside a main that loads a model) and
/// run on a real model: it must build without warnings and stream some text.
#[test]
fn readme_engine_example_builds_and_runs() {
    let readme = std::fs::read_to_string(root().join("docs/USING.md")).unwrap();
    let section = &readme[readme.find("## Serving engine (`ds_engine`)").expect("docs/USING.md's engine section")..];
    let code = section.split("```c\n").nth(1).and_then(|s| s.split("```").next()).expect("a C block in the engine section");
    let program = format!("#include <stdio.h>\n#include \"llama.h\"\nint main(int argc, char **argv) {{\n    (void) argc;\n    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());\n    if (!model) return 1;\n{code}    llama_model_free(model);\n    return 0;\n}}\n");
    let out_dir = root().join("target/c_tests");
    std::fs::create_dir_all(&out_dir).unwrap();
    let src = out_dir.join("readme_engine_example.c");
    std::fs::write(&src, program).unwrap();
    let exe = out_dir.join("readme_engine_example");
    let status = Command::new("cc")
        .args(["-std=c11", "-O1", "-Wall", "-Wextra", "-Werror"])
        .arg("-I").arg(root().join("include"))
        .arg(&src).arg("-o").arg(&exe)
        .arg("-L").arg(lib_dir()).arg("-ldeepseek")
        .arg(format!("-Wl,-rpath,{}", lib_dir().display()))
        .status()
        .unwrap();
    assert!(status.success(), "docs/USING.md's ds_engine example does not compile");
    let model = common::models_dir().join("smollm2-135m-instruct-q4_1.gguf");
    let out = Command::new(&exe).arg(&model).output().unwrap();
    assert!(out.status.success(), "docs/USING.md's example failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("internal error"), "docs/USING.md's example caught a panic: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!out.stdout.is_empty(), "docs/USING.md's example printed no text");
}

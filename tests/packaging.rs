//! The library as users get it: `scripts/install.sh` into a prefix, then
//! - a C++ CMake project (c_tests/cmake_consumer) finds it with `find_package(deepseek 0.1)` and
//!   links `deepseek::deepseek` and `deepseek::deepseek_static`;
//! - pkg-config's flags build a C program against the shared and the static library;
//! - the static archive is plain object code whose only global symbols are the API;
//! - LD_PRELOAD puts our library in front of a program linked to a stand-in `libllama.so`.
//! The programs answer a real prompt and must give llama.cpp's decisive next token
//! (tests/data/generate, Qwen2.5-Coder-0.5B). Needs `cargo build --release` first; skips only
//! when cmake is absent (the CMake part; .ci/run installs it).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::json::Json;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn release_dir() -> PathBuf {
    let dir = root().join("target/release");
    assert!(dir.join("libdeepseek.so").exists() && dir.join("libdeepseek.a").exists(), "target/release/libdeepseek.{{so,a}} missing: run `cargo build --release` first");
    dir
}

fn work_dir(name: &str) -> PathBuf {
    let dir = root().join("target/packaging").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?} failed ({}):\n{}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The install prefix, written once per test process by scripts/install.sh from the release build.
fn prefix() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let prefix = work_dir("prefix");
        run(Command::new(root().join("scripts/install.sh")).arg(&prefix).env("DEEPSEEK_LIB_DIR", release_dir()));
        prefix
    })
}

/// The real model and llama.cpp's answer for its first reference prompt: (model, prompt,
/// expected "tokens: ..." line, expected next token), with the reference's margin checked to be
/// decisive (≥ 1.0, tests/data/README.md (Tolerances)).
fn reference() -> (PathBuf, String, String, i64) {
    let model = common::models_dir().join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    assert!(model.exists(), "{} is missing: run scripts/fetch-models.sh qwen05", model.display());
    let jsonl = std::fs::read_to_string(common::data("generate/qwen2.5-coder-0.5b-instruct-q4_k_m.jsonl")).unwrap();
    let case = Json::parse(jsonl.lines().next().unwrap());
    let prompt = case.get("prompt").str().to_string();
    let tokens: Vec<String> = case.get("prompt_tokens").i32s().iter().map(|t| t.to_string()).collect();
    let step = &case.get("steps").arr()[0];
    let top = step.get("top5").arr();
    let margin = top[0].arr()[1].num() - top[1].arr()[1].num();
    assert!(margin >= 1.0, "reference margin {margin} is not decisive");
    (model, prompt, format!("tokens: {}", tokens.join(" ")), step.get("token").num() as i64)
}

/// Runs a consumer program (c_tests/cmake_consumer/main.cpp) and checks its answer.
fn check_answer(cmd: &mut Command, what: &str) -> String {
    let (model, prompt, tokens_line, next) = reference();
    let text = stdout(&run(cmd.arg(&model).arg(&prompt)));
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(tokens_line.as_str()), "{what}: tokenization differs:\n{text}");
    let argmax = lines.next().and_then(|l| l.strip_prefix("argmax: ")).unwrap_or_else(|| panic!("{what}: no argmax line:\n{text}"));
    assert_eq!(argmax.split(' ').next(), Some(next.to_string().as_str()), "{what}: next token differs from llama.cpp's {next}:\n{text}");
    text
}

fn needed(exe: &Path) -> Vec<String> {
    let dynamic = stdout(&run(Command::new("readelf").arg("-d").arg(exe)));
    dynamic.lines().filter(|l| l.contains("(NEEDED)")).filter_map(|l| l.split('[').nth(1)).map(|s| s.trim_end_matches(']').to_string()).collect()
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success())
}

#[test]
fn install_prefix_layout() {
    let p = prefix();
    for f in ["lib/libdeepseek.so.0.1.0", "lib/libdeepseek.a", "include/llama.h", "include/deepseek.h", "lib/pkgconfig/deepseek.pc", "lib/cmake/deepseek/deepseekConfig.cmake", "lib/cmake/deepseek/deepseekConfigVersion.cmake"] {
        assert!(p.join(f).is_file(), "{f} is not installed");
    }
    assert_eq!(std::fs::read_link(p.join("lib/libdeepseek.so.0")).unwrap(), PathBuf::from("libdeepseek.so.0.1.0"));
    assert_eq!(std::fs::read_link(p.join("lib/libdeepseek.so")).unwrap(), PathBuf::from("libdeepseek.so.0"));
    let pc = std::fs::read_to_string(p.join("lib/pkgconfig/deepseek.pc")).unwrap();
    assert!(pc.contains(&format!("prefix={}\n", p.canonicalize().unwrap().display())) && pc.contains("Version: 0.1.0\n"), "{pc}");
}

#[test]
fn cmake_find_package_shared_and_static() {
    if !have("cmake") {
        eprintln!("SKIPPED: cmake is not installed (.ci/run installs it); the CMake package was not tested");
        return;
    }
    let build = work_dir("cmake_consumer");
    let configure = |dir: &Path, version: &str| {
        Command::new("cmake")
            .arg("-S").arg(root().join("c_tests/cmake_consumer"))
            .arg("-B").arg(dir)
            .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix().display()))
            .arg(format!("-DDEEPSEEK_MIN_VERSION={version}"))
            .arg("-DCMAKE_BUILD_TYPE=Release")
            .output()
            .unwrap()
    };
    let out = configure(&build, "0.1");
    assert!(out.status.success(), "cmake configure failed:\n{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    run(Command::new("cmake").arg("--build").arg(&build));

    let shared = build.join("consumer_shared");
    let text_shared = check_answer(&mut Command::new(&shared), "deepseek::deepseek");
    assert!(needed(&shared).contains(&"libdeepseek.so.0".to_string()), "{:?}", needed(&shared));
    let stat = build.join("consumer_static");
    let text_static = check_answer(&mut Command::new(&stat), "deepseek::deepseek_static");
    assert!(!needed(&stat).iter().any(|n| n.contains("deepseek")), "{:?}", needed(&stat));
    assert_eq!(text_shared, text_static);

    // deepseekConfigVersion.cmake: 0.1.0 is exact; a newer minor or another major is refused
    for (version, accepted) in [("0.1.0", true), ("0.2", false), ("1.0", false)] {
        let out = configure(&work_dir(&format!("cmake_version_{version}")), version);
        assert_eq!(out.status.success(), accepted, "find_package(deepseek {version}):\n{}", String::from_utf8_lossy(&out.stderr));
    }
}

fn pkg_config(args: &[&str]) -> Vec<String> {
    let out = run(Command::new("pkg-config").args(args).arg("deepseek").env("PKG_CONFIG_PATH", prefix().join("lib/pkgconfig")));
    stdout(&out).split_whitespace().map(str::to_string).collect()
}

#[test]
fn pkg_config_builds_c_programs_shared_and_static() {
    assert!(have("pkg-config"), "pkg-config is required (.ci/run installs it)");
    assert_eq!(pkg_config(&["--modversion"]), ["0.1.0"]);
    let dir = work_dir("pkg_config");
    let model = common::data("tiny/tiny-qwen2-q8_0.gguf");
    let source = root().join("c_tests/walkthrough.c");

    let shared = dir.join("walkthrough_shared");
    let libdir = pkg_config(&["--variable=libdir"]).remove(0);
    run(Command::new("cc").arg("-std=c11").arg(&source).args(pkg_config(&["--cflags", "--libs"])).arg("-lm").arg(format!("-Wl,-rpath,{libdir}")).arg("-o").arg(&shared));
    assert!(stdout(&run(Command::new(&shared).arg(&model))).contains("walkthrough: ok"));
    assert!(needed(&shared).contains(&"libdeepseek.so.0".to_string()));

    // static: the archive itself, then the system libraries that Libs.private lists
    let stat = dir.join("walkthrough_static");
    let private: Vec<String> = pkg_config(&["--static", "--libs-only-l"]).into_iter().filter(|l| l != "-ldeepseek").collect();
    assert!(!private.is_empty());
    run(Command::new("cc").arg("-std=c11").arg(&source).args(pkg_config(&["--cflags"])).arg(format!("{libdir}/libdeepseek.a")).args(&private).arg("-o").arg(&stat));
    assert!(stdout(&run(Command::new(&stat).arg(&model))).contains("walkthrough: ok"));
    assert!(!needed(&stat).iter().any(|n| n.contains("deepseek")), "{:?}", needed(&stat));
}

/// The installed archive is one plain ELF object (no LLVM bitcode for binutils' plugin to choke
/// on) whose only global symbols are the API the shared library exports: nothing of Rust's
/// runtime or compiler_builtins' libm functions can meet a C program's symbols.
#[test]
fn static_archive_exports_only_the_api() {
    let archive = prefix().join("lib/libdeepseek.a");
    let sections = stdout(&run(Command::new("readelf").arg("-SW").arg(&archive)));
    assert!(!sections.contains(".llvmbc"), "the installed archive still carries LLVM bitcode");
    let nm = run(Command::new("nm").args(["-g", "--defined-only"]).arg(&archive));
    assert!(!String::from_utf8_lossy(&nm.stderr).contains("plugin"), "{}", String::from_utf8_lossy(&nm.stderr));
    let symbols = |text: &str| -> Vec<String> {
        let mut v: Vec<String> = text.lines().filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 3).then(|| format!("{} {}", w[1], w[2]))
        }).collect();
        v.sort();
        v
    };
    let archive_globals = symbols(&stdout(&nm));
    let exported = symbols(&stdout(&run(Command::new("nm").args(["-D", "--defined-only"]).arg(release_dir().join("libdeepseek.so")))));
    assert!(archive_globals.len() > 250, "{archive_globals:?}");
    assert_eq!(archive_globals, exported, "libdeepseek.a's global symbols differ from libdeepseek.so's exports");
}

/// Every function name that the pinned llama.h declares.
fn upstream_functions() -> Vec<String> {
    let header = std::fs::read_to_string(common::data("llama-b11312.h")).unwrap();
    let mut names: Vec<String> = header
        .lines()
        .map(|l| l.split("//").next().unwrap())
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let decl = &l[l.find("LLAMA_API")?..];
            let head = decl[..decl.find('(')?].trim_end();
            let name = &head[head.rfind(|c: char| !(c.is_alphanumeric() || c == '_'))? + 1..];
            Some(name.to_string())
        })
        .collect();
    names.sort();
    names.dedup();
    assert!(names.len() > 240 && names.contains(&"llama_decode".to_string()), "{names:?}");
    names
}

/// A stand-in `libllama.so` whose every llama.h function (and the ggml helpers that programs
/// reach through llama.h's includes, which upstream's libllama brings in with libggml) says it
/// was called and returns 0 (NULL, false), built from the pinned header's function list.
fn stand_in_libllama(dir: &Path) -> PathBuf {
    let mut c = String::from("/* stand-in libllama.so: every function of llama.h fails */\n#include <stdio.h>\n");
    let ggml_helpers = ["ggml_time_us", "ggml_time_init", "ggml_backend_load_all"].map(String::from);
    for f in upstream_functions().into_iter().chain(ggml_helpers) {
        c += &format!("long {f}(void) {{ fputs(\"stand-in libllama: {f}\\n\", stderr); return 0; }}\n");
    }
    std::fs::write(dir.join("libllama.c"), c).unwrap();
    run(Command::new("cc").args(["-shared", "-fPIC", "-Wl,-soname,libllama.so", "-o"]).arg(dir.join("libllama.so")).arg(dir.join("libllama.c")));
    dir.join("libllama.so")
}

#[test]
fn ld_preload_replaces_libllama() {
    let dir = work_dir("ld_preload");
    stand_in_libllama(&dir);
    let ours = release_dir().join("libdeepseek.so");
    let link = |source: &Path, compiler: &str, std: &str, exe: &Path| {
        run(Command::new(compiler).arg(std).arg("-I").arg(root().join("include")).arg(source).arg("-L").arg(&dir).arg("-lllama").arg("-lm").arg(format!("-Wl,-rpath,{}", dir.display())).arg("-o").arg(exe));
        assert!(needed(exe).contains(&"libllama.so".to_string()) && !needed(exe).iter().any(|n| n.contains("deepseek")), "{:?}", needed(exe));
    };
    // The C++ consumer: fails on the stand-in; with our library preloaded it gives the same
    // answer as when linked to libdeepseek directly (and llama.cpp's next token).
    let consumer = dir.join("consumer");
    link(&root().join("c_tests/cmake_consumer/main.cpp"), "c++", "-std=c++17", &consumer);
    let (model, prompt, _, _) = reference();
    let plain = Command::new(&consumer).arg(&model).arg(&prompt).output().unwrap();
    assert!(!plain.status.success() && String::from_utf8_lossy(&plain.stderr).contains("stand-in libllama"), "{plain:?}");
    let preloaded = check_answer(Command::new(&consumer).env("LD_PRELOAD", &ours), "LD_PRELOAD consumer");
    let direct = dir.join("consumer_direct");
    run(Command::new("c++").arg("-std=c++17").arg("-I").arg(root().join("include")).arg(root().join("c_tests/cmake_consumer/main.cpp")).arg("-L").arg(release_dir()).arg("-ldeepseek").arg(format!("-Wl,-rpath,{}", release_dir().display())).arg("-o").arg(&direct));
    assert_eq!(preloaded, check_answer(&mut Command::new(&direct), "linked to libdeepseek"));

    // The dynamic linker binds the program's llama_* references to our library.
    let bindings = Command::new(&consumer).arg(&model).arg(&prompt).env("LD_PRELOAD", &ours).env("LD_DEBUG", "bindings").output().unwrap();
    let log = String::from_utf8_lossy(&bindings.stderr);
    for f in ["llama_decode", "llama_tokenize", "llama_model_load_from_file", "llama_get_logits_ith"] {
        let bound: Vec<&str> = log.lines().filter(|l| l.contains(&format!("normal symbol `{f}'"))).collect();
        assert!(!bound.is_empty() && bound.iter().all(|l| l.split(" to ").nth(1).is_some_and(|target| target.contains("libdeepseek.so"))), "{f}: {bound:?}");
    }

    // The C walkthrough (dozens of llama.h calls, self-checking) on the tiny model.
    let walkthrough = dir.join("walkthrough");
    link(&root().join("c_tests/walkthrough.c"), "cc", "-std=c11", &walkthrough);
    let tiny = common::data("tiny/tiny-qwen2-q8_0.gguf");
    assert!(!Command::new(&walkthrough).arg(&tiny).output().unwrap().status.success());
    assert!(stdout(&run(Command::new(&walkthrough).arg(&tiny).env("LD_PRELOAD", &ours))).contains("walkthrough: ok"));
}

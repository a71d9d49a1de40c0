//! The shared library's identity: SONAME libdeepseek.so.0, and only the C API is exported
//! (llama_*, ggml_*, ds_*, and the C++ names of upstream's staging llama_* API: no Rust
//! symbols leak).

use std::path::PathBuf;
use std::process::Command;

fn lib(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/release").join(name);
    assert!(p.exists(), "{} is missing: run `cargo build --release` first", p.display());
    p
}

fn tool(args: &[&str], file: &PathBuf) -> String {
    let out = Command::new(args[0]).args(&args[1..]).arg(file).output().unwrap_or_else(|e| panic!("{}: {e}", args[0]));
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn soname_is_libdeepseek_so_0() {
    let dynamic = tool(&["readelf", "-d"], &lib("libdeepseek.so"));
    let soname: Vec<&str> = dynamic.lines().filter(|l| l.contains("(SONAME)")).collect();
    assert_eq!(soname.len(), 1, "{dynamic}");
    assert!(soname[0].contains("[libdeepseek.so.0]"), "{}", soname[0]);
}

fn is_api(sym: &str) -> bool {
    ["llama_", "ggml_", "ds_"].iter().any(|p| sym.starts_with(p)) || is_staging_cxx_api(sym)
}

/// A C++ (Itanium) name of a free function `llama_*` (src/api/ext.rs: upstream's llama-ext.h):
/// `_Z<length><name>...`.
fn is_staging_cxx_api(sym: &str) -> bool {
    let Some(rest) = sym.strip_prefix("_Z") else { return false };
    let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
    let Ok(len) = rest[..digits].parse::<usize>() else { return false };
    rest[digits..].get(..len).is_some_and(|name| name.starts_with("llama_"))
}

#[test]
fn only_the_c_api_is_exported() {
    let syms = tool(&["nm", "-D", "--defined-only"], &lib("libdeepseek.so"));
    let names: Vec<&str> = syms.lines().filter_map(|l| l.split_whitespace().nth(2)).collect();
    assert!(names.len() > 250, "too few exported symbols ({}):\n{syms}", names.len());
    let leaked: Vec<&&str> = names.iter().filter(|s| !is_api(s)).collect();
    assert!(leaked.is_empty(), "symbols outside llama_*/ggml_*/ds_* are exported: {leaked:?}");
    assert!(names.contains(&"llama_decode") && names.contains(&"ggml_backend_load_all"));
    // the checker itself must be able to fail
    assert!(!is_api("_ZN8deepseek3api4misc17h0123456789abcdefE") && !is_api("rust_eh_personality"));
    assert!(is_api("_Z26llama_get_memory_breakdownPK13llama_context") && !is_api("_Z5llamaPKc") && !is_api("_ZN5llama_4workEv"));
    assert!(names.contains(&"_Z26llama_get_memory_breakdownPK13llama_context"));
    assert!(is_api("_Z26llama_get_memory_breakdownPK13llama_context") && !is_api("_Z5llamaPKc") && !is_api("_ZN5llama_4workEv"));
    assert!(names.contains(&"_Z26llama_get_memory_breakdownPK13llama_context"));
}

/// A symbol libstdc++ (the C++ runtime) defines: any of its versions (GLIBCXX_*, CXXABI_*), or
/// unversioned the std namespace, operator new/delete, the C++ ABI's `__cxa_*` and the
/// personality routine (glibc's own `__cxa_atexit`/`__cxa_finalize`, versioned GLIBC_*, are not).
fn is_cxx_runtime(sym: &str) -> bool {
    let (name, version) = sym.split_once('@').unwrap_or((sym, ""));
    if version.contains("GLIBCXX") || version.contains("CXXABI") {
        return true;
    }
    if version.trim_start_matches('@').starts_with("GLIBC_") {
        return false;
    }
    ["_ZSt", "_ZNSt", "_ZNKSt", "_Znw", "_Zna", "_ZdlPv", "_ZdaPv", "__cxa_", "__gxx_personality"].iter().any(|p| name.starts_with(p))
}

/// src/api/ext_shim.cpp is C++ compiled against libstdc++'s headers, but calls nothing out of
/// line: the library needs no libstdc++ at run time, so C programs link it (and the static
/// archive, tests/packaging.rs) without -lstdc++: it names no libstdc++ and leaves none of its
/// symbols undefined.
#[test]
fn needs_no_cxx_runtime() {
    let so = lib("libdeepseek.so");
    let dynamic = tool(&["readelf", "-d"], &so);
    let needed: Vec<&str> = dynamic.lines().filter(|l| l.contains("(NEEDED)")).collect();
    assert!(!needed.is_empty() && !needed.iter().any(|l| l.contains("libstdc++")), "{needed:?}");
    let undefined = tool(&["nm", "-D", "--undefined-only"], &so);
    let cxx: Vec<&str> = undefined.lines().filter_map(|l| l.split_whitespace().last()).filter(|s| is_cxx_runtime(s)).collect();
    assert!(cxx.is_empty(), "libdeepseek.so uses the C++ runtime: {cxx:?}");
    // the checker itself must be able to fail
    assert!(is_cxx_runtime("_Znwm@GLIBCXX_3.4") && is_cxx_runtime("__cxa_throw") && is_cxx_runtime("__gxx_personality_v0@CXXABI_1.3"));
    assert!(is_cxx_runtime("_ZSt9terminatev") && is_cxx_runtime("_ZNSt8ios_base4InitC1Ev@GLIBCXX_3.4"));
    assert!(!is_cxx_runtime("_Z26llama_get_memory_breakdownPK13llama_context") && !is_cxx_runtime("__cxa_finalize@GLIBC_2.2.5") && !is_cxx_runtime("memcpy@GLIBC_2.14"));
}

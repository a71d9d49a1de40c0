//! Generates the C header from the crate's #[repr(C)] types and extern "C" functions.
//! The result goes to OUT_DIR; `tests/header.rs` fails when the committed include/deepseek.h
//! differs from it (refresh with scripts/update-header.sh).

use std::path::PathBuf;

fn main() {
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("deepseek.h");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml");
    match cbindgen::Builder::new().with_crate(&crate_dir).with_config(config).generate() {
        Ok(bindings) => {
            bindings.write_to_file(&out);
        }
        Err(e) => panic!("cbindgen failed: {e}"),
    }
    println!("cargo:rustc-env=DS_GENERATED_HEADER={}", out.display());
    ext_shim(&crate_dir);
    link_args();
}

/// src/api/ext_shim.cpp: the staging C++ functions whose arguments or values are C++ objects
/// (a `std::map` returned by value, a `std::vector` of vectors), compiled by the C++ compiler
/// against the system's libstdc++ headers so that it lays those objects out. Without exceptions
/// or RTTI, and without linking libstdc++: the shim calls nothing out of line
/// (tests/library_files.rs checks that the shared library neither needs libstdc++ nor leaves
/// one of its symbols undefined). Not `--no-undefined`: sanitizer builds (fuzz/) link the
/// cdylib with the sanitizers' symbols left to the executable.
fn ext_shim(crate_dir: &std::path::Path) {
    println!("cargo:rerun-if-changed=include");
    cc::Build::new()
        .cpp(true)
        .cpp_link_stdlib(None)
        .file(crate_dir.join("src/api/ext_shim.cpp"))
        .include(crate_dir.join("include"))
        .flag("-std=c++17")
        .flag("-fno-exceptions")
        .flag("-fno-rtti")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("deepseek_ext_shim");
}

/// The C++ names of upstream's staging API that the library exports: src/api/ext.rs's
/// `export_name`s and the names on src/api/ext_shim.cpp's "// export: " lines.
fn cxx_export_names() -> Vec<String> {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("src/api");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("src/api/{name}: {e}"));
    let (rust, cxx) = (read("ext.rs"), read("ext_shim.cpp"));
    let from_rust = rust.lines().filter_map(|l| l.trim().strip_prefix("#[export_name = \"")?.strip_suffix("\"]").map(str::to_string));
    let from_cxx = cxx.lines().filter_map(|l| l.trim().strip_prefix("// export: ").map(|n| n.trim().to_string()));
    from_rust.chain(from_cxx).collect()
}

/// Shared-library identity on Linux: SONAME libdeepseek.so.0 (the ABI major version) and a
/// version script that makes only the llama_*, ggml_* and ds_* API global. rustc adds its own
/// list of exported (#[no_mangle]) symbols, so `tests/library_files.rs` checks the result.
fn link_args() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let map = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("libdeepseek.map");
    let cxx: String = cxx_export_names().iter().map(|n| format!(" {n};")).collect();
    std::fs::write(&map, format!("{{\n  global: llama_*; ggml_*; ds_*;{cxx}\n  local: *;\n}};\n")).expect("write version script");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libdeepseek.so.0");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={}", map.display());
}

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
    link_args();
}

/// The C++ names of upstream's staging API that src/api/ext.rs exports (its `export_name`s).
fn cxx_export_names() -> Vec<String> {
    let path = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("src/api/ext.rs");
    let src = std::fs::read_to_string(&path).expect("src/api/ext.rs");
    src.lines().filter_map(|l| l.trim().strip_prefix("#[export_name = \"")?.strip_suffix("\"]").map(str::to_string)).collect()
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

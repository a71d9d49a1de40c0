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
}

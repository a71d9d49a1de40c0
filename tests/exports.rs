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

/// The SIMD kernels inline every intrinsic: a closure that calls intrinsics, handed to a
/// function that is not inlined (`array::from_fn` was not for 3 or more activation rows), is
/// compiled without the kernel's target features, and each `maddubs`/`madd` becomes a call — the
/// AVX2 Q4_K kernels for 3–8 rows ran 7× slower so. Disassembles the release library and
/// requires that no function of `kernels::simd` calls into `core::core_arch` or into an array
/// helper (and that the disassembly found the kernels at all).
#[test]
fn simd_kernels_call_no_out_of_line_intrinsic() {
    let lib = root().join("target/release/libdeepseek.so");
    assert!(lib.exists(), "target/release/libdeepseek.so is missing: run `cargo build --release` first");
    let out = Command::new("objdump").args(["-d", "--no-show-raw-insn", "-C"]).arg(&lib).output().expect("objdump (binutils)");
    assert!(out.status.success(), "objdump failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut function, mut kernels, mut bad) = (String::new(), 0usize, Vec::new());
    for line in text.lines() {
        if line.ends_with(">:") {
            function = line.split_once('<').map_or("", |(_, f)| f.trim_end_matches(">:")).to_string();
            kernels += function.starts_with("deepseek::kernels::simd::") as usize;
        } else if function.starts_with("deepseek::kernels::simd::") && line.contains("call") && (line.contains("core::core_arch") || line.contains("core::array::")) {
            bad.push(format!("{function}: {}", line.trim()));
        }
    }
    assert!(kernels > 100, "only {kernels} functions of kernels::simd in the disassembly");
    assert!(bad.is_empty(), "SIMD kernels calling out-of-line helpers:\n{}", bad[..bad.len().min(20)].join("\n"));
}

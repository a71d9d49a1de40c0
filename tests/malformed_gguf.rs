//! Hostile model files through the C API: the structured generator (tests/common/malformed.rs)
//! makes docs/GUARANTEES.md's count of variants of six models (a qwen2 fixture, V2-Lite-style, V3-style,
//! V3.2-style and V4-style DeepSeek seeds, an IQ1_S qwen2 seed); each is written to a file and
//! loaded with the exported `llama_model_load_from_file`, once mapped (`LLAMA_LOAD_MODE_MMAP`)
//! and once read into an owned buffer (`LLAMA_LOAD_MODE_NONE`). A variant must end in NULL with
//! a logged reason naming the file, or a model whose context is created (or refused with a logged
//! reason) and decodes (or fails with a logged reason), and freed — never a panic (the log guard,
//! tests/common/log.rs, aborts on "internal error"), never a hang (watchdog: 10 s per variant).
//! Both load modes must give the same answer, word for word.

mod common;

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::log::logged;
use common::malformed::{variants, FIXTURES};
use deepseek::api::batch::llama_batch_get_one;
use deepseek::api::context::{llama_context_default_params, llama_decode, llama_free, llama_init_from_model};
use deepseek::api::model::{llama_model_default_params, llama_model_free, llama_model_get_vocab, llama_model_load_from_file};
use deepseek::api::types::llama_load_mode;
use deepseek::api::vocab::llama_vocab_n_tokens;
use deepseek::gguf::GgufFile;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// What became of one variant in one load mode: "rejected: REASON", "loaded; context refused:
/// REASON", "loaded; decode N" or "loaded; decode N: REASON".
fn load_decode_free(path: &Path, mode: llama_load_mode) -> String {
    let c_path = CString::new(path.to_str().unwrap()).unwrap();
    let mut mp = llama_model_default_params();
    mp.load_mode = mode;
    // SAFETY: a NUL-terminated path; the model is freed below.
    let (model, log) = logged(|| unsafe { llama_model_load_from_file(c_path.as_ptr(), mp) });
    if model.is_null() {
        // the boundary's line: "llama_model_load_from_file: PATH: REASON"
        let prefix = format!("llama_model_load_from_file: {}: ", path.display());
        let line = log.lines().find(|l| l.starts_with("llama_model_load_from_file: ")).unwrap_or_else(|| panic!("rejected without a logged reason: {log:?}"));
        let reason = line.strip_prefix(&prefix).unwrap_or_else(|| panic!("the reason does not name the file: {line}")).trim();
        assert!(!reason.is_empty(), "an empty reason: {line}");
        return format!("rejected: {reason}");
    }
    let mut cp = llama_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 16;
    cp.n_ubatch = 8;
    cp.n_seq_max = 2;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    let (ctx, log) = logged(|| llama_init_from_model(model, cp));
    let outcome = if ctx.is_null() {
        let line = log.lines().find(|l| l.starts_with("llama_init_from_model: ")).unwrap_or_else(|| panic!("context refused without a logged reason: {log:?}"));
        format!("loaded; context refused: {line}")
    } else {
        let n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model)).max(1);
        let mut tokens: Vec<i32> = (0..10).map(|i| (i * 7919) % n_vocab).collect();
        // SAFETY: a live context; the batch's array holds its 10 tokens.
        let (rc, log) = logged(|| unsafe { llama_decode(ctx, llama_batch_get_one(tokens.as_mut_ptr(), tokens.len() as i32)) });
        // SAFETY: freed once.
        unsafe { llama_free(ctx) };
        match rc {
            0 => "loaded; decode 0".to_string(),
            _ => {
                let line = log.lines().find(|l| l.starts_with("llama_decode: ")).unwrap_or_else(|| panic!("decode returned {rc} without a logged reason: {log:?}"));
                format!("loaded; decode {rc}: {line}")
            }
        }
    };
    // SAFETY: freed once, after its context.
    unsafe { llama_model_free(model) };
    outcome
}

/// Caps this process's address space, so that an allocation sized by a lying header fails here
/// as it would on a machine without overcommit (where it aborts the process), instead of
/// succeeding as untouched virtual memory.
fn cap_address_space(bytes: u64) {
    let limit = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
    // SAFETY: setrlimit reads the struct we pass.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0, "setrlimit(RLIMIT_AS) failed");
}

/// Every variant of fixture `index` through the C API in both load modes, under the watchdog.
fn fixture(index: usize) {
    cap_address_space(16 << 30);
    let (rel, expected) = FIXTURES[index];
    let dir = root().join("target/malformed-variants");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.gguf", Path::new(rel).file_stem().unwrap().to_str().unwrap()));
    let started_ms = Arc::new(AtomicU64::new(u64::MAX));
    let current = Arc::new(Mutex::new(String::new()));
    let epoch = Instant::now();
    let worker = {
        let (started_ms, current) = (Arc::clone(&started_ms), Arc::clone(&current));
        std::thread::spawn(move || {
            let original = std::fs::read(root().join(rel)).unwrap();
            let (mut rejected, mut loaded) = (0, 0);
            let n = variants(&original, |name, bytes| {
                *current.lock().unwrap() = format!("{rel}: {name}");
                started_ms.store(epoch.elapsed().as_millis() as u64, Ordering::SeqCst);
                std::fs::write(&path, &bytes).unwrap();
                let mapped = load_decode_free(&path, llama_load_mode::LLAMA_LOAD_MODE_MMAP);
                let read = load_decode_free(&path, llama_load_mode::LLAMA_LOAD_MODE_NONE);
                assert_eq!(mapped, read, "{rel}: variant '{name}': mapped and read into memory, the library answers differently");
                if mapped.starts_with("rejected") {
                    rejected += 1;
                } else {
                    loaded += 1;
                }
                started_ms.store(u64::MAX, Ordering::SeqCst);
            });
            let _ = std::fs::remove_file(&path);
            eprintln!("{rel}: {n} variants, {rejected} rejected (each with its reason, the same mapped and read), {loaded} loaded, given a context and decoded");
            assert!(rejected > n / 2, "{rel}: most variants should be rejected: {rejected} of {n}");
            n
        })
    };
    while !worker.is_finished() {
        std::thread::sleep(Duration::from_millis(100));
        let since = started_ms.load(Ordering::SeqCst);
        let now = epoch.elapsed().as_millis() as u64;
        assert!(since == u64::MAX || now - since < 10_000, "variant '{}' has been running for over 10 s (hang)", current.lock().unwrap());
    }
    let n = worker.join().unwrap_or_else(|_| panic!("{rel}: a variant failed (above)"));
    assert_eq!(n, expected, "{rel}: the generator made {n} variants, FIXTURES (and docs/GUARANTEES.md's total) say {expected}");
}

#[test]
fn malformed_qwen2_q4_0_variants_fail_cleanly() {
    fixture(0);
}

#[test]
fn malformed_deepseek2_lite_variants_fail_cleanly() {
    fixture(1);
}

#[test]
fn malformed_deepseek3_variants_fail_cleanly() {
    fixture(2);
}

#[test]
fn malformed_deepseek32_variants_fail_cleanly() {
    fixture(3);
}

#[test]
fn malformed_deepseek4_variants_fail_cleanly() {
    fixture(4);
}

#[test]
fn malformed_qwen2_iq1_s_variants_fail_cleanly() {
    fixture(5);
}

/// docs/GUARANTEES.md's bad-input row states the number of variants these tests load: FIXTURES' sum.
#[test]
fn readme_states_the_count() {
    let total: usize = FIXTURES.iter().map(|f| f.1).sum();
    let readme = std::fs::read_to_string(root().join("docs/GUARANTEES.md")).unwrap();
    let row = readme.lines().find(|l| l.starts_with("| **Bad input gets a clear error")).expect("docs/GUARANTEES.md's bad-input row");
    let stated = format!("`tests/malformed_gguf.rs`: {} defective files", thousands(total));
    assert!(row.contains(&stated), "docs/GUARANTEES.md's bad-input row should say \"{stated}\"");
}

/// 7123 -> "7,123".
fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Every tensor type the reader knows (the IQ, ternary, FP4 and 1/2-bit ones included), in a
/// tensor whose data the file cannot hold (the next tensor starts inside it, or the file ends
/// before it), or whose rows are not a multiple of the type's block: rejected with a reason
/// that names the tensor. The same tensors with the right size load (the control).
#[test]
fn every_type_with_a_wrong_size_is_rejected() {
    use deepseek::gguf::{GgufValue, GgufWriter};
    use deepseek::quant::GgmlType;
    for id in 0..64u32 {
        let Some(ty) = GgmlType::from_u32(id) else { continue };
        let n = 2 * ty.block_len().max(32);
        let rb = ty.row_bytes(n).unwrap();
        let file = |dims: &[usize], bytes: usize, then_another: bool| {
            let mut w = GgufWriter::new();
            w.kv("general.architecture", GgufValue::Str("llama".into()));
            w.tensor("w", dims, ty, vec![0; bytes]);
            if then_another {
                w.tensor("next", &[32], GgmlType::F32, vec![0; 128]);
            }
            GgufFile::from_slice(&w.to_bytes()).map(|_| ())
        };
        for then_another in [false, true] {
            assert!(file(&[n, 3], 3 * rb, then_another).is_ok(), "{}: the right size is refused", ty.name());
        }
        // one row short with a tensor after it (rows are >= 32 bytes: past the alignment)
        let e = file(&[n, 3], 2 * rb, true).expect_err(ty.name());
        assert!(e.contains("'w'") || e.contains("next"), "{}: {e}", ty.name());
        // the file ends one byte before the tensor's data does
        let mut w = GgufWriter::new();
        w.kv("general.architecture", GgufValue::Str("llama".into()));
        w.tensor("w", &[n, 3], ty, vec![0; 3 * rb]);
        let bytes = w.to_bytes();
        let t = GgufFile::from_slice(&bytes).unwrap().tensor("w").map(|t| t.file_offset + t.n_bytes).unwrap();
        let e = GgufFile::from_slice(&bytes[..t - 1]).map(|_| ()).expect_err(ty.name());
        assert!(e.contains("'w'"), "{}: {e}", ty.name());
        if ty.block_len() > 1 {
            let e = file(&[ty.block_len() + 1], rb, false).expect_err(ty.name());
            assert!(e.contains("'w'") && e.contains(ty.name()), "{}: {e}", ty.name());
        }
    }
}

//! Hostile model files: the structured generator (tests/common/malformed.rs) makes over 1,000
//! variants of four models (a qwen2 fixture, a V2-Lite-style and a V3-style deepseek2 seed, an
//! IQ1_S qwen2 seed); each is parsed and built, decoded when it loads, and freed. A variant must
//! end in a clean error or a model that decodes — never a panic, never a hang (watchdog: 10 s
//! per variant).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::malformed::variants;
use deepseek::batch::BatchInput;
use deepseek::context::{Context, ContextParams};
use deepseek::gguf::GgufFile;
use deepseek::model::Model;

fn params() -> ContextParams {
    ContextParams { n_ctx: 64, n_batch: 16, n_ubatch: 8, n_seq_max: 2, n_threads: 1, n_threads_batch: 1, ..ContextParams::default() }
}

/// What became of one variant.
#[derive(Default, Debug)]
struct Outcome {
    rejected: usize,
    loaded_and_decoded: usize,
}

fn try_variant(bytes: &[u8], outcome: &mut Outcome) {
    let file = match GgufFile::from_slice(bytes) {
        Ok(f) => f,
        Err(reason) => {
            assert!(!reason.is_empty());
            outcome.rejected += 1;
            return;
        }
    };
    let model = match Model::from_file(file) {
        Ok(m) => Arc::new(m),
        Err(reason) => {
            assert!(!reason.is_empty());
            outcome.rejected += 1;
            return;
        }
    };
    let Ok(mut ctx) = Context::new(Arc::clone(&model), &params()) else {
        outcome.rejected += 1;
        return;
    };
    let n_vocab = model.hp.n_vocab as i32;
    let tokens: Vec<i32> = (0..10).map(|i| (i * 7919) % n_vocab).collect();
    let _ = ctx.decode(&BatchInput { tokens: &tokens, pos: None, seq_ids: None, logits: None }, None);
    outcome.loaded_and_decoded += 1;
}

/// Caps this process's address space, so that an allocation sized by a lying header fails here
/// as it would on a machine without overcommit (where it aborts the process), instead of
/// succeeding as untouched virtual memory.
fn cap_address_space(bytes: u64) {
    let limit = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
    // SAFETY: setrlimit reads the struct we pass.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0, "setrlimit(RLIMIT_AS) failed");
}

#[test]
fn a_thousand_malformed_files_fail_cleanly() {
    cap_address_space(16 << 30);
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let originals = ["tests/data/tiny/tiny-qwen2-q4_0.gguf", "fuzz/corpus/gguf_model/deepseek2-lite-q8_0", "fuzz/corpus/gguf_model/deepseek3-q4_1", "fuzz/corpus/gguf_model/deepseek32-q8_0", "fuzz/corpus/gguf_model/deepseek4-q8_0", "fuzz/corpus/gguf_model/qwen2-iq1_s"];
    let started_ms = Arc::new(AtomicU64::new(u64::MAX));
    let current = Arc::new(std::sync::Mutex::new(String::new()));
    let epoch = Instant::now();
    let worker = {
        let started_ms = Arc::clone(&started_ms);
        let current = Arc::clone(&current);
        std::thread::spawn(move || {
            let mut total = 0;
            for rel in originals {
                let original = std::fs::read(root.join(rel)).unwrap();
                let mut outcome = Outcome::default();
                let n = variants(&original, |name, bytes| {
                    *current.lock().unwrap() = format!("{rel}: {name}");
                    started_ms.store(epoch.elapsed().as_millis() as u64, Ordering::SeqCst);
                    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| try_variant(&bytes, &mut outcome)));
                    assert!(caught.is_ok(), "{rel}: variant '{name}' panicked");
                    started_ms.store(u64::MAX, Ordering::SeqCst);
                });
                eprintln!("{rel}: {n} variants: {outcome:?}");
                assert!(outcome.rejected > n / 2, "{rel}: most variants should be rejected: {outcome:?}");
                total += n;
            }
            total
        })
    };
    while !worker.is_finished() {
        std::thread::sleep(Duration::from_millis(100));
        let since = started_ms.load(Ordering::SeqCst);
        let now = epoch.elapsed().as_millis() as u64;
        assert!(since == u64::MAX || now - since < 10_000, "variant '{}' has been running for over 10 s (hang)", current.lock().unwrap());
    }
    let total = worker.join().expect("a variant failed");
    assert!(total >= 1000, "only {total} variants");
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

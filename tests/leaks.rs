//! Lifetimes through the C API: after contexts and models are created and freed many times,
//! the live-object counters read zero, the model file is no longer mapped, and the process's
//! anonymous memory is back where it was. One test in this binary, so nothing else runs
//! beside it and the process-wide counters are its own.

mod common;

use common::*;
use deepseek::api::batch::llama_batch_get_one;
use deepseek::api::context::{llama_decode, llama_free};
use deepseek::api::model::llama_model_free;
use deepseek::sys::stats;

/// Anonymous memory of this process in KiB (page cache of mapped files is not counted).
fn anonymous_kib() -> u64 {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
    text.lines().find(|l| l.starts_with("Anonymous:")).and_then(|l| l.split_whitespace().nth(1)).unwrap().parse().unwrap()
}

fn mapped(path: &std::path::Path) -> bool {
    std::fs::read_to_string("/proc/self/maps").unwrap().contains(path.to_str().unwrap())
}

fn cycle(path: &std::path::Path, contexts: usize) {
    let m = load_model(path);
    for i in 0..contexts {
        let c = new_context(m, 256, 1 + (i % 3) as u32, 2);
        let mut toks: Vec<i32> = (0..12).map(|t| (t * 31 + i as i32) % 400).collect();
        // SAFETY: toks outlives the call.
        assert_eq!(unsafe { llama_decode(c, llama_batch_get_one(toks.as_mut_ptr(), toks.len() as i32)) }, 0);
        // SAFETY: freed once.
        unsafe { llama_free(c) };
    }
    // SAFETY: freed once.
    unsafe { llama_model_free(m) };
}

#[test]
fn freeing_returns_everything() {
    let models = [data("tiny/tiny-qwen2-q8_0.gguf"), data("deepseek2/tiny-deepseek2-lite-q4_k_m.gguf")];
    // Warm up allocator pools and thread-local state once.
    for p in &models {
        cycle(p, 3);
    }
    assert_eq!(stats::snapshot(), stats::Snapshot::default(), "counters after warm-up");
    let before = anonymous_kib();
    for round in 0..8 {
        for p in &models {
            cycle(p, 5);
            assert!(!mapped(p), "round {round}: {} still mapped after llama_model_free", p.display());
        }
    }
    let s = stats::snapshot();
    assert_eq!((s.models, s.contexts, s.mapped_bytes, s.kv_bytes), (0, 0, 0, 0), "live objects after freeing everything: {s:?}");
    let after = anonymous_kib();
    // 80 contexts and 16 models went through; each context alone holds over 1 MiB of KV cache
    // and scratch, so a per-context leak would show as tens of MiB. Allow allocator slack.
    assert!(after <= before + 8 * 1024, "anonymous memory grew from {before} KiB to {after} KiB");
    eprintln!("anonymous memory: {before} KiB before, {after} KiB after 80 contexts and 16 models");
}

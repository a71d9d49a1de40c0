//! Idempotent registration and no allocation per token: 100,000 single-token decodes over 4
//! sequences (with old positions trimmed so the cache never fills) leave the KV metadata at
//! its size after warm-up, publish no new sequence-table snapshot (the set of sequences does
//! not change), and allocate nothing at all on the decoding thread (jemalloc's per-thread
//! allocation counter does not move). Own binary: it reads process-wide counters.

mod common;

use common::*;
use deepseek::api::context::{llama_decode, llama_free, llama_get_memory};
use deepseek::api::memory::llama_memory_seq_rm;
use deepseek::api::model::llama_model_free;
use deepseek::api::stats::{ds_context_stats, ds_stats, ds_stats_get};
use deepseek::sys::alloc::thread_allocated_bytes;

const N_SEQ: i32 = 4;
const WINDOW: i32 = 64;

fn stats() -> ds_stats {
    let mut s = ds_stats::default();
    assert_eq!(ds_stats_get(&mut s), 0);
    s
}

/// One test (the counters are process-wide): a dense model, then deepseek32 with its indexer
/// choosing 8 of the up to 128 cells each token sees (the scoring, the top-k and the sparse
/// attention allocate nothing either).
#[test]
fn repeated_decodes_neither_grow_metadata_nor_allocate() {
    check("tiny/tiny-qwen2-q8_0.gguf", 100_000);
    check("deepseek-family/tiny-deepseek32-q8_0.gguf", 20_000);
}

fn check(model: &str, n_decodes: usize) {
    let m = load_model(&data(model));
    let c = new_context(m, 256 * N_SEQ as u32, N_SEQ as u32, 1);
    let mem = llama_get_memory(c);
    let mut batch = Batch::new(1, 1);
    let mut next_pos = [0i32; N_SEQ as usize];
    let mut step = |i: usize| {
        let s = (i % N_SEQ as usize) as i32;
        let p = next_pos[s as usize];
        batch.clear();
        batch.add((i * 7 % 480) as i32, p, s, true);
        // SAFETY: the batch holds one token.
        assert_eq!(unsafe { llama_decode(c, batch.0) }, 0, "decode {i}");
        next_pos[s as usize] += 1;
        if p >= 2 * WINDOW {
            assert!(llama_memory_seq_rm(mem, s, 0, p - WINDOW));
        }
    };
    for i in 0..2_000 {
        step(i);
    }
    let mut before = Default::default();
    assert_eq!(ds_context_stats(c, &mut before), 0);
    let published = stats().seq_snapshots_published;
    let allocated = thread_allocated_bytes();
    assert!(allocated > 0, "jemalloc's per-thread counter is not available");
    for i in 2_000..2_000 + n_decodes {
        step(i);
    }
    let allocated_during = thread_allocated_bytes() - allocated;
    let mut after = Default::default();
    assert_eq!(ds_context_stats(c, &mut after), 0);
    assert_eq!(after.decode_calls - before.decode_calls, n_decodes as u64);
    assert_eq!(after.kv_metadata_bytes, before.kv_metadata_bytes, "KV metadata grew");
    assert_eq!(after.n_seq_active, N_SEQ as u32);
    assert_eq!(stats().seq_snapshots_published, published, "re-registering existing sequences published new snapshots");
    assert_eq!(allocated_during, 0, "{model}: the decode path allocated {allocated_during} bytes over {n_decodes} decodes");
    eprintln!("{model}: {n_decodes} decodes: KV metadata {} bytes before and after, 0 bytes allocated", after.kv_metadata_bytes);
    // SAFETY: freed once each, context first.
    unsafe {
        llama_free(c);
        llama_model_free(m);
    }
}

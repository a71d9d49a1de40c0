//! Idempotent registration and no allocation per token. After a warm-up of the same workload,
//! many decodes over 4 sequences (old positions trimmed so the cache never fills) leave the KV
//! metadata at its size, publish no new sequence-table snapshot (the set of sequences does not
//! change), and allocate nothing at all on any thread the decode runs on: the decoding thread
//! and every worker of the context's pool (jemalloc's per-thread allocation counters do not
//! move). Workloads: single tokens, a batch with one token of every sequence, prompt chunks of
//! 8 tokens; with and without sampling every output through the common chains (penalties,
//! top-k, top-p, min-p, temperature, dist; greedy); on a dense model, on deepseek2 (MLA), on a legacy deepseek2 file (its per-head K/V cache) and on
//! deepseek32 (its indexer choosing 8 of up to 128 cells) and on deepseek4 (whose cache cuts
//! no sequence: every 200 positions a sequence starts over as a whole copy of a 20-token
//! template sequence; HCA blocks complete, the indexer chooses 4 of up to 50 rows). Last,
//! sequences coming and going (removed whole, registered again) grow nothing. Own binary:
//! it reads process-wide
//! counters.

mod common;

use common::*;
use deepseek::api::context::{llama_decode, llama_free, llama_get_memory};
use deepseek::api::handles::{llama_context, llama_model};
use deepseek::api::memory::{llama_memory_seq_cp, llama_memory_seq_rm};
use deepseek::api::model::{llama_model_free, llama_model_get_vocab};
use deepseek::api::sampling::*;
use deepseek::api::stats::{ds_context_stats, ds_stats, ds_stats_get};
use deepseek::api::types::llama_sampler;
use deepseek::api::vocab::llama_vocab_n_tokens;
use deepseek::sys::alloc::thread_allocated_bytes;

const N_SEQ: i32 = 4;
const WINDOW: i32 = 64;
const THREADS: i32 = 2;
/// deepseek4: the position at which a sequence starts over (past an HCA block of 128, its CSA
/// rows beyond the indexer's top-k), as a copy of a template sequence (`N_SEQ`) of `TEMPLATE`
/// tokens.
const RESTART: i32 = 200;
const TEMPLATE: i32 = 20;

fn stats() -> ds_stats {
    let mut s = ds_stats::default();
    assert_eq!(ds_stats_get(&mut s), 0);
    s
}

/// What one decode call holds.
#[derive(Clone, Copy, Debug)]
enum Batches {
    /// One token of one sequence (sequences in turn): generation.
    Single,
    /// One token of every sequence: batched generation.
    EverySeq,
    /// `n` consecutive tokens of one sequence, the last one output: prompt chunks.
    Chunks(i32),
}

/// How the next token of a sequence is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Next {
    /// A fixed pattern (no sampling).
    Pattern,
    /// Sampled from the output with the sequence's own chain: penalties, top-k, top-p, min-p,
    /// temperature, dist (sequences 0–2) or greedy (sequence 3).
    Sampled,
}

fn chain(n_vocab: i32, s: i32) -> *mut llama_sampler {
    let c = llama_sampler_chain_init(llama_sampler_chain_default_params());
    if s == N_SEQ - 1 {
        llama_sampler_chain_add(c, llama_sampler_init_greedy());
        return c;
    }
    llama_sampler_chain_add(c, llama_sampler_init_penalties(n_vocab, 64, 1.1, 0.05, 0.05));
    llama_sampler_chain_add(c, llama_sampler_init_top_k(40));
    llama_sampler_chain_add(c, llama_sampler_init_top_p(0.95, 1));
    llama_sampler_chain_add(c, llama_sampler_init_min_p(0.05, 1));
    llama_sampler_chain_add(c, llama_sampler_init_temp(0.8));
    llama_sampler_chain_add(c, llama_sampler_init_dist(1234 + s as u32));
    c
}

/// Bytes allocated so far by the decoding thread (this one) and by the context's workers.
fn allocated(c: *mut llama_context) -> (u64, u64) {
    // SAFETY: a live context used by this thread only.
    let workers = unsafe { &(*c).owned().ctx }.workers_allocated_bytes();
    (thread_allocated_bytes(), workers)
}

/// One test (the counters are process-wide), every workload on every model.
#[test]
fn repeated_decodes_neither_grow_metadata_nor_allocate() {
    let cases: &[(&str, &[(Batches, Next, usize)])] = &[
        (
            "tiny/tiny-qwen2-q8_0.gguf",
            &[(Batches::Single, Next::Pattern, 100_000), (Batches::Single, Next::Sampled, 10_000), (Batches::EverySeq, Next::Sampled, 5_000), (Batches::Chunks(8), Next::Pattern, 5_000)],
        ),
        (
            "deepseek2/tiny-deepseek2-lite-q4_k_m.gguf",
            &[(Batches::Single, Next::Pattern, 20_000), (Batches::EverySeq, Next::Sampled, 5_000), (Batches::Chunks(8), Next::Pattern, 2_000)],
        ),
        (
            // the legacy layout run as upstream runs it: per-head K/V decompressed and cached
            "deepseek-family/tiny-deepseek2-legacy-q8_0.gguf",
            &[(Batches::Single, Next::Pattern, 5_000), (Batches::EverySeq, Next::Sampled, 2_000), (Batches::Chunks(8), Next::Pattern, 1_000)],
        ),
        (
            "deepseek-family/tiny-deepseek32-q8_0.gguf",
            &[(Batches::Single, Next::Pattern, 20_000), (Batches::EverySeq, Next::Sampled, 5_000), (Batches::Chunks(8), Next::Pattern, 2_000)],
        ),
        (
            "deepseek-family/tiny-deepseek4-q8_0.gguf",
            &[(Batches::Single, Next::Pattern, 20_000), (Batches::EverySeq, Next::Sampled, 5_000), (Batches::Chunks(8), Next::Pattern, 2_000)],
        ),
    ];
    for (model, workloads) in cases {
        let m = load_model(&data(model));
        for &(batches, next, n_decodes) in workloads.iter() {
            check(m, model, batches, next, n_decodes);
        }
        // SAFETY: every context on it is freed.
        unsafe { llama_model_free(m) };
    }
    sequences_coming_and_going_grow_nothing();
}

/// What could grow when sequences come and go — the sequence table's published snapshots, the
/// cells' sequence sets, the output buffers, the KV metadata — does not: 100,000 single-token
/// decodes over 4 sequences where every 50 decodes one sequence is removed whole (its cells
/// freed, it leaves the table) and starts again at position 0 (it registers again), publishing
/// a snapshot each time. After an epoch flush the live snapshots are back to the count before,
/// and jemalloc's allocated bytes are where they were (within 64 KiB: what the flush leaves in
/// crossbeam's per-thread bags), while 4,000 snapshots were published and freed. (Run after the
/// other workloads in the same test: it reads process-wide counters.)
fn sequences_coming_and_going_grow_nothing() {
    let m = load_model(&data("tiny/tiny-qwen2-q8_0.gguf"));
    let c = new_context(m, 256 * N_SEQ as u32, N_SEQ as u32, THREADS);
    let mem = llama_get_memory(c);
    let mut batch = Batch::new(1, N_SEQ);
    let mut next_pos = [0i32; N_SEQ as usize];
    let mut step = |i: usize| {
        let s = (i % N_SEQ as usize) as i32;
        if i % 50 == 49 {
            let gone = ((i / 50) % N_SEQ as usize) as i32;
            assert!(llama_memory_seq_rm(mem, gone, -1, -1));
            next_pos[gone as usize] = 0;
        }
        batch.clear();
        batch.add((i * 7 % 480) as i32, next_pos[s as usize], s, true);
        next_pos[s as usize] += 1;
        // SAFETY: the batch holds one token, within its capacity.
        assert_eq!(unsafe { llama_decode(c, batch.0) }, 0, "decode {i}");
        if next_pos[s as usize] >= 200 {
            assert!(llama_memory_seq_rm(mem, s, 0, next_pos[s as usize] - WINDOW));
        }
    };
    let settle = || {
        for _ in 0..16 {
            crossbeam_epoch::pin().flush();
        }
        stats()
    };
    for i in 0..2_000 {
        step(i);
    }
    let mut before = Default::default();
    assert_eq!(ds_context_stats(c, &mut before), 0);
    let s0 = settle();
    for i in 2_000..102_000 {
        step(i);
    }
    let s1 = settle();
    let mut after = Default::default();
    assert_eq!(ds_context_stats(c, &mut after), 0);
    let published = s1.seq_snapshots_published - s0.seq_snapshots_published;
    assert!(published >= 4_000, "only {published} snapshots were published: the sequences did not come and go");
    assert_eq!(s1.seq_snapshots_live, s0.seq_snapshots_live, "{published} snapshots published, live ones grew");
    assert_eq!(after.kv_metadata_bytes, before.kv_metadata_bytes, "KV metadata grew");
    assert_eq!(s1.scratch_bytes, s0.scratch_bytes, "scratch and output buffers grew");
    let growth = s1.heap_allocated_bytes as i64 - s0.heap_allocated_bytes as i64;
    assert!(growth.abs() <= 64 << 10, "100,000 decodes with {published} sequence changes: the heap grew by {growth} bytes");
    eprintln!("churn: {published} snapshots published over 100,000 decodes; live {} before and after; heap {growth:+} bytes", s1.seq_snapshots_live);
    // SAFETY: freed once each.
    unsafe {
        llama_free(c);
        llama_model_free(m);
    }
}

fn check(m: *mut llama_model, model: &str, batches: Batches, next: Next, n_decodes: usize) {
    let what = format!("{model}, {batches:?}, {next:?}");
    let whole_only = model.contains("deepseek4");
    let n_seq = N_SEQ + whole_only as i32;
    let c = new_context(m, 256 * n_seq as u32, n_seq as u32, THREADS);
    let mem = llama_get_memory(c);
    if whole_only {
        let mut b = Batch::new(TEMPLATE, n_seq);
        for p in 0..TEMPLATE {
            b.add(p * 5 % 480, p, N_SEQ, p == TEMPLATE - 1);
        }
        // SAFETY: a valid batch.
        assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
    }
    let n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
    let chains: Vec<*mut llama_sampler> = (0..N_SEQ).map(|s| chain(n_vocab, s)).collect();
    let mut batch = Batch::new(8.max(N_SEQ), N_SEQ);
    let mut next_pos = [0i32; N_SEQ as usize];
    let mut next_tok = [1i32, 2, 3, 4];

    // Outputs of the last decode: (batch index, sequence).
    let mut outputs = [(0i32, 0i32); N_SEQ as usize];
    let mut step = |i: usize| {
        batch.clear();
        let mut n_out = 0;
        let mut add = |batch: &mut Batch, s: i32, tok: i32, out: bool| {
            let p = next_pos[s as usize];
            if out {
                outputs[n_out] = (batch.0.n_tokens, s);
                n_out += 1;
            }
            batch.add(tok, p, s, out);
            next_pos[s as usize] += 1;
        };
        let pattern = |k: usize| (k * 7 % 480) as i32;
        match batches {
            Batches::Single => {
                let s = (i % N_SEQ as usize) as i32;
                add(&mut batch, s, if next == Next::Sampled { next_tok[s as usize] } else { pattern(i) }, true);
            }
            Batches::EverySeq => {
                for s in 0..N_SEQ {
                    add(&mut batch, s, if next == Next::Sampled { next_tok[s as usize] } else { pattern(i + s as usize) }, true);
                }
            }
            Batches::Chunks(n) => {
                let s = (i % N_SEQ as usize) as i32;
                for k in 0..n {
                    add(&mut batch, s, pattern(i * n as usize + k as usize), k == n - 1);
                }
            }
        }
        // SAFETY: the batch holds what was added, within its capacity.
        assert_eq!(unsafe { llama_decode(c, batch.0) }, 0, "decode {i}");
        if next == Next::Sampled {
            for &(idx, s) in &outputs[..n_out] {
                let t = llama_sampler_sample(chains[s as usize], c, idx);
                assert!((0..n_vocab).contains(&t), "sampled {t}");
                next_tok[s as usize] = t;
            }
        }
        for s in 0..N_SEQ {
            let p = next_pos[s as usize] - 1;
            if whole_only && p >= RESTART - 8 {
                // deepseek4's cache cuts no sequence: it starts over as a copy of the template
                // sequence (whole-sequence copy: cells, compressed rows and rings), staying
                // registered
                llama_memory_seq_cp(mem, N_SEQ, s, -1, -1);
                next_pos[s as usize] = TEMPLATE;
            } else if !whole_only && p >= 2 * WINDOW {
                assert!(llama_memory_seq_rm(mem, s, 0, p - WINDOW));
            }
        }
    };
    for i in 0..2_000 {
        step(i);
    }
    let mut before = Default::default();
    assert_eq!(ds_context_stats(c, &mut before), 0);
    let published = stats().seq_snapshots_published;
    let (caller0, workers0) = allocated(c);
    // (Each worker has allocated something since it started, if only at its start: the
    // counters are live on every thread.)
    assert!(caller0 > 0 && workers0 > 0, "jemalloc's per-thread counters are not available ({caller0}, {workers0})");
    // Reading the counters allocates nothing itself.
    assert_eq!(allocated(c), (caller0, workers0), "{what}: reading the allocation counters allocates");
    for i in 2_000..2_000 + n_decodes {
        step(i);
    }
    let (caller1, workers1) = allocated(c);
    let (caller, workers) = (caller1 - caller0, workers1 - workers0);
    let mut after = Default::default();
    assert_eq!(ds_context_stats(c, &mut after), 0);
    assert_eq!(after.decode_calls - before.decode_calls, n_decodes as u64);
    assert_eq!(after.kv_metadata_bytes, before.kv_metadata_bytes, "{what}: KV metadata grew");
    assert_eq!(after.n_seq_active, n_seq as u32);
    assert_eq!(stats().seq_snapshots_published, published, "{what}: re-registering existing sequences published new snapshots");
    assert!(
        caller == 0 && workers == 0,
        "{what}: {n_decodes} decodes allocated {caller} bytes on the decoding thread and {workers} on the {} worker(s)",
        THREADS - 1
    );
    eprintln!("{what}: {n_decodes} decodes on {THREADS} threads: KV metadata {} bytes before and after, 0 bytes allocated on any thread", after.kv_metadata_bytes);
    // SAFETY: freed once each, the context before its model.
    unsafe {
        for s in chains {
            llama_sampler_free(s);
        }
        llama_free(c);
    }
}

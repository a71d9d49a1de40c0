//! Readers while decoding: one thread hammers llama_memory_seq_pos_min/max, ds_context_stats
//! and ds_stats_get on a context while another thread decodes in it (and trims, clears and
//! re-registers its sequence, so sequence-table snapshots are replaced all along). Readers
//! complete whole calls inside a single decode (they never wait for it), never see a torn
//! or impossible value, the decoding thread's step time stays close to a run without
//! readers, and every replaced snapshot is reclaimed. Own binary: process-wide counters.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use deepseek::api::context::{llama_decode, llama_free, llama_get_memory};
use deepseek::api::handles::{llama_context, llama_memory_i};
use deepseek::api::memory::{llama_memory_seq_pos_max, llama_memory_seq_pos_min, llama_memory_seq_rm};
use deepseek::api::model::llama_model_free;
use deepseek::api::stats::{ds_context_stats, ds_stats, ds_stats_get};

const N_CTX: i32 = 512;
const STEPS: usize = 1_500;

#[derive(Clone, Copy)]
struct Handles(*mut llama_context, *mut llama_memory_i);
// SAFETY: the reader thread only makes the calls documented as safe from any thread.
unsafe impl Send for Handles {}

/// The decoding thread: single tokens on sequence 0, trimming old positions, and clearing the
/// sequence every 300 steps (it unregisters and registers again). `phase` is odd while a
/// decode runs. Returns each step's time.
fn decode_steps(h: Handles, phase: &AtomicU64) -> Vec<Duration> {
    let mut batch = Batch::new(1, 1);
    let mut pos = 0;
    let mut times = Vec::with_capacity(STEPS);
    assert!(llama_memory_seq_rm(h.1, 0, -1, -1));
    for i in 0..STEPS {
        if i % 300 == 299 {
            assert!(llama_memory_seq_rm(h.1, 0, -1, -1));
            pos = 0;
        }
        batch.clear();
        batch.add((i * 13 % 480) as i32, pos, 0, true);
        let t = Instant::now();
        phase.fetch_add(1, Ordering::SeqCst);
        // SAFETY: the batch holds one token.
        let rc = unsafe { llama_decode(h.0, batch.0) };
        phase.fetch_add(1, Ordering::SeqCst);
        times.push(t.elapsed());
        assert_eq!(rc, 0, "decode {i} at position {pos}");
        if pos >= 256 {
            assert!(llama_memory_seq_rm(h.1, 0, 0, pos - 128));
        }
        pos += 1;
    }
    times
}

#[derive(Default, Debug)]
struct ReaderCounts {
    calls: u64,
    inside_one_decode: u64,
}

/// The reader: every call's values are checked for consistency and monotonicity.
fn read_until(h: Handles, phase: &AtomicU64, stop: &AtomicBool) -> ReaderCounts {
    let mut counts = ReaderCounts::default();
    let (mut last_calls, mut last_tokens, mut last_global) = (0u64, 0u64, 0u64);
    while !stop.load(Ordering::SeqCst) {
        let before = phase.load(Ordering::SeqCst);
        // SAFETY: the context lives until the reader is stopped and joined; the monitor is
        // what these read.
        let (lo, hi) = unsafe { &*h.0 }.monitor.seqs.range(0);
        assert!((lo, hi) == (-1, -1) || (0 <= lo && lo <= hi && hi < N_CTX), "torn or impossible range ({lo}, {hi})");
        let (pmin, pmax) = (llama_memory_seq_pos_min(h.1, 0), llama_memory_seq_pos_max(h.1, 0));
        assert!((-1..N_CTX).contains(&pmin) && (-1..N_CTX).contains(&pmax));
        let mut cs = Default::default();
        assert_eq!(ds_context_stats(h.0, &mut cs), 0);
        assert!(cs.decode_calls >= last_calls && cs.prompt_tokens + cs.generated_tokens >= last_tokens, "context counters went back");
        assert!(cs.kv_cells_used as i32 <= N_CTX && cs.n_seq_active <= 1 && cs.n_ctx >= N_CTX as u32);
        let mut s = ds_stats::default();
        assert_eq!(ds_stats_get(&mut s), 0);
        assert!(s.decode_calls >= last_global && s.live_contexts >= 1);
        (last_calls, last_tokens, last_global) = (cs.decode_calls, cs.prompt_tokens + cs.generated_tokens, s.decode_calls);
        let after = phase.load(Ordering::SeqCst);
        counts.calls += 1;
        if before == after && before % 2 == 1 {
            counts.inside_one_decode += 1;
        }
    }
    counts
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
fn readers_on_another_thread_never_block_or_tear() {
    let m = load_model(&data("tiny/tiny-qwen2-q8_0.gguf"));
    let c = new_context(m, N_CTX as u32, 1, 1);
    let h = Handles(c, llama_get_memory(c));
    let published_before = {
        let mut s = ds_stats::default();
        ds_stats_get(&mut s);
        s.seq_snapshots_published
    };
    let (mut alone, mut watched, mut counts) = (Vec::new(), Vec::new(), ReaderCounts::default());
    // Alternate runs without and with a reader, so drift on a shared machine hits both.
    for _ in 0..3 {
        alone.extend(decode_steps(h, &AtomicU64::new(0)));
        let phase = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (phase, stop) = (Arc::clone(&phase), Arc::clone(&stop));
            std::thread::spawn(move || read_until(h, &phase, &stop))
        };
        watched.extend(decode_steps(h, &phase));
        stop.store(true, Ordering::SeqCst);
        let r = reader.join().expect("the reader found a bad value");
        counts.calls += r.calls;
        counts.inside_one_decode += r.inside_one_decode;
    }
    let (m_alone, m_watched) = (median(alone), median(watched));
    eprintln!("reader: {counts:?}; median decode step {m_alone:?} alone, {m_watched:?} with the reader");
    assert!(counts.inside_one_decode > 0, "no reader call completed inside a decode: readers wait for the decoder ({counts:?})");
    assert!(m_watched <= m_alone * 3 / 2 + Duration::from_micros(20), "the reader slowed decoding: median step {m_alone:?} alone, {m_watched:?} with it");

    // SAFETY: the reader is joined; freed once each.
    unsafe {
        llama_free(c);
        llama_model_free(m);
    }
    let mut s = ds_stats::default();
    ds_stats_get(&mut s);
    assert!(s.seq_snapshots_published - published_before >= 3 * (STEPS as u64 / 300), "the sequence was not re-registered: {s:?}");
    assert_eq!(s.seq_snapshots_live, 0, "replaced sequence-table snapshots leaked: {s:?}");
}

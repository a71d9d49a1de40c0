//! What other threads may read about a context while it decodes (`ds_context_stats`,
//! `llama_memory_seq_pos_min/max`): atomics and the KV cache's epoch-published sequence
//! table, shared through an `Arc` so that reading never touches the context itself. The
//! owning thread writes; any thread reads, without blocking it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::kv::SeqTable;
use crate::sys::stats::{HistogramSnapshot, LatencyHistogram};

pub struct ContextMonitor {
    pub seqs: Arc<SeqTable>,
    pub n_ctx: u32,
    pub n_seq_max: u32,
    pub kv_bytes: usize,
    /// deepseek4: `llama_memory_seq_pos_min` reports a sequence's last position, as upstream's
    /// cache does (it cannot be rolled back inside its window).
    pub pos_min_is_max: bool,
    scratch_bytes: AtomicU64,
    decode_calls: AtomicU64,
    prompt_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    prompt_latency: LatencyHistogram,
    generation_latency: LatencyHistogram,
}

/// One reading of a context's monitor.
#[derive(Clone, Copy, Debug, Default)]
pub struct ContextReading {
    pub n_ctx: u32,
    pub n_seq_max: u32,
    pub n_seq_active: u32,
    pub kv_cells_used: u32,
    pub kv_bytes: u64,
    pub kv_metadata_bytes: u64,
    pub scratch_bytes: u64,
    pub decode_calls: u64,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    pub prompt_latency: HistogramSnapshot,
    pub generation_latency: HistogramSnapshot,
}

impl ContextMonitor {
    pub fn new(seqs: Arc<SeqTable>, n_ctx: u32, n_seq_max: u32, kv_bytes: usize) -> ContextMonitor {
        ContextMonitor {
            seqs,
            n_ctx,
            n_seq_max,
            kv_bytes,
            pos_min_is_max: false,
            scratch_bytes: AtomicU64::new(0),
            decode_calls: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            generated_tokens: AtomicU64::new(0),
            prompt_latency: LatencyHistogram::new(),
            generation_latency: LatencyHistogram::new(),
        }
    }

    pub(super) fn set_scratch_bytes(&self, n: usize) {
        self.scratch_bytes.store(n as u64, Ordering::Relaxed);
    }

    /// Records a finished decode of `n_tokens` that took `ns`: a generation step when every
    /// sequence in it advanced by one token, prompt processing otherwise.
    pub(super) fn record_decode(&self, n_tokens: usize, generation: bool, ns: u64) {
        use crate::sys::stats;
        let n = n_tokens as u64;
        self.decode_calls.fetch_add(1, Ordering::Relaxed);
        stats::DECODE_CALLS.add(1);
        if generation {
            self.generated_tokens.fetch_add(n, Ordering::Relaxed);
            stats::GENERATED_TOKENS.add(n);
            self.generation_latency.observe(ns, n);
            stats::GENERATION_LATENCY.observe(ns, n);
        } else {
            self.prompt_tokens.fetch_add(n, Ordering::Relaxed);
            stats::PROMPT_TOKENS.add(n);
            self.prompt_latency.observe(ns / n.max(1), n);
            stats::PROMPT_LATENCY.observe(ns / n.max(1), n);
        }
    }

    pub fn read(&self) -> ContextReading {
        ContextReading {
            n_ctx: self.n_ctx,
            n_seq_max: self.n_seq_max,
            n_seq_active: self.seqs.n_registered() as u32,
            kv_cells_used: self.seqs.used_cells() as u32,
            kv_bytes: self.kv_bytes as u64,
            kv_metadata_bytes: self.seqs.metadata_bytes() as u64,
            scratch_bytes: self.scratch_bytes.load(Ordering::Relaxed),
            decode_calls: self.decode_calls.load(Ordering::Relaxed),
            prompt_tokens: self.prompt_tokens.load(Ordering::Relaxed),
            generated_tokens: self.generated_tokens.load(Ordering::Relaxed),
            prompt_latency: self.prompt_latency.snapshot(),
            generation_latency: self.generation_latency.snapshot(),
        }
    }
}

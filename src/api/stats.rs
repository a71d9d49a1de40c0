//! deepseek's own monitoring API: ds_stats_get, ds_context_stats, ds_metrics_prometheus.
//! All three may be called from any thread at any time, also while contexts decode (on the
//! context being read, too): they read atomics and epoch-published snapshots only, never
//! block a decoding thread and never wait for one.

use std::ffi::c_char;

use super::boundary::{as_mut, as_ref, guard_or, write_c_string};
use super::handles::llama_context;
use crate::context::ContextReading;
use crate::sys::alloc::heap_stats;
use crate::sys::stats::{self, HistogramSnapshot};

/// Process-wide figures of the library. Live counts and bytes return to 0 when every model,
/// context and sampler is freed. Safe to call from any thread at any time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ds_stats {
    /// Models, contexts and samplers alive (a sampler chain counts with its members).
    pub live_models: i64,
    pub live_contexts: i64,
    pub live_samplers: i64,
    /// Model file bytes mapped (mmap loading) and copied into owned memory (no mmap).
    pub mapped_model_bytes: i64,
    pub owned_model_bytes: i64,
    /// K/V data and KV metadata (cells, sequence tables) of all contexts.
    pub kv_bytes: i64,
    pub kv_metadata_bytes: i64,
    /// Activation scratch and output (logits, embeddings) buffers of all contexts.
    pub scratch_bytes: i64,
    /// The tokenizer keeps no cache (it is linear-time without one), so these read 0.
    pub tokenizer_cache_entries: i64,
    pub tokenizer_cache_bytes: i64,
    /// Sequence-table snapshots alive (current ones plus replaced ones awaiting the epoch)
    /// and published since start.
    pub seq_snapshots_live: i64,
    pub seq_snapshots_published: u64,
    /// jemalloc: bytes allocated by the library, resident, and retained (0 in builds without
    /// jemalloc).
    pub heap_allocated_bytes: u64,
    pub heap_resident_bytes: u64,
    pub heap_retained_bytes: u64,
    /// llama_decode calls that succeeded, and the tokens they processed as prompt and as
    /// generation (a decode where every sequence advances by one token).
    pub decode_calls: u64,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    /// Per-token latency quantiles in microseconds, from the histograms
    /// ds_metrics_prometheus renders (0 before the first decode).
    pub prompt_token_p50_us: f64,
    pub prompt_token_p90_us: f64,
    pub prompt_token_p99_us: f64,
    pub generation_token_p50_us: f64,
    pub generation_token_p90_us: f64,
    pub generation_token_p99_us: f64,
    /// Serving engines alive (ds_engine_new), and the sum of their figures.
    pub live_engines: i64,
    pub engines: super::engine::ds_engine_stats,
}

/// One context's figures. Safe to call from any thread while the context decodes; not
/// after llama_free(ctx).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ds_context_stats {
    pub n_ctx: u32,
    pub n_seq_max: u32,
    /// Sequences holding KV cells, and cells in use.
    pub n_seq_active: u32,
    pub kv_cells_used: u32,
    pub kv_bytes: u64,
    pub kv_metadata_bytes: u64,
    pub scratch_bytes: u64,
    pub decode_calls: u64,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    pub prompt_token_p50_us: f64,
    pub prompt_token_p90_us: f64,
    pub prompt_token_p99_us: f64,
    pub generation_token_p50_us: f64,
    pub generation_token_p90_us: f64,
    pub generation_token_p99_us: f64,
}

fn quantiles(h: &HistogramSnapshot) -> [f64; 3] {
    [h.quantile_us(0.5), h.quantile_us(0.9), h.quantile_us(0.99)]
}

fn read_stats() -> ds_stats {
    let heap = heap_stats();
    let prompt = quantiles(&stats::PROMPT_LATENCY.snapshot());
    let generation = quantiles(&stats::GENERATION_LATENCY.snapshot());
    ds_stats {
        live_models: stats::MODELS.get(),
        live_contexts: stats::CONTEXTS.get(),
        live_samplers: stats::SAMPLERS.get(),
        mapped_model_bytes: stats::MAPPED_BYTES.get(),
        owned_model_bytes: stats::OWNED_MODEL_BYTES.get(),
        kv_bytes: stats::KV_BYTES.get(),
        kv_metadata_bytes: stats::KV_META_BYTES.get(),
        scratch_bytes: stats::SCRATCH_BYTES.get(),
        tokenizer_cache_entries: 0,
        tokenizer_cache_bytes: 0,
        seq_snapshots_live: stats::SEQ_SNAPSHOTS.get(),
        seq_snapshots_published: stats::SEQ_SNAPSHOTS_PUBLISHED.get(),
        heap_allocated_bytes: heap.allocated,
        heap_resident_bytes: heap.resident,
        heap_retained_bytes: heap.retained,
        decode_calls: stats::DECODE_CALLS.get(),
        prompt_tokens: stats::PROMPT_TOKENS.get(),
        generated_tokens: stats::GENERATED_TOKENS.get(),
        prompt_token_p50_us: prompt[0],
        prompt_token_p90_us: prompt[1],
        prompt_token_p99_us: prompt[2],
        generation_token_p50_us: generation[0],
        generation_token_p90_us: generation[1],
        generation_token_p99_us: generation[2],
        live_engines: stats::ENGINES.get(),
        engines: super::engine::engine_stats(&stats::ENGINES_ALL),
    }
}

fn context_stats(r: &ContextReading) -> ds_context_stats {
    let prompt = quantiles(&r.prompt_latency);
    let generation = quantiles(&r.generation_latency);
    ds_context_stats {
        n_ctx: r.n_ctx,
        n_seq_max: r.n_seq_max,
        n_seq_active: r.n_seq_active,
        kv_cells_used: r.kv_cells_used,
        kv_bytes: r.kv_bytes,
        kv_metadata_bytes: r.kv_metadata_bytes,
        scratch_bytes: r.scratch_bytes,
        decode_calls: r.decode_calls,
        prompt_tokens: r.prompt_tokens,
        generated_tokens: r.generated_tokens,
        prompt_token_p50_us: prompt[0],
        prompt_token_p90_us: prompt[1],
        prompt_token_p99_us: prompt[2],
        generation_token_p50_us: generation[0],
        generation_token_p90_us: generation[1],
        generation_token_p99_us: generation[2],
    }
}

/// Fills `*out` with the library's figures. Returns 0, or -1 (logged) when `out` is NULL.
/// Any thread, any time.
#[no_mangle]
pub extern "C" fn ds_stats_get(out: *mut ds_stats) -> i32 {
    guard_or("ds_stats_get", -1, || {
        // SAFETY: the caller passes NULL or a writable ds_stats.
        *unsafe { as_mut(out, "out") }? = read_stats();
        Ok(0)
    })
}

/// Fills `*out` with `ctx`'s figures. Returns 0, or -1 (logged) when an argument is NULL.
/// Any thread, also while `ctx` decodes on another; not after llama_free(ctx).
#[no_mangle]
pub extern "C" fn ds_context_stats(ctx: *const llama_context, out: *mut ds_context_stats) -> i32 {
    guard_or("ds_context_stats", -1, || {
        // SAFETY: llama_context handles are live until llama_free; only the monitor (never
        // written after creation, read through atomics) is touched.
        let c = unsafe { as_ref(ctx, "ctx") }?;
        // SAFETY: the caller passes NULL or a writable ds_context_stats.
        let out = unsafe { as_mut(out, "out") }?;
        *out = context_stats(&c.monitor.read());
        Ok(0)
    })
}

/// Renders the figures of ds_stats_get, with per-token latency histograms for prompt and
/// generation, in Prometheus' text exposition format. Writes at most `len` bytes including a
/// NUL (as snprintf) and returns the full length, so a caller can size its buffer; -1
/// (logged) when `buf` is NULL and `len` > 0. Any thread, any time.
///
/// # Safety
/// `buf` must be NULL (with `len` 0) or writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ds_metrics_prometheus(buf: *mut c_char, len: usize) -> i64 {
    guard_or("ds_metrics_prometheus", -1, || {
        if buf.is_null() && len > 0 {
            return Err("buf is NULL".into());
        }
        let e = &stats::ENGINES_ALL;
        let histograms = [
            ("ds_prompt_token_seconds", "Per-token latency of prompt processing.", stats::PROMPT_LATENCY.snapshot()),
            ("ds_generation_token_seconds", "Per-token latency of generation steps.", stats::GENERATION_LATENCY.snapshot()),
            ("ds_engine_time_to_first_token_seconds", "Serving engines: time from a request's submission to its first token.", e.ttft.snapshot()),
            ("ds_engine_inter_token_seconds", "Serving engines: time between a request's consecutive tokens.", e.itl.snapshot()),
        ];
        let text = crate::sys::prometheus::render(&metric_values(&read_stats()), &histograms);
        // SAFETY: buf is writable for len bytes (caller).
        unsafe { write_c_string(&text, buf, len) };
        Ok(text.len() as i64)
    })
}

fn metric_values(s: &ds_stats) -> Vec<crate::sys::prometheus::Metric> {
    use crate::sys::prometheus::{Kind::*, Metric};
    vec![
        Metric::new("ds_live_models", Gauge, "Models alive.", s.live_models as f64),
        Metric::new("ds_live_contexts", Gauge, "Contexts alive.", s.live_contexts as f64),
        Metric::new("ds_live_samplers", Gauge, "Samplers alive.", s.live_samplers as f64),
        Metric::new("ds_mapped_model_bytes", Gauge, "Model file bytes mapped.", s.mapped_model_bytes as f64),
        Metric::new("ds_owned_model_bytes", Gauge, "Model file bytes copied into owned memory.", s.owned_model_bytes as f64),
        Metric::new("ds_kv_bytes", Gauge, "K/V data bytes of all contexts.", s.kv_bytes as f64),
        Metric::new("ds_kv_metadata_bytes", Gauge, "KV metadata bytes of all contexts.", s.kv_metadata_bytes as f64),
        Metric::new("ds_scratch_bytes", Gauge, "Scratch and output buffer bytes of all contexts.", s.scratch_bytes as f64),
        Metric::new("ds_tokenizer_cache_entries", Gauge, "Tokenizer cache entries (the tokenizer keeps none).", s.tokenizer_cache_entries as f64),
        Metric::new("ds_tokenizer_cache_bytes", Gauge, "Tokenizer cache bytes (the tokenizer keeps none).", s.tokenizer_cache_bytes as f64),
        Metric::new("ds_seq_snapshots_live", Gauge, "Sequence-table snapshots alive, including replaced ones awaiting reclamation.", s.seq_snapshots_live as f64),
        Metric::new("ds_seq_snapshots_published_total", Counter, "Sequence-table snapshots published.", s.seq_snapshots_published as f64),
        Metric::new("ds_heap_allocated_bytes", Gauge, "Bytes allocated through jemalloc.", s.heap_allocated_bytes as f64),
        Metric::new("ds_heap_resident_bytes", Gauge, "Bytes jemalloc holds resident.", s.heap_resident_bytes as f64),
        Metric::new("ds_heap_retained_bytes", Gauge, "Bytes jemalloc retains (virtual, not resident).", s.heap_retained_bytes as f64),
        Metric::new("ds_decode_calls_total", Counter, "Successful llama_decode calls.", s.decode_calls as f64),
        Metric::new("ds_prompt_tokens_total", Counter, "Tokens processed as prompt.", s.prompt_tokens as f64),
        Metric::new("ds_generated_tokens_total", Counter, "Tokens processed as generation steps.", s.generated_tokens as f64),
        Metric::new("ds_live_engines", Gauge, "Serving engines alive.", s.live_engines as f64),
        Metric::new("ds_engine_queue_depth", Gauge, "Serving engines: requests waiting for a slot.", s.engines.queued as f64),
        Metric::new("ds_engine_running", Gauge, "Serving engines: requests holding a slot.", s.engines.running as f64),
        Metric::new("ds_engine_kv_cells_used", Gauge, "Serving engines: KV cells in use.", s.engines.kv_cells_used as f64),
        Metric::new("ds_engine_kv_cells_total", Gauge, "Serving engines: KV cells.", s.engines.kv_cells_total as f64),
        Metric::new("ds_engine_table_versions_live", Gauge, "Serving engines: request-table versions alive, including replaced ones awaiting reclamation.", s.engines.table_versions_live as f64),
        Metric::new("ds_engine_requests_submitted_total", Counter, "Serving engines: requests accepted.", s.engines.requests_submitted as f64),
        Metric::new("ds_engine_requests_rejected_total", Counter, "Serving engines: submissions refused (invalid, queue full, closing).", s.engines.requests_rejected as f64),
        Metric::new("ds_engine_requests_finished_length_total", Counter, "Serving engines: requests ended by max_tokens or a full context.", s.engines.finished_length as f64),
        Metric::new("ds_engine_requests_finished_stop_total", Counter, "Serving engines: requests ended by a stop token or string.", s.engines.finished_stop as f64),
        Metric::new("ds_engine_requests_finished_eog_total", Counter, "Serving engines: requests ended by an end-of-generation token.", s.engines.finished_eog as f64),
        Metric::new("ds_engine_requests_finished_cancelled_total", Counter, "Serving engines: requests cancelled.", s.engines.finished_cancelled as f64),
        Metric::new("ds_engine_requests_finished_error_total", Counter, "Serving engines: requests ended by an error.", s.engines.finished_error as f64),
        Metric::new("ds_engine_prompt_tokens_computed_total", Counter, "Serving engines: prompt tokens computed.", s.engines.prompt_tokens_computed as f64),
        Metric::new("ds_engine_prompt_tokens_reused_total", Counter, "Serving engines: prompt tokens whose KV cells were reused.", s.engines.prompt_tokens_reused as f64),
        Metric::new("ds_engine_generated_tokens_total", Counter, "Serving engines: tokens generated.", s.engines.generated_tokens as f64),
        Metric::new("ds_engine_tokens_per_second", Gauge, "Serving engines: tokens generated per second over the last second.", s.engines.tokens_per_second),
    ]
}

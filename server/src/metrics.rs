//! GET /metrics: Prometheus text of the engine's metrics (`ds_engine_*`, as the library's
//! `ds_metrics_prometheus` names them), the server's own, and llama-server's `llamacpp:*`
//! names for the quantities that mean the same thing here, so that dashboards built for
//! llama-server keep working.

use std::sync::atomic::Ordering;

use deepseek::sys::prometheus::{render, Kind::*, Metric};

use crate::{App, Ready};

pub fn text(app: &App, r: &Ready) -> String {
    let m = r.engine.metrics();
    let s = |us: u64| us as f64 / 1e6;
    let per_second = |n: u64, us: u64| if us > 0 { n as f64 / s(us) } else { 0.0 };
    let finished = |i: usize| m.finished[i].get() as f64;
    let steps = m.steps.get();
    let prompt = m.prompt_computed.get();
    let generated = m.generated.get();
    let (used, total) = (m.kv_cells_used.get() as f64, m.kv_cells_total.get() as f64);
    let kv_usage = if total > 0.0 { used / total } else { 0.0 };
    let metrics = vec![
        // llama-server's names (tools/server/server-task.cpp, to_metrics).
        Metric::new("llamacpp:prompt_tokens_total", Counter, "Number of prompt tokens processed, excluding cached tokens", prompt as f64),
        Metric::new("llamacpp:prompt_tokens_cached_total", Counter, "Number of prompt tokens reused from the cache", m.prompt_reused.get() as f64),
        Metric::new("llamacpp:prompt_seconds_total", Counter, "Total time spent processing prompts", s(m.prompt_us.get())),
        Metric::new("llamacpp:tokens_predicted_total", Counter, "Number of generation tokens processed", generated as f64),
        Metric::new("llamacpp:tokens_predicted_seconds_total", Counter, "Total time spent generating tokens", s(m.generation_us.get())),
        Metric::new("llamacpp:n_decode_total", Counter, "Total number of decode steps", steps as f64),
        Metric::new("llamacpp:n_tokens_max", Counter, "Largest observed sequence length (prompt + generation)", m.n_tokens_max.get() as f64),
        Metric::new("llamacpp:prompt_tokens_seconds", Gauge, "Average prompt throughput in tokens/s", per_second(prompt, m.prompt_us.get())),
        Metric::new("llamacpp:predicted_tokens_seconds", Gauge, "Average generation throughput in tokens/s", per_second(generated, m.generation_us.get())),
        Metric::new("llamacpp:requests_processing", Gauge, "Number of requests processing", m.running.get() as f64),
        Metric::new("llamacpp:requests_deferred", Gauge, "Number of requests deferred", m.queued.get() as f64),
        Metric::new("llamacpp:n_busy_slots_per_decode", Gauge, "Average number of busy slots per decode step", m.busy_slot_steps.get() as f64 / steps.max(1) as f64),
        // This server does not speculate (yet): no drafts, none accepted.
        Metric::new("llamacpp:spec_decode_num_draft_tokens_total", Counter, "Number of speculative draft tokens", 0.0),
        Metric::new("llamacpp:spec_decode_num_accepted_tokens_total", Counter, "Number of accepted speculative draft tokens", 0.0),
        Metric::new("llamacpp:spec_decode_num_drafts_total", Counter, "Number of speculative drafts", 0.0),
        // vLLM's names, which the Kubernetes Gateway API Inference Extension's model-server
        // protocol (and llm-d) read to route and scale: queue, running, KV utilisation (0-1).
        Metric::new("vllm:num_requests_waiting", Gauge, "Number of requests waiting to be processed.", m.queued.get() as f64),
        Metric::new("vllm:num_requests_running", Gauge, "Number of requests in model execution batches.", m.running.get() as f64),
        Metric::new("vllm:kv_cache_usage_perc", Gauge, "KV-cache usage. 1 means 100 percent usage.", kv_usage),
        Metric::new("vllm:prefix_cache_queries_total", Counter, "Prefix cache queries, in terms of number of queried tokens.", (prompt + m.prompt_reused.get()) as f64),
        Metric::new("vllm:prefix_cache_hits_total", Counter, "Prefix cache hits, in terms of number of cached tokens.", m.prompt_reused.get() as f64),
        // The engine's own.
        Metric::new("ds_engine_queue_depth", Gauge, "Requests waiting for a slot.", m.queued.get() as f64),
        Metric::new("ds_engine_running", Gauge, "Requests holding a slot.", m.running.get() as f64),
        Metric::new("ds_engine_slots", Gauge, "Slots (requests decoded at once).", r.engine.n_seq_max() as f64),
        Metric::new("ds_engine_kv_cells_used", Gauge, "KV cells in use.", m.kv_cells_used.get() as f64),
        Metric::new("ds_engine_kv_cells_total", Gauge, "KV cells.", m.kv_cells_total.get() as f64),
        Metric::new("ds_engine_table_versions_live", Gauge, "Request-table versions alive, including replaced ones awaiting reclamation.", m.table_versions_live.get() as f64),
        Metric::new("ds_engine_requests_submitted_total", Counter, "Requests accepted.", m.submitted.get() as f64),
        Metric::new("ds_engine_requests_rejected_total", Counter, "Submissions refused (invalid, queue full, closing).", m.rejected.get() as f64),
        Metric::new("ds_engine_requests_finished_length_total", Counter, "Requests ended by max_tokens or a full context.", finished(0)),
        Metric::new("ds_engine_requests_finished_stop_total", Counter, "Requests ended by a stop token or string.", finished(1)),
        Metric::new("ds_engine_requests_finished_eog_total", Counter, "Requests ended by an end-of-generation token.", finished(2)),
        Metric::new("ds_engine_requests_finished_cancelled_total", Counter, "Requests cancelled (a client went away, or shutdown).", finished(3)),
        Metric::new("ds_engine_requests_finished_error_total", Counter, "Requests ended by an error.", finished(4)),
        Metric::new("ds_engine_prompt_tokens_total", Counter, "Prompt tokens computed.", prompt as f64),
        Metric::new("ds_engine_prompt_tokens_reused_total", Counter, "Prompt tokens whose KV cells were reused.", m.prompt_reused.get() as f64),
        Metric::new("ds_engine_generated_tokens_total", Counter, "Tokens generated.", generated as f64),
        Metric::new("ds_engine_steps_total", Counter, "Decode steps.", steps as f64),
        Metric::new("ds_engine_tokens_per_second", Gauge, "Generated tokens per second over the last second or so.", m.tokens_per_second_milli.get() as f64 / 1000.0),
        Metric::new("ds_engine_loop_allocated_bytes_total", Counter, "Bytes the decode thread has allocated.", m.loop_allocated_bytes.get() as f64),
        // The server's.
        Metric::new("ds_server_http_requests_total", Counter, "HTTP requests answered.", app.stats.requests.load(Ordering::Relaxed) as f64),
        Metric::new("ds_server_http_errors_total", Counter, "HTTP requests answered with an error status.", app.stats.errors.load(Ordering::Relaxed) as f64),
        Metric::new("ds_server_streams_open", Gauge, "Streaming responses in progress.", app.stats.streams_open.load(Ordering::Relaxed) as f64),
        Metric::new("ds_server_disconnects_total", Counter, "Requests whose client went away before the end (cancelled in the engine).", app.stats.disconnects.load(Ordering::Relaxed) as f64),
        Metric::new("ds_server_uptime_seconds", Gauge, "Seconds since the server started.", app.started.elapsed().as_secs_f64()),
    ];
    let histograms = [
        ("ds_engine_time_to_first_token_seconds", "Time from a request's submission to its first token.", m.ttft.snapshot()),
        ("ds_engine_inter_token_seconds", "Time between a request's consecutive tokens.", m.itl.snapshot()),
    ];
    let mut out = render(&metrics, &histograms);
    // vLLM's cache_config_info: an info gauge whose labels describe the cache (one cell a block).
    out += &format!("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{block_size=\"1\",num_gpu_blocks=\"{}\"}} 1\n", total as u64);
    out
}

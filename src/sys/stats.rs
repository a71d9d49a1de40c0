//! What the library holds and has done, as plain atomics: readable from any thread at any
//! time, never blocking, never allocating. Fixed-size statics only (no growable data): live
//! gauges that return to zero when everything is freed, monotonic counters, and per-token
//! latency histograms. Nothing here owns memory.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// A level that goes up and down with what is alive (objects, bytes).
pub struct Gauge(AtomicI64);

impl Gauge {
    const fn new() -> Gauge {
        Gauge(AtomicI64::new(0))
    }
    pub fn add(&self, d: i64) {
        self.0.fetch_add(d, Ordering::Relaxed);
    }
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A count that only grows.
pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Counter {
        Counter(AtomicU64::new(0))
    }
    pub fn add(&self, d: u64) {
        self.0.fetch_add(d, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// An amount held on a gauge for as long as this value lives (added now, removed on drop).
pub struct Held {
    gauge: &'static Gauge,
    amount: i64,
}

impl Held {
    pub fn new(gauge: &'static Gauge, amount: usize) -> Held {
        let amount = amount as i64;
        gauge.add(amount);
        Held { gauge, amount }
    }
    pub fn amount(&self) -> usize {
        self.amount as usize
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.gauge.add(-self.amount);
    }
}

pub static MODELS: Gauge = Gauge::new();
pub static CONTEXTS: Gauge = Gauge::new();
pub static SAMPLERS: Gauge = Gauge::new();
/// Bytes of model files mapped (mmap loading).
pub static MAPPED_BYTES: Gauge = Gauge::new();
/// Bytes of model files copied into owned memory (LLAMA_LOAD_MODE_NONE, from_slice).
pub static OWNED_MODEL_BYTES: Gauge = Gauge::new();
/// Bytes of K/V data in all KV caches.
pub static KV_BYTES: Gauge = Gauge::new();
/// Bytes of KV metadata (cells, per-sequence tables) in all KV caches.
pub static KV_META_BYTES: Gauge = Gauge::new();
/// Bytes of activation scratch and output (logits, embeddings) buffers in all contexts.
pub static SCRATCH_BYTES: Gauge = Gauge::new();
/// Sequence-table snapshots alive: published ones plus replaced ones not yet reclaimed.
pub static SEQ_SNAPSHOTS: Gauge = Gauge::new();

pub static DECODE_CALLS: Counter = Counter::new();
pub static PROMPT_TOKENS: Counter = Counter::new();
pub static GENERATED_TOKENS: Counter = Counter::new();
pub static SEQ_SNAPSHOTS_PUBLISHED: Counter = Counter::new();

/// Upper bounds of the latency buckets, in microseconds (a last bucket takes the rest).
pub const LATENCY_BOUNDS_US: [u64; 16] = [50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 10_000_000];
const N_BUCKETS: usize = LATENCY_BOUNDS_US.len() + 1;

/// A latency histogram: how many observations fell into each bucket, their count and sum.
pub struct LatencyHistogram {
    buckets: [AtomicU64; N_BUCKETS],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

/// What a histogram read at one moment (buckets are per bucket, not cumulative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub buckets: [u64; N_BUCKETS],
    pub count: u64,
    pub sum_ns: u64,
}

impl LatencyHistogram {
    pub const fn new() -> LatencyHistogram {
        #[allow(clippy::declare_interior_mutable_const)]
        const ZERO: AtomicU64 = AtomicU64::new(0);
        LatencyHistogram { buckets: [ZERO; N_BUCKETS], count: ZERO, sum_ns: ZERO }
    }

    /// Records `n` observations of `each_ns` nanoseconds.
    pub fn observe(&self, each_ns: u64, n: u64) {
        let b = LATENCY_BOUNDS_US.iter().position(|&bound_us| each_ns <= bound_us * 1000).unwrap_or(N_BUCKETS - 1);
        self.buckets[b].fetch_add(n, Ordering::Relaxed);
        self.count.fetch_add(n, Ordering::Relaxed);
        self.sum_ns.fetch_add(each_ns.saturating_mul(n), Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut s = HistogramSnapshot { count: self.count.load(Ordering::Relaxed), sum_ns: self.sum_ns.load(Ordering::Relaxed), ..Default::default() };
        for (d, b) in s.buckets.iter_mut().zip(&self.buckets) {
            *d = b.load(Ordering::Relaxed);
        }
        s
    }
}

impl HistogramSnapshot {
    /// The q-quantile in microseconds, interpolated linearly inside its bucket as Prometheus'
    /// histogram_quantile does; 0 without observations. The open last bucket reports its
    /// lower bound.
    pub fn quantile_us(&self, q: f64) -> f64 {
        let total: u64 = self.buckets.iter().sum();
        if total == 0 {
            return 0.0;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut below = 0u64;
        for (i, &n) in self.buckets.iter().enumerate() {
            if n > 0 && (below + n) as f64 >= rank {
                let lo = if i == 0 { 0.0 } else { LATENCY_BOUNDS_US[i - 1] as f64 };
                let Some(&hi) = LATENCY_BOUNDS_US.get(i) else { return lo };
                return lo + (hi as f64 - lo) * ((rank - below as f64) / n as f64).clamp(0.0, 1.0);
            }
            below += n;
        }
        *LATENCY_BOUNDS_US.last().unwrap_or(&0) as f64
    }
}

/// Per-token latency of prompt processing (a decode's time divided over its tokens).
pub static PROMPT_LATENCY: LatencyHistogram = LatencyHistogram::new();
/// Per-token latency of generation (a decode where each sequence advances by one token: each
/// of its tokens waited the whole decode).
pub static GENERATION_LATENCY: LatencyHistogram = LatencyHistogram::new();

/// Why a serving-engine request ended (`ds_engine_finish_reason` without NONE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishKind {
    Length = 0,
    Stop = 1,
    Eog = 2,
    Cancelled = 3,
    Error = 4,
}

impl FinishKind {
    /// The kind whose `as usize` is `i`.
    pub fn from_index(i: u64) -> Option<FinishKind> {
        [FinishKind::Length, FinishKind::Stop, FinishKind::Eog, FinishKind::Cancelled, FinishKind::Error].get(i as usize).copied()
    }
}

/// What a serving engine (`ds_engine`) holds and has done. Each engine has one, and the
/// process-wide [`ENGINES_ALL`] sums every engine's; the engine updates both.
pub struct EngineMetrics {
    /// Requests submitted and not yet started (waiting for a slot).
    pub queued: Gauge,
    /// Requests holding a slot (prefilling or generating).
    pub running: Gauge,
    pub kv_cells_used: Gauge,
    pub kv_cells_total: Gauge,
    /// Request-table versions alive (the current ones plus replaced ones awaiting the epoch).
    pub table_versions_live: Gauge,
    pub table_versions_published: Counter,
    pub submitted: Counter,
    pub rejected: Counter,
    /// Finished requests by reason, indexed by `FinishKind`.
    pub finished: [Counter; 5],
    /// Prompt tokens computed by the model, and prompt tokens whose KV cells were reused.
    pub prompt_computed: Counter,
    pub prompt_reused: Counter,
    pub generated: Counter,
    pub steps: Counter,
    /// Σ over steps of the slots holding a request (÷ steps: llama-server's
    /// n_busy_slots_per_decode).
    pub busy_slot_steps: Counter,
    /// Requests' time from taking a slot to their first token, and from it to their end
    /// (llama-server's prompt and generation seconds), in µs.
    pub prompt_us: Counter,
    pub generation_us: Counter,
    /// The longest sequence (prompt + generated) a finished request reached.
    pub n_tokens_max: Gauge,
    /// Bytes the decode thread has allocated (jemalloc's per-thread counter; 0 without
    /// jemalloc): flat while requests only generate.
    pub loop_allocated_bytes: Counter,
    /// Generated tokens per second over the last second or so of decoding, × 1000 (an
    /// engine adds the change of its own rate, so the process-wide one is the sum).
    pub tokens_per_second_milli: Gauge,
    /// Time from submission to the first token.
    pub ttft: LatencyHistogram,
    /// Time between a request's consecutive tokens.
    pub itl: LatencyHistogram,
}

impl EngineMetrics {
    pub const fn new() -> EngineMetrics {
        EngineMetrics {
            queued: Gauge::new(),
            running: Gauge::new(),
            kv_cells_used: Gauge::new(),
            kv_cells_total: Gauge::new(),
            table_versions_live: Gauge::new(),
            table_versions_published: Counter::new(),
            submitted: Counter::new(),
            rejected: Counter::new(),
            finished: [Counter::new(), Counter::new(), Counter::new(), Counter::new(), Counter::new()],
            prompt_computed: Counter::new(),
            prompt_reused: Counter::new(),
            generated: Counter::new(),
            steps: Counter::new(),
            busy_slot_steps: Counter::new(),
            prompt_us: Counter::new(),
            generation_us: Counter::new(),
            n_tokens_max: Gauge::new(),
            loop_allocated_bytes: Counter::new(),
            tokens_per_second_milli: Gauge::new(),
            ttft: LatencyHistogram::new(),
            itl: LatencyHistogram::new(),
        }
    }
}

impl Default for EngineMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Serving engines alive.
pub static ENGINES: Gauge = Gauge::new();
/// The sum of every engine's metrics.
pub static ENGINES_ALL: EngineMetrics = EngineMetrics::new();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        let h = LatencyHistogram::new();
        // 100 observations in (1000, 2500] µs and 100 in (2500, 5000] µs.
        h.observe(2_000_000, 100);
        h.observe(3_000_000, 100);
        let s = h.snapshot();
        assert_eq!(s.count, 200);
        assert_eq!(s.sum_ns, 500_000_000);
        assert!((s.quantile_us(0.25) - 1750.0).abs() < 1e-9);
        assert!((s.quantile_us(0.5) - 2500.0).abs() < 1e-9);
        assert!((s.quantile_us(0.9) - 4500.0).abs() < 1e-9);
        assert_eq!(LatencyHistogram::new().snapshot().quantile_us(0.5), 0.0);
    }

    #[test]
    fn bucket_bounds_are_inclusive() {
        let h = LatencyHistogram::new();
        h.observe(50_000, 1);
        h.observe(50_001, 1);
        h.observe(20_000_000_000, 1);
        let s = h.snapshot();
        assert_eq!(s.buckets[0], 1);
        assert_eq!(s.buckets[1], 1);
        assert_eq!(s.buckets[N_BUCKETS - 1], 1);
    }
}

//! What a context handle counts and the clock it counts with: `PerfCounters` (llama_perf_context's
//! decode timings, updated by llama_decode) and the monotonic clock behind ggml_time_us. Below
//! the handles and the C types: it names nothing else of the API.

use std::time::Instant;

/// Microseconds on CLOCK_MONOTONIC, as upstream's ggml_time_us.
pub fn now_us() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000 + ts.tv_nsec / 1_000
}

/// Decode timings of one context, as upstream counts them: a decode of one token is a
/// generation step (`n_eval`), a decode of several is prompt processing (`n_p_eval` tokens).
#[derive(Clone, Debug)]
pub struct PerfCounters {
    /// Start time on ggml_time_us's clock (CLOCK_MONOTONIC, as upstream): callers compute
    /// `1e-3 * ggml_time_us() - t_start_ms` for the total time.
    pub t_start_us: f64,
    /// Model load time, then (after the first decode) the time from start to the first result.
    pub t_load_us: f64,
    pub t_p_eval_us: f64,
    pub t_eval_us: f64,
    pub n_p_eval: i32,
    pub n_eval: i32,
    /// When set, times are not measured (counts still are).
    pub no_perf: bool,
    start: Instant,
    evaluated_once: bool,
}

impl PerfCounters {
    pub fn new(t_load_us: f64, no_perf: bool) -> PerfCounters {
        PerfCounters { t_start_us: now_us() as f64 - t_load_us, t_load_us, t_p_eval_us: 0.0, t_eval_us: 0.0, n_p_eval: 0, n_eval: 0, no_perf, start: Instant::now(), evaluated_once: false }
    }

    /// Records one successful decode of `n_tokens` that started at `began`.
    pub fn record_decode(&mut self, n_tokens: usize, began: Instant) {
        let us = began.elapsed().as_secs_f64() * 1e6;
        if n_tokens == 1 {
            if !self.no_perf {
                self.t_eval_us += us;
            }
            self.n_eval += 1;
        } else if n_tokens > 1 {
            if !self.no_perf {
                self.t_p_eval_us += us;
            }
            self.n_p_eval += n_tokens as i32;
        }
        if n_tokens > 0 && !self.evaluated_once {
            self.t_load_us += self.start.elapsed().as_secs_f64() * 1e6;
            self.evaluated_once = true;
        }
    }

    pub fn reset(&mut self) {
        self.t_start_us = now_us() as f64;
        self.t_eval_us = 0.0;
        self.n_eval = 0;
        self.t_p_eval_us = 0.0;
        self.n_p_eval = 0;
    }
}

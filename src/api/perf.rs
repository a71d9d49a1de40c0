//! llama_perf_context*/llama_perf_sampler*: real counts and times. A context's counters live in
//! its handle (`PerfCounters`, updated by llama_decode); a chain's in the chain.

use std::time::Instant;

use super::boundary::{as_ref, guard_or};
use super::handles::llama_context;
use super::sampler_iface;
use super::types::*;

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

fn now_us() -> f64 {
    super::backend::ggml_time_us() as f64
}

impl PerfCounters {
    pub fn new(t_load_us: f64, no_perf: bool) -> PerfCounters {
        PerfCounters { t_start_us: now_us() - t_load_us, t_load_us, t_p_eval_us: 0.0, t_eval_us: 0.0, n_p_eval: 0, n_eval: 0, no_perf, start: Instant::now(), evaluated_once: false }
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
        self.t_start_us = now_us();
        self.t_eval_us = 0.0;
        self.n_eval = 0;
        self.t_p_eval_us = 0.0;
        self.n_p_eval = 0;
    }

    pub fn data(&self) -> llama_perf_context_data {
        llama_perf_context_data {
            t_start_ms: 1e-3 * self.t_start_us,
            t_load_ms: 1e-3 * self.t_load_us,
            t_p_eval_ms: 1e-3 * self.t_p_eval_us,
            t_eval_ms: 1e-3 * self.t_eval_us,
            n_p_eval: self.n_p_eval.max(1),
            n_eval: self.n_eval.max(1),
            n_reused: 0,
        }
    }
}

#[no_mangle]
pub extern "C" fn llama_perf_context(ctx: *const llama_context) -> llama_perf_context_data {
    guard_or("llama_perf_context", llama_perf_context_data::default(), || {
        // SAFETY: live context handle (NULL is caught).
        Ok(unsafe { as_ref(ctx, "ctx")?.owned() }.perf.data())
    })
}

#[no_mangle]
pub extern "C" fn llama_perf_context_print(ctx: *const llama_context) {
    guard_or("llama_perf_context_print", (), || {
        let d = llama_perf_context(ctx);
        let t_end_ms = 1e-3 * now_us();
        crate::log_info!("llama_perf_context_print:        load time = {:10.2} ms", d.t_load_ms);
        crate::log_info!(
            "llama_perf_context_print: prompt eval time = {:10.2} ms / {:5} tokens ({:8.2} ms per token, {:8.2} tokens per second)",
            d.t_p_eval_ms,
            d.n_p_eval,
            d.t_p_eval_ms / d.n_p_eval as f64,
            1e3 / d.t_p_eval_ms * d.n_p_eval as f64
        );
        crate::log_info!(
            "llama_perf_context_print:        eval time = {:10.2} ms / {:5} runs   ({:8.2} ms per token, {:8.2} tokens per second)",
            d.t_eval_ms,
            d.n_eval,
            d.t_eval_ms / d.n_eval as f64,
            1e3 / d.t_eval_ms * d.n_eval as f64
        );
        crate::log_info!("llama_perf_context_print:       total time = {:10.2} ms / {:5} tokens", t_end_ms - d.t_start_ms, d.n_p_eval + d.n_eval);
        crate::log_info!("llama_perf_context_print:    graphs reused = {:10}", d.n_reused);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn llama_perf_context_reset(ctx: *mut llama_context) {
    guard_or("llama_perf_context_reset", (), || {
        // SAFETY: live context handle used by this thread only (NULL is caught).
        unsafe { as_ref(ctx, "ctx")?.owned() }.perf.reset();
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn llama_perf_sampler(chain: *const llama_sampler) -> llama_perf_sampler_data {
    guard_or("llama_perf_sampler", llama_perf_sampler_data::default(), || {
        // SAFETY: chain_mut checks that this is a live chain (read-only use).
        let c = unsafe { sampler_iface::chain_mut(chain as *mut _) }?;
        Ok(llama_perf_sampler_data { t_sample_ms: c.t_sample.as_secs_f64() * 1e3, n_sample: c.n_sample.max(0) })
    })
}

#[no_mangle]
pub extern "C" fn llama_perf_sampler_print(chain: *const llama_sampler) {
    guard_or("llama_perf_sampler_print", (), || {
        let d = llama_perf_sampler(chain);
        crate::log_info!("llama_perf_sampler_print:    samplers time = {:10.2} ms / {:5} runs", d.t_sample_ms, d.n_sample);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn llama_perf_sampler_reset(chain: *mut llama_sampler) {
    guard_or("llama_perf_sampler_reset", (), || {
        // SAFETY: chain_mut checks that this is a live chain.
        unsafe { sampler_iface::chain_mut(chain) }?.reset_perf();
        Ok(())
    })
}

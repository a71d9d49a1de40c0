//! llama_perf_context*/llama_perf_sampler*: real counts and times. A context's counters live in
//! its handle (`PerfCounters`, updated by llama_decode); a chain's in the chain.

use super::boundary::{as_ref, guard_or};
use super::counters::{now_us, PerfCounters};
use super::handles::llama_context;
use super::sampler_iface;
use super::types::*;

/// llama_perf_context_data from a context's counters (counts of 0 read as 1, as upstream's).
fn context_data(c: &PerfCounters) -> llama_perf_context_data {
    llama_perf_context_data {
        t_start_ms: 1e-3 * c.t_start_us,
        t_load_ms: 1e-3 * c.t_load_us,
        t_p_eval_ms: 1e-3 * c.t_p_eval_us,
        t_eval_ms: 1e-3 * c.t_eval_us,
        n_p_eval: c.n_p_eval.max(1),
        n_eval: c.n_eval.max(1),
        n_reused: 0,
    }
}

#[no_mangle]
pub extern "C" fn llama_perf_context(ctx: *const llama_context) -> llama_perf_context_data {
    guard_or("llama_perf_context", llama_perf_context_data::default(), || {
        // SAFETY: live context handle (NULL is caught).
        Ok(context_data(&unsafe { as_ref(ctx, "ctx")?.owned() }.perf))
    })
}

#[no_mangle]
pub extern "C" fn llama_perf_context_print(ctx: *const llama_context) {
    guard_or("llama_perf_context_print", (), || {
        let d = llama_perf_context(ctx);
        let t_end_ms = 1e-3 * now_us() as f64;
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

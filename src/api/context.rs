//! Context creation and freeing, llama_decode, logits and embeddings, context getters.

use std::ptr;
use std::sync::Arc;

use super::boundary::{as_ref, guard, guard_or};
use super::handles::{llama_context, llama_model, ContextOwned};
use super::types::*;
use super::batch::with_input;
use crate::context::{Context, ContextParams, DecodeError};
use crate::model::hparams::RopeScaling;

#[no_mangle]
pub extern "C" fn llama_context_default_params() -> llama_context_params {
    // The engine's defaults, in llama.h's struct (one place for the numbers).
    let d = ContextParams::default();
    llama_context_params {
        n_ctx: d.n_ctx,
        n_batch: d.n_batch,
        n_ubatch: d.n_ubatch,
        n_seq_max: d.n_seq_max,
        n_rs_seq: 0,
        n_outputs_max: 0,
        n_outputs_max_per_seq: 1,
        n_threads: d.n_threads,
        n_threads_batch: d.n_threads_batch,
        ctx_type: llama_context_type::LLAMA_CONTEXT_TYPE_DEFAULT,
        rope_scaling_type: llama_rope_scaling_type::LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED,
        pooling_type: llama_pooling_type::LLAMA_POOLING_TYPE_UNSPECIFIED,
        attention_type: llama_attention_type::LLAMA_ATTENTION_TYPE_UNSPECIFIED,
        flash_attn_type: llama_flash_attn_type::LLAMA_FLASH_ATTN_TYPE_AUTO,
        rope_freq_base: d.rope_freq_base,
        rope_freq_scale: d.rope_freq_scale,
        yarn_ext_factor: d.yarn_ext_factor,
        yarn_attn_factor: d.yarn_attn_factor,
        yarn_beta_fast: d.yarn_beta_fast,
        yarn_beta_slow: d.yarn_beta_slow,
        yarn_orig_ctx: d.yarn_orig_ctx,
        defrag_thold: -1.0,
        cb_eval: None,
        cb_eval_user_data: ptr::null_mut(),
        type_k: ggml_type::GGML_TYPE_F16,
        type_v: ggml_type::GGML_TYPE_F16,
        abort_callback: None,
        abort_callback_data: ptr::null_mut(),
        embeddings: d.embeddings,
        offload_kqv: true,
        no_perf: true,
        op_offload: true,
        swa_full: true,
        kv_unified: d.kv_unified,
        samplers: ptr::null_mut(),
        n_samplers: 0,
        ctx_other: ptr::null_mut(),
    }
}

/// The engine's parameters from the C struct, rejecting what we do not support (with why).
fn engine_params(p: &llama_context_params) -> Result<ContextParams, String> {
    let rope_scaling = match raw_enum(&p.rope_scaling_type) {
        -1 => None,
        0 => Some(RopeScaling::None),
        1 => Some(RopeScaling::Linear),
        2 => Some(RopeScaling::Yarn),
        v => return Err(format!("rope_scaling_type {v} is not supported")),
    };
    use crate::model::hparams::Pooling;
    let pooling = match raw_enum(&p.pooling_type) {
        -1 => None,
        v => Some(Pooling::from_raw(v).ok_or_else(|| format!("invalid pooling_type {v}"))?),
    };
    let causal_attn = match raw_enum(&p.attention_type) {
        -1 => None,
        0 => Some(true),
        1 => Some(false),
        v => return Err(format!("invalid attention_type {v}")),
    };
    match raw_enum(&p.ctx_type) {
        0 => {}
        v => return Err(format!("ctx_type {v} is not supported (only DEFAULT)")),
    }
    if !(-1..=1).contains(&raw_enum(&p.flash_attn_type)) {
        return Err(format!("invalid flash_attn_type {}", raw_enum(&p.flash_attn_type)));
    }
    let cache_type = |name: &str, t: i32| {
        crate::kv::CacheType::from_ggml(t).ok_or_else(|| format!("{name} = {t} is not a KV cache type this library has (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL: ggml types 0, 1, 30, 8, 2, 3, 6, 7, 20)"))
    };
    let (type_k, type_v) = (cache_type("type_k", raw_enum(&p.type_k))?, cache_type("type_v", raw_enum(&p.type_v))?);
    // as upstream: a quantized V cache needs flash attention (AUTO turns it on)
    if type_v.is_quantized() && raw_enum(&p.flash_attn_type) == 0 {
        return Err(format!("quantized V cache ({}) requires flash_attn to be enabled", type_v.name()));
    }
    if p.cb_eval.is_some() {
        return Err("cb_eval (a callback on the ggml graph's tensors) is not supported: this library does not build a ggml graph, so there are no tensors to pass it".into());
    }
    // backend samplers: upstream offloads a chain's samplers into its ggml graph where it can and
    // leaves the rest with the caller; this library has no device backend, so every sampler
    // stays with the caller (as upstream does for a sampler it cannot offload): the context is
    // created, `llama_get_sampled_*` report nothing sampled, and common's sampler runs the whole
    // chain on the logits
    if p.n_samplers != 0 {
        if p.samplers.is_null() {
            return Err(format!("samplers is NULL with n_samplers = {}", p.n_samplers));
        }
        // SAFETY: llama.h: `samplers` points to `n_samplers` configs (NULL checked above).
        let configs = unsafe { std::slice::from_raw_parts(p.samplers, p.n_samplers) };
        for c in configs {
            if !super::sampler_iface::is_chain(c.sampler) {
                return Err("the backend samplers must be of type llama_sampler_chain".into());
            }
            crate::log_warn!("llama_init_from_model: sampler for seq_id = {} cannot be offloaded to the backend (this library runs on the CPU only): the caller samples from the logits", c.seq_id);
        }
    }
    Ok(ContextParams {
        n_ctx: p.n_ctx,
        n_batch: p.n_batch,
        n_ubatch: p.n_ubatch,
        n_seq_max: p.n_seq_max,
        n_threads: p.n_threads,
        n_threads_batch: p.n_threads_batch,
        rope_scaling,
        rope_freq_base: p.rope_freq_base,
        rope_freq_scale: p.rope_freq_scale,
        yarn_ext_factor: p.yarn_ext_factor,
        yarn_attn_factor: p.yarn_attn_factor,
        yarn_beta_fast: p.yarn_beta_fast,
        yarn_beta_slow: p.yarn_beta_slow,
        yarn_orig_ctx: p.yarn_orig_ctx,
        embeddings: p.embeddings,
        kv_unified: p.kv_unified,
        pooling,
        causal_attn,
        type_k,
        type_v,
    })
}

#[no_mangle]
pub extern "C" fn llama_init_from_model(model: *mut llama_model, params: llama_context_params) -> *mut llama_context {
    guard("llama_init_from_model", || {
        // SAFETY: llama.h requires a live model handle (NULL is caught).
        let m = unsafe { as_ref(model, "model") }?;
        let p = engine_params(&params)?;
        let ctx = Context::new(Arc::clone(&m.model), &p)?;
        let fa = match raw_enum(&params.flash_attn_type) {
            -1 => "auto",
            0 => "disabled",
            _ => "enabled",
        };
        crate::log_info!("llama_init_from_model: flash_attn = {fa}: this library has one attention path (fused: scores, online softmax and the V sum in one pass over the cache, as flash attention), whatever flash_attn_type asks");
        Ok(llama_context::boxed(ContextOwned {
            ctx,
            model,
            abort_callback: params.abort_callback,
            abort_callback_data: params.abort_callback_data,
            perf: super::counters::PerfCounters::new(m.t_load_us, params.no_perf),
        }))
    })
}

#[no_mangle]
pub extern "C" fn llama_new_context_with_model(model: *mut llama_model, params: llama_context_params) -> *mut llama_context {
    llama_init_from_model(model, params)
}

/// # Safety
/// `ctx` must be NULL or a context from llama_init_from_model, not freed before.
#[no_mangle]
pub unsafe extern "C" fn llama_free(ctx: *mut llama_context) {
    guard("llama_free", || {
        if !ctx.is_null() {
            // SAFETY: ownership returns to us; the caller will not use the pointer again.
            drop(unsafe { Box::from_raw(ctx) });
            crate::sys::alloc::release_freed();
        }
        Ok(())
    })
}

fn with_ctx<R: super::boundary::Fallback>(name: &str, ctx: *const llama_context, f: impl FnOnce(&ContextOwned) -> Result<R, String>) -> R {
    guard(name, || {
        // SAFETY: llama.h requires a live context handle (NULL is caught), used by one
        // thread at a time.
        f(unsafe { as_ref(ctx, "ctx")?.owned() })
    })
}

fn with_ctx_mut<R: super::boundary::Fallback>(name: &str, ctx: *mut llama_context, f: impl FnOnce(&mut ContextOwned) -> Result<R, String>) -> R {
    guard(name, || {
        // SAFETY: llama.h requires a live context handle used by one thread at a time.
        f(unsafe { as_ref(ctx, "ctx")?.owned() })
    })
}

#[no_mangle]
pub extern "C" fn llama_n_ctx(ctx: *const llama_context) -> u32 {
    with_ctx("llama_n_ctx", ctx, |c| Ok(c.ctx.n_ctx))
}
#[no_mangle]
pub extern "C" fn llama_n_ctx_seq(ctx: *const llama_context) -> u32 {
    with_ctx("llama_n_ctx_seq", ctx, |c| Ok(c.ctx.n_ctx_seq))
}
#[no_mangle]
pub extern "C" fn llama_n_batch(ctx: *const llama_context) -> u32 {
    with_ctx("llama_n_batch", ctx, |c| Ok(c.ctx.n_batch))
}
#[no_mangle]
pub extern "C" fn llama_n_ubatch(ctx: *const llama_context) -> u32 {
    with_ctx("llama_n_ubatch", ctx, |c| Ok(c.ctx.n_ubatch))
}
#[no_mangle]
pub extern "C" fn llama_n_seq_max(ctx: *const llama_context) -> u32 {
    with_ctx("llama_n_seq_max", ctx, |c| Ok(c.ctx.n_seq_max))
}
#[no_mangle]
pub extern "C" fn llama_get_model(ctx: *const llama_context) -> *const llama_model {
    with_ctx("llama_get_model", ctx, |c| Ok(c.model))
}
#[no_mangle]
pub extern "C" fn llama_get_memory(ctx: *const llama_context) -> super::handles::llama_memory_t {
    guard("llama_get_memory", || {
        // SAFETY: llama.h requires a live context handle (NULL is caught); the memory handle
        // is never written after creation.
        let c = unsafe { as_ref(ctx, "ctx") }?;
        Ok(&c.memory as *const _ as *mut _)
    })
}
#[no_mangle]
pub extern "C" fn llama_pooling_type(ctx: *const llama_context) -> llama_pooling_type {
    guard_or("llama_pooling_type", llama_pooling_type::LLAMA_POOLING_TYPE_UNSPECIFIED, || {
        use crate::model::hparams::Pooling;
        // SAFETY: live context handle required by llama.h, used by one thread at a time.
        let c = unsafe { as_ref(ctx, "ctx")?.owned() };
        Ok(match c.ctx.pooling {
            Pooling::None => llama_pooling_type::LLAMA_POOLING_TYPE_NONE,
            Pooling::Mean => llama_pooling_type::LLAMA_POOLING_TYPE_MEAN,
            Pooling::Cls => llama_pooling_type::LLAMA_POOLING_TYPE_CLS,
            Pooling::Last => llama_pooling_type::LLAMA_POOLING_TYPE_LAST,
            Pooling::Rank => llama_pooling_type::LLAMA_POOLING_TYPE_RANK,
        })
    })
}

#[no_mangle]
pub extern "C" fn llama_set_n_threads(ctx: *mut llama_context, n_threads: i32, n_threads_batch: i32) {
    with_ctx_mut("llama_set_n_threads", ctx, |c| {
        c.ctx.set_n_threads(n_threads, n_threads_batch);
        Ok(())
    })
}
/// deepseek extension: pins the context's worker threads, one CPU each (worker i to the i-th
/// CPU, wrapping, of those the calling thread may run on), or with `pin` false lets them run
/// anywhere the calling thread may. The calling thread (which runs thread index 0 of every
/// decode) is not pinned: pin it yourself if you want (`sched_setaffinity`, `taskset`). Call it
/// between decodes, like `llama_set_n_threads`. Returns 0, or -1 with a logged reason.
#[no_mangle]
pub extern "C" fn ds_context_pin_threads(ctx: *mut llama_context, pin: bool) -> i32 {
    with_ctx_mut("ds_context_pin_threads", ctx, |c| c.ctx.pin_threads(pin).map(|()| 0))
}
#[no_mangle]
pub extern "C" fn llama_n_threads(ctx: *mut llama_context) -> i32 {
    with_ctx("llama_n_threads", ctx, |c| Ok(c.ctx.n_threads))
}
#[no_mangle]
pub extern "C" fn llama_n_threads_batch(ctx: *mut llama_context) -> i32 {
    with_ctx("llama_n_threads_batch", ctx, |c| Ok(c.ctx.n_threads_batch))
}
#[no_mangle]
pub extern "C" fn llama_set_embeddings(ctx: *mut llama_context, embeddings: bool) {
    with_ctx_mut("llama_set_embeddings", ctx, |c| {
        c.ctx.embeddings = embeddings;
        Ok(())
    })
}
#[no_mangle]
pub extern "C" fn llama_set_causal_attn(ctx: *mut llama_context, causal_attn: bool) {
    with_ctx_mut("llama_set_causal_attn", ctx, |c| c.ctx.set_causal_attn(causal_attn))
}
#[no_mangle]
pub extern "C" fn llama_set_warmup(ctx: *mut llama_context, warmup: bool) {
    with_ctx_mut("llama_set_warmup", ctx, |c| {
        c.ctx.warmup = warmup;
        Ok(())
    })
}
#[no_mangle]
pub extern "C" fn llama_set_abort_callback(ctx: *mut llama_context, abort_callback: ggml_abort_callback, abort_callback_data: *mut std::ffi::c_void) {
    with_ctx_mut("llama_set_abort_callback", ctx, |c| {
        c.abort_callback = abort_callback;
        c.abort_callback_data = abort_callback_data;
        Ok(())
    })
}
#[no_mangle]
pub extern "C" fn llama_synchronize(ctx: *mut llama_context) {
    with_ctx_mut("llama_synchronize", ctx, |_| Ok(()))
}

/// # Safety
/// `batch`'s arrays must hold `n_tokens` entries each (or be NULL where llama.h allows).
#[no_mangle]
pub unsafe extern "C" fn llama_decode(ctx: *mut llama_context, batch: llama_batch) -> i32 {
    guard_or("llama_decode", -1, || {
        // SAFETY: live context handle used by one thread at a time (llama.h's contract).
        let c = unsafe { as_ref(ctx, "ctx")?.owned() };
        let (cb, data) = (c.abort_callback, c.abort_callback_data);
        // SAFETY: the caller's abort callback with its own data pointer.
        let abort = move || cb.is_some_and(|f| unsafe { f(data) });
        let check: Option<&dyn Fn() -> bool> = if cb.is_some() { Some(&abort) } else { None };
        let began = std::time::Instant::now();
        // SAFETY: the caller's arrays hold n_tokens entries (llama.h's contract for llama_batch).
        let decoded = unsafe {
            with_input(&batch, |input| {
                if input.tokens.len() > c.ctx.n_batch as usize {
                    return Err(format!("n_tokens = {} exceeds n_batch = {}", input.tokens.len(), c.ctx.n_batch));
                }
                Ok(c.ctx.decode(input, check))
            })?
        };
        let n = batch.n_tokens as usize;
        match decoded {
            Ok(()) => {
                c.perf.record_decode(n, began);
                Ok(0)
            }
            Err(DecodeError::NoSlot) => {
                crate::log_warn!("llama_decode: failed to find a KV cache slot for the batch (n_tokens = {n})");
                Ok(1)
            }
            Err(DecodeError::Aborted) => Ok(2),
            Err(DecodeError::Invalid(reason)) => Err(reason),
        }
    })
}

#[no_mangle]
pub extern "C" fn llama_encode(ctx: *mut llama_context, _batch: llama_batch) -> i32 {
    with_ctx_mut("llama_encode", ctx, |_| Err::<i32, _>("encoder models are not supported".into()))
}

#[no_mangle]
pub extern "C" fn llama_get_logits(ctx: *mut llama_context) -> *mut f32 {
    with_ctx_mut("llama_get_logits", ctx, |c| Ok(c.ctx.logits().as_ptr() as *mut f32))
}

#[no_mangle]
pub extern "C" fn llama_get_logits_ith(ctx: *mut llama_context, i: i32) -> *mut f32 {
    with_ctx_mut("llama_get_logits_ith", ctx, |c| c.ctx.logits_row(i).map(|r| r.as_ptr() as *mut f32).map_err(|e| format!("invalid logits id {i}, reason: {e}")))
}

#[no_mangle]
pub extern "C" fn llama_get_embeddings(ctx: *mut llama_context) -> *mut f32 {
    with_ctx_mut("llama_get_embeddings", ctx, |c| {
        let e = c.ctx.embeddings_all();
        Ok(if e.is_empty() { ptr::null_mut() } else { e.as_ptr() as *mut f32 })
    })
}

#[no_mangle]
pub extern "C" fn llama_get_embeddings_ith(ctx: *mut llama_context, i: i32) -> *mut f32 {
    with_ctx_mut("llama_get_embeddings_ith", ctx, |c| c.ctx.embeddings_row(i).map(|r| r.as_ptr() as *mut f32).map_err(|e| format!("invalid embeddings id {i}, reason: {e}")))
}

#[no_mangle]
pub extern "C" fn llama_get_embeddings_seq(ctx: *mut llama_context, seq_id: llama_seq_id) -> *mut f32 {
    // as upstream: NULL without a log line when the context does not pool or the last decode
    // had no token of the sequence
    with_ctx_mut("llama_get_embeddings_seq", ctx, |c| Ok(c.ctx.embeddings_seq(seq_id).map_or(ptr::null_mut(), |e| e.as_ptr() as *mut f32)))
}

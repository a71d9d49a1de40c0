//! The serving engine's C API (`ds_engine_*`): a thin layer over `crate::engine::Engine`.
//! Every function may be called from any thread at any time, also at once, except that
//! `ds_engine_free` must be the last call on an engine (it waits for calls still in
//! progress, and refuses to run on the engine's own decode thread, i.e. from a callback).

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_void};
use std::time::Duration;

use super::boundary::{as_mut, as_ref, as_slice, guard, guard_or};
use super::handles::llama_model;
use super::sampler_iface::Member;
use super::types::{llama_sampler, llama_token};
use crate::engine::{Callback, Engine, EngineParams, Event, EventView, FinishInfo, FinishKind, Prompt, Request, SubmitError};
use crate::sampling::chain::CommonParams;
use crate::sys::stats::{EngineMetrics, HistogramSnapshot};

/// `struct ds_engine`: an engine, its context and its decode thread.
pub struct ds_engine {
    engine: Engine,
}

/// Parameters of `ds_engine_new` (start from `ds_engine_default_params()`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds_engine_params {
    /// Sequences decoded at once (slots), 1 to 64.
    pub n_seq_max: u32,
    /// Each slot's context in tokens (rounded up to a multiple of 256); 0: the model's training
    /// context, at most 4096.
    pub n_ctx_seq: u32,
    /// Tokens per decode step (at least n_seq_max) and per micro-batch.
    pub n_batch: u32,
    pub n_ubatch: u32,
    /// Threads of the engine's pool (the decode thread is one of them).
    pub n_threads: i32,
    /// Requests submitted and not yet started beyond which ds_engine_submit returns
    /// DS_ENGINE_ERR_FULL.
    pub queue_limit: u32,
    /// The most prompt tokens a step takes while other sequences generate.
    pub prefill_chunk: u32,
    /// > 1: a step's prompt tokens are also limited so that it is predicted to take at most
    /// this multiple of a step without them (bounded inter-token latency); 0: off.
    pub max_step_slowdown: f32,
    /// Events a polled request buffers; a request whose buffer is full pauses until polled.
    pub event_capacity: u32,
    /// Render special tokens in event pieces.
    pub special: bool,
    /// Reuse the KV cells of the longest prompt prefix any slot holds.
    pub prefix_reuse: bool,
    /// One KV pool shared by all slots (llama-server's unified KV, the default): a sequence may
    /// hold up to n_ctx cells (or kv_unified_per_slot), requests start when their prompt fits
    /// in the free cells, idle slots' cached prefixes are evicted for them. false: each slot
    /// has its own n_ctx_seq cells. (Appended: the fields above keep their offsets.)
    pub kv_unified: bool,
    /// The cells of all slots together (rounded up to a multiple of 256); 0: n_ctx_seq ×
    /// n_seq_max.
    pub n_ctx: u32,
    /// With kv_unified: the most cells one sequence may hold; 0: the whole pool.
    pub kv_unified_per_slot: u32,
}

/// The sampler a request builds when it brings none: penalties, top-k, top-p, min-p,
/// temperature and a seeded draw, as llama.cpp's common sampler; temperature <= 0 is greedy.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds_sampling_params {
    pub temperature: f32,
    /// <= 0: off.
    pub top_k: i32,
    /// >= 1: off.
    pub top_p: f32,
    /// <= 0: off.
    pub min_p: f32,
    /// 1: off.
    pub repeat_penalty: f32,
    /// Tokens the penalties look back over; -1: the slot's context.
    pub repeat_last_n: i32,
    pub seed: u32,
    /// OpenAI's penalties (0: off): minus this times a token's count, and minus this once for
    /// a token that occurs, in the last `repeat_last_n` tokens.
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
}

/// What kind of event a `ds_engine_event` is.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ds_engine_event_kind {
    DS_ENGINE_EVENT_TOKEN = 0,
    DS_ENGINE_EVENT_FINISH = 1,
}

/// Why a request ended.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ds_engine_finish_reason {
    /// Not a final event.
    DS_ENGINE_FINISH_NONE = 0,
    /// max_tokens generated, or the slot's context is full.
    DS_ENGINE_FINISH_LENGTH = 1,
    /// A stop token or stop string (neither is part of the output).
    DS_ENGINE_FINISH_STOP = 2,
    /// An end-of-generation token (not part of the output).
    DS_ENGINE_FINISH_EOG = 3,
    /// ds_engine_cancel, a callback returning false, or ds_engine_free.
    DS_ENGINE_FINISH_CANCELLED = 4,
    /// The step failed (reason logged).
    DS_ENGINE_FINISH_ERROR = 5,
}

/// One output event. `piece` points into the engine's piece table (valid until
/// ds_engine_free; not NUL-terminated): for a token, the `n_piece` bytes of its piece that
/// belong to the output (fewer than the whole piece only for the token in which a stop string
/// begins). The counts are filled on the final event.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds_engine_event {
    pub request_id: i64,
    pub user_data: *mut c_void,
    pub kind: ds_engine_event_kind,
    pub token: llama_token,
    pub piece: *const c_char,
    pub n_piece: i32,
    pub finish_reason: ds_engine_finish_reason,
    pub n_prompt_tokens: i32,
    /// Prompt tokens whose KV cells were reused from an earlier or concurrent sequence.
    pub n_cached_tokens: i32,
    pub n_generated_tokens: i32,
    /// Submission to first token, and submission to the end, in microseconds.
    pub ttft_us: i64,
    pub total_us: i64,
}

/// Called on the engine's decode thread for each event of a request that has one; returning
/// false cancels the request. It may call any ds_engine_* function but ds_engine_free; it
/// should return quickly (every sequence of the engine waits for it).
pub type ds_engine_callback = Option<unsafe extern "C" fn(event: *const ds_engine_event, user_data: *mut c_void) -> bool>;

/// A request (start from `ds_engine_default_request()`). The prompt is `tokens` when
/// `n_tokens` > 0, else `text` (tokenized on the submitting thread). The engine copies
/// everything it needs; the caller's arrays may go when ds_engine_submit returns.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ds_engine_request {
    pub tokens: *const llama_token,
    pub n_tokens: i32,
    pub text: *const c_char,
    pub add_special: bool,
    pub parse_special: bool,
    /// A sampler (chain) the engine takes over in every case (freed by the engine when the
    /// request ends, or at once when the submission fails); NULL: built from `sampling`.
    pub sampler: *mut llama_sampler,
    pub sampling: ds_sampling_params,
    /// Tokens to generate at most; -1: until the slot's context is full.
    pub max_tokens: i32,
    pub stop_tokens: *const llama_token,
    pub n_stop_tokens: i32,
    /// NUL-terminated stop strings.
    pub stop_strings: *const *const c_char,
    pub n_stop_strings: i32,
    /// Keep generating past end-of-generation tokens.
    pub ignore_eos: bool,
    /// NULL: events are read with ds_engine_poll / ds_engine_wait.
    pub callback: ds_engine_callback,
    pub user_data: *mut c_void,
}

/// ds_engine_submit: the request is invalid (reason logged).
pub const DS_ENGINE_ERR_INVALID: i64 = -1;
/// ds_engine_submit: `queue_limit` requests are waiting to start (back off and retry).
pub const DS_ENGINE_ERR_FULL: i64 = -2;
/// ds_engine_submit: the engine is being freed.
pub const DS_ENGINE_ERR_CLOSED: i64 = -3;

/// An engine's figures (ds_engine_stats_get), or the sum over every engine (ds_stats.engines).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ds_engine_stats {
    /// Requests waiting for a slot, and holding one.
    pub queued: i64,
    pub running: i64,
    pub kv_cells_used: i64,
    pub kv_cells_total: i64,
    /// Request-table versions alive (current plus replaced ones awaiting the epoch), and
    /// published since creation.
    pub table_versions_live: i64,
    pub table_versions_published: u64,
    pub requests_submitted: u64,
    pub requests_rejected: u64,
    pub finished_length: u64,
    pub finished_stop: u64,
    pub finished_eog: u64,
    pub finished_cancelled: u64,
    pub finished_error: u64,
    /// Prompt tokens computed by the model, and reused from cached KV cells.
    pub prompt_tokens_computed: u64,
    pub prompt_tokens_reused: u64,
    pub generated_tokens: u64,
    pub steps: u64,
    /// Bytes the decode thread has allocated since the engine started (0 in builds without
    /// jemalloc); it does not grow while requests only generate.
    pub decode_thread_allocated_bytes: u64,
    /// Generated tokens per second over the last second.
    pub tokens_per_second: f64,
    pub ttft_p50_us: f64,
    pub ttft_p90_us: f64,
    pub ttft_p99_us: f64,
    pub itl_p50_us: f64,
    pub itl_p90_us: f64,
    pub itl_p99_us: f64,
}

fn quantiles(h: &HistogramSnapshot) -> [f64; 3] {
    [h.quantile_us(0.5), h.quantile_us(0.9), h.quantile_us(0.99)]
}

pub(crate) fn engine_stats(m: &EngineMetrics) -> ds_engine_stats {
    let ttft = quantiles(&m.ttft.snapshot());
    let itl = quantiles(&m.itl.snapshot());
    ds_engine_stats {
        queued: m.queued.get(),
        running: m.running.get(),
        kv_cells_used: m.kv_cells_used.get(),
        kv_cells_total: m.kv_cells_total.get(),
        table_versions_live: m.table_versions_live.get(),
        table_versions_published: m.table_versions_published.get(),
        requests_submitted: m.submitted.get(),
        requests_rejected: m.rejected.get(),
        finished_length: m.finished[FinishKind::Length as usize].get(),
        finished_stop: m.finished[FinishKind::Stop as usize].get(),
        finished_eog: m.finished[FinishKind::Eog as usize].get(),
        finished_cancelled: m.finished[FinishKind::Cancelled as usize].get(),
        finished_error: m.finished[FinishKind::Error as usize].get(),
        prompt_tokens_computed: m.prompt_computed.get(),
        prompt_tokens_reused: m.prompt_reused.get(),
        generated_tokens: m.generated.get(),
        steps: m.steps.get(),
        decode_thread_allocated_bytes: m.loop_allocated_bytes.get(),
        tokens_per_second: m.tokens_per_second_milli.get() as f64 / 1000.0,
        ttft_p50_us: ttft[0],
        ttft_p90_us: ttft[1],
        ttft_p99_us: ttft[2],
        itl_p50_us: itl[0],
        itl_p90_us: itl[1],
        itl_p99_us: itl[2],
    }
}

fn params_from(p: &ds_engine_params) -> EngineParams {
    EngineParams {
        n_seq_max: p.n_seq_max,
        n_ctx_seq: p.n_ctx_seq,
        n_batch: p.n_batch,
        n_ubatch: p.n_ubatch,
        n_threads: p.n_threads,
        queue_limit: p.queue_limit,
        prefill_chunk: p.prefill_chunk,
        max_step_slowdown: p.max_step_slowdown,
        event_capacity: p.event_capacity,
        special: p.special,
        prefix_reuse: p.prefix_reuse,
        kv_unified: p.kv_unified,
        n_ctx: p.n_ctx,
        kv_unified_per_slot: p.kv_unified_per_slot,
        ..EngineParams::default()
    }
}

#[no_mangle]
pub extern "C" fn ds_engine_default_params() -> ds_engine_params {
    let d = EngineParams::default();
    ds_engine_params {
        n_seq_max: d.n_seq_max,
        n_ctx_seq: d.n_ctx_seq,
        n_batch: d.n_batch,
        n_ubatch: d.n_ubatch,
        n_threads: d.n_threads,
        queue_limit: d.queue_limit,
        prefill_chunk: d.prefill_chunk,
        max_step_slowdown: d.max_step_slowdown,
        event_capacity: d.event_capacity,
        special: d.special,
        prefix_reuse: d.prefix_reuse,
        kv_unified: d.kv_unified,
        n_ctx: d.n_ctx,
        kv_unified_per_slot: d.kv_unified_per_slot,
    }
}

/// Greedy, no penalties, seed LLAMA_DEFAULT_SEED; max_tokens -1; no callback.
#[no_mangle]
pub extern "C" fn ds_engine_default_request() -> ds_engine_request {
    ds_engine_request {
        tokens: std::ptr::null(),
        n_tokens: 0,
        text: std::ptr::null(),
        add_special: true,
        parse_special: false,
        sampler: std::ptr::null_mut(),
        sampling: ds_sampling_params { temperature: 0.0, top_k: 40, top_p: 0.95, min_p: 0.05, repeat_penalty: 1.0, repeat_last_n: 64, seed: super::types::LLAMA_DEFAULT_SEED, frequency_penalty: 0.0, presence_penalty: 0.0 },
        max_tokens: -1,
        stop_tokens: std::ptr::null(),
        n_stop_tokens: 0,
        stop_strings: std::ptr::null(),
        n_stop_strings: 0,
        ignore_eos: false,
        callback: None,
        user_data: std::ptr::null_mut(),
    }
}

/// Creates an engine on `model` (which may be freed before the engine: the engine keeps it).
/// NULL (logged) on invalid parameters or when memory runs out.
#[no_mangle]
pub extern "C" fn ds_engine_new(model: *const llama_model, params: ds_engine_params) -> *mut ds_engine {
    guard("ds_engine_new", || {
        // SAFETY: llama_model handles are live until llama_model_free.
        let m = unsafe { as_ref(model, "model") }?;
        let engine = Engine::new(m.model.clone(), &params_from(&params))?;
        crate::log_info!("ds_engine_new: {} slots, {} KV cells{}, up to {} tokens a sequence, {} threads", engine.n_seq_max(), engine.n_ctx(), if engine.kv_unified() { " in one pool" } else { "" }, engine.n_ctx_seq(), params.n_threads);
        Ok(Box::into_raw(Box::new(ds_engine { engine })))
    })
}

/// Ends every request (each gets its final event, "cancelled" unless it had ended; callbacks
/// receive theirs before this returns), waits for calls in progress on other threads, frees
/// the context and everything else. NULL is ignored.
#[no_mangle]
pub extern "C" fn ds_engine_free(engine: *mut ds_engine) {
    guard("ds_engine_free", || {
        if engine.is_null() {
            return Ok(());
        }
        // SAFETY: a live engine handle (the caller's), not yet freed.
        let e = &unsafe { &*engine }.engine;
        if e.on_decode_thread() {
            return Err("called from a callback (the engine's decode thread), which would wait for itself; free the engine from another thread".into());
        }
        // Through a shared reference while other threads may still be inside calls on the
        // handle: it returns once none is.
        e.shutdown();
        // SAFETY: the handle came from ds_engine_new and is freed once (the caller's contract).
        drop(unsafe { Box::from_raw(engine) });
        crate::sys::alloc::release_freed();
        Ok(())
    })
}

/// Builds the engine's request from the C one; `taken` is its sampler, already owned, so it is
/// freed whatever fails.
///
/// # Safety
/// The request's pointers are NULL or valid for their counts / NUL-terminated.
unsafe fn request_from(r: &ds_engine_request, taken: Option<Member>, engine: &Engine) -> Result<Request, String> {
    let prompt = if r.n_tokens > 0 {
        // SAFETY: the caller's array of n_tokens tokens.
        Prompt::Tokens(unsafe { as_slice(r.tokens, r.n_tokens as usize, "request.tokens") }?.to_vec())
    } else if r.n_tokens < 0 {
        return Err(format!("request.n_tokens = {} is negative", r.n_tokens));
    } else if !r.text.is_null() {
        // SAFETY: a NUL-terminated string (the caller's).
        Prompt::Text { text: unsafe { std::ffi::CStr::from_ptr(r.text) }.to_bytes().to_vec(), add_special: r.add_special, parse_special: r.parse_special }
    } else {
        return Err("the request has neither tokens (n_tokens = 0) nor text".into());
    };
    if r.n_stop_tokens < 0 || r.n_stop_strings < 0 {
        return Err("request.n_stop_tokens and n_stop_strings must not be negative".into());
    }
    // SAFETY: the caller's arrays of their counts.
    let stop_tokens = unsafe { as_slice(r.stop_tokens, r.n_stop_tokens as usize, "request.stop_tokens") }?.to_vec();
    // SAFETY: as above.
    let strings = unsafe { as_slice(r.stop_strings, r.n_stop_strings as usize, "request.stop_strings") }?;
    let mut stop_strings = Vec::with_capacity(strings.len());
    for (i, &s) in strings.iter().enumerate() {
        if s.is_null() {
            return Err(format!("request.stop_strings[{i}] is NULL"));
        }
        // SAFETY: a NUL-terminated string (the caller's).
        stop_strings.push(unsafe { std::ffi::CStr::from_ptr(s) }.to_bytes().to_vec());
    }
    if r.max_tokens < -1 {
        return Err(format!("request.max_tokens = {} must be -1 (until the context is full) or at least 0", r.max_tokens));
    }
    let sampler: Box<dyn crate::sampling::Sampler + Send> = match taken {
        Some(m) => Box::new(m),
        None => {
            let s = &r.sampling;
            let common = CommonParams {
                temperature: s.temperature,
                top_k: s.top_k,
                top_p: s.top_p,
                min_p: s.min_p,
                repeat_penalty: s.repeat_penalty,
                repeat_last_n: s.repeat_last_n,
                seed: s.seed,
                frequency_penalty: s.frequency_penalty,
                presence_penalty: s.presence_penalty,
                ..CommonParams::default()
            };
            Box::new(common.build(engine.model(), engine.n_ctx_seq() as usize)?)
        }
    };
    let callback: Option<Callback> = r.callback.map(|f| {
        let user = r.user_data as usize;
        Box::new(move |v: &EventView<'_>| {
            let e = event_from(v.id, v.user_data, v.event, v.piece, v.finish.as_ref());
            // SAFETY: the caller's callback, called with a valid event and its user data.
            unsafe { f(&e, user as *mut c_void) }
        }) as Callback
    });
    Ok(Request { prompt, sampler, max_tokens: r.max_tokens, stop_tokens, stop_strings, ignore_eos: r.ignore_eos, callback, user_data: r.user_data as usize, n_probs: 0, grammar: None, reuse_prefix: true, slot: None, tag: None, t_max_predict: None, progress: None })
}

fn reason_of(k: FinishKind) -> ds_engine_finish_reason {
    use ds_engine_finish_reason::*;
    match k {
        FinishKind::Length => DS_ENGINE_FINISH_LENGTH,
        FinishKind::Stop => DS_ENGINE_FINISH_STOP,
        FinishKind::Eog => DS_ENGINE_FINISH_EOG,
        FinishKind::Cancelled => DS_ENGINE_FINISH_CANCELLED,
        FinishKind::Error => DS_ENGINE_FINISH_ERROR,
    }
}

fn event_from(id: u64, user_data: usize, e: Event, piece: &[u8], info: Option<&FinishInfo>) -> ds_engine_event {
    let i = info.copied().unwrap_or_default();
    let (kind, token, n_piece, reason) = match e {
        Event::Token { token, n_piece } => (ds_engine_event_kind::DS_ENGINE_EVENT_TOKEN, token, n_piece.min(piece.len() as u32) as i32, ds_engine_finish_reason::DS_ENGINE_FINISH_NONE),
        Event::Finish(k) => (ds_engine_event_kind::DS_ENGINE_EVENT_FINISH, -1, 0, reason_of(k)),
    };
    ds_engine_event {
        request_id: id as i64,
        user_data: user_data as *mut c_void,
        kind,
        token,
        piece: piece.as_ptr() as *const c_char,
        n_piece,
        finish_reason: reason,
        n_prompt_tokens: i.n_prompt as i32,
        n_cached_tokens: i.n_cached as i32,
        n_generated_tokens: i.n_generated as i32,
        ttft_us: i.ttft_us as i64,
        total_us: i.total_us as i64,
    }
}

/// Queues a request, from any thread, without waiting for other submitters or the decode
/// loop. Returns its id (>= 1), or DS_ENGINE_ERR_INVALID (empty prompt, prompt not shorter
/// than a slot's context, token ids outside the vocabulary, bad counts), DS_ENGINE_ERR_FULL
/// (queue_limit requests waiting) or DS_ENGINE_ERR_CLOSED, each with a logged reason; a
/// failed submission leaves nothing behind.
///
/// # Safety
/// `request`'s pointers are NULL or valid for their counts.
#[no_mangle]
pub unsafe extern "C" fn ds_engine_submit(engine: *mut ds_engine, request: *const ds_engine_request) -> i64 {
    guard_or("ds_engine_submit", DS_ENGINE_ERR_INVALID, || {
        // SAFETY: NULL or a live request struct (the caller's).
        let r = unsafe { as_ref(request, "request") }?;
        // The engine takes the sampler over in every case: owned from here on, it is freed
        // whatever fails below (a NULL engine handle included).
        let taken = (!r.sampler.is_null()).then(|| Member(r.sampler));
        // SAFETY: a live engine handle.
        let e = &unsafe { as_ref(engine as *const ds_engine, "engine") }?.engine;
        // SAFETY: the request's pointers (caller's contract).
        let req = unsafe { request_from(r, taken, e) }.inspect_err(|_| e.note_rejected())?;
        match e.submit(req) {
            Ok(id) => Ok(id as i64),
            Err(SubmitError::Invalid(why)) => Err(why),
            Err(SubmitError::Full(why)) => {
                crate::log_warn!("ds_engine_submit: {why}");
                Ok(DS_ENGINE_ERR_FULL)
            }
            Err(SubmitError::Closed) => {
                crate::log_warn!("ds_engine_submit: the engine is being freed");
                Ok(DS_ENGINE_ERR_CLOSED)
            }
        }
    })
}

/// Ends request `id` at the next step (from any thread, at any moment; idempotent). Returns 0,
/// also for a request that had already ended; -1 (logged) for an id this engine never gave.
#[no_mangle]
pub extern "C" fn ds_engine_cancel(engine: *mut ds_engine, id: i64) -> i32 {
    guard_or("ds_engine_cancel", -1, || {
        // SAFETY: a live engine handle.
        let e = &unsafe { as_ref(engine as *const ds_engine, "engine") }?.engine;
        e.cancel(u64::try_from(id).map_err(|_| format!("unknown request id {id}"))?)?;
        Ok(0)
    })
}

fn read_events(e: &Engine, id: i64, out: *mut ds_engine_event, max: i32, timeout: Option<Duration>) -> Result<i32, String> {
    let id = u64::try_from(id).map_err(|_| format!("unknown request id {id}"))?;
    if max < 0 {
        return Err(format!("max = {max} is negative"));
    }
    if max > 0 && out.is_null() {
        return Err("events is NULL".into());
    }
    let mut buf = [Event::Finish(FinishKind::Error); 64];
    let (mut n, mut info) = (0usize, None);
    while n < max as usize {
        let want = (max as usize - n).min(buf.len());
        let got = match (timeout, n) {
            (Some(t), 0) => e.wait(id, &mut buf[..want], &mut info, t)?,
            _ => e.poll(id, &mut buf[..want], &mut info)?,
        };
        for (k, &ev) in buf[..got].iter().enumerate() {
            let piece = match ev {
                Event::Token { token, .. } => e.piece(token),
                Event::Finish(_) => &[],
            };
            let fin = if matches!(ev, Event::Finish(_)) { info.as_ref() } else { None };
            // SAFETY: out holds max events (caller) and n + k < max.
            unsafe { *out.add(n + k) = event_from(id, 0, ev, piece, fin) };
        }
        n += got;
        if got < want || buf[..got].iter().any(|e| matches!(e, Event::Finish(_))) {
            break;
        }
    }
    Ok(n as i32)
}

/// Moves up to `max` of request `id`'s events into `events`, oldest first, without waiting;
/// returns how many (0: none yet), or -1 (logged) for an unknown id, a request with a
/// callback, or one whose final event has been read already. Several threads may poll the
/// same request: each event goes to exactly one of them. (`user_data` is not set on polled
/// events: the poller knows its request.)
///
/// # Safety
/// `events` must be writable for `max` events.
#[no_mangle]
pub unsafe extern "C" fn ds_engine_poll(engine: *mut ds_engine, id: i64, events: *mut ds_engine_event, max: i32) -> i32 {
    guard_or("ds_engine_poll", -1, || {
        // SAFETY: a live engine handle.
        let e = &unsafe { as_ref(engine as *const ds_engine, "engine") }?.engine;
        read_events(e, id, events, max, None)
    })
}

/// As ds_engine_poll, but waits up to `timeout_ms` milliseconds (< 0: without limit) for the
/// first event. Returns 0 on timeout.
///
/// # Safety
/// `events` must be writable for `max` events.
#[no_mangle]
pub unsafe extern "C" fn ds_engine_wait(engine: *mut ds_engine, id: i64, events: *mut ds_engine_event, max: i32, timeout_ms: i32) -> i32 {
    guard_or("ds_engine_wait", -1, || {
        // SAFETY: a live engine handle.
        let e = &unsafe { as_ref(engine as *const ds_engine, "engine") }?.engine;
        let t = if timeout_ms < 0 { Duration::MAX } else { Duration::from_millis(timeout_ms as u64) };
        read_events(e, id, events, max, Some(t))
    })
}

/// Fills `*out` with the engine's figures; 0, or -1 (logged) when an argument is NULL. Any
/// thread, any time.
#[no_mangle]
pub extern "C" fn ds_engine_stats_get(engine: *const ds_engine, out: *mut ds_engine_stats) -> i32 {
    guard_or("ds_engine_stats_get", -1, || {
        // SAFETY: a live engine handle.
        let e = &unsafe { as_ref(engine, "engine") }?.engine;
        // SAFETY: NULL or a writable ds_engine_stats.
        *unsafe { as_mut(out, "out") }? = engine_stats(e.metrics());
        Ok(0)
    })
}

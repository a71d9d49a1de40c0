//! llama_state_* / llama_state_seq_* (and the deprecated names): the context's state as bytes
//! or files. Files hold a small header (magic, version, the caller's token list) then the state.

use std::ffi::c_char;

use super::boundary::{as_ref, as_slice, as_str, guard};
use super::handles::llama_context;
use super::types::{llama_seq_id, llama_state_seq_flags, llama_token, LLAMA_SESSION_MAGIC, LLAMA_SESSION_VERSION, LLAMA_STATE_SEQ_FLAGS_ON_DEVICE, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY, LLAMA_STATE_SEQ_MAGIC, LLAMA_STATE_SEQ_VERSION};
use crate::context::Context;
use crate::state;

// The engine's slot files (ds_engine's save / restore) are these files too.
const _: () = assert!(LLAMA_STATE_SEQ_MAGIC == state::SEQ_FILE_MAGIC && LLAMA_STATE_SEQ_VERSION == state::SEQ_FILE_VERSION);


fn with_ctx<R: super::boundary::Fallback>(name: &str, ctx: *mut llama_context, f: impl FnOnce(&mut Context) -> Result<R, String>) -> R {
    guard(name, || {
        // SAFETY: llama.h requires a live context handle used by one thread at a time.
        f(&mut unsafe { as_ref(ctx, "ctx")?.owned() }.ctx)
    })
}

fn seq_of(ctx: &Context, seq_id: llama_seq_id) -> Result<usize, String> {
    if seq_id < 0 || seq_id as u32 >= ctx.n_seq_max {
        return Err(format!("seq_id {seq_id} is out of range [0, {})", ctx.n_seq_max));
    }
    Ok(seq_id as usize)
}

fn serialised(ctx: &Context, seq: Option<usize>) -> Vec<u8> {
    let mut out = Vec::new();
    state::save(ctx, seq, &mut out);
    out
}

/// Copies `bytes` to `dst` when it holds `size` bytes; returns the bytes copied.
///
/// # Safety
/// `dst` must be writable for `size` bytes.
unsafe fn copy_out(bytes: &[u8], dst: *mut u8, size: usize) -> Result<usize, String> {
    if size < bytes.len() {
        return Err(format!("destination holds {size} bytes, the state needs {}", bytes.len()));
    }
    if dst.is_null() {
        return Err("dst is NULL".into());
    }
    // SAFETY: dst is writable for size >= bytes.len() bytes (caller's contract).
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) };
    Ok(bytes.len())
}

#[no_mangle]
pub extern "C" fn llama_state_get_size(ctx: *mut llama_context) -> usize {
    with_ctx("llama_state_get_size", ctx, |c| Ok(serialised(c, None).len()))
}

#[no_mangle]
pub extern "C" fn llama_get_state_size(ctx: *mut llama_context) -> usize {
    llama_state_get_size(ctx)
}

/// # Safety
/// `dst` must be writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn llama_state_get_data(ctx: *mut llama_context, dst: *mut u8, size: usize) -> usize {
    // SAFETY: dst contract forwarded.
    with_ctx("llama_state_get_data", ctx, |c| unsafe { copy_out(&serialised(c, None), dst, size) })
}

/// # Safety
/// `dst` must hold llama_state_get_size(ctx) bytes.
#[no_mangle]
pub unsafe extern "C" fn llama_copy_state_data(ctx: *mut llama_context, dst: *mut u8) -> usize {
    // SAFETY: dst contract forwarded; the deprecated call has no size, so the exact size is assumed.
    with_ctx("llama_copy_state_data", ctx, |c| unsafe {
        let s = serialised(c, None);
        copy_out(&s, dst, s.len())
    })
}

/// # Safety
/// `src` must hold `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn llama_state_set_data(ctx: *mut llama_context, src: *const u8, size: usize) -> usize {
    with_ctx("llama_state_set_data", ctx, |c| {
        // SAFETY: src holds size bytes (caller's contract).
        let bytes = unsafe { as_slice(src, size, "src") }?;
        state::load(c, bytes, None)
    })
}

/// # Safety
/// `src` must hold a state from llama_state_get_data.
#[no_mangle]
pub unsafe extern "C" fn llama_set_state_data(ctx: *mut llama_context, src: *const u8) -> usize {
    let _ = src;
    with_ctx("llama_set_state_data", ctx, |_| Err::<usize, _>("the deprecated call gives no length, so the state cannot be read safely; use llama_state_set_data".into()))
}

#[no_mangle]
pub extern "C" fn llama_state_seq_get_size(ctx: *mut llama_context, seq_id: llama_seq_id) -> usize {
    with_ctx("llama_state_seq_get_size", ctx, |c| Ok(serialised(c, Some(seq_of(c, seq_id)?)).len()))
}

/// # Safety
/// `dst` must be writable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_get_data(ctx: *mut llama_context, dst: *mut u8, size: usize, seq_id: llama_seq_id) -> usize {
    // SAFETY: dst contract forwarded.
    with_ctx("llama_state_seq_get_data", ctx, |c| unsafe { copy_out(&serialised(c, Some(seq_of(c, seq_id)?)), dst, size) })
}

/// # Safety
/// `src` must hold `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_set_data(ctx: *mut llama_context, src: *const u8, size: usize, dest_seq_id: llama_seq_id) -> usize {
    with_ctx("llama_state_seq_set_data", ctx, |c| {
        let d = seq_of(c, dest_seq_id)?;
        // SAFETY: src holds size bytes (caller's contract).
        let bytes = unsafe { as_slice(src, size, "src") }?;
        state::load(c, bytes, Some(d))
    })
}

/// What the `_ext` calls do with their flags, said once per process and flag: upstream's
/// standard KV cache ignores them too (`llama_kv_cache::state_write`: `GGML_UNUSED(flags)`), but
/// its SWA, recurrent and deepseek4 caches and its device buffers honour them.
fn note_flags(name: &str, flags: llama_state_seq_flags) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static PARTIAL: AtomicBool = AtomicBool::new(false);
    static DEVICE: AtomicBool = AtomicBool::new(false);
    if flags & LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY != 0 && !PARTIAL.swap(true, Ordering::Relaxed) {
        crate::log_info!("{name}: LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: the caches here have no partial (SWA or recurrent) part to save alone; the whole sequence state is saved and restored, as upstream's standard KV cache does (said once)");
    }
    if flags & LLAMA_STATE_SEQ_FLAGS_ON_DEVICE != 0 && !DEVICE.swap(true, Ordering::Relaxed) {
        crate::log_info!("{name}: LLAMA_STATE_SEQ_FLAGS_ON_DEVICE: there is no device memory here; the state is the same host bytes as without the flag (said once)");
    }
    let unknown = flags & !(LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY | LLAMA_STATE_SEQ_FLAGS_ON_DEVICE);
    if unknown != 0 {
        crate::log_warn!("{name}: unknown state flags 0x{unknown:x} ignored");
    }
}

#[no_mangle]
pub extern "C" fn llama_state_seq_get_size_ext(ctx: *mut llama_context, seq_id: llama_seq_id, flags: llama_state_seq_flags) -> usize {
    note_flags("llama_state_seq_get_size_ext", flags);
    llama_state_seq_get_size(ctx, seq_id)
}

/// # Safety
/// As llama_state_seq_get_data.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_get_data_ext(ctx: *mut llama_context, dst: *mut u8, size: usize, seq_id: llama_seq_id, flags: llama_state_seq_flags) -> usize {
    note_flags("llama_state_seq_get_data_ext", flags);
    // SAFETY: same contract.
    unsafe { llama_state_seq_get_data(ctx, dst, size, seq_id) }
}

/// # Safety
/// As llama_state_seq_set_data.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_set_data_ext(ctx: *mut llama_context, src: *const u8, size: usize, dest_seq_id: llama_seq_id, flags: llama_state_seq_flags) -> usize {
    note_flags("llama_state_seq_set_data_ext", flags);
    // SAFETY: same contract.
    unsafe { llama_state_seq_set_data(ctx, src, size, dest_seq_id) }
}

/// A session file: magic, version, token count, tokens, then the state bytes
/// (`state::write_file`: a crash leaves the old file or the new one).
fn write_file(path: &str, magic: u32, version: u32, tokens: &[llama_token], state: &[u8]) -> Result<(), String> {
    state::write_file(std::path::Path::new(path), magic, version, tokens, state).map(|_| ())
}

/// Reads a session file: (tokens, state bytes).
fn read_file(path: &str, magic: u32, version: u32) -> Result<(Vec<llama_token>, Vec<u8>), String> {
    state::read_file(std::path::Path::new(path), magic, version).map(|(t, s, _)| (t, s))
}

/// # Safety
/// `path_session` NUL-terminated; `tokens` holds `n_token_count` ids.
#[no_mangle]
pub unsafe extern "C" fn llama_state_save_file(ctx: *mut llama_context, path_session: *const c_char, tokens: *const llama_token, n_token_count: usize) -> bool {
    with_ctx("llama_state_save_file", ctx, |c| {
        // SAFETY: caller's contract for both pointers.
        let (path, toks) = unsafe { (as_str(path_session, "path_session")?, as_slice(tokens, n_token_count, "tokens")?) };
        write_file(path, LLAMA_SESSION_MAGIC, LLAMA_SESSION_VERSION, toks, &serialised(c, None))?;
        Ok(true)
    })
}

/// # Safety
/// `path_session` NUL-terminated; `tokens_out` writable for `n_token_capacity` ids;
/// `n_token_count_out` writable.
#[no_mangle]
pub unsafe extern "C" fn llama_state_load_file(ctx: *mut llama_context, path_session: *const c_char, tokens_out: *mut llama_token, n_token_capacity: usize, n_token_count_out: *mut usize) -> bool {
    with_ctx("llama_state_load_file", ctx, |c| {
        // SAFETY: caller's contract.
        let path = unsafe { as_str(path_session, "path_session") }?;
        let (tokens, state_bytes) = read_file(path, LLAMA_SESSION_MAGIC, LLAMA_SESSION_VERSION)?;
        if tokens.len() > n_token_capacity {
            return Err(format!("token count in session file exceeded capacity! {} > {n_token_capacity}", tokens.len()));
        }
        state::load(c, &state_bytes, None)?;
        // SAFETY: tokens_out is writable for n_token_capacity >= tokens.len() ids; the count pointer is writable.
        unsafe {
            if !tokens.is_empty() {
                std::ptr::copy_nonoverlapping(tokens.as_ptr(), tokens_out, tokens.len());
            }
            if let Some(n) = n_token_count_out.as_mut() {
                *n = tokens.len();
            }
        }
        Ok(true)
    })
}

/// # Safety
/// As llama_state_save_file.
#[no_mangle]
pub unsafe extern "C" fn llama_save_session_file(ctx: *mut llama_context, path_session: *const c_char, tokens: *const llama_token, n_token_count: usize) -> bool {
    // SAFETY: same contract.
    unsafe { llama_state_save_file(ctx, path_session, tokens, n_token_count) }
}

/// # Safety
/// As llama_state_load_file.
#[no_mangle]
pub unsafe extern "C" fn llama_load_session_file(ctx: *mut llama_context, path_session: *const c_char, tokens_out: *mut llama_token, n_token_capacity: usize, n_token_count_out: *mut usize) -> bool {
    // SAFETY: same contract.
    unsafe { llama_state_load_file(ctx, path_session, tokens_out, n_token_capacity, n_token_count_out) }
}

/// # Safety
/// `filepath` NUL-terminated; `tokens` holds `n_token_count` ids.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_save_file(ctx: *mut llama_context, filepath: *const c_char, seq_id: llama_seq_id, tokens: *const llama_token, n_token_count: usize) -> usize {
    with_ctx("llama_state_seq_save_file", ctx, |c| {
        // SAFETY: caller's contract for both pointers.
        let (path, toks) = unsafe { (as_str(filepath, "filepath")?, as_slice(tokens, n_token_count, "tokens")?) };
        let s = serialised(c, Some(seq_of(c, seq_id)?));
        write_file(path, LLAMA_STATE_SEQ_MAGIC, LLAMA_STATE_SEQ_VERSION, toks, &s)?;
        Ok(16 + toks.len() * 4 + s.len())
    })
}

/// # Safety
/// `filepath` NUL-terminated; `tokens_out` NULL or writable for `n_token_capacity` ids;
/// `n_token_count_out` writable.
#[no_mangle]
pub unsafe extern "C" fn llama_state_seq_load_file(ctx: *mut llama_context, filepath: *const c_char, dest_seq_id: llama_seq_id, tokens_out: *mut llama_token, n_token_capacity: usize, n_token_count_out: *mut usize) -> usize {
    with_ctx("llama_state_seq_load_file", ctx, |c| {
        // SAFETY: caller's contract.
        let path = unsafe { as_str(filepath, "filepath") }?;
        let (tokens, state_bytes) = read_file(path, LLAMA_STATE_SEQ_MAGIC, LLAMA_STATE_SEQ_VERSION)?;
        // SAFETY: the count pointer is writable (caller's contract).
        if let Some(n) = unsafe { n_token_count_out.as_mut() } {
            *n = tokens.len();
        }
        // upstream b11312's query: without a token buffer it reports the count and the bytes
        // read so far (the header), and restores nothing (llama-server asks first, then loads)
        if tokens_out.is_null() {
            return Ok(16);
        }
        if tokens.len() > n_token_capacity {
            return Err(format!("token count in sequence state file exceeded capacity! {} > {n_token_capacity}", tokens.len()));
        }
        let read = state::load(c, &state_bytes, Some(seq_of(c, dest_seq_id)?))?;
        // SAFETY: tokens_out is writable for n_token_capacity >= tokens.len() ids.
        unsafe { std::ptr::copy_nonoverlapping(tokens.as_ptr(), tokens_out, tokens.len()) };
        Ok(16 + tokens.len() * 4 + read)
    })
}

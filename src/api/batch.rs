//! llama_batch helpers: allocation with upstream's layout (per-token seq_id arrays, the list
//! ended by a NULL entry) using the C allocator, the single-sequence view of
//! llama_batch_get_one, and a caller's batch checked and viewed as the engine's `BatchInput`
//! (`with_input`, for llama_decode).

use std::ptr;

use super::boundary::guard_or;
use super::types::{llama_batch, llama_seq_id, llama_token};
use crate::batch::BatchInput;

fn empty_batch() -> llama_batch {
    llama_batch { n_tokens: 0, token: ptr::null_mut(), embd: ptr::null_mut(), pos: ptr::null_mut(), n_seq_id: ptr::null_mut(), seq_id: ptr::null_mut(), logits: ptr::null_mut() }
}

#[no_mangle]
pub extern "C" fn llama_batch_get_one(tokens: *mut llama_token, n_tokens: i32) -> llama_batch {
    llama_batch { n_tokens, token: tokens, ..empty_batch() }
}

fn array<T>(n: usize) -> Result<*mut T, String> {
    // SAFETY: calloc checks n * size for overflow and returns NULL on failure.
    let p = unsafe { libc::calloc(n.max(1), std::mem::size_of::<T>()) } as *mut T;
    if p.is_null() {
        return Err(format!("cannot allocate a batch array of {n} entries"));
    }
    Ok(p)
}

/// Allocates a batch for up to `n_tokens` tokens (or embeddings of `embd` floats each when
/// `embd` > 0), each in at most `n_seq_max` sequences. On failure returns an all-NULL batch
/// and logs why; freeing that is harmless.
#[no_mangle]
pub extern "C" fn llama_batch_init(n_tokens: i32, embd: i32, n_seq_max: i32) -> llama_batch {
    let mut b = empty_batch();
    let ok = guard_or("llama_batch_init", false, || {
        if n_tokens <= 0 || embd < 0 || n_seq_max <= 0 {
            return Err(format!("invalid sizes n_tokens = {n_tokens}, embd = {embd}, n_seq_max = {n_seq_max}"));
        }
        let (n, e, s) = (n_tokens as usize, embd as usize, n_seq_max as usize);
        if e > 0 {
            b.embd = array::<f32>(n.checked_mul(e).ok_or("embedding batch too large")?)?;
        } else {
            b.token = array::<llama_token>(n)?;
        }
        b.pos = array(n)?;
        b.n_seq_id = array(n)?;
        b.seq_id = array::<*mut llama_seq_id>(n + 1)?;
        for i in 0..n {
            // SAFETY: seq_id has n + 1 zeroed entries; the last stays NULL as the end marker.
            unsafe { *b.seq_id.add(i) = array::<llama_seq_id>(s)? };
        }
        b.logits = array(n)?;
        Ok(true)
    });
    if !ok {
        // SAFETY: every non-NULL array in b came from `array` above.
        unsafe { llama_batch_free(b) };
        return empty_batch();
    }
    b
}

/// # Safety
/// `batch` must come from llama_batch_init and not be freed before.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_free(batch: llama_batch) {
    // SAFETY: the arrays come from calloc in llama_batch_init (free(NULL) is a no-op); the
    // seq_id list ends at its NULL entry.
    unsafe {
        if !batch.seq_id.is_null() {
            let mut i = 0;
            while !(*batch.seq_id.add(i)).is_null() {
                libc::free(*batch.seq_id.add(i) as *mut libc::c_void);
                i += 1;
            }
            libc::free(batch.seq_id as *mut libc::c_void);
        }
        for p in [batch.token as *mut libc::c_void, batch.embd as _, batch.pos as _, batch.n_seq_id as _, batch.logits as _] {
            libc::free(p);
        }
    }
}

/// Runs `f` on `batch` as a `BatchInput` (token ids, optional positions, sequence ids and
/// output flags, borrowed from the caller's arrays), after the checks the arrays' shape needs:
/// a positive `n_tokens`, token input (embedding input is refused with its reason), `seq_id`
/// and `n_seq_id` both set or both NULL. The per-token limits (ids, positions, sequences) are
/// the engine's to check.
///
/// # Safety
/// `batch`'s non-NULL arrays hold `n_tokens` entries each, and `seq_id[i]` holds `n_seq_id[i]`
/// ids (llama.h's contract for llama_batch).
pub(super) unsafe fn with_input<R>(batch: &llama_batch, f: impl FnOnce(&BatchInput) -> Result<R, String>) -> Result<R, String> {
    if batch.n_tokens <= 0 {
        return Err(format!("n_tokens = {} (must be positive)", batch.n_tokens));
    }
    if batch.token.is_null() {
        return Err(if batch.embd.is_null() { "batch has neither token ids nor embeddings".into() } else { "embedding input (batch.embd) is not supported yet".into() });
    }
    if batch.seq_id.is_null() != batch.n_seq_id.is_null() {
        return Err("seq_id and n_seq_id must both be set or both be NULL".into());
    }
    let n = batch.n_tokens as usize;
    // SAFETY: the caller's arrays hold n_tokens entries (this function's contract).
    let tokens = unsafe { std::slice::from_raw_parts(batch.token, n) };
    // SAFETY: as above.
    let pos = (!batch.pos.is_null()).then(|| unsafe { std::slice::from_raw_parts(batch.pos as *const i32, n) });
    // SAFETY: as above.
    let logits = (!batch.logits.is_null()).then(|| unsafe { std::slice::from_raw_parts(batch.logits as *const i8, n) });
    let lookup = seq_lookup(batch);
    f(&BatchInput { tokens, pos, seq_ids: if batch.seq_id.is_null() { None } else { Some(&lookup) }, logits })
}

/// The sequence ids of token i of a caller's batch.
fn seq_lookup<'a>(batch: &'a llama_batch) -> impl Fn(usize) -> &'a [i32] + 'a {
    move |i| {
        // SAFETY: for i < n_tokens, n_seq_id[i] entries of seq_id[i] are readable (llama.h).
        unsafe {
            let cnt = (*batch.n_seq_id.add(i)).max(0) as usize;
            let p = *batch.seq_id.add(i);
            if p.is_null() || cnt == 0 {
                &[]
            } else {
                std::slice::from_raw_parts(p as *const i32, cnt)
            }
        }
    }
}

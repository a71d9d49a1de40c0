//! The extended batch API for token input (`llama_batch_ext_*`, `llama_process` with
//! LLAMA_PROCESS_TYPE_DECODE), which upstream's own examples (llama-simple) use instead of
//! llama_batch: the batch collects tokens, and llama_process hands them to llama_decode as a
//! llama_batch. Embedding inputs (`llama_batch_ext_add_embd`, `_set_embd_*`) and the encoder pass
//! stay unsupported (src/api/unsupported.rs), as llama_decode refuses embedding input.
//! Return values and checks follow upstream's llama-batch.cpp.

#![allow(non_camel_case_types)]

use super::boundary::{as_mut, as_ref, guard, guard_or};
use super::context::llama_decode;
use super::handles::llama_context;
use super::types::{llama_batch, llama_pos, llama_process_type, llama_seq_id, llama_token, raw_enum, LLAMA_TOKEN_NULL};

/// `struct llama_batch_ext`: tokens with their sequences, positions and output flags, up to the
/// context's n_batch. Owned by the caller between llama_batch_ext_init and llama_batch_ext_free.
pub struct llama_batch_ext {
    n_tokens_max: usize,
    n_seq_max: i32,
    n_vocab: i32,
    tokens: Vec<llama_token>,
    /// Upstream leaves a position at 0 until llama_batch_ext_set_pos sets it.
    pos: Vec<llama_pos>,
    seq_ids: Vec<Vec<llama_seq_id>>,
    output: Vec<i8>,
}

impl llama_batch_ext {
    fn index(&self, idx: i32) -> Option<usize> {
        (0..self.tokens.len() as i32).contains(&idx).then_some(idx as usize)
    }
    fn valid_seq(&self, seq_id: llama_seq_id) -> bool {
        (0..self.n_seq_max).contains(&seq_id)
    }
}

/// A batch sized for `ctx` (n_batch tokens, n_seq_max sequences, its model's vocabulary).
#[no_mangle]
pub extern "C" fn llama_batch_ext_init(ctx: *mut llama_context) -> *mut llama_batch_ext {
    guard("llama_batch_ext_init", || {
        // SAFETY: a live context handle (NULL is caught), used by one thread at a time (llama.h's contract).
        let c = unsafe { as_ref(ctx, "ctx")?.owned() };
        Ok(Box::into_raw(Box::new(llama_batch_ext {
            n_tokens_max: c.ctx.n_batch as usize,
            n_seq_max: c.ctx.n_seq_max as i32,
            n_vocab: c.ctx.model.vocab.n_tokens() as i32,
            tokens: Vec::new(),
            pos: Vec::new(),
            seq_ids: Vec::new(),
            output: Vec::new(),
        })))
    })
}

/// # Safety
/// `batch` must be NULL or come from llama_batch_ext_init and not be freed before.
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_free(batch: *mut llama_batch_ext) {
    if !batch.is_null() {
        // SAFETY: batch came from Box::into_raw in llama_batch_ext_init (caller's contract).
        drop(unsafe { Box::from_raw(batch) });
    }
}

fn with_batch<R: super::boundary::Fallback>(name: &str, batch: *mut llama_batch_ext, f: impl FnOnce(&mut llama_batch_ext) -> Result<R, String>) -> R {
    guard(name, || {
        // SAFETY: a live batch from llama_batch_ext_init, used by one thread at a time.
        f(unsafe { as_mut(batch, "batch") }?)
    })
}

#[no_mangle]
pub extern "C" fn llama_batch_ext_clear(batch: *mut llama_batch_ext) {
    with_batch("llama_batch_ext_clear", batch, |b| {
        b.tokens.clear();
        b.pos.clear();
        b.seq_ids.clear();
        b.output.clear();
        Ok(())
    })
}

/// Adds an entry without a token id: -1 when the batch is full, -3 for an invalid sequence id,
/// else its index.
#[no_mangle]
pub extern "C" fn llama_batch_ext_add(batch: *mut llama_batch_ext, seq_id: llama_seq_id) -> i32 {
    with_batch("llama_batch_ext_add", batch, |b| Ok(add_entry(b, seq_id, LLAMA_TOKEN_NULL)))
}

fn add_entry(b: &mut llama_batch_ext, seq_id: llama_seq_id, id: llama_token) -> i32 {
    if b.tokens.len() >= b.n_tokens_max {
        return -1;
    }
    if !b.valid_seq(seq_id) {
        return -3;
    }
    b.tokens.push(id);
    b.pos.push(0);
    b.seq_ids.push(vec![seq_id]);
    b.output.push(0);
    b.tokens.len() as i32 - 1
}

/// As llama_batch_ext_add with a token id; -2 (and nothing added) for an id outside the vocabulary.
#[no_mangle]
pub extern "C" fn llama_batch_ext_add_token(batch: *mut llama_batch_ext, seq_id: llama_seq_id, id: llama_token) -> i32 {
    with_batch("llama_batch_ext_add_token", batch, |b| {
        if !(0..b.n_vocab).contains(&id) {
            // upstream adds the entry and then refuses the id; the entry stays without one
            let idx = add_entry(b, seq_id, LLAMA_TOKEN_NULL);
            return Ok(if idx < 0 { idx } else { -2 });
        }
        Ok(add_entry(b, seq_id, id))
    })
}

/// Puts entry `idx` in sequence `seq_id` as well.
#[no_mangle]
pub extern "C" fn llama_batch_ext_add_seq(batch: *mut llama_batch_ext, idx: i32, seq_id: llama_seq_id) -> bool {
    with_batch("llama_batch_ext_add_seq", batch, |b| {
        let (Some(i), true) = (b.index(idx), b.valid_seq(seq_id)) else { return Ok(false) };
        if !b.seq_ids[i].contains(&seq_id) {
            b.seq_ids[i].push(seq_id);
        }
        Ok(true)
    })
}

/// # Safety
/// `pos` must be NULL or point to one position (a token entry has one).
#[no_mangle]
pub unsafe extern "C" fn llama_batch_ext_set_pos(batch: *mut llama_batch_ext, idx: i32, pos: *const llama_pos) -> bool {
    with_batch("llama_batch_ext_set_pos", batch, |b| {
        let Some(i) = b.index(idx) else { return Ok(false) };
        // SAFETY: pos is NULL or points to a position (caller's contract).
        let Some(&p) = (unsafe { pos.as_ref() }) else { return Ok(false) };
        b.pos[i] = p;
        Ok(true)
    })
}

fn set_output(name: &str, batch: *mut llama_batch_ext, idx: i32, value: bool) -> bool {
    with_batch(name, batch, |b| {
        let Some(i) = b.index(idx) else { return Ok(false) };
        b.output[i] = value as i8;
        Ok(true)
    })
}

/// Same as llama_batch_ext_set_output_logits (upstream: "for now, this is equivalent").
#[no_mangle]
pub extern "C" fn llama_batch_ext_set_output_embd(batch: *mut llama_batch_ext, idx: i32, value: bool) -> bool {
    set_output("llama_batch_ext_set_output_embd", batch, idx, value)
}

#[no_mangle]
pub extern "C" fn llama_batch_ext_set_output_logits(batch: *mut llama_batch_ext, idx: i32, value: bool) -> bool {
    set_output("llama_batch_ext_set_output_logits", batch, idx, value)
}

/// DECODE runs the batch through llama_decode (same return values); ENCODE is not supported
/// (no encoder models).
///
/// # Safety
/// `ctx` and `batch` must be live handles.
#[no_mangle]
pub unsafe extern "C" fn llama_process(ctx: *mut llama_context, type_: llama_process_type, batch: *mut llama_batch_ext) -> i32 {
    let prepared = guard_or("llama_process", None, || {
        match raw_enum(&type_) {
            1 => {}
            0 => return Err("not supported by deepseek (encoder models: LLAMA_PROCESS_TYPE_ENCODE)".into()),
            other => return Err(format!("unknown llama_process_type {other}")),
        }
        // SAFETY: a live batch from llama_batch_ext_init.
        let b = unsafe { as_mut(batch, "batch") }?;
        if b.tokens.is_empty() {
            return Err("the batch is empty".into());
        }
        if let Some(i) = b.tokens.iter().position(|&t| t == LLAMA_TOKEN_NULL) {
            return Err(format!("entry {i} has neither a token id nor an embedding"));
        }
        Ok(Some(b))
    });
    let Some(b) = prepared else { return -1 };
    let mut n_seq_id: Vec<i32> = b.seq_ids.iter().map(|s| s.len() as i32).collect();
    let mut seq_id: Vec<*mut llama_seq_id> = b.seq_ids.iter_mut().map(|s| s.as_mut_ptr()).collect();
    let view = llama_batch {
        n_tokens: b.tokens.len() as i32,
        token: b.tokens.as_mut_ptr(),
        embd: std::ptr::null_mut(),
        pos: b.pos.as_mut_ptr(),
        n_seq_id: n_seq_id.as_mut_ptr(),
        seq_id: seq_id.as_mut_ptr(),
        logits: b.output.as_mut_ptr(),
    };
    // SAFETY: every array of `view` holds n_tokens entries and lives until the call returns.
    unsafe { llama_decode(ctx, view) }
}

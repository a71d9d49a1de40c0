//! llama_memory_* on the context's KV cache.

use super::boundary::{as_ref, guard, guard_or};
use super::handles::{llama_context, llama_memory_t};
use super::types::{llama_pos, llama_seq_id};
use crate::context::Context;

fn with_mem<R: super::boundary::Fallback>(name: &str, mem: llama_memory_t, f: impl FnOnce(&mut Context) -> Result<R, String>) -> R {
    guard(name, || {
        // SAFETY: llama.h requires a live memory handle from llama_get_memory.
        let c = unsafe { context_of(mem) }?;
        // SAFETY: memory operations change the context: llama.h lets one thread at a time do that.
        f(&mut unsafe { c.owned() }.ctx)
    })
}

/// The context that owns a memory handle.
///
/// # Safety
/// `mem` must be NULL or a live handle from llama_get_memory.
unsafe fn context_of<'a>(mem: llama_memory_t) -> Result<&'a llama_context, String> {
    // SAFETY: guaranteed by the caller; the handle is never written after creation.
    let m = unsafe { as_ref(mem, "mem") }?;
    // SAFETY: m.ctx points to the live context that owns this memory handle.
    unsafe { as_ref(m.ctx, "mem's context") }
}

/// Position range of a sequence, read from the context's published sequence table: callable
/// from any thread while the context decodes (beyond llama.h, which forbids it).
fn seq_range(name: &str, mem: llama_memory_t, seq: llama_seq_id) -> Option<(llama_pos, llama_pos)> {
    guard_or(name, None, || {
        // SAFETY: llama.h requires a live memory handle; only the monitor is read.
        let c = unsafe { context_of(mem) }?;
        if seq < 0 || seq as u32 >= c.monitor.n_seq_max {
            return Err(format!("seq_id {seq} is out of range [0, {})", c.monitor.n_seq_max));
        }
        Ok(Some(c.monitor.seqs.range(seq as usize)))
    })
}

fn check_seq(c: &Context, seq: llama_seq_id) -> Result<usize, String> {
    if seq < 0 || seq as u32 >= c.n_seq_max {
        return Err(format!("seq_id {seq} is out of range [0, {})", c.n_seq_max));
    }
    Ok(seq as usize)
}

#[no_mangle]
pub extern "C" fn llama_memory_clear(mem: llama_memory_t, data: bool) {
    with_mem("llama_memory_clear", mem, |c| {
        c.kv.clear(data);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn llama_memory_seq_rm(mem: llama_memory_t, seq_id: llama_seq_id, p0: llama_pos, p1: llama_pos) -> bool {
    with_mem("llama_memory_seq_rm", mem, |c| {
        if seq_id >= 0 {
            check_seq(c, seq_id)?;
        }
        if !c.kv.seq_rm(seq_id, p0, p1) {
            return Err(format!("deepseek4's compressed caches cannot remove positions [{p0}, {p1}) from inside sequence {seq_id}: only whole sequences, or nothing past the end (as upstream, which returns false too); nothing changed"));
        }
        Ok(true)
    })
}

#[no_mangle]
pub extern "C" fn llama_memory_seq_cp(mem: llama_memory_t, seq_id_src: llama_seq_id, seq_id_dst: llama_seq_id, p0: llama_pos, p1: llama_pos) {
    with_mem("llama_memory_seq_cp", mem, |c| {
        let (s, d) = (check_seq(c, seq_id_src)?, check_seq(c, seq_id_dst)?);
        if !c.kv.seq_cp(s, d, p0, p1) {
            return Err(format!("deepseek4 copies only whole sequences (p0 <= 0, p1 < 0), not [{p0}, {p1}); nothing changed"));
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn llama_memory_seq_keep(mem: llama_memory_t, seq_id: llama_seq_id) {
    with_mem("llama_memory_seq_keep", mem, |c| {
        let s = check_seq(c, seq_id)?;
        c.kv.seq_keep(s);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn llama_memory_seq_add(mem: llama_memory_t, seq_id: llama_seq_id, p0: llama_pos, p1: llama_pos, delta: llama_pos) {
    with_mem("llama_memory_seq_add", mem, |c| {
        let s = check_seq(c, seq_id)?;
        if !c.kv.seq_add(s, p0, p1, delta) {
            return Err("deepseek4's cache cannot shift positions (llama_memory_can_shift is false); nothing changed".into());
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn llama_memory_seq_div(mem: llama_memory_t, seq_id: llama_seq_id, p0: llama_pos, p1: llama_pos, d: i32) {
    with_mem("llama_memory_seq_div", mem, |c| {
        let s = check_seq(c, seq_id)?;
        if d <= 0 {
            return Err(format!("divisor {d} must be positive"));
        }
        if !c.kv.seq_div(s, p0, p1, d) {
            return Err("deepseek4's cache cannot shift positions (llama_memory_can_shift is false); nothing changed".into());
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn llama_memory_seq_pos_min(mem: llama_memory_t, seq_id: llama_seq_id) -> llama_pos {
    seq_range("llama_memory_seq_pos_min", mem, seq_id).map_or(-1, |r| pos_min_of(mem, r))
}

/// deepseek4 reports a sequence's last position as its first (upstream's cache does: its
/// compressed state cannot be rolled back inside the raw window).
fn pos_min_of(mem: llama_memory_t, r: (llama_pos, llama_pos)) -> llama_pos {
    // SAFETY: seq_range succeeded on this handle just before.
    match unsafe { context_of(mem) } {
        Ok(c) if c.monitor.pos_min_is_max => r.1,
        _ => r.0,
    }
}

#[no_mangle]
pub extern "C" fn llama_memory_seq_pos_max(mem: llama_memory_t, seq_id: llama_seq_id) -> llama_pos {
    seq_range("llama_memory_seq_pos_max", mem, seq_id).map_or(-1, |r| r.1)
}

#[no_mangle]
pub extern "C" fn llama_memory_can_shift(mem: llama_memory_t) -> bool {
    with_mem("llama_memory_can_shift", mem, |c| Ok(c.kv.can_shift()))
}

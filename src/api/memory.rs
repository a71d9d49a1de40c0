//! llama_memory_* on the context's KV cache.

use super::boundary::{as_mut, guard};
use super::handles::llama_memory_t;
use super::types::{llama_pos, llama_seq_id};
use crate::context::Context;

fn with_mem<R: super::boundary::Fallback>(name: &str, mem: llama_memory_t, f: impl FnOnce(&mut Context) -> Result<R, String>) -> R {
    guard(name, || {
        // SAFETY: llama.h requires a live memory handle from llama_get_memory.
        let m = unsafe { as_mut(mem, "mem") }?;
        // SAFETY: m.ctx points to the context that owns this memory handle.
        let c = unsafe { as_mut(m.ctx, "mem's context") }?;
        f(&mut c.ctx)
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
        c.kv.seq_rm(seq_id, p0, p1);
        Ok(true)
    })
}

#[no_mangle]
pub extern "C" fn llama_memory_seq_cp(mem: llama_memory_t, seq_id_src: llama_seq_id, seq_id_dst: llama_seq_id, p0: llama_pos, p1: llama_pos) {
    with_mem("llama_memory_seq_cp", mem, |c| {
        let (s, d) = (check_seq(c, seq_id_src)?, check_seq(c, seq_id_dst)?);
        c.kv.seq_cp(s, d, p0, p1);
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
        c.kv.seq_add(s, p0, p1, delta);
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
        c.kv.seq_div(s, p0, p1, d);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn llama_memory_seq_pos_min(mem: llama_memory_t, seq_id: llama_seq_id) -> llama_pos {
    with_mem("llama_memory_seq_pos_min", mem, |c| Ok(c.kv.seq_pos_min(check_seq(c, seq_id)?)))
}

#[no_mangle]
pub extern "C" fn llama_memory_seq_pos_max(mem: llama_memory_t, seq_id: llama_seq_id) -> llama_pos {
    with_mem("llama_memory_seq_pos_max", mem, |c| Ok(c.kv.seq_pos_max(check_seq(c, seq_id)?)))
}

#[no_mangle]
pub extern "C" fn llama_memory_can_shift(mem: llama_memory_t) -> bool {
    with_mem("llama_memory_can_shift", mem, |_| Ok(true))
}

//! How our samplers sit behind llama.h's public `llama_sampler { iface, ctx }`: a built-in
//! sampler's `ctx` is a `Box<Builtin>` and its `iface` is `BUILTIN_IFACE`; a chain's `ctx` is a
//! `Box<ChainState>` behind `CHAIN_IFACE`. Chain members are handles (`Member`), so user-defined
//! samplers chain like ours. The interface tables are immutable statics (no mutable state).

use std::ffi::c_char;
use std::ptr;

use super::boundary::guard;
use super::types::*;
use crate::sampling::chain::Chain;
use crate::sampling::{Candidates, Sampler, TokenData};

pub type Builtin = Box<dyn Sampler + Send>;
pub type ChainState = Chain<Member>;

const _: () = {
    // llama_token_data and the engine's TokenData are the same C struct.
    assert!(std::mem::size_of::<TokenData>() == std::mem::size_of::<llama_token_data>());
    assert!(std::mem::align_of::<TokenData>() == std::mem::align_of::<llama_token_data>());
    assert!(std::mem::offset_of!(TokenData, logit) == std::mem::offset_of!(llama_token_data, logit));
    assert!(std::mem::offset_of!(TokenData, p) == std::mem::offset_of!(llama_token_data, p));
};

/// Runs `f` on a C candidate array viewed as engine `Candidates`, then writes the view back
/// (pointer, size, selected, sorted) as upstream samplers leave it.
///
/// # Safety
/// `arr.data` must point to `arr.size` writable entries (or size 0).
pub unsafe fn with_candidates(arr: &mut llama_token_data_array, f: impl FnOnce(&mut Candidates<'_>)) {
    let base = arr.data as *mut TokenData;
    let data: &mut [TokenData] = if arr.size == 0 || base.is_null() {
        &mut []
    } else {
        // SAFETY: the caller guarantees size writable entries at data.
        unsafe { std::slice::from_raw_parts_mut(base, arr.size) }
    };
    let mut cur = Candidates { data, selected: arr.selected, sorted: arr.sorted };
    f(&mut cur);
    if !base.is_null() {
        // SAFETY: samplers only narrow the slice, so its start lies within the original array.
        let offset = unsafe { (cur.data.as_ptr()).offset_from(base) }.max(0) as usize;
        // SAFETY: offset <= original size, see above.
        arr.data = unsafe { base.add(offset) } as *mut llama_token_data;
    }
    arr.size = cur.len();
    arr.selected = cur.selected;
    arr.sorted = cur.sorted;
}

/// A chain entry: a sampler handle the chain owns (freed with the chain).
pub struct Member(pub *mut llama_sampler);

// SAFETY: a sampler is used by one thread at a time (llama.h's contract); moving the handle to
// another thread with its chain is what upstream allows too.
unsafe impl Send for Member {}

impl Drop for Member {
    fn drop(&mut self) {
        free_handle(self.0);
    }
}

impl Sampler for Member {
    fn name(&self) -> &'static std::ffi::CStr {
        c"(member)"
    }
    fn accept(&mut self, token: i32) {
        accept_handle(self.0, token);
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        let orig = std::mem::take(&mut cur.data);
        let base = orig.as_mut_ptr();
        let len = orig.len();
        let mut arr = llama_token_data_array { data: base as *mut llama_token_data, size: len, selected: cur.selected, sorted: cur.sorted };
        apply_handle(self.0, &mut arr);
        // A foreign sampler may move the pointer or size anywhere; accept only a sub-range.
        // SAFETY: pointer arithmetic on the same allocation is checked right after.
        let offset = unsafe { (arr.data as *const TokenData).offset_from(base) };
        assert!(offset >= 0 && offset as usize + arr.size <= len, "sampler {:?} left its candidate array outside the original buffer", name_of(self.0));
        cur.data = &mut orig[offset as usize..offset as usize + arr.size];
        cur.selected = arr.selected;
        cur.sorted = arr.sorted;
    }
    fn reset(&mut self) {
        reset_handle(self.0);
    }
    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        Box::new(Member(clone_handle(self.0)))
    }
    fn seed(&self) -> Option<u32> {
        let s = seed_of(self.0);
        (s != LLAMA_DEFAULT_SEED).then_some(s)
    }
}

pub fn new_handle(iface: *const llama_sampler_i, ctx: llama_sampler_context_t) -> *mut llama_sampler {
    Box::into_raw(Box::new(llama_sampler { iface: iface as *mut llama_sampler_i, ctx }))
}

pub fn new_builtin(s: impl Sampler + Send + 'static) -> *mut llama_sampler {
    new_builtin_boxed(Box::new(s))
}

/// As [`new_builtin`] for a sampler already boxed (`crate::sampling::init`'s).
pub fn new_builtin_boxed(s: Builtin) -> *mut llama_sampler {
    let ctx: Box<Builtin> = Box::new(s);
    crate::sys::stats::SAMPLERS.add(1);
    new_handle(&BUILTIN_IFACE, Box::into_raw(ctx).cast())
}

pub fn new_chain(no_perf: bool) -> *mut llama_sampler {
    let ctx: Box<ChainState> = Box::new(Chain::new(no_perf));
    crate::sys::stats::SAMPLERS.add(1);
    new_handle(&CHAIN_IFACE, Box::into_raw(ctx).cast())
}

fn iface_of(h: *const llama_sampler) -> Option<&'static llama_sampler_i> {
    // SAFETY: h is a live sampler (callers checked NULL); its iface lives as long as it.
    unsafe { h.as_ref().and_then(|s| s.iface.as_ref()) }
}

pub fn is_chain(h: *const llama_sampler) -> bool {
    // SAFETY: h is NULL or a live sampler.
    unsafe { h.as_ref() }.is_some_and(|s| ptr::eq(s.iface, &CHAIN_IFACE))
}

fn is_builtin(h: *const llama_sampler) -> bool {
    // SAFETY: h is NULL or a live sampler.
    unsafe { h.as_ref() }.is_some_and(|s| ptr::eq(s.iface, &BUILTIN_IFACE))
}

/// The chain state of a chain handle.
///
/// # Safety
/// `h` must be a live chain handle not borrowed elsewhere.
pub unsafe fn chain_mut<'a>(h: *mut llama_sampler) -> Result<&'a mut ChainState, String> {
    if !is_chain(h) {
        return Err("the sampler is not a chain (llama_sampler_chain_init)".into());
    }
    // SAFETY: a chain handle's ctx is a live Box<ChainState> (new_chain).
    Ok(unsafe { &mut *((*h).ctx as *mut ChainState) })
}

/// # Safety
/// `h` must be a live built-in handle not borrowed elsewhere.
unsafe fn builtin_mut<'a>(h: *mut llama_sampler) -> &'a mut Builtin {
    // SAFETY: a built-in handle's ctx is a live Box<Builtin> (new_builtin).
    unsafe { &mut *((*h).ctx as *mut Builtin) }
}

pub fn name_of(h: *const llama_sampler) -> *const c_char {
    match iface_of(h).and_then(|i| i.name) {
        // SAFETY: the sampler's own name function on the sampler.
        Some(f) => unsafe { f(h) },
        None => c"(null)".as_ptr(),
    }
}

pub fn accept_handle(h: *mut llama_sampler, token: llama_token) {
    if let Some(f) = iface_of(h).and_then(|i| i.accept) {
        // SAFETY: the sampler's own accept function on the sampler.
        unsafe { f(h, token) }
    }
}

pub fn apply_handle(h: *mut llama_sampler, arr: &mut llama_token_data_array) {
    let f = iface_of(h).and_then(|i| i.apply).expect("the sampler has no apply function");
    // SAFETY: the sampler's own apply function on a candidate array we own.
    unsafe { f(h, arr) }
}

pub fn reset_handle(h: *mut llama_sampler) {
    if let Some(f) = iface_of(h).and_then(|i| i.reset) {
        // SAFETY: the sampler's own reset function on the sampler.
        unsafe { f(h) }
    }
}

/// llama_sampler_clone: the interface's clone, or a copy of a context-less sampler.
pub fn clone_handle(h: *const llama_sampler) -> *mut llama_sampler {
    let iface = iface_of(h).expect("sampler without interface");
    if let Some(f) = iface.clone {
        // SAFETY: the sampler's own clone function on the sampler.
        let c = unsafe { f(h) };
        assert!(!c.is_null(), "the sampler's clone returned NULL");
        return c;
    }
    // SAFETY: h is live (iface_of succeeded).
    if unsafe { (*h).ctx }.is_null() {
        return new_handle(iface, ptr::null_mut());
    }
    panic!("the sampler does not support cloning")
}

/// llama_sampler_free: the interface's free for the state, then the handle itself.
pub fn free_handle(h: *mut llama_sampler) {
    if h.is_null() {
        return;
    }
    if let Some(f) = iface_of(h).and_then(|i| i.free) {
        // SAFETY: the sampler's own free function, called once, before the handle goes.
        unsafe { f(h) }
    }
    // SAFETY: every handle is a Box from new_handle or upstream-compatible llama_sampler_init.
    drop(unsafe { Box::from_raw(h) });
}

/// llama_sampler_get_seed.
pub fn seed_of(h: *const llama_sampler) -> u32 {
    if is_builtin(h) {
        // SAFETY: built-in handle, read-only use.
        return unsafe { builtin_mut(h as *mut _) }.seed().unwrap_or(LLAMA_DEFAULT_SEED);
    }
    if is_chain(h) {
        // SAFETY: chain handle, read-only use.
        let chain = unsafe { &*((*h).ctx as *const ChainState) };
        return chain.members.iter().rev().map(|m| seed_of(m.0)).find(|&s| s != LLAMA_DEFAULT_SEED).unwrap_or(LLAMA_DEFAULT_SEED);
    }
    LLAMA_DEFAULT_SEED
}

// --- the interface functions of built-in samplers ---

unsafe extern "C" fn builtin_name(h: *const llama_sampler) -> *const c_char {
    // SAFETY: called through BUILTIN_IFACE, so h is a live built-in handle.
    guard("llama_sampler_name", || Ok(unsafe { builtin_mut(h as *mut _) }.name().as_ptr()))
}
unsafe extern "C" fn builtin_accept(h: *mut llama_sampler, token: llama_token) {
    // SAFETY: called through BUILTIN_IFACE, so h is a live built-in handle.
    guard("llama_sampler_accept", || Ok(unsafe { builtin_mut(h) }.accept(token)))
}
unsafe extern "C" fn builtin_apply(h: *mut llama_sampler, cur_p: *mut llama_token_data_array) {
    guard("llama_sampler_apply", || {
        // SAFETY: the caller's candidate array (NULL is caught).
        let arr = unsafe { super::boundary::as_mut(cur_p, "cur_p") }?;
        // SAFETY: called through BUILTIN_IFACE; arr holds size entries (llama.h's contract).
        unsafe { with_candidates(arr, |cur| builtin_mut(h).apply(cur)) };
        Ok(())
    })
}
unsafe extern "C" fn builtin_reset(h: *mut llama_sampler) {
    // SAFETY: called through BUILTIN_IFACE, so h is a live built-in handle.
    guard("llama_sampler_reset", || Ok(unsafe { builtin_mut(h) }.reset()))
}
unsafe extern "C" fn builtin_clone(h: *const llama_sampler) -> *mut llama_sampler {
    guard("llama_sampler_clone", || {
        // SAFETY: called through BUILTIN_IFACE, so h is a live built-in handle.
        let copy = unsafe { builtin_mut(h as *mut _) }.clone_box();
        crate::sys::stats::SAMPLERS.add(1);
        Ok(new_handle(&BUILTIN_IFACE, Box::into_raw(Box::new(copy)).cast()))
    })
}
unsafe extern "C" fn builtin_free(h: *mut llama_sampler) {
    guard("llama_sampler_free", || {
        // SAFETY: called once through BUILTIN_IFACE; ctx is the Box from new_builtin.
        unsafe {
            if !(*h).ctx.is_null() {
                drop(Box::from_raw((*h).ctx as *mut Builtin));
                (*h).ctx = ptr::null_mut();
                crate::sys::stats::SAMPLERS.add(-1);
            }
        }
        Ok(())
    })
}

pub static BUILTIN_IFACE: llama_sampler_i = llama_sampler_i {
    name: Some(builtin_name),
    accept: Some(builtin_accept),
    apply: Some(builtin_apply),
    reset: Some(builtin_reset),
    clone: Some(builtin_clone),
    free: Some(builtin_free),
    backend_init: None,
    backend_accept: None,
    backend_apply: None,
    backend_set_input: None,
    backend_reset: None,
    copy_state: None,
};

// --- the interface functions of chains ---

unsafe extern "C" fn chain_name(_h: *const llama_sampler) -> *const c_char {
    c"chain".as_ptr()
}
unsafe extern "C" fn chain_accept(h: *mut llama_sampler, token: llama_token) {
    // SAFETY: called through CHAIN_IFACE, so h is a live chain handle.
    guard("llama_sampler_accept", || Ok(unsafe { chain_mut(h) }?.accept(token)))
}
unsafe extern "C" fn chain_apply(h: *mut llama_sampler, cur_p: *mut llama_token_data_array) {
    guard("llama_sampler_apply", || {
        // SAFETY: the caller's candidate array (NULL is caught).
        let arr = unsafe { super::boundary::as_mut(cur_p, "cur_p") }?;
        // SAFETY: called through CHAIN_IFACE, so h is a live chain handle.
        let chain = unsafe { chain_mut(h) }?;
        if let Some(why) = &chain.broken {
            // No member runs and no token is selected: llama_sampler_sample fails too.
            arr.selected = -1;
            return Err(format!("the chain cannot sample: {why}"));
        }
        // SAFETY: arr holds size entries (llama.h's contract).
        unsafe { with_candidates(arr, |cur| chain.apply(cur)) };
        Ok(())
    })
}
unsafe extern "C" fn chain_reset(h: *mut llama_sampler) {
    // SAFETY: called through CHAIN_IFACE, so h is a live chain handle.
    guard("llama_sampler_reset", || Ok(unsafe { chain_mut(h) }?.reset()))
}
unsafe extern "C" fn chain_clone(h: *const llama_sampler) -> *mut llama_sampler {
    guard("llama_sampler_clone", || {
        // SAFETY: called through CHAIN_IFACE, so h is a live chain handle.
        let src = unsafe { chain_mut(h as *mut _) }?;
        let copy = new_chain(src.no_perf);
        // SAFETY: copy was just made by new_chain.
        let dst = unsafe { chain_mut(copy) }?;
        dst.broken = src.broken.clone();
        for m in &src.members {
            dst.members.push(Member(clone_handle(m.0)));
        }
        Ok(copy)
    })
}
unsafe extern "C" fn chain_free(h: *mut llama_sampler) {
    guard("llama_sampler_free", || {
        // SAFETY: called once through CHAIN_IFACE; ctx is the Box from new_chain (members
        // free their handles when dropped).
        unsafe {
            if !(*h).ctx.is_null() {
                drop(Box::from_raw((*h).ctx as *mut ChainState));
                (*h).ctx = ptr::null_mut();
                crate::sys::stats::SAMPLERS.add(-1);
            }
        }
        Ok(())
    })
}

pub static CHAIN_IFACE: llama_sampler_i = llama_sampler_i {
    name: Some(chain_name),
    accept: Some(chain_accept),
    apply: Some(chain_apply),
    reset: Some(chain_reset),
    clone: Some(chain_clone),
    free: Some(chain_free),
    backend_init: None,
    backend_accept: None,
    backend_apply: None,
    backend_set_input: None,
    backend_reset: None,
    copy_state: None,
};

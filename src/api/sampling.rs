//! llama.h's sampler API: the interface functions, chains, every built-in sampler's init and
//! llama_sampler_sample. Samplers themselves live in `crate::sampling`; the handle glue in
//! `sampler_iface`.

use std::ffi::c_char;
use std::sync::Arc;

use super::boundary::{as_mut, as_ref, as_slice, guard, guard_or};
use super::handles::{llama_context, llama_vocab};
use super::sampler_iface::{self as iface, Member};
use super::types::*;
use crate::sampling::chain::fill_candidates;
use crate::sampling::dry::Dry;
use crate::sampling::grammar::sampler::GrammarSampler;
use crate::sampling::init;
use crate::sampling::Noop;

pub(crate) fn noop(name: &'static std::ffi::CStr) -> *mut llama_sampler {
    iface::new_builtin(Noop { name })
}

// --- the interface ---

#[no_mangle]
pub extern "C" fn llama_sampler_init(iface: *mut llama_sampler_i, ctx: llama_sampler_context_t) -> *mut llama_sampler {
    guard("llama_sampler_init", || if iface.is_null() { Err("iface is NULL".into()) } else { Ok(iface::new_handle(iface, ctx)) })
}

#[no_mangle]
pub extern "C" fn llama_sampler_name(smpl: *const llama_sampler) -> *const c_char {
    guard("llama_sampler_name", || if smpl.is_null() { Err("smpl is NULL".into()) } else { Ok(iface::name_of(smpl)) })
}

#[no_mangle]
pub extern "C" fn llama_sampler_accept(smpl: *mut llama_sampler, token: llama_token) {
    guard("llama_sampler_accept", || Ok(if !smpl.is_null() { iface::accept_handle(smpl, token) }))
}

#[no_mangle]
pub extern "C" fn llama_sampler_apply(smpl: *mut llama_sampler, cur_p: *mut llama_token_data_array) {
    guard("llama_sampler_apply", || {
        // SAFETY: the caller's candidate array (NULL is caught).
        let arr = unsafe { as_mut(cur_p, "cur_p") }?;
        if !smpl.is_null() {
            iface::apply_handle(smpl, arr);
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn llama_sampler_reset(smpl: *mut llama_sampler) {
    guard("llama_sampler_reset", || Ok(if !smpl.is_null() { iface::reset_handle(smpl) }))
}

#[no_mangle]
pub extern "C" fn llama_sampler_clone(smpl: *const llama_sampler) -> *mut llama_sampler {
    guard("llama_sampler_clone", || if smpl.is_null() { Ok(std::ptr::null_mut()) } else { Ok(iface::clone_handle(smpl)) })
}

/// Copies `src`'s configuration and state into `dst` (same sampler type), keeping `dst`'s handle.
#[no_mangle]
pub extern "C" fn llama_sampler_copy(src: *const llama_sampler, dst: *mut llama_sampler) {
    guard("llama_sampler_copy", || {
        if src.is_null() || dst.is_null() || std::ptr::eq(src, dst) {
            return Ok(());
        }
        // SAFETY: both are live sampler handles (llama.h's contract).
        let (s, d) = unsafe { (&*src, &mut *dst) };
        if !std::ptr::eq(s.iface, d.iface) {
            return Err("cannot copy between different sampler types".into());
        }
        // SAFETY: iface checked equal and non-NULL handles.
        if let Some(copy_state) = unsafe { d.iface.as_ref() }.and_then(|i| i.copy_state) {
            // SAFETY: the sampler's own copy_state on two samplers of its type.
            unsafe { copy_state(src, dst) };
            return Ok(());
        }
        let tmp = iface::clone_handle(src);
        // SAFETY: as above; free releases dst's state only, the handle stays.
        if let Some(free) = unsafe { d.iface.as_ref() }.and_then(|i| i.free) {
            // SAFETY: the sampler's own free on its state, once.
            unsafe { free(dst) };
        }
        // SAFETY: tmp is a fresh handle from clone; its state moves to dst, the shell is freed.
        unsafe {
            d.ctx = (*tmp).ctx;
            drop(Box::from_raw(tmp));
        }
        Ok(())
    })
}

/// # Safety
/// `smpl` must be NULL or a sampler not owned by a chain, not freed before.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_free(smpl: *mut llama_sampler) {
    guard("llama_sampler_free", || Ok(iface::free_handle(smpl)))
}

#[no_mangle]
pub extern "C" fn llama_sampler_get_seed(smpl: *const llama_sampler) -> u32 {
    guard_or("llama_sampler_get_seed", LLAMA_DEFAULT_SEED, || if smpl.is_null() { Err("smpl is NULL".into()) } else { Ok(iface::seed_of(smpl)) })
}

/// Samples from output `idx` of the last decode, accepts the token and returns it.
#[no_mangle]
pub extern "C" fn llama_sampler_sample(smpl: *mut llama_sampler, ctx: *mut llama_context, idx: i32) -> llama_token {
    guard_or("llama_sampler_sample", LLAMA_TOKEN_NULL, || {
        if smpl.is_null() {
            return Err("smpl is NULL".into());
        }
        // SAFETY: live context handle (NULL is caught), used by this thread only.
        let c = unsafe { as_ref(ctx, "ctx")?.owned() };
        let logits = c.ctx.logits_row(idx).map_err(|e| format!("invalid logits id {idx}, reason: {e}"))?;
        // A chain keeps its candidate buffer; other samplers get a temporary one.
        // SAFETY: smpl is a live handle; chain_mut checks it is a chain.
        let mut buf = match unsafe { iface::chain_mut(smpl) } {
            Ok(chain) => std::mem::take(&mut chain.candidates),
            Err(_) => Vec::new(),
        };
        fill_candidates(&mut buf, logits);
        let mut arr = llama_token_data_array { data: buf.as_mut_ptr() as *mut llama_token_data, size: buf.len(), selected: -1, sorted: false };
        iface::apply_handle(smpl, &mut arr);
        let chosen = (arr.selected >= 0 && (arr.selected as usize) < arr.size).then(|| {
            // SAFETY: selected < size entries of the array the samplers left inside buf.
            unsafe { (*arr.data.add(arr.selected as usize)).id }
        });
        // SAFETY: as above.
        if let Ok(chain) = unsafe { iface::chain_mut(smpl) } {
            chain.candidates = buf;
        }
        let token = chosen.ok_or_else(|| format!("no token selected (selected = {}, size = {}); end the chain with greedy, dist or mirostat", arr.selected, arr.size))?;
        iface::accept_handle(smpl, token);
        Ok(token)
    })
}

// --- chains ---

#[no_mangle]
pub extern "C" fn llama_sampler_chain_default_params() -> llama_sampler_chain_params {
    llama_sampler_chain_params { no_perf: true }
}

#[no_mangle]
pub extern "C" fn llama_sampler_chain_init(params: llama_sampler_chain_params) -> *mut llama_sampler {
    guard("llama_sampler_chain_init", || Ok(iface::new_chain(params.no_perf)))
}

/// Takes ownership of `smpl`: the chain frees it.
#[no_mangle]
pub extern "C" fn llama_sampler_chain_add(chain: *mut llama_sampler, smpl: *mut llama_sampler) {
    guard("llama_sampler_chain_add", || {
        // SAFETY: chain is a live handle; chain_mut checks its type.
        let c = unsafe { iface::chain_mut(chain) }?;
        if smpl.is_null() {
            // Upstream would crash later; a chain that silently lacks a member (e.g. a grammar
            // whose init failed) would sample unconstrained text. The chain refuses to sample.
            let why = format!("member {} was added as NULL (its init failed)", c.members.len());
            c.broken.get_or_insert(why.clone());
            return Err(format!("smpl is NULL: the chain will not sample ({why})"));
        }
        c.members.push(Member(smpl));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn llama_sampler_chain_get(chain: *mut llama_sampler, i: i32) -> *mut llama_sampler {
    guard_or("llama_sampler_chain_get", std::ptr::null_mut(), || {
        if !iface::is_chain(chain) {
            return Ok(std::ptr::null_mut());
        }
        if i == -1 {
            return Ok(chain);
        }
        // SAFETY: checked to be a live chain.
        let c = unsafe { iface::chain_mut(chain) }?;
        Ok(usize::try_from(i).ok().and_then(|i| c.members.get(i)).map_or(std::ptr::null_mut(), |m| m.0))
    })
}

#[no_mangle]
pub extern "C" fn llama_sampler_chain_n(chain: *const llama_sampler) -> i32 {
    // SAFETY: chain is a live handle; chain_mut checks its type (read-only use).
    guard("llama_sampler_chain_n", || Ok(unsafe { iface::chain_mut(chain as *mut _) }?.members.len() as i32))
}

/// Removes member `i` and hands its ownership back to the caller.
#[no_mangle]
pub extern "C" fn llama_sampler_chain_remove(chain: *mut llama_sampler, i: i32) -> *mut llama_sampler {
    guard("llama_sampler_chain_remove", || {
        // SAFETY: chain is a live handle; chain_mut checks its type.
        let c = unsafe { iface::chain_mut(chain) }?;
        match usize::try_from(i).ok().filter(|&i| i < c.members.len()) {
            None => Ok(std::ptr::null_mut()),
            Some(i) => {
                let m = c.members.remove(i);
                let h = m.0;
                std::mem::forget(m);
                Ok(h)
            }
        }
    })
}

// --- the samplers ---

#[no_mangle]
pub extern "C" fn llama_sampler_init_greedy() -> *mut llama_sampler {
    guard("llama_sampler_init_greedy", || Ok(iface::new_builtin_boxed(init::greedy())))
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_dist(seed: u32) -> *mut llama_sampler {
    guard("llama_sampler_init_dist", || Ok(iface::new_builtin_boxed(init::dist(seed))))
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_top_k(k: i32) -> *mut llama_sampler {
    guard("llama_sampler_init_top_k", || Ok(iface::new_builtin_boxed(init::top_k(k))))
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_top_p(p: f32, min_keep: usize) -> *mut llama_sampler {
    guard("llama_sampler_init_top_p", || Ok(iface::new_builtin_boxed(init::top_p(p, min_keep))))
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_min_p(p: f32, min_keep: usize) -> *mut llama_sampler {
    guard("llama_sampler_init_min_p", || Ok(iface::new_builtin_boxed(init::min_p(p, min_keep))))
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_typical(p: f32, min_keep: usize) -> *mut llama_sampler {
    guard("llama_sampler_init_typical", || Ok(iface::new_builtin_boxed(init::typical(p, min_keep))))
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_temp(t: f32) -> *mut llama_sampler {
    guard("llama_sampler_init_temp", || Ok(iface::new_builtin_boxed(init::temp(t))))
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_temp_ext(t: f32, delta: f32, exponent: f32) -> *mut llama_sampler {
    guard("llama_sampler_init_temp_ext", || Ok(iface::new_builtin_boxed(init::temp_ext(t, delta, exponent))))
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_xtc(p: f32, t: f32, min_keep: usize, seed: u32) -> *mut llama_sampler {
    guard("llama_sampler_init_xtc", || Ok(iface::new_builtin_boxed(init::xtc(p, t, min_keep, seed))))
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_top_n_sigma(n: f32) -> *mut llama_sampler {
    guard("llama_sampler_init_top_n_sigma", || Ok(iface::new_builtin_boxed(init::top_n_sigma(n))))
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_mirostat(n_vocab: i32, seed: u32, tau: f32, eta: f32, m: i32) -> *mut llama_sampler {
    guard("llama_sampler_init_mirostat", || Ok(iface::new_builtin_boxed(init::mirostat(n_vocab, seed, tau, eta, m))))
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_mirostat_v2(seed: u32, tau: f32, eta: f32) -> *mut llama_sampler {
    guard("llama_sampler_init_mirostat_v2", || Ok(iface::new_builtin_boxed(init::mirostat_v2(seed, tau, eta))))
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_penalties(n_vocab: i32, penalty_last_n: i32, penalty_repeat: f32, penalty_freq: f32, penalty_present: f32) -> *mut llama_sampler {
    let _ = n_vocab;
    guard("llama_sampler_init_penalties", || Ok(iface::new_builtin_boxed(init::penalties(penalty_last_n, penalty_repeat, penalty_freq, penalty_present))))
}

/// # Safety
/// `seq_breakers` must hold `num_breakers` pointers, each NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_dry(
    vocab: *const llama_vocab,
    dry_multiplier: f32,
    dry_base: f32,
    dry_allowed_length: i32,
    dry_penalty_last_n: i32,
    seq_breakers: *mut *const c_char,
    num_breakers: usize,
) -> *mut llama_sampler {
    guard("llama_sampler_init_dry", || {
        if !Dry::is_enabled(dry_multiplier, dry_base, dry_penalty_last_n.max(0)) {
            return Ok(noop(c"?dry"));
        }
        // SAFETY: live vocab handle (NULL is caught).
        let v = unsafe { as_ref(vocab, "vocab") }?;
        // SAFETY: num_breakers readable pointers (caller).
        let ptrs = unsafe { as_slice(seq_breakers as *const *const c_char, num_breakers, "seq_breakers") }?;
        let mut breakers: Vec<&[u8]> = Vec::with_capacity(ptrs.len());
        for (i, &p) in ptrs.iter().enumerate() {
            if p.is_null() {
                crate::log_warn!("llama_sampler_init_dry: skipping NULL sequence breaker at index {i}");
                continue;
            }
            // SAFETY: a NUL-terminated string (caller).
            breakers.push(unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes());
        }
        Ok(iface::new_builtin_boxed(init::dry(v.vocab(), dry_multiplier, dry_base, dry_allowed_length, dry_penalty_last_n, &breakers)))
    })
}

/// # Safety
/// `logit_bias` must hold `n_logit_bias` entries.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_logit_bias(n_vocab: i32, n_logit_bias: i32, logit_bias: *const llama_logit_bias) -> *mut llama_sampler {
    let _ = n_vocab;
    guard("llama_sampler_init_logit_bias", || {
        if n_logit_bias <= 0 {
            return Ok(noop(c"?logit-bias"));
        }
        // SAFETY: n_logit_bias readable entries (caller).
        let biases = unsafe { as_slice(logit_bias, n_logit_bias as usize, "logit_bias") }?;
        Ok(iface::new_builtin_boxed(init::logit_bias(biases.iter().map(|b| (b.token, b.bias)).collect())))
    })
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_infill(vocab: *const llama_vocab) -> *mut llama_sampler {
    guard("llama_sampler_init_infill", || {
        // SAFETY: live vocab handle (NULL is caught).
        let v = unsafe { as_ref(vocab, "vocab") }?;
        Ok(iface::new_builtin_boxed(init::infill(&v.model)))
    })
}

fn not_supported(name: &str) -> *mut llama_sampler {
    super::boundary::unsupported(name, "this sampler is not implemented yet")
}

/// The C strings of an array of `n` pointers (NULL entries are an error).
///
/// # Safety
/// `p` must be NULL (with n = 0) or hold `n` pointers, each NULL or a NUL-terminated string.
unsafe fn c_strings<'a>(p: *const *const c_char, n: usize, what: &str) -> Result<Vec<&'a [u8]>, String> {
    // SAFETY: n readable pointers (caller).
    let ptrs = unsafe { as_slice(p, n, what) }?;
    ptrs.iter()
        .enumerate()
        .map(|(i, &s)| {
            if s.is_null() {
                return Err(format!("{what}[{i}] is NULL"));
            }
            // SAFETY: a NUL-terminated string (caller).
            Ok(unsafe { std::ffi::CStr::from_ptr(s) }.to_bytes())
        })
        .collect()
}

/// The shared body of the three grammar inits.
///
/// # Safety
/// As the inits: C strings or NULL, arrays of the given lengths.
#[allow(clippy::too_many_arguments)]
unsafe fn init_grammar(
    vocab: *const llama_vocab,
    grammar_str: *const c_char,
    grammar_root: *const c_char,
    lazy: bool,
    words: (*const *const c_char, usize),
    patterns: (*const *const c_char, usize),
    tokens: (*const llama_token, usize),
) -> Result<*mut llama_sampler, String> {
    // SAFETY: live vocab handle (NULL is caught).
    let v = unsafe { as_ref(vocab, "vocab") }?;
    let src = if grammar_str.is_null() {
        None
    } else {
        // SAFETY: a NUL-terminated string (caller).
        Some(unsafe { std::ffi::CStr::from_ptr(grammar_str) }.to_bytes())
    };
    let root: &[u8] = match src {
        Some(s) if !s.is_empty() => {
            if grammar_root.is_null() {
                return Err("grammar_root is NULL".into());
            }
            // SAFETY: a NUL-terminated string (caller).
            unsafe { std::ffi::CStr::from_ptr(grammar_root) }.to_bytes()
        }
        _ => b"",
    };
    // SAFETY: arrays of the given lengths (caller).
    let (words, patterns, tokens) = unsafe {
        (c_strings(words.0, words.1, "trigger_words")?, c_strings(patterns.0, patterns.1, "trigger_patterns")?, as_slice(tokens.0, tokens.1, "trigger_tokens")?)
    };
    let s = GrammarSampler::new(Arc::clone(&v.model), src, root, lazy, &words, &patterns, tokens)?;
    Ok(iface::new_builtin(s))
}

/// # Safety
/// `grammar_str` and `grammar_root` must be NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_grammar(vocab: *const llama_vocab, grammar_str: *const c_char, grammar_root: *const c_char) -> *mut llama_sampler {
    guard("llama_sampler_init_grammar", || {
        // SAFETY: the caller's strings (see above).
        unsafe { init_grammar(vocab, grammar_str, grammar_root, false, (std::ptr::null(), 0), (std::ptr::null(), 0), (std::ptr::null(), 0)) }
    })
}

/// # Safety
/// Strings NULL or NUL-terminated; `trigger_words` holds `num_trigger_words` strings and
/// `trigger_tokens` `num_trigger_tokens` ids.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_grammar_lazy(
    vocab: *const llama_vocab,
    grammar_str: *const c_char,
    grammar_root: *const c_char,
    trigger_words: *mut *const c_char,
    num_trigger_words: usize,
    trigger_tokens: *const llama_token,
    num_trigger_tokens: usize,
) -> *mut llama_sampler {
    guard("llama_sampler_init_grammar_lazy", || {
        // SAFETY: the caller's strings and arrays (see above).
        unsafe { init_grammar(vocab, grammar_str, grammar_root, true, (trigger_words as *const _, num_trigger_words), (std::ptr::null(), 0), (trigger_tokens, num_trigger_tokens)) }
    })
}

/// # Safety
/// Strings NULL or NUL-terminated; `trigger_patterns` holds `num_trigger_patterns` strings and
/// `trigger_tokens` `num_trigger_tokens` ids.
#[no_mangle]
pub unsafe extern "C" fn llama_sampler_init_grammar_lazy_patterns(
    vocab: *const llama_vocab,
    grammar_str: *const c_char,
    grammar_root: *const c_char,
    trigger_patterns: *mut *const c_char,
    num_trigger_patterns: usize,
    trigger_tokens: *const llama_token,
    num_trigger_tokens: usize,
) -> *mut llama_sampler {
    guard("llama_sampler_init_grammar_lazy_patterns", || {
        // SAFETY: the caller's strings and arrays (see above).
        unsafe { init_grammar(vocab, grammar_str, grammar_root, true, (std::ptr::null(), 0), (trigger_patterns as *const _, num_trigger_patterns), (trigger_tokens, num_trigger_tokens)) }
    })
}

#[no_mangle]
pub extern "C" fn llama_sampler_init_adaptive_p(target: f32, decay: f32, seed: u32) -> *mut llama_sampler {
    let _ = (target, decay, seed);
    not_supported("llama_sampler_init_adaptive_p")
}

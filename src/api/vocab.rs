//! llama_vocab_*, llama_tokenize, llama_token_to_piece, llama_detokenize (and the deprecated
//! llama_token_* aliases) over the model's tokenizer, with upstream's buffer contracts.

use std::ffi::c_char;

use super::boundary::{as_ref, as_slice, guard, guard_or};
use super::handles::llama_vocab;
use super::types::{llama_token, llama_vocab_type};
use crate::tokenizer::Vocab;

fn with_vocab<R: super::boundary::Fallback>(name: &str, vocab: *const llama_vocab, f: impl FnOnce(&llama_vocab) -> Result<R, String>) -> R {
    guard(name, || {
        // SAFETY: llama.h requires a live vocab handle from llama_model_get_vocab (NULL is caught).
        f(unsafe { as_ref(vocab, "vocab") }?)
    })
}

fn check_id(v: &Vocab, id: llama_token) -> Result<(), String> {
    if id < 0 || id as usize >= v.n_tokens() {
        return Err(format!("token id {id} out of range [0, {})", v.n_tokens()));
    }
    Ok(())
}

#[no_mangle]
pub extern "C" fn llama_vocab_type(vocab: *const llama_vocab) -> llama_vocab_type {
    guard_or("llama_vocab_type", llama_vocab_type::LLAMA_VOCAB_TYPE_NONE, || {
        // SAFETY: live vocab handle (NULL is caught).
        let v = unsafe { as_ref(vocab, "vocab") }?.vocab();
        Ok(match v.vocab_type() {
            1 => llama_vocab_type::LLAMA_VOCAB_TYPE_SPM,
            2 => llama_vocab_type::LLAMA_VOCAB_TYPE_BPE,
            _ => llama_vocab_type::LLAMA_VOCAB_TYPE_NONE,
        })
    })
}

#[no_mangle]
pub extern "C" fn llama_vocab_n_tokens(vocab: *const llama_vocab) -> i32 {
    with_vocab("llama_vocab_n_tokens", vocab, |v| Ok(v.vocab().n_tokens() as i32))
}

#[no_mangle]
pub extern "C" fn llama_vocab_get_text(vocab: *const llama_vocab, token: llama_token) -> *const c_char {
    with_vocab("llama_vocab_get_text", vocab, |v| {
        check_id(v.vocab(), token)?;
        Ok(v.texts[token as usize].as_ptr())
    })
}

#[no_mangle]
pub extern "C" fn llama_vocab_get_score(vocab: *const llama_vocab, token: llama_token) -> f32 {
    with_vocab("llama_vocab_get_score", vocab, |v| {
        check_id(v.vocab(), token)?;
        Ok(v.vocab().token_score(token))
    })
}

/// Returns `enum llama_token_attr` bits (declared as uint32_t: a bit set is not one enumerator).
#[no_mangle]
pub extern "C" fn llama_vocab_get_attr(vocab: *const llama_vocab, token: llama_token) -> u32 {
    with_vocab("llama_vocab_get_attr", vocab, |v| {
        check_id(v.vocab(), token)?;
        Ok(v.vocab().token_attr(token))
    })
}

#[no_mangle]
pub extern "C" fn llama_vocab_is_eog(vocab: *const llama_vocab, token: llama_token) -> bool {
    with_vocab("llama_vocab_is_eog", vocab, |v| Ok(v.vocab().is_eog(token)))
}

#[no_mangle]
pub extern "C" fn llama_vocab_is_control(vocab: *const llama_vocab, token: llama_token) -> bool {
    with_vocab("llama_vocab_is_control", vocab, |v| Ok(v.vocab().is_control(token)))
}

macro_rules! special_ids {
    ($($name:ident, $alias:ident => $method:ident;)*) => {$(
        #[no_mangle]
        pub extern "C" fn $name(vocab: *const llama_vocab) -> llama_token {
            with_vocab(stringify!($name), vocab, |v| Ok(v.vocab().$method()))
        }
        #[no_mangle]
        pub extern "C" fn $alias(vocab: *const llama_vocab) -> llama_token {
            $name(vocab)
        }
    )*};
}

special_ids! {
    llama_vocab_bos, llama_token_bos => bos;
    llama_vocab_eos, llama_token_eos => eos;
    llama_vocab_eot, llama_token_eot => eot;
    llama_vocab_sep, llama_token_sep => sep;
    llama_vocab_nl, llama_token_nl => nl;
    llama_vocab_pad, llama_token_pad => pad;
    llama_vocab_fim_pre, llama_token_fim_pre => fim_pre;
    llama_vocab_fim_suf, llama_token_fim_suf => fim_suf;
    llama_vocab_fim_mid, llama_token_fim_mid => fim_mid;
    llama_vocab_fim_pad, llama_token_fim_pad => fim_pad;
    llama_vocab_fim_rep, llama_token_fim_rep => fim_rep;
    llama_vocab_fim_sep, llama_token_fim_sep => fim_sep;
    llama_vocab_cls, llama_token_cls => bos;
}

#[no_mangle]
pub extern "C" fn llama_vocab_mask(vocab: *const llama_vocab) -> llama_token {
    with_vocab("llama_vocab_mask", vocab, |v| Ok(v.vocab().mask()))
}

#[no_mangle]
pub extern "C" fn llama_vocab_get_add_bos(vocab: *const llama_vocab) -> bool {
    with_vocab("llama_vocab_get_add_bos", vocab, |v| Ok(v.vocab().add_bos()))
}
#[no_mangle]
pub extern "C" fn llama_vocab_get_add_eos(vocab: *const llama_vocab) -> bool {
    with_vocab("llama_vocab_get_add_eos", vocab, |v| Ok(v.vocab().add_eos()))
}
#[no_mangle]
pub extern "C" fn llama_vocab_get_add_sep(vocab: *const llama_vocab) -> bool {
    with_vocab("llama_vocab_get_add_sep", vocab, |v| Ok(v.vocab().add_sep()))
}
#[no_mangle]
pub extern "C" fn llama_add_bos_token(vocab: *const llama_vocab) -> bool {
    llama_vocab_get_add_bos(vocab)
}
#[no_mangle]
pub extern "C" fn llama_add_eos_token(vocab: *const llama_vocab) -> bool {
    llama_vocab_get_add_eos(vocab)
}
#[no_mangle]
pub extern "C" fn llama_token_get_text(vocab: *const llama_vocab, token: llama_token) -> *const c_char {
    llama_vocab_get_text(vocab, token)
}
#[no_mangle]
pub extern "C" fn llama_token_get_score(vocab: *const llama_vocab, token: llama_token) -> f32 {
    llama_vocab_get_score(vocab, token)
}
#[no_mangle]
pub extern "C" fn llama_token_get_attr(vocab: *const llama_vocab, token: llama_token) -> u32 {
    llama_vocab_get_attr(vocab, token)
}
#[no_mangle]
pub extern "C" fn llama_token_is_eog(vocab: *const llama_vocab, token: llama_token) -> bool {
    llama_vocab_is_eog(vocab, token)
}
#[no_mangle]
pub extern "C" fn llama_token_is_control(vocab: *const llama_vocab, token: llama_token) -> bool {
    llama_vocab_is_control(vocab, token)
}

/// # Safety
/// `text` must hold `text_len` bytes; `tokens` must be writable for `n_tokens_max` ids.
#[no_mangle]
pub unsafe extern "C" fn llama_tokenize(vocab: *const llama_vocab, text: *const c_char, text_len: i32, tokens: *mut llama_token, n_tokens_max: i32, add_special: bool, parse_special: bool) -> i32 {
    guard_or("llama_tokenize", i32::MIN, || {
        // SAFETY: live vocab handle (NULL is caught).
        let v = unsafe { as_ref(vocab, "vocab") }?.vocab();
        if text_len < 0 {
            return Err(format!("text_len = {text_len} is negative"));
        }
        // SAFETY: text holds text_len bytes (caller's contract).
        let bytes = unsafe { as_slice(text as *const u8, text_len as usize, "text") }?;
        let mut out = Vec::new();
        v.tokenize(bytes, add_special, parse_special, &mut out);
        let n = i32::try_from(out.len()).map_err(|_| "tokenization result size overflows int32_t".to_string())?;
        if n_tokens_max < n {
            return Ok(-n);
        }
        if n > 0 {
            if tokens.is_null() {
                return Err("tokens is NULL".into());
            }
            // SAFETY: tokens is writable for n_tokens_max >= n ids.
            unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), tokens, out.len()) };
        }
        Ok(n)
    })
}

/// # Safety
/// `buf` must be writable for `length` bytes.
#[no_mangle]
pub unsafe extern "C" fn llama_token_to_piece(vocab: *const llama_vocab, token: llama_token, buf: *mut c_char, length: i32, lstrip: i32, special: bool) -> i32 {
    guard_or("llama_token_to_piece", 0, || {
        // SAFETY: live vocab handle (NULL is caught).
        let v = unsafe { as_ref(vocab, "vocab") }?.vocab();
        check_id(v, token)?;
        let mut piece = Vec::new();
        v.token_to_piece(token, lstrip, special, &mut piece);
        let n = piece.len() as i32;
        if length < n {
            return Ok(-n);
        }
        if n > 0 {
            if buf.is_null() {
                return Err("buf is NULL".into());
            }
            // SAFETY: buf is writable for length >= n bytes.
            unsafe { std::ptr::copy_nonoverlapping(piece.as_ptr(), buf as *mut u8, piece.len()) };
        }
        Ok(n)
    })
}

/// # Safety
/// `tokens` must hold `n_tokens` ids; `text` must be writable for `text_len_max` bytes.
#[no_mangle]
pub unsafe extern "C" fn llama_detokenize(vocab: *const llama_vocab, tokens: *const llama_token, n_tokens: i32, text: *mut c_char, text_len_max: i32, remove_special: bool, unparse_special: bool) -> i32 {
    guard_or("llama_detokenize", i32::MIN, || {
        // SAFETY: live vocab handle (NULL is caught).
        let v = unsafe { as_ref(vocab, "vocab") }?.vocab();
        if n_tokens < 0 || text_len_max < 0 {
            return Err(format!("negative size (n_tokens = {n_tokens}, text_len_max = {text_len_max})"));
        }
        // SAFETY: tokens holds n_tokens ids (caller's contract).
        let ids = unsafe { as_slice(tokens, n_tokens as usize, "tokens") }?;
        if let Some(&bad) = ids.iter().find(|&&t| t < 0 || t as usize >= v.n_tokens()) {
            return Err(format!("token id {bad} out of range [0, {})", v.n_tokens()));
        }
        let mut out = Vec::new();
        let raw = v.detokenize(ids, remove_special, unparse_special, &mut out);
        if raw > text_len_max as usize {
            return Ok(-(raw.min(i32::MAX as usize) as i32));
        }
        if !out.is_empty() {
            if text.is_null() {
                return Err("text is NULL".into());
            }
            // SAFETY: text is writable for text_len_max >= raw >= out.len() bytes.
            unsafe { std::ptr::copy_nonoverlapping(out.as_ptr(), text as *mut u8, out.len()) };
        }
        Ok(out.len() as i32)
    })
}

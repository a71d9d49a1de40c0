//! The remaining implemented llama.h functions: names of enum values, version, split-file
//! path helpers, deprecated model getters, and the getters whose answer is fixed for the
//! decoder-only, non-recurrent models deepseek runs.

use std::ffi::{c_char, CStr};
use std::ptr;

use super::boundary::{as_mut, as_ref, as_str, guard, guard_or};
use super::handles::{llama_context, llama_model, llama_vocab};
use super::types::*;

/// llama.cpp's version string for the pinned build (b11312), as `llama_version` returns it.
pub const LLAMA_VERSION: &CStr = c"0.0.11312";

#[no_mangle]
pub extern "C" fn llama_version() -> *const c_char {
    LLAMA_VERSION.as_ptr()
}

#[no_mangle]
pub extern "C" fn llama_max_tensor_buft_overrides() -> usize {
    4096
}

/// `name` for a known llama_ftype value, as upstream's llama_ftype_name (without the
/// "guessed" prefix).
fn ftype_text(ft: i32) -> Option<&'static CStr> {
    Some(match ft {
        0 => c"all F32",
        1 => c"F16",
        32 => c"BF16",
        40 => c"Q1_0",
        41 => c"Q2_0",
        2 => c"Q4_0",
        3 => c"Q4_1",
        8 => c"Q5_0",
        9 => c"Q5_1",
        7 => c"Q8_0",
        38 => c"MXFP4 MoE",
        39 => c"NVFP4",
        10 => c"Q2_K - Medium",
        21 => c"Q2_K - Small",
        11 => c"Q3_K - Small",
        12 => c"Q3_K - Medium",
        13 => c"Q3_K - Large",
        14 => c"Q4_K - Small",
        15 => c"Q4_K - Medium",
        16 => c"Q5_K - Small",
        17 => c"Q5_K - Medium",
        18 => c"Q6_K",
        36 => c"TQ1_0 - 1.69 bpw ternary",
        37 => c"TQ2_0 - 2.06 bpw ternary",
        19 => c"IQ2_XXS - 2.0625 bpw",
        20 => c"IQ2_XS - 2.3125 bpw",
        28 => c"IQ2_S - 2.5 bpw",
        29 => c"IQ2_M - 2.7 bpw",
        22 => c"IQ3_XS - 3.3 bpw",
        23 => c"IQ3_XXS - 3.0625 bpw",
        24 => c"IQ1_S - 1.5625 bpw",
        31 => c"IQ1_M - 1.75 bpw",
        25 => c"IQ4_NL - 4.5 bpw",
        30 => c"IQ4_XS - 4.25 bpw",
        26 => c"IQ3_S - 3.4375 bpw",
        27 => c"IQ3_S mix - 3.66 bpw",
        _ => return None,
    })
}

/// The same names with upstream's "(guessed) " prefix, for values with LLAMA_FTYPE_GUESSED set.
fn ftype_text_guessed(ft: i32) -> &'static CStr {
    macro_rules! g {
        ($($v:literal => $s:literal),* $(,)?) => { match ft { $($v => concat!("(guessed) ", $s, "\0"),)* _ => "(guessed) unknown, may not work\0" } };
    }
    let s: &'static str = g! {
        0 => "all F32", 1 => "F16", 32 => "BF16", 40 => "Q1_0", 41 => "Q2_0", 2 => "Q4_0", 3 => "Q4_1",
        8 => "Q5_0", 9 => "Q5_1", 7 => "Q8_0", 38 => "MXFP4 MoE", 39 => "NVFP4", 10 => "Q2_K - Medium",
        21 => "Q2_K - Small", 11 => "Q3_K - Small", 12 => "Q3_K - Medium", 13 => "Q3_K - Large",
        14 => "Q4_K - Small", 15 => "Q4_K - Medium", 16 => "Q5_K - Small", 17 => "Q5_K - Medium", 18 => "Q6_K",
        36 => "TQ1_0 - 1.69 bpw ternary", 37 => "TQ2_0 - 2.06 bpw ternary", 19 => "IQ2_XXS - 2.0625 bpw",
        20 => "IQ2_XS - 2.3125 bpw", 28 => "IQ2_S - 2.5 bpw", 29 => "IQ2_M - 2.7 bpw", 22 => "IQ3_XS - 3.3 bpw",
        23 => "IQ3_XXS - 3.0625 bpw", 24 => "IQ1_S - 1.5625 bpw", 31 => "IQ1_M - 1.75 bpw",
        25 => "IQ4_NL - 4.5 bpw", 30 => "IQ4_XS - 4.25 bpw", 26 => "IQ3_S - 3.4375 bpw", 27 => "IQ3_S mix - 3.66 bpw",
    };
    CStr::from_bytes_with_nul(s.as_bytes()).unwrap_or(c"(guessed) unknown, may not work")
}

#[no_mangle]
pub extern "C" fn llama_ftype_name(ftype: llama_ftype) -> *const c_char {
    let ft = raw_enum(&ftype);
    if ft & 1024 != 0 {
        return ftype_text_guessed(ft & !1024).as_ptr();
    }
    ftype_text(ft).unwrap_or(c"unknown, may not work").as_ptr()
}

#[no_mangle]
pub extern "C" fn llama_flash_attn_type_name(flash_attn_type: llama_flash_attn_type) -> *const c_char {
    guard("llama_flash_attn_type_name", || {
        Ok(match raw_enum(&flash_attn_type) {
            -1 => c"auto",
            0 => c"disabled",
            1 => c"enabled",
            other => return Err(format!("invalid flash_attn_type {other}")),
        }
        .as_ptr())
    })
}

#[no_mangle]
pub extern "C" fn llama_load_mode_name(load_mode: llama_load_mode) -> *const c_char {
    guard("llama_load_mode_name", || {
        Ok(match raw_enum(&load_mode) {
            -1 => c"auto",
            0 => c"none",
            1 => c"mmap",
            2 => c"mlock",
            3 => c"mmap+mlock",
            4 => c"dio",
            other => return Err(format!("invalid load_mode {other}")),
        }
        .as_ptr())
    })
}

/// Upstream throws on an unknown name; we log it and return LLAMA_LOAD_MODE_AUTO.
///
/// # Safety
/// `str` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn llama_load_mode_from_str(str: *const c_char) -> llama_load_mode {
    use llama_load_mode::*;
    guard_or("llama_load_mode_from_str", LLAMA_LOAD_MODE_AUTO, || {
        // SAFETY: the caller passes a NUL-terminated string (NULL is caught).
        let s = unsafe { as_str(str, "str") }?;
        Ok(match s {
            "auto" => LLAMA_LOAD_MODE_AUTO,
            "none" => LLAMA_LOAD_MODE_NONE,
            "mmap" => LLAMA_LOAD_MODE_MMAP,
            "mlock" => LLAMA_LOAD_MODE_MLOCK,
            "mmap+mlock" => LLAMA_LOAD_MODE_MMAP_MLOCK,
            "dio" => LLAMA_LOAD_MODE_DIRECT_IO,
            other => return Err(format!("unknown load mode: {other}")),
        })
    })
}

#[no_mangle]
pub extern "C" fn llama_model_meta_key_str(key: llama_model_meta_key) -> *const c_char {
    let s = match raw_enum(&key) {
        0 => c"general.sampling.sequence",
        1 => c"general.sampling.top_k",
        2 => c"general.sampling.top_p",
        3 => c"general.sampling.min_p",
        4 => c"general.sampling.xtc_probability",
        5 => c"general.sampling.xtc_threshold",
        6 => c"general.sampling.temp",
        7 => c"general.sampling.penalty_last_n",
        8 => c"general.sampling.penalty_repeat",
        9 => c"general.sampling.mirostat",
        10 => c"general.sampling.mirostat_tau",
        11 => c"general.sampling.mirostat_eta",
        _ => return ptr::null(),
    };
    s.as_ptr()
}

/// The llama_ftype enumerator for a GGUF `general.file_type` value, if it names one.
fn ftype_enum(v: u32) -> Option<llama_ftype> {
    use llama_ftype::*;
    const ALL: [llama_ftype; 36] = [
        LLAMA_FTYPE_ALL_F32, LLAMA_FTYPE_MOSTLY_F16, LLAMA_FTYPE_MOSTLY_Q4_0, LLAMA_FTYPE_MOSTLY_Q4_1, LLAMA_FTYPE_MOSTLY_Q8_0,
        LLAMA_FTYPE_MOSTLY_Q5_0, LLAMA_FTYPE_MOSTLY_Q5_1, LLAMA_FTYPE_MOSTLY_Q2_K, LLAMA_FTYPE_MOSTLY_Q3_K_S, LLAMA_FTYPE_MOSTLY_Q3_K_M,
        LLAMA_FTYPE_MOSTLY_Q3_K_L, LLAMA_FTYPE_MOSTLY_Q4_K_S, LLAMA_FTYPE_MOSTLY_Q4_K_M, LLAMA_FTYPE_MOSTLY_Q5_K_S, LLAMA_FTYPE_MOSTLY_Q5_K_M,
        LLAMA_FTYPE_MOSTLY_Q6_K, LLAMA_FTYPE_MOSTLY_IQ2_XXS, LLAMA_FTYPE_MOSTLY_IQ2_XS, LLAMA_FTYPE_MOSTLY_Q2_K_S, LLAMA_FTYPE_MOSTLY_IQ3_XS,
        LLAMA_FTYPE_MOSTLY_IQ3_XXS, LLAMA_FTYPE_MOSTLY_IQ1_S, LLAMA_FTYPE_MOSTLY_IQ4_NL, LLAMA_FTYPE_MOSTLY_IQ3_S, LLAMA_FTYPE_MOSTLY_IQ3_M,
        LLAMA_FTYPE_MOSTLY_IQ2_S, LLAMA_FTYPE_MOSTLY_IQ2_M, LLAMA_FTYPE_MOSTLY_IQ4_XS, LLAMA_FTYPE_MOSTLY_IQ1_M, LLAMA_FTYPE_MOSTLY_BF16,
        LLAMA_FTYPE_MOSTLY_TQ1_0, LLAMA_FTYPE_MOSTLY_TQ2_0, LLAMA_FTYPE_MOSTLY_MXFP4_MOE, LLAMA_FTYPE_MOSTLY_NVFP4, LLAMA_FTYPE_MOSTLY_Q1_0,
        LLAMA_FTYPE_MOSTLY_Q2_0,
    ];
    ALL.into_iter().find(|f| *f as u32 == v)
}

/// The GGUF's `general.file_type`; a file without it (or with an unknown value) reports
/// LLAMA_FTYPE_ALL_F32 with the reason logged.
#[no_mangle]
pub extern "C" fn llama_model_ftype(model: *const llama_model) -> llama_ftype {
    guard_or("llama_model_ftype", llama_ftype::LLAMA_FTYPE_ALL_F32, || {
        // SAFETY: llama.h requires a live model handle (NULL is caught).
        let m = unsafe { as_ref(model, "model") }?;
        match m.model.file.get_u32("general.file_type") {
            Some(v) => ftype_enum(v).ok_or_else(|| format!("unknown general.file_type {v}")),
            None => Err("general.file_type is absent".into()),
        }
    })
}

/// Multi-token-prediction layers: `<arch>.nextn_predict_layers` (DeepSeek V3/R1 files carry
/// it; deepseek does not run those layers), 0 when absent.
#[no_mangle]
pub extern "C" fn llama_model_n_layer_nextn(model: *const llama_model) -> i32 {
    guard("llama_model_n_layer_nextn", || {
        // SAFETY: llama.h requires a live model handle (NULL is caught).
        let m = unsafe { as_ref(model, "model") }?;
        let key = format!("{}.nextn_predict_layers", m.model.hp.arch.name());
        Ok(m.model.file.get_u32(&key).map(|v| v as i32).unwrap_or(0))
    })
}

/// Classifier label `i` (`{arch}.classifier.output_labels`), NULL past the last (as upstream).
#[no_mangle]
pub extern "C" fn llama_model_cls_label(model: *const llama_model, i: u32) -> *const c_char {
    guard("llama_model_cls_label", || {
        // SAFETY: llama.h requires a live model handle (NULL is caught).
        let m = unsafe { as_ref(model, "model") }?;
        Ok(m.model.hp.cls_labels.get(i as usize).map_or(ptr::null(), |l| l.as_ptr()))
    })
}

/// Decoder-only models have no decoder start token: -1 (LLAMA_TOKEN_NULL), as upstream.
#[no_mangle]
pub extern "C" fn llama_model_decoder_start_token(model: *const llama_model) -> llama_token {
    guard("llama_model_decoder_start_token", || {
        // SAFETY: llama.h requires a live model handle (NULL is caught).
        unsafe { as_ref(model, "model") }?;
        Ok(LLAMA_TOKEN_NULL)
    })
}

// ---- Deprecated model getters (aliases of llama_model_*, llama_vocab_n_tokens).

#[no_mangle]
pub extern "C" fn llama_n_ctx_train(model: *const llama_model) -> i32 {
    super::model::llama_model_n_ctx_train(model)
}
#[no_mangle]
pub extern "C" fn llama_n_embd(model: *const llama_model) -> i32 {
    super::model::llama_model_n_embd(model)
}
#[no_mangle]
pub extern "C" fn llama_n_layer(model: *const llama_model) -> i32 {
    super::model::llama_model_n_layer(model)
}
#[no_mangle]
pub extern "C" fn llama_n_head(model: *const llama_model) -> i32 {
    super::model::llama_model_n_head(model)
}
#[no_mangle]
pub extern "C" fn llama_n_vocab(vocab: *const llama_vocab) -> i32 {
    super::vocab::llama_vocab_n_tokens(vocab)
}

/// Recurrent-state snapshots: upstream clamps n_rs_seq to 0 for non-recurrent models, and
/// deepseek runs none.
#[no_mangle]
pub extern "C" fn llama_n_rs_seq(ctx: *const llama_context) -> u32 {
    guard("llama_n_rs_seq", || {
        // SAFETY: llama.h requires a live context handle (NULL is caught).
        unsafe { as_ref(ctx, "ctx") }?;
        Ok(0)
    })
}

/// Whether the context attends causally (the model's `attention.causal`, the context's
/// `attention_type`, or the last `llama_set_causal_attn`).
#[no_mangle]
pub extern "C" fn llama_get_causal_attn(ctx: *const llama_context) -> bool {
    guard("llama_get_causal_attn", || {
        // SAFETY: llama.h requires a live context handle (NULL is caught), used by one
        // thread at a time.
        let c = unsafe { as_ref(ctx, "ctx") }?;
        // SAFETY: as above.
        Ok(unsafe { c.owned() }.ctx.causal_attn())
    })
}

/// NUMA placement: only GGML_NUMA_STRATEGY_DISABLED (the default) is accepted; any other
/// strategy is logged as not supported (the call has no effect).
#[no_mangle]
pub extern "C" fn llama_numa_init(numa: ggml_numa_strategy) {
    guard("llama_numa_init", || match raw_enum(&numa) {
        0 => Ok(()),
        other => Err(format!("NUMA strategy {other} is not supported (ignored)")),
    })
}

/// ggml thread pools are not used: deepseek runs its own pool per context. Attaching one is
/// logged and has no effect.
#[no_mangle]
pub extern "C" fn llama_attach_threadpool(ctx: *mut llama_context, _threadpool: ggml_threadpool_t, _threadpool_batch: ggml_threadpool_t) {
    guard("llama_attach_threadpool", || {
        // SAFETY: llama.h requires a live context handle (NULL is caught).
        unsafe { as_mut(ctx, "ctx") }?;
        Err("ggml thread pools are not supported (deepseek uses its own; ignored)".into())
    })
}

#[no_mangle]
pub extern "C" fn llama_detach_threadpool(ctx: *mut llama_context) {
    guard("llama_detach_threadpool", || {
        // SAFETY: llama.h requires a live context handle (NULL is caught).
        unsafe { as_mut(ctx, "ctx") }?;
        Ok(())
    })
}

/// Model-specific suppress tokens (`tokenizer.ggml.suppress_tokens`, Whisper-style models):
/// none for the models deepseek runs; a file that has the key gets the reason logged.
///
/// # Safety
/// `n_suppress_tokens` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llama_vocab_get_suppress_tokens(vocab: *const llama_vocab, n_suppress_tokens: *mut i32) -> *const llama_token {
    // SAFETY: the caller passes a writable pointer or NULL.
    if let Some(n) = unsafe { n_suppress_tokens.as_mut() } {
        *n = 0;
    }
    guard("llama_vocab_get_suppress_tokens", || {
        // SAFETY: llama.h requires a live vocab handle (NULL is caught).
        let v = unsafe { as_ref(vocab, "vocab") }?;
        if v.model.file.get("tokenizer.ggml.suppress_tokens").is_some() {
            return Err("tokenizer.ggml.suppress_tokens is not supported (reported as none)".into());
        }
        Ok(ptr::null())
    })
}

/// `<prefix>-%05d-of-%05d.gguf` with split_no + 1; the length written, or 0 when it does not fit.
///
/// # Safety
/// `split_path` writable for `maxlen` bytes; `path_prefix` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn llama_split_path(split_path: *mut c_char, maxlen: usize, path_prefix: *const c_char, split_no: i32, split_count: i32) -> i32 {
    guard_or("llama_split_path", 0, || {
        // SAFETY: NUL-terminated (NULL is caught).
        let prefix = unsafe { as_ref(path_prefix, "path_prefix") }.map(|p| {
            // SAFETY: as above.
            unsafe { CStr::from_ptr(p) }
        })?;
        let s = crate::gguf::split::path(prefix.to_bytes(), split_no as i64, split_count as i64);
        let n = s.len();
        if split_path.is_null() || n >= maxlen {
            return Ok(0);
        }
        // SAFETY: split_path is writable for maxlen > n bytes.
        unsafe {
            ptr::copy_nonoverlapping(s.as_ptr(), split_path as *mut u8, n);
            *split_path.add(n) = 0;
        }
        Ok(n as i32)
    })
}

/// The prefix of `split_path` when it ends in `-%05d-of-%05d.gguf` for these numbers: copies
/// at most maxlen - 1 bytes of it and returns its full length; 0 otherwise.
///
/// # Safety
/// `split_prefix` writable for `maxlen` bytes; `split_path` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn llama_split_prefix(split_prefix: *mut c_char, maxlen: usize, split_path: *const c_char, split_no: i32, split_count: i32) -> i32 {
    guard_or("llama_split_prefix", 0, || {
        // SAFETY: NUL-terminated (NULL is caught).
        let path = unsafe { as_ref(split_path, "split_path") }.map(|p| {
            // SAFETY: as above.
            unsafe { CStr::from_ptr(p) }
        })?;
        let Some(prefix) = crate::gguf::split::prefix(path.to_bytes(), split_no as i64, split_count as i64) else { return Ok(0) };
        let n = prefix.len();
        if !split_prefix.is_null() && maxlen > 0 {
            let c = n.min(maxlen - 1);
            // SAFETY: split_prefix is writable for maxlen > c bytes.
            unsafe {
                ptr::copy_nonoverlapping(prefix.as_ptr(), split_prefix as *mut u8, c);
                *split_prefix.add(c) = 0;
            }
        }
        Ok(n as i32)
    })
}

#[no_mangle]
pub extern "C" fn llama_model_quantize_default_params() -> llama_model_quantize_params {
    llama_model_quantize_params {
        nthread: 0,
        ftype: llama_ftype::LLAMA_FTYPE_MOSTLY_Q8_0,
        output_tensor_type: ggml_type::GGML_TYPE_COUNT,
        token_embedding_type: ggml_type::GGML_TYPE_COUNT,
        allow_requantize: false,
        quantize_output_tensor: true,
        only_copy: false,
        pure_: false,
        keep_split: false,
        dry_run: false,
        imatrix: ptr::null(),
        kv_overrides: ptr::null(),
        tt_overrides: ptr::null(),
        prune_layers: ptr::null(),
        max_buf_size: 8 << 30,
    }
}

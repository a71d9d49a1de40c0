//! Model loading, freeing and the llama_model_* getters.

use std::ffi::{c_char, CString};
use std::ptr;
use std::sync::Arc;

use super::boundary::{as_ref, as_str, guard, guard_or, write_c_string};
use super::handles::{llama_model, llama_vocab};
use super::types::*;
use crate::kernels::rope::RopeMode;
use crate::gguf::Source;
use crate::model::Model;

#[no_mangle]
pub extern "C" fn llama_model_default_params() -> llama_model_params {
    llama_model_params {
        devices: ptr::null_mut(),
        tensor_buft_overrides: ptr::null(),
        n_gpu_layers: -1,
        split_mode: llama_split_mode::LLAMA_SPLIT_MODE_LAYER,
        load_mode: llama_load_mode::LLAMA_LOAD_MODE_AUTO,
        lazy_mode: llama_lazy_mode::LLAMA_LAZY_MODE_AUTO,
        main_gpu: 0,
        tensor_split: ptr::null(),
        progress_callback: None,
        progress_callback_user_data: ptr::null_mut(),
        kv_overrides: ptr::null(),
        vocab_only: false,
        check_tensors: false,
        use_extra_bufts: true,
        no_host: false,
        no_alloc: false,
        load_mtp: false,
    }
}

/// # Safety
/// `path_model` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn llama_model_load_from_file(path_model: *const c_char, params: llama_model_params) -> *mut llama_model {
    guard("llama_model_load_from_file", || {
        // SAFETY: the caller passes a NUL-terminated path.
        let path = unsafe { as_path(path_model, "path_model") }?;
        load(Source::File(&path), &params)
    })
}

/// A split model from the list of its shards, in order (the list's length must be the first
/// shard's `split.count`, as upstream requires).
///
/// # Safety
/// `paths` must point to `n_paths` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn llama_model_load_from_splits(paths: *mut *const c_char, n_paths: usize, params: llama_model_params) -> *mut llama_model {
    guard("llama_model_load_from_splits", || {
        if n_paths == 0 {
            return Err("list of splits is empty".into());
        }
        as_ref(paths, "paths")?;
        let owned = (0..n_paths)
            .map(|i| {
                // SAFETY: paths points to n_paths NUL-terminated strings (the caller's contract).
                unsafe { as_path(*paths.add(i), "paths[i]") }.map_err(|e| format!("split {i}: {e}"))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let refs: Vec<&std::path::Path> = owned.iter().map(|p| p.as_path()).collect();
        load(Source::Splits(&refs), &params)
    })
}

/// A C path string as a path (any bytes but NUL; not necessarily UTF-8).
///
/// # Safety
/// `p` is NULL or NUL-terminated.
unsafe fn as_path(p: *const c_char, what: &str) -> Result<std::path::PathBuf, String> {
    use std::os::unix::ffi::OsStrExt;
    let p = as_ref(p, what)?;
    // SAFETY: NUL-terminated (the caller's contract); NULL was refused above.
    let bytes = unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes();
    Ok(std::path::Path::new(std::ffi::OsStr::from_bytes(bytes)).to_path_buf())
}

/// The loader behind both entry points: the load mode, the refused parameters, the progress
/// callback, vocab-only; the model handle with its description and chat templates.
fn load(source: Source<'_>, params: &llama_model_params) -> Result<*mut llama_model, String> {
    // DIRECT_IO reads the file (upstream falls back to reading where direct I/O is not available)
    let (mmap, mlock) = match raw_enum(&params.load_mode) {
        -1 | 1 => (true, false),
        3 => (true, true),
        0 | 4 => (false, false),
        2 => (false, true),
        other => return Err(format!("invalid load_mode {other}")),
    };
    // offload settings: one warning each, never silently (this library runs on the CPU only)
    if params.n_gpu_layers > 0 {
        crate::log_warn!("llama_model_load: n_gpu_layers = {} has no effect: this library runs every layer on the CPU", params.n_gpu_layers);
    }
    if params.main_gpu != 0 {
        crate::log_warn!("llama_model_load: main_gpu = {} has no effect: this library has no GPU devices", params.main_gpu);
    }
    // SAFETY: a non-NULL tensor_buft_overrides points to an array ended by an entry whose pattern is NULL.
    if !params.tensor_buft_overrides.is_null() && !unsafe { (*params.tensor_buft_overrides).pattern }.is_null() {
        crate::log_warn!("llama_model_load: tensor_buft_overrides have no effect: every tensor stays in host memory");
    }
    // SAFETY: a non-NULL devices points to a NULL-terminated list.
    if !params.devices.is_null() && !unsafe { *params.devices }.is_null() {
        crate::log_warn!("llama_model_load: devices have no effect: this library runs on the CPU only");
    }
    if !params.kv_overrides.is_null() {
        // SAFETY: a non-NULL kv_overrides points to an array ended by an entry with an empty key.
        let first_key = unsafe { (*params.kv_overrides).key[0] };
        if first_key != 0 {
            return Err("kv_overrides are not supported yet".into());
        }
    }
    let load_start = std::time::Instant::now();
    let model = match params.progress_callback {
        _ if params.vocab_only => Model::load_vocab_only(source, mmap),
        None => Model::load_source_opts(source, mmap, params.use_extra_bufts),
        Some(cb) => {
            let user_data = params.progress_callback_user_data;
            // SAFETY: the caller's callback with its own user data, as llama.h documents.
            let mut report = |p: f32| unsafe { cb(p, user_data) };
            Model::load_with_progress(source, mmap, params.use_extra_bufts, &mut report)
        }
    }
    .map_err(|e| format!("{}: {e}", source.display()))?;
    if mlock {
        model.file.lock_memory().map_err(|e| format!("{}: {e}", source.display()))?;
        if let Some(p) = &model.packed {
            p.lock().map_err(|e| format!("{}: {e}", source.display()))?;
        }
    }
    let t_load_us = load_start.elapsed().as_secs_f64() * 1e6;
    let desc = CString::new(model.description()).expect("no NUL in description");
    let templates = model
        .file
        .kvs()
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer.chat_template"))
        .filter_map(|(k, v)| match v {
            crate::gguf::GgufValue::Str(s) => CString::new(s.as_str()).ok().map(|c| (k.clone(), c)),
            _ => None,
        })
        .collect();
    let model = Arc::new(model);
    Ok(Box::into_raw(Box::new(llama_model { vocab: llama_vocab::new(Arc::clone(&model)), model, desc, templates, t_load_us })))
}

/// # Safety
/// As llama_model_load_from_file.
#[no_mangle]
pub unsafe extern "C" fn llama_load_model_from_file(path_model: *const c_char, params: llama_model_params) -> *mut llama_model {
    // SAFETY: same contract.
    unsafe { llama_model_load_from_file(path_model, params) }
}

/// # Safety
/// `model` must be NULL or a model from llama_model_load_from_file, not freed before.
#[no_mangle]
pub unsafe extern "C" fn llama_model_free(model: *mut llama_model) {
    guard("llama_model_free", || {
        if !model.is_null() {
            // SAFETY: ownership returns to us; the caller will not use the pointer again.
            drop(unsafe { Box::from_raw(model) });
            crate::sys::alloc::release_freed();
        }
        Ok(())
    })
}

/// # Safety
/// As llama_model_free.
#[no_mangle]
pub unsafe extern "C" fn llama_free_model(model: *mut llama_model) {
    // SAFETY: same contract.
    unsafe { llama_model_free(model) }
}

/// Runs `f` on a model handle; NULL logs and returns the fallback.
fn with_model<R: super::boundary::Fallback>(name: &str, model: *const llama_model, f: impl FnOnce(&llama_model) -> R) -> R {
    guard(name, || {
        // SAFETY: llama.h requires a live model handle (NULL is caught).
        let m = unsafe { as_ref(model, "model") }?;
        Ok(f(m))
    })
}

#[no_mangle]
pub extern "C" fn llama_model_get_vocab(model: *const llama_model) -> *const llama_vocab {
    with_model("llama_model_get_vocab", model, |m| &m.vocab as *const llama_vocab)
}


#[no_mangle]
pub extern "C" fn llama_model_n_ctx_train(model: *const llama_model) -> i32 {
    with_model("llama_model_n_ctx_train", model, |m| m.model.hp.n_ctx_train as i32)
}
#[no_mangle]
pub extern "C" fn llama_model_n_embd(model: *const llama_model) -> i32 {
    with_model("llama_model_n_embd", model, |m| m.model.hp.n_embd as i32)
}
#[no_mangle]
pub extern "C" fn llama_model_n_embd_inp(model: *const llama_model) -> i32 {
    with_model("llama_model_n_embd_inp", model, |m| m.model.hp.n_embd as i32)
}
#[no_mangle]
pub extern "C" fn llama_model_n_embd_out(model: *const llama_model) -> i32 {
    with_model("llama_model_n_embd_out", model, |m| m.model.hp.n_embd as i32)
}
#[no_mangle]
pub extern "C" fn llama_model_n_layer(model: *const llama_model) -> i32 {
    with_model("llama_model_n_layer", model, |m| m.model.hp.n_layer as i32)
}
#[no_mangle]
pub extern "C" fn llama_model_n_head(model: *const llama_model) -> i32 {
    with_model("llama_model_n_head", model, |m| m.model.hp.n_head as i32)
}
#[no_mangle]
pub extern "C" fn llama_model_n_head_kv(model: *const llama_model) -> i32 {
    with_model("llama_model_n_head_kv", model, |m| m.model.hp.n_head_kv as i32)
}
#[no_mangle]
pub extern "C" fn llama_model_n_swa(model: *const llama_model) -> i32 {
    with_model("llama_model_n_swa", model, |_| 0)
}
#[no_mangle]
pub extern "C" fn llama_model_rope_freq_scale_train(model: *const llama_model) -> f32 {
    with_model("llama_model_rope_freq_scale_train", model, |m| m.model.hp.rope_freq_scale)
}
#[no_mangle]
pub extern "C" fn llama_model_n_cls_out(model: *const llama_model) -> u32 {
    with_model("llama_model_n_cls_out", model, |m| m.model.hp.n_cls_out as u32)
}
#[no_mangle]
pub extern "C" fn llama_model_rope_type(model: *const llama_model) -> llama_rope_type {
    guard_or("llama_model_rope_type", llama_rope_type::LLAMA_ROPE_TYPE_NONE, || {
        // SAFETY: llama.h requires a live model handle (NULL is caught).
        let m = unsafe { as_ref(model, "model") }?;
        Ok(match m.model.hp.arch.rope_mode() {
            RopeMode::Norm => llama_rope_type::LLAMA_ROPE_TYPE_NORM,
            RopeMode::Neox => llama_rope_type::LLAMA_ROPE_TYPE_NEOX,
        })
    })
}
#[no_mangle]
pub extern "C" fn llama_model_size(model: *const llama_model) -> u64 {
    with_model("llama_model_size", model, |m| m.model.size_bytes)
}
#[no_mangle]
pub extern "C" fn llama_model_n_params(model: *const llama_model) -> u64 {
    with_model("llama_model_n_params", model, |m| m.model.n_params)
}
#[no_mangle]
pub extern "C" fn llama_model_has_encoder(model: *const llama_model) -> bool {
    with_model("llama_model_has_encoder", model, |_| false)
}
#[no_mangle]
pub extern "C" fn llama_model_has_decoder(model: *const llama_model) -> bool {
    with_model("llama_model_has_decoder", model, |_| true)
}
#[no_mangle]
pub extern "C" fn llama_model_is_recurrent(model: *const llama_model) -> bool {
    with_model("llama_model_is_recurrent", model, |_| false)
}
#[no_mangle]
pub extern "C" fn llama_model_is_hybrid(model: *const llama_model) -> bool {
    with_model("llama_model_is_hybrid", model, |_| false)
}
#[no_mangle]
pub extern "C" fn llama_model_is_diffusion(model: *const llama_model) -> bool {
    with_model("llama_model_is_diffusion", model, |_| false)
}

/// # Safety
/// `buf` must be NULL or writable for `buf_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn llama_model_desc(model: *const llama_model, buf: *mut c_char, buf_size: usize) -> i32 {
    // SAFETY: buf contract forwarded from the caller.
    with_model("llama_model_desc", model, |m| unsafe { write_c_string(m.desc.to_str().unwrap_or(""), buf, buf_size) })
}

#[no_mangle]
pub extern "C" fn llama_model_meta_count(model: *const llama_model) -> i32 {
    with_model("llama_model_meta_count", model, |m| m.model.file.kvs().len() as i32)
}

fn meta_index<'a>(m: &'a llama_model, i: i32) -> Result<&'a (String, crate::gguf::GgufValue), String> {
    usize::try_from(i).ok().and_then(|i| m.model.file.kvs().get(i)).ok_or_else(|| format!("metadata index {i} out of range"))
}

/// # Safety
/// `buf` must be NULL or writable for `buf_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn llama_model_meta_key_by_index(model: *const llama_model, i: i32, buf: *mut c_char, buf_size: usize) -> i32 {
    guard("llama_model_meta_key_by_index", || {
        // SAFETY: live model handle required by llama.h.
        let m = unsafe { as_ref(model, "model") }?;
        let (k, _) = meta_index(m, i)?;
        // SAFETY: buf contract forwarded from the caller.
        Ok(unsafe { write_c_string(k, buf, buf_size) })
    })
}

/// # Safety
/// `buf` must be NULL or writable for `buf_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn llama_model_meta_val_str_by_index(model: *const llama_model, i: i32, buf: *mut c_char, buf_size: usize) -> i32 {
    guard("llama_model_meta_val_str_by_index", || {
        // SAFETY: live model handle required by llama.h.
        let m = unsafe { as_ref(model, "model") }?;
        let (_, v) = meta_index(m, i)?;
        // SAFETY: buf contract forwarded from the caller.
        Ok(unsafe { write_c_string(&v.render(), buf, buf_size) })
    })
}

/// # Safety
/// `key` must be NUL-terminated; `buf` NULL or writable for `buf_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn llama_model_meta_val_str(model: *const llama_model, key: *const c_char, buf: *mut c_char, buf_size: usize) -> i32 {
    guard_or("llama_model_meta_val_str", -1, || {
        // SAFETY: live model handle and NUL-terminated key required by llama.h.
        let m = unsafe { as_ref(model, "model") }?;
        // SAFETY: as above.
        let key = unsafe { as_str(key, "key") }?;
        match m.model.file.get(key) {
            None => {
                // SAFETY: buf contract forwarded from the caller.
                unsafe { write_c_string("", buf, buf_size) };
                Ok(-1)
            }
            // SAFETY: buf contract forwarded from the caller.
            Some(v) => Ok(unsafe { write_c_string(&v.render(), buf, buf_size) }),
        }
    })
}

#[no_mangle]
pub extern "C" fn llama_model_chat_template(model: *const llama_model, name: *const c_char) -> *const c_char {
    guard("llama_model_chat_template", || {
        // SAFETY: live model handle required by llama.h.
        let m = unsafe { as_ref(model, "model") }?;
        let key = if name.is_null() {
            "tokenizer.chat_template".to_string()
        } else {
            // SAFETY: a non-NULL name is NUL-terminated.
            format!("tokenizer.chat_template.{}", unsafe { as_str(name, "name") }?)
        };
        Ok(m.templates.iter().find(|(k, _)| *k == key).map_or(ptr::null(), |(_, c)| c.as_ptr()))
    })
}

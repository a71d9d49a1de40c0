//! llama.h functions of features deepseek does not implement: LoRA/aLoRA adapters, control
//! vectors, training (`llama_opt_*`), embedding input to the extended batch API
//! (`llama_batch_ext_add_embd`, `_set_embd_*`; token input is in batch_ext.rs), backend-side
//! sampling (`llama_set_sampler` returns false as upstream's for a sampler it cannot offload;
//! the `llama_get_sampled_*` queries answer "nothing sampled"),
//! model quantization, split files, building or saving models other than from one GGUF path.
//! Each returns its documented failure value and logs one line naming the function; the few
//! calls that ask for nothing (clearing adapters, freeing NULL) succeed silently.
//! docs/IMPLEMENTED.md (Unsupported llama.h functions) lists these functions; keep both in step.

#![allow(unused_variables)]

use std::ffi::{c_char, c_void};

use super::batch_ext::llama_batch_ext;
use super::boundary::{guard, guard_or, unsupported, Fallback};
use super::handles::{llama_context, llama_model};
use super::types::*;

/// Not supported: model quantization. Logs one line; returns 1 (upstream's failure value).
#[no_mangle]
pub extern "C" fn llama_model_quantize(fname_inp: *const c_char, fname_out: *const c_char, params: *const llama_model_quantize_params) -> u32 {
    super::boundary::guard_or("llama_model_quantize", 1, || Err("not supported by deepseek (model quantization)".into()))
}

/// No adapter is ever created; freeing NULL is a no-op, anything else is logged.
#[no_mangle]
pub extern "C" fn llama_adapter_lora_free(adapter: *mut llama_adapter_lora) {
    if !adapter.is_null() {
        unsupported::<()>("llama_adapter_lora_free", "LoRA adapters")
    }
}

/// Setting no adapters (n_adapters == 0) succeeds (0); any adapter is not supported (-1).
#[no_mangle]
pub extern "C" fn llama_set_adapters_lora(ctx: *mut llama_context, adapters: *mut *mut llama_adapter_lora, n_adapters: usize, scales: *mut f32) -> i32 {
    if n_adapters == 0 && !ctx.is_null() {
        return 0;
    }
    unsupported("llama_set_adapters_lora", "LoRA adapters")
}

/// Clearing the control vector (data NULL) succeeds (0); setting one is not supported (-1).
#[no_mangle]
pub extern "C" fn llama_set_adapter_cvec(ctx: *mut llama_context, data: *const f32, len: usize, n_embd: i32, il_start: i32, il_end: i32) -> i32 {
    if data.is_null() && !ctx.is_null() {
        return 0;
    }
    unsupported("llama_set_adapter_cvec", "control vectors")
}

/// Backend-side sampling: there is no device backend to offload a sampler to, so attaching one
/// fails as upstream's does for a sampler it cannot offload (false, with its warning: the caller
/// samples from the logits); removing one (smpl NULL) succeeds.
#[no_mangle]
pub extern "C" fn llama_set_sampler(ctx: *mut llama_context, seq_id: llama_seq_id, smpl: *mut llama_sampler) -> bool {
    guard_or("llama_set_sampler", false, || {
        // SAFETY: llama.h requires a live context handle (NULL is caught).
        unsafe { super::boundary::as_ref(ctx, "ctx") }?;
        if !smpl.is_null() {
            // SAFETY: a live sampler handle (llama.h); its name is a NUL-terminated string.
            let name = unsafe { std::ffi::CStr::from_ptr(super::sampler_iface::name_of(smpl)) }.to_string_lossy().into_owned();
            crate::log_warn!("llama_set_sampler: sampler '{name}' for seq_id = {seq_id}, cannot be offloaded to the backend (this library runs on the CPU only)");
        }
        Ok(smpl.is_null())
    })
}

/// Always true, as upstream (a parameter filter for training, which is not supported).
#[no_mangle]
pub extern "C" fn llama_opt_param_filter_all(tensor: *const ggml_tensor, userdata: *mut c_void) -> bool {
    true
}

/// Not supported: building models from user tensors. Logs one line; returns NULL.
#[no_mangle]
pub extern "C" fn llama_model_init_from_user(metadata: *mut gguf_context, set_tensor_data: llama_model_set_tensor_data_t, set_tensor_data_ud: *mut c_void, params: llama_model_params) -> *mut llama_model {
    unsupported("llama_model_init_from_user", "building models from user tensors")
}

/// Not supported: loading from a FILE* (use llama_model_load_from_file). Logs one line; returns NULL.
#[no_mangle]
pub extern "C" fn llama_model_load_from_file_ptr(file: *mut libc::FILE, params: llama_model_params) -> *mut llama_model {
    unsupported("llama_model_load_from_file_ptr", "loading from a FILE*")
}

/// Not supported: saving models. Logs one line.
#[no_mangle]
pub extern "C" fn llama_model_save_to_file(model: *const llama_model, path_model: *const c_char) {
    unsupported("llama_model_save_to_file", "saving models")
}

/// Not supported: LoRA adapters. Logs one line; returns NULL.
#[no_mangle]
pub extern "C" fn llama_adapter_lora_init(model: *mut llama_model, path_lora: *const c_char) -> *mut llama_adapter_lora {
    unsupported("llama_adapter_lora_init", "LoRA adapters")
}

/// Not supported: LoRA adapters. Logs one line; returns NULL.
#[no_mangle]
pub extern "C" fn llama_adapter_lora_init_from_file_ptr(model: *mut llama_model, file: *mut libc::FILE) -> *mut llama_adapter_lora {
    unsupported("llama_adapter_lora_init_from_file_ptr", "LoRA adapters")
}

/// Not supported: LoRA adapters. Logs one line; returns -1.
#[no_mangle]
pub extern "C" fn llama_adapter_meta_val_str(adapter: *const llama_adapter_lora, key: *const c_char, buf: *mut c_char, buf_size: usize) -> i32 {
    unsupported("llama_adapter_meta_val_str", "LoRA adapters")
}

/// Not supported: LoRA adapters. Logs one line; returns -1.
#[no_mangle]
pub extern "C" fn llama_adapter_meta_count(adapter: *const llama_adapter_lora) -> i32 {
    unsupported("llama_adapter_meta_count", "LoRA adapters")
}

/// Not supported: LoRA adapters. Logs one line; returns -1.
#[no_mangle]
pub extern "C" fn llama_adapter_meta_key_by_index(adapter: *const llama_adapter_lora, i: i32, buf: *mut c_char, buf_size: usize) -> i32 {
    unsupported("llama_adapter_meta_key_by_index", "LoRA adapters")
}

/// Not supported: LoRA adapters. Logs one line; returns -1.
#[no_mangle]
pub extern "C" fn llama_adapter_meta_val_str_by_index(adapter: *const llama_adapter_lora, i: i32, buf: *mut c_char, buf_size: usize) -> i32 {
    unsupported("llama_adapter_meta_val_str_by_index", "LoRA adapters")
}

/// Not supported: aLoRA adapters. Logs one line; returns 0.
#[no_mangle]
pub extern "C" fn llama_adapter_get_alora_n_invocation_tokens(adapter: *const llama_adapter_lora) -> u64 {
    unsupported("llama_adapter_get_alora_n_invocation_tokens", "aLoRA adapters")
}

/// Not supported: aLoRA adapters. Logs one line; returns NULL.
#[no_mangle]
pub extern "C" fn llama_adapter_get_alora_invocation_tokens(adapter: *const llama_adapter_lora) -> *const llama_token {
    unsupported("llama_adapter_get_alora_invocation_tokens", "aLoRA adapters")
}

/// Not supported: embedding input (token input works). Logs one line; returns -1.
#[no_mangle]
pub extern "C" fn llama_batch_ext_add_embd(batch: *mut llama_batch_ext, seq_id: llama_seq_id, embd: llama_embd) -> i32 {
    unsupported("llama_batch_ext_add_embd", "embedding input")
}

/// Not supported: embedding input (token input works). Logs one line; returns false.
#[no_mangle]
pub extern "C" fn llama_batch_ext_set_embd_token(batch: *mut llama_batch_ext, idx: i32, embd: llama_embd) -> bool {
    unsupported("llama_batch_ext_set_embd_token", "embedding input")
}

/// Not supported: embedding input (token input works). Logs one line; returns false.
#[no_mangle]
pub extern "C" fn llama_batch_ext_set_embd_state(batch: *mut llama_batch_ext, idx: i32, embd: llama_embd) -> bool {
    unsupported("llama_batch_ext_set_embd_state", "embedding input")
}

/// Backend-sampled results: a backend sampler can never be attached (llama_set_sampler above),
/// so these answer as upstream does for a context without one — nothing sampled — and silently:
/// upstream's common library asks on every token before sampling on the CPU.
fn nothing_sampled<R>(name: &str, ctx: *mut llama_context, value: impl FnOnce(&super::handles::ContextOwned) -> R) -> R
where
    R: Fallback,
{
    guard(name, || {
        // SAFETY: a live context handle (NULL is caught), used by one thread at a time.
        Ok(value(unsafe { super::boundary::as_ref(ctx, "ctx")?.owned() }))
    })
}

#[no_mangle]
pub extern "C" fn llama_get_sampled_token_ith(ctx: *mut llama_context, i: i32) -> llama_token {
    nothing_sampled("llama_get_sampled_token_ith", ctx, |_| LLAMA_TOKEN_NULL)
}

#[no_mangle]
pub extern "C" fn llama_get_sampled_probs_ith(ctx: *mut llama_context, i: i32) -> *mut f32 {
    nothing_sampled("llama_get_sampled_probs_ith", ctx, |_| std::ptr::null_mut())
}

#[no_mangle]
pub extern "C" fn llama_get_sampled_probs_count_ith(ctx: *mut llama_context, i: i32) -> u32 {
    nothing_sampled("llama_get_sampled_probs_count_ith", ctx, |_| 0)
}

#[no_mangle]
pub extern "C" fn llama_get_sampled_logits_ith(ctx: *mut llama_context, i: i32) -> *mut f32 {
    nothing_sampled("llama_get_sampled_logits_ith", ctx, |_| std::ptr::null_mut())
}

/// Without backend-sampled logits upstream reports the full vocabulary (the plain logits row).
#[no_mangle]
pub extern "C" fn llama_get_sampled_logits_count_ith(ctx: *mut llama_context, i: i32) -> u32 {
    nothing_sampled("llama_get_sampled_logits_count_ith", ctx, |c| c.ctx.model.vocab.n_tokens() as u32)
}

#[no_mangle]
pub extern "C" fn llama_get_sampled_candidates_ith(ctx: *mut llama_context, i: i32) -> *mut llama_token {
    nothing_sampled("llama_get_sampled_candidates_ith", ctx, |_| std::ptr::null_mut())
}

#[no_mangle]
pub extern "C" fn llama_get_sampled_candidates_count_ith(ctx: *mut llama_context, i: i32) -> u32 {
    nothing_sampled("llama_get_sampled_candidates_count_ith", ctx, |_| 0)
}

/// Not supported: training. Logs one line.
#[no_mangle]
pub extern "C" fn llama_opt_init(lctx: *mut llama_context, model: *mut llama_model, lopt_params: llama_opt_params) {
    unsupported("llama_opt_init", "training")
}

/// Not supported: training. Logs one line.
#[no_mangle]
pub extern "C" fn llama_opt_epoch(lctx: *mut llama_context, dataset: ggml_opt_dataset_t, result_train: ggml_opt_result_t, result_eval: ggml_opt_result_t, idata_split: i64, callback_train: ggml_opt_epoch_callback, callback_eval: ggml_opt_epoch_callback) {
    unsupported("llama_opt_epoch", "training")
}


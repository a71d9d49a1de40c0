//! Upstream's staging C++ API (b11312's src/llama-ext.h), which llama.h programs do not see but
//! upstream's own `libllama-common` calls (llama-completion, llama-cli, ...). Exported under
//! their C++ (Itanium) names, so that under LD_PRELOAD these calls reach our library instead of
//! upstream's libllama, which would read our handles as its own and crash. `build.rs` adds every
//! `export_name` of this file to the version script; cbindgen skips them (they are C++).
//! Devices and memory answer for a CPU-only library (no offload devices, an empty memory
//! breakdown), model queries as upstream answers for a model without MTP/EAGLE/DFlash parts; the
//! speculative-decoding hooks (NextN/MTP embeddings, layer inputs) are not supported and log
//! like src/api/unsupported.rs. The two functions whose arguments or values are C++ objects
//! (`llama_get_memory_breakdown`, `llama_sampler_init_dry_testing`) are C++, in ext_shim.cpp
//! (compiled by build.rs), which calls the `deepseek_ext_*` functions here: their pass through
//! the boundary. Those are hidden from the shared library's exports (see ext_shim.cpp).

#![allow(unused_variables)]

use std::ffi::c_void;

use super::boundary::{as_ref, guard};
use super::handles::{llama_context, llama_model};

fn unsupported<R: super::boundary::Fallback>(name: &str) -> R {
    super::boundary::unsupported(name, "speculative decoding")
}

/// `int32_t llama_model_n_expert(const llama_model *)`: experts per MoE layer (0 for dense models).
/// cbindgen:ignore
#[export_name = "_Z20llama_model_n_expertPK11llama_model"]
pub extern "C" fn llama_model_n_expert_cxx(model: *const llama_model) -> i32 {
    guard("llama_model_n_expert", || {
        // SAFETY: a live model handle (NULL is caught).
        let m = unsafe { as_ref(model, "model") }?;
        Ok(m.model.hp.n_expert() as i32)
    })
}

/// `int32_t llama_model_n_devices(const llama_model *)`: offload devices; the CPU is not one.
/// cbindgen:ignore
#[export_name = "_Z21llama_model_n_devicesPK11llama_model"]
pub extern "C" fn llama_model_n_devices_cxx(model: *const llama_model) -> i32 {
    guard("llama_model_n_devices", || {
        // SAFETY: a live model handle (NULL is caught).
        unsafe { as_ref(model, "model") }?;
        Ok(0)
    })
}

/// `ggml_backend_dev_t llama_model_get_device(const llama_model *, int)`: there is none (NULL,
/// as upstream for an index out of range).
/// cbindgen:ignore
#[export_name = "_Z22llama_model_get_devicePK11llama_modeli"]
pub extern "C" fn llama_model_get_device_cxx(model: *const llama_model, i: i32) -> *mut c_void {
    std::ptr::null_mut()
}

/// The Rust side of `llama_memory_breakdown llama_get_memory_breakdown(const llama_context *)`,
/// which src/api/ext_shim.cpp exports under its C++ name: the compiler builds the `std::map` it
/// returns (empty: no ggml buffer types back our memory). This is its pass through the
/// boundary: a NULL context is logged (the map is still returned, empty). Not exported from the
/// shared library (the shim's hidden reference hides it).
/// cbindgen:ignore
#[no_mangle]
pub extern "C" fn deepseek_ext_memory_breakdown(ctx: *const llama_context) -> bool {
    guard("llama_get_memory_breakdown", || {
        // SAFETY: a live context handle (NULL is caught).
        unsafe { as_ref(ctx, "ctx") }?;
        Ok(true)
    })
}

/// `void llama_set_embeddings_nextn(llama_context *, bool value, bool masked)`: not supported.
/// cbindgen:ignore
#[export_name = "_Z26llama_set_embeddings_nextnP13llama_contextbb"]
pub extern "C" fn llama_set_embeddings_nextn_cxx(ctx: *mut llama_context, value: bool, masked: bool) {
    unsupported::<()>("llama_set_embeddings_nextn")
}

/// `void llama_set_nextn_layer_offset(llama_context *, int32_t)`: not supported.
/// cbindgen:ignore
#[export_name = "_Z28llama_set_nextn_layer_offsetP13llama_contexti"]
pub extern "C" fn llama_set_nextn_layer_offset_cxx(ctx: *mut llama_context, offset: i32) {
    unsupported::<()>("llama_set_nextn_layer_offset")
}

/// `float * llama_get_embeddings_nextn(llama_context *)`: not supported (NULL).
/// cbindgen:ignore
#[export_name = "_Z26llama_get_embeddings_nextnP13llama_context"]
pub extern "C" fn llama_get_embeddings_nextn_cxx(ctx: *mut llama_context) -> *mut f32 {
    unsupported("llama_get_embeddings_nextn")
}

/// `float * llama_get_embeddings_nextn_ith(llama_context *, int32_t)`: not supported (NULL).
/// cbindgen:ignore
#[export_name = "_Z30llama_get_embeddings_nextn_ithP13llama_contexti"]
pub extern "C" fn llama_get_embeddings_nextn_ith_cxx(ctx: *mut llama_context, i: i32) -> *mut f32 {
    unsupported("llama_get_embeddings_nextn_ith")
}

/// `void llama_set_embeddings_layer_inp(llama_context *, uint32_t, bool)`: not supported.
/// cbindgen:ignore
#[export_name = "_Z30llama_set_embeddings_layer_inpP13llama_contextjb"]
pub extern "C" fn llama_set_embeddings_layer_inp_cxx(ctx: *mut llama_context, lid: u32, value: bool) {
    unsupported::<()>("llama_set_embeddings_layer_inp")
}

/// `float * llama_get_embeddings_layer_inp(llama_context *, uint32_t)`: not supported (NULL).
/// cbindgen:ignore
#[export_name = "_Z30llama_get_embeddings_layer_inpP13llama_contextj"]
pub extern "C" fn llama_get_embeddings_layer_inp_cxx(ctx: *mut llama_context, lid: u32) -> *mut f32 {
    unsupported("llama_get_embeddings_layer_inp")
}

/// `llama_context * llama_get_ctx_other(llama_context *)`: no paired context (NULL, as upstream
/// without `ctx_other`).
/// cbindgen:ignore
#[export_name = "_Z19llama_get_ctx_otherP13llama_context"]
pub extern "C" fn llama_get_ctx_other_cxx(ctx: *mut llama_context) -> *mut llama_context {
    std::ptr::null_mut()
}

/// `const int32_t * llama_model_target_layer_ids(const llama_model *)`: our models extract no
/// target layers (NULL, as upstream for such a model).
/// cbindgen:ignore
#[export_name = "_Z28llama_model_target_layer_idsPK11llama_model"]
pub extern "C" fn llama_model_target_layer_ids_cxx(model: *const llama_model) -> *const i32 {
    std::ptr::null()
}

/// `uint32_t llama_model_target_layer_ids_n(const llama_model *)`: none (0), as above.
/// cbindgen:ignore
#[export_name = "_Z30llama_model_target_layer_ids_nPK11llama_model"]
pub extern "C" fn llama_model_target_layer_ids_n_cxx(model: *const llama_model) -> u32 {
    0
}

/// `int32_t llama_model_dflash_selector_top_k(const llama_model *)`: our models have no DFlash
/// selector (0, upstream's value for such a model).
/// cbindgen:ignore
#[export_name = "_Z33llama_model_dflash_selector_top_kPK11llama_model"]
pub extern "C" fn llama_model_dflash_selector_top_k_cxx(model: *const llama_model) -> i32 {
    0
}

/// What src/api/ext_shim.cpp defines for the Rust side.
/// cbindgen:ignore
mod shim {
    use std::ffi::c_void;
    extern "C" {
        /// The `i`-th of the caller's breakers (`const std::vector<std::vector<llama_token>>
        /// *`): its tokens, and their count in `*n`.
        pub fn deepseek_ext_dry_breaker(breakers: *const c_void, i: usize, n: *mut usize) -> *const i32;
    }
}

/// The Rust side of `llama_sampler * llama_sampler_init_dry_testing(float, float, int32_t,
/// int32_t, const std::vector<std::vector<llama_token>> &)` (src/llama-sampler.h), which
/// src/api/ext_shim.cpp exports under its C++ name and forwards here with the vector of
/// `n_breakers` breakers, whose elements only the shim reads (`deepseek_ext_dry_breaker`): the
/// DRY sampler with sequence breakers given as tokens (head token, then the rest), which
/// upstream's test-sampling uses. Upstream's version writes into the sampler that
/// `llama_sampler_init_dry` returned, which under LD_PRELOAD is ours: it must be ours too.
/// Not exported from the shared library (the shim's hidden reference hides it).
///
/// # Safety
/// `breakers` must be the shim's live vector of `n_breakers` vectors (NULL is caught).
/// cbindgen:ignore
#[no_mangle]
pub unsafe extern "C" fn deepseek_ext_dry_testing(
    dry_multiplier: f32,
    dry_base: f32,
    dry_allowed_length: i32,
    dry_penalty_last_n: i32,
    breakers: *const c_void,
    n_breakers: usize,
) -> *mut super::types::llama_sampler {
    guard("llama_sampler_init_dry_testing", || {
        use crate::sampling::dry::Dry;
        let last_n = dry_penalty_last_n.max(0);
        if !Dry::is_enabled(dry_multiplier, dry_base, last_n) {
            return Ok(super::sampling::noop(c"?dry"));
        }
        // SAFETY: only checked for NULL here; the shim reads it.
        unsafe { as_ref(breakers, "seq_breakers") }?;
        let mut map: std::collections::HashMap<i32, Vec<Vec<i32>>> = std::collections::HashMap::new();
        if n_breakers == 0 {
            crate::log_warn!("empty DRY sequence breakers list in llama_sampler_init_dry_testing");
        }
        for i in 0..n_breakers {
            let mut n = 0usize;
            // SAFETY: i < the vector's size (the shim passed it); the shim writes `n`.
            let data = unsafe { shim::deepseek_ext_dry_breaker(breakers, i, &mut n) };
            // SAFETY: the shim's vector holds `n` tokens at `data` for the call (none: any pointer).
            let toks = unsafe { super::boundary::as_slice(data, n, "seq_breakers[i]") }?;
            match toks.split_first() {
                None => crate::log_warn!("skipping DRY empty sequence breaker"),
                Some((&head, tail)) => map.entry(head).or_default().push(tail.to_vec()),
            }
        }
        Ok(super::sampler_iface::new_builtin(Dry::with_token_breakers(dry_multiplier, dry_base, dry_allowed_length, last_n as usize, map)))
    })
}

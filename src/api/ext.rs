//! Upstream's staging C++ API (b11312's src/llama-ext.h), which llama.h programs do not see but
//! upstream's own `libllama-common` calls (llama-completion, llama-cli, ...). Exported under
//! their C++ (Itanium) names, so that under LD_PRELOAD these calls reach our library instead of
//! upstream's libllama, which would read our handles as its own and crash. `build.rs` adds every
//! `export_name` of this file to the version script; cbindgen skips them (they are C++).
//! Devices and memory answer for a CPU-only library (no offload devices, an empty memory
//! breakdown), model queries as upstream answers for a model without MTP/EAGLE/DFlash parts; the
//! speculative-decoding hooks (NextN/MTP embeddings, layer inputs) are not supported and log
//! like src/api/unsupported.rs.

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

/// An empty `std::map<ggml_backend_buffer_type_t, llama_memory_breakdown_data>` as libstdc++
/// lays it out on x86-64 (`_Rb_tree_impl`: the empty comparator padded to 8 bytes, then the
/// header node — colour, parent, leftmost, rightmost — and the node count). An empty tree's
/// header has colour red (0), no parent, and points to itself as leftmost and rightmost.
#[repr(C)]
pub struct EmptyStdMap {
    compare: u64,
    color: i32,
    parent: *mut c_void,
    left: *mut c_void,
    right: *mut c_void,
    node_count: usize,
}

/// `llama_memory_breakdown llama_get_memory_breakdown(const llama_context *)`: the map is
/// returned through the hidden pointer a C++ caller passes first (the Itanium ABI for a class
/// with a non-trivial destructor), and that pointer is returned. The map is empty: no
/// ggml buffer types back our memory, and callers (common_memory_breakdown_print, --fit) then
/// report nothing for it.
///
/// # Safety
/// `out` must be writable storage for the map, as a C++ caller provides.
/// cbindgen:ignore
#[export_name = "_Z26llama_get_memory_breakdownPK13llama_context"]
pub unsafe extern "C" fn llama_get_memory_breakdown_cxx(out: *mut EmptyStdMap, ctx: *const llama_context) -> *mut EmptyStdMap {
    // SAFETY: `out` is the caller's uninitialised return slot of the map's size (48 bytes).
    unsafe {
        let header = std::ptr::addr_of_mut!((*out).color) as *mut c_void;
        out.write(EmptyStdMap { compare: 0, color: 0, parent: std::ptr::null_mut(), left: header, right: header, node_count: 0 });
    }
    out
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

/// libstdc++'s `std::vector<T>` on x86-64: begin, end, end of storage.
#[repr(C)]
pub struct StdVector<T> {
    begin: *const T,
    end: *const T,
    cap: *const T,
}

impl<T> StdVector<T> {
    /// # Safety
    /// `self` must be a live vector of `T` as libstdc++ lays it out.
    unsafe fn as_slice(&self) -> &[T] {
        if self.begin.is_null() || self.end <= self.begin {
            return &[];
        }
        // SAFETY: a live vector's [begin, end) holds its elements (caller).
        unsafe { std::slice::from_raw_parts(self.begin, self.end.offset_from(self.begin) as usize) }
    }
}

/// `llama_sampler * llama_sampler_init_dry_testing(float, float, int32_t, int32_t, const
/// std::vector<std::vector<llama_token>> &)` (src/llama-sampler.h): the DRY sampler with
/// sequence breakers given as tokens (head token, then the rest), which upstream's
/// test-sampling uses. Upstream's version writes into the sampler that `llama_sampler_init_dry`
/// returned, which under LD_PRELOAD is ours: it must be ours too.
/// cbindgen:ignore
#[export_name = "_Z30llama_sampler_init_dry_testingffiiRKSt6vectorIS_IiSaIiEESaIS1_EE"]
pub unsafe extern "C" fn llama_sampler_init_dry_testing_cxx(
    dry_multiplier: f32,
    dry_base: f32,
    dry_allowed_length: i32,
    dry_penalty_last_n: i32,
    seq_breakers: *const StdVector<StdVector<i32>>,
) -> *mut super::types::llama_sampler {
    guard("llama_sampler_init_dry_testing", || {
        use crate::sampling::dry::Dry;
        let last_n = dry_penalty_last_n.max(0);
        if !Dry::is_enabled(dry_multiplier, dry_base, last_n) {
            return Ok(super::sampling::noop(c"?dry"));
        }
        // SAFETY: a live vector reference (NULL is caught).
        let outer = unsafe { as_ref(seq_breakers, "seq_breakers") }?;
        let mut map: std::collections::HashMap<i32, Vec<Vec<i32>>> = std::collections::HashMap::new();
        // SAFETY: the caller's vectors are live for the call.
        let breakers = unsafe { outer.as_slice() };
        if breakers.is_empty() {
            crate::log_warn!("empty DRY sequence breakers list in llama_sampler_init_dry_testing");
        }
        for b in breakers {
            // SAFETY: as above.
            let toks = unsafe { b.as_slice() };
            match toks.split_first() {
                None => crate::log_warn!("skipping DRY empty sequence breaker"),
                Some((&head, tail)) => map.entry(head).or_default().push(tail.to_vec()),
            }
        }
        Ok(super::sampler_iface::new_builtin(Dry::with_token_breakers(dry_multiplier, dry_base, dry_allowed_length, last_n as usize, map)))
    })
}

//! Process-level functions: backend init/free, logging, time, system info, capabilities.

use std::ffi::{c_char, c_void};

use super::boundary::guard;
use super::counters::now_us;
use super::types::ggml_log_callback;

#[no_mangle]
pub extern "C" fn llama_backend_init() {
    guard("llama_backend_init", || {
        crate::kernels::cpu_features();
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn llama_backend_free() {}

#[no_mangle]
pub extern "C" fn llama_log_set(log_callback: ggml_log_callback, user_data: *mut c_void) {
    guard("llama_log_set", || {
        crate::sys::log::set_sink(log_callback, user_data);
        Ok(())
    })
}

/// # Safety
/// `log_callback` and `user_data` must each be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn llama_log_get(log_callback: *mut ggml_log_callback, user_data: *mut *mut c_void) {
    guard("llama_log_get", || {
        let (cb, ud) = crate::sys::log::sink();
        // SAFETY: the caller passes writable pointers or NULL.
        unsafe {
            if let Some(p) = log_callback.as_mut() {
                *p = cb;
            }
            if let Some(p) = user_data.as_mut() {
                *p = ud;
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn llama_time_us() -> i64 {
    now_us()
}

#[no_mangle]
pub extern "C" fn ggml_time_us() -> i64 {
    now_us()
}

#[no_mangle]
pub extern "C" fn ggml_time_init() {}

/// Upstream loads its dynamic backends (CPU variants, GPUs); here the CPU kernels are built in and
/// chosen at run time, so there is nothing to load: said once.
#[no_mangle]
pub extern "C" fn ggml_backend_load_all() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        crate::log_info!("ggml_backend_load_all: no backends to load: the CPU kernels are built into this library (level chosen at run time: {:?})", crate::kernels::simd::level());
    }
}

#[no_mangle]
pub extern "C" fn llama_print_system_info() -> *const c_char {
    crate::kernels::system_info().as_ptr()
}

#[no_mangle]
pub extern "C" fn llama_supports_mmap() -> bool {
    true
}

#[no_mangle]
pub extern "C" fn llama_supports_mlock() -> bool {
    // load_mode MLOCK / MMAP_MLOCK lock the model's bytes (mlock(2))
    true
}

#[no_mangle]
pub extern "C" fn llama_supports_gpu_offload() -> bool {
    false
}

#[no_mangle]
pub extern "C" fn llama_supports_rpc() -> bool {
    false
}

#[no_mangle]
pub extern "C" fn llama_max_devices() -> usize {
    1
}

#[no_mangle]
pub extern "C" fn llama_max_parallel_sequences() -> usize {
    crate::kv::seqset::MAX_SEQ
}

//! Shared pieces of the fuzz targets: a log sink that turns a panic caught at the API boundary
//! into a crash (the boundary keeps callers alive, but an internal panic is still a bug the
//! fuzzer must report), and paths of the fixtures the targets load.

use std::ffi::{c_char, c_void, CStr};

use deepseek::api::backend::llama_log_set;
use deepseek::api::types::ggml_log_level;

unsafe extern "C" fn abort_on_internal_error(_level: ggml_log_level, text: *const c_char, _ud: *mut c_void) {
    // SAFETY: the library passes a NUL-terminated message.
    let msg = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    if msg.contains("internal error") {
        eprintln!("{msg}");
        std::process::abort();
    }
}

/// Silences ordinary error logs (bad input is expected) and aborts on internal errors.
pub fn install_log_guard() {
    llama_log_set(Some(abort_on_internal_error), std::ptr::null_mut());
}

/// A file under the main crate's tests/data.
pub fn fixture(rel: &str) -> std::ffi::CString {
    std::ffi::CString::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/").to_string() + rel).unwrap()
}

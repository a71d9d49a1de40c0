//! The log sink of every test binary that includes `mod common`: installed before `main` (an
//! `.init_array` entry, so no test can forget it), it aborts the test process on a line
//! containing "internal error" — what the API boundary logs when it catches a panic
//! (`src/api/boundary.rs`): the caller gets a failure value, but a panic is a bug, never a clean
//! rejection (as `fuzz/src/lib.rs` does for the fuzzers). Other lines are captured by `logged`
//! on the thread that logs them, or printed to stderr as the library's default sink would.
//!
//! Tests never call `llama_log_set` themselves (`log_guard_is_the_only_sink` in
//! tests/no_global_state.rs checks that); `install` restores the guard after a test changed
//! nothing but wants to be explicit.

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr};
use std::io::Write;

use deepseek::api::backend::llama_log_set;
use deepseek::api::types::ggml_log_level;

thread_local! {
    /// Lines logged on this thread while `logged` runs.
    static CAPTURE: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn print_threshold() -> ggml_log_level {
    match std::env::var("DEEPSEEK_LOG").as_deref() {
        Ok("debug") => ggml_log_level::GGML_LOG_LEVEL_DEBUG,
        Ok("info") => ggml_log_level::GGML_LOG_LEVEL_INFO,
        Ok("none") => ggml_log_level::GGML_LOG_LEVEL_CONT,
        _ => ggml_log_level::GGML_LOG_LEVEL_WARN,
    }
}

unsafe extern "C" fn guard_sink(level: ggml_log_level, text: *const c_char, _ud: *mut c_void) {
    // SAFETY: the library passes a NUL-terminated message.
    let msg = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    if msg.contains("internal error") {
        // Straight to the file descriptor: libtest's capture of eprintln! dies with the process.
        let _ = writeln!(std::io::stderr(), "\nTEST FAILED: the library caught a panic at its C boundary (a bug, not a clean rejection):\n{msg}");
        std::process::abort();
    }
    let captured = CAPTURE
        .try_with(|c| match c.borrow_mut().as_mut() {
            Some(buf) => {
                buf.push_str(&msg);
                true
            }
            None => false,
        })
        .unwrap_or(false);
    if !captured && level >= print_threshold() {
        eprint!("{msg}");
    }
}

/// Installs the guard as the library's log sink (done before `main`; idempotent).
pub fn install() {
    llama_log_set(Some(guard_sink), std::ptr::null_mut());
}

extern "C" fn install_at_start() {
    install();
}

// Runs `install` before the test harness starts, in every test binary that has `mod common`.
#[used]
#[link_section = ".init_array"]
static INSTALL_AT_START: extern "C" fn() = install_at_start;

/// Runs `f`, returning its result and what this thread logged meanwhile (still aborting on an
/// internal error).
pub fn logged<R>(f: impl FnOnce() -> R) -> (R, String) {
    let outer = CAPTURE.with(|c| c.borrow_mut().replace(String::new()));
    let r = f();
    let text = CAPTURE.with(|c| {
        let mut c = c.borrow_mut();
        let text = std::mem::replace(&mut *c, outer).unwrap_or_default();
        if let Some(buf) = c.as_mut() {
            buf.push_str(&text);
        }
        text
    });
    (r, text)
}

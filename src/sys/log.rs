//! The log sink behind `llama_log_set`. llama.h makes the sink process-wide, so it is the one
//! piece of global state: an immutable (callback, user_data) pair published through
//! crossbeam-epoch, replaced whole by `set_sink`, read lock-free by every log call.

#![allow(non_camel_case_types)]
use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::Ordering;

use crossbeam_epoch::{self as epoch, Atomic, Owned};
use once_cell::sync::Lazy;

/// ggml's log levels (values match `enum ggml_log_level`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ggml_log_level {
    GGML_LOG_LEVEL_NONE = 0,
    GGML_LOG_LEVEL_DEBUG = 1,
    GGML_LOG_LEVEL_INFO = 2,
    GGML_LOG_LEVEL_WARN = 3,
    GGML_LOG_LEVEL_ERROR = 4,
    GGML_LOG_LEVEL_CONT = 5,
}

pub type ggml_log_callback =
    Option<unsafe extern "C" fn(level: ggml_log_level, text: *const c_char, user_data: *mut c_void)>;

#[derive(Clone, Copy)]
struct Sink {
    callback: ggml_log_callback,
    user_data: *mut c_void,
}

// SAFETY: the user_data pointer is handed back to the user's callback only; llama.h makes the
// caller responsible for its thread-safety, as upstream does.
unsafe impl Send for Sink {}
// SAFETY: as above.
unsafe impl Sync for Sink {}

static SINK: Lazy<Atomic<Sink>> = Lazy::new(|| Atomic::new(Sink { callback: None, user_data: std::ptr::null_mut() }));

/// Installs a callback (None restores the default stderr sink).
pub fn set_sink(callback: ggml_log_callback, user_data: *mut c_void) {
    let guard = epoch::pin();
    let old = SINK.swap(Owned::new(Sink { callback, user_data }), Ordering::AcqRel, &guard);
    // SAFETY: `old` was published by SINK and is now unreachable to new readers; readers that
    // still hold it are pinned, so destruction waits for them.
    unsafe { guard.defer_destroy(old) };
}

/// The installed (callback, user_data).
pub fn sink() -> (ggml_log_callback, *mut c_void) {
    let guard = epoch::pin();
    let shared = SINK.load(Ordering::Acquire, &guard);
    // SAFETY: non-null since initialisation, kept alive by the pin.
    let s = unsafe { shared.deref() };
    (s.callback, s.user_data)
}

/// Minimum level printed by the default sink: errors and warnings, or `DEEPSEEK_LOG=info|debug`.
fn default_threshold() -> ggml_log_level {
    match std::env::var("DEEPSEEK_LOG").as_deref() {
        Ok("debug") => ggml_log_level::GGML_LOG_LEVEL_DEBUG,
        Ok("info") => ggml_log_level::GGML_LOG_LEVEL_INFO,
        Ok("none") => ggml_log_level::GGML_LOG_LEVEL_CONT,
        _ => ggml_log_level::GGML_LOG_LEVEL_WARN,
    }
}

pub fn emit(level: ggml_log_level, msg: std::fmt::Arguments<'_>) {
    let mut text = std::fmt::format(msg);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    let (callback, user_data) = sink();
    match callback {
        Some(cb) => {
            let c = CString::new(text.replace('\0', "\\0")).unwrap_or_default();
            // SAFETY: the user installed this callback through llama_log_set with this user_data.
            unsafe { cb(level, c.as_ptr(), user_data) };
        }
        None => {
            if level >= default_threshold() {
                eprint!("{text}");
            }
        }
    }
}

#[macro_export]
macro_rules! log_error {
    ($($arg:tt)*) => { $crate::sys::log::emit($crate::sys::log::ggml_log_level::GGML_LOG_LEVEL_ERROR, format_args!($($arg)*)) };
}
#[macro_export]
macro_rules! log_warn {
    ($($arg:tt)*) => { $crate::sys::log::emit($crate::sys::log::ggml_log_level::GGML_LOG_LEVEL_WARN, format_args!($($arg)*)) };
}
#[macro_export]
macro_rules! log_info {
    ($($arg:tt)*) => { $crate::sys::log::emit($crate::sys::log::ggml_log_level::GGML_LOG_LEVEL_INFO, format_args!($($arg)*)) };
}

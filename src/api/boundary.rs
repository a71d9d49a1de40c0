//! The one door between C and Rust: every exported function runs its body through `guard`,
//! which catches panics, logs the reason for any failure with the function's name, and returns
//! the function's documented failure value. Pointer conversions live here too.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// The value a function returns when it fails.
pub trait Fallback {
    fn fallback() -> Self;
}

impl<T> Fallback for *mut T {
    fn fallback() -> Self {
        std::ptr::null_mut()
    }
}
impl<T> Fallback for *const T {
    fn fallback() -> Self {
        std::ptr::null()
    }
}
impl Fallback for () {
    fn fallback() -> Self {}
}
impl Fallback for bool {
    fn fallback() -> Self {
        false
    }
}
macro_rules! fallback_value {
    ($($t:ty = $v:expr),*) => { $(impl Fallback for $t { fn fallback() -> Self { $v } })* };
}
fallback_value!(i32 = -1, i64 = -1, u32 = 0, u64 = 0, usize = 0, f32 = 0.0);

/// Runs `body`; on Err or panic logs "`name`: reason" and returns `R::fallback()`.
pub fn guard<R: Fallback>(name: &str, body: impl FnOnce() -> Result<R, String>) -> R {
    guard_or(name, R::fallback(), body)
}

/// As `guard`, with an explicit failure value.
/// The one way a feature deepseek does not implement answers: logs "`name`: not supported by
/// deepseek (`feature`)" and returns the function's failure value (NULL, -1, false, 0).
pub fn unsupported<R: Fallback>(name: &str, feature: &str) -> R {
    guard(name, || Err(format!("not supported by deepseek ({feature})")))
}

pub fn guard_or<R>(name: &str, on_fail: R, body: impl FnOnce() -> Result<R, String>) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(r)) => r,
        Ok(Err(reason)) => {
            crate::log_error!("{name}: {reason}");
            on_fail
        }
        Err(panic) => {
            let what = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
            crate::log_error!("{name}: internal error: {}", what.unwrap_or_else(|| "panic".into()));
            on_fail
        }
    }
}

/// A shared reference from a C pointer, or an error naming the argument.
///
/// # Safety
/// `p` must be NULL or point to a live `T` for the duration of the returned borrow.
pub unsafe fn as_ref<'a, T>(p: *const T, what: &str) -> Result<&'a T, String> {
    // SAFETY: guaranteed by the caller.
    unsafe { p.as_ref() }.ok_or_else(|| format!("{what} is NULL"))
}

/// A unique reference from a C pointer, or an error naming the argument.
///
/// # Safety
/// `p` must be NULL or point to a live `T` not accessed elsewhere during the borrow.
pub unsafe fn as_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, String> {
    // SAFETY: guaranteed by the caller.
    unsafe { p.as_mut() }.ok_or_else(|| format!("{what} is NULL"))
}

/// A slice from a C pointer and length (len 0 accepts NULL).
///
/// # Safety
/// When len > 0, `p` must be NULL or point to `len` readable `T`s.
pub unsafe fn as_slice<'a, T>(p: *const T, len: usize, what: &str) -> Result<&'a [T], String> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: guaranteed by the caller.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// The bytes of a NUL-terminated C string (without the NUL), whatever their encoding.
///
/// # Safety
/// `p` must be NULL or a NUL-terminated string.
pub unsafe fn as_c_bytes<'a>(p: *const std::ffi::c_char, what: &str) -> Result<&'a [u8], String> {
    if p.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: guaranteed by the caller.
    Ok(unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes())
}

/// A UTF-8 string from a NUL-terminated C string.
///
/// # Safety
/// `p` must be NULL or a NUL-terminated string.
pub unsafe fn as_str<'a>(p: *const std::ffi::c_char, what: &str) -> Result<&'a str, String> {
    if p.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: guaranteed by the caller.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_str().map_err(|_| format!("{what} is not valid UTF-8"))
}

/// Copies `s` into a C buffer as snprintf does: returns the full length, writes at most
/// `size - 1` bytes plus a NUL.
///
/// # Safety
/// `buf` must be NULL (with size 0) or writable for `size` bytes.
pub unsafe fn write_c_string(s: &str, buf: *mut std::ffi::c_char, size: usize) -> i32 {
    if !buf.is_null() && size > 0 {
        let n = s.len().min(size - 1);
        // SAFETY: buf is writable for size bytes (caller) and n + 1 <= size.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
            *buf.add(n) = 0;
        }
    }
    i32::try_from(s.len()).unwrap_or(i32::MAX)
}

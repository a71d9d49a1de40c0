//! `strftime_now`: the local time, formatted by the C library's `strftime` as Python's
//! `datetime.now().strftime(...)` (and upstream's `std::strftime`) format it.

use std::ffi::CString;

pub fn strftime_now(fmt: &str) -> Result<String, String> {
    // SAFETY: time(NULL) only reads the clock.
    strftime_at(fmt, unsafe { libc::time(std::ptr::null_mut()) } as i64)
}

/// `fmt` applied to the local time at `unix_secs`.
pub fn strftime_at(fmt: &str, unix_secs: i64) -> Result<String, String> {
    if fmt.len() > 256 {
        return Err("strftime_now: the format is longer than 256 bytes".into());
    }
    let cfmt = CString::new(fmt).map_err(|_| "strftime_now: the format holds a NUL byte".to_string())?;
    let now = unix_secs as libc::time_t;
    // SAFETY: an all-zero tm is a valid value to be overwritten.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live locals; localtime_r is the re-entrant form.
    if unsafe { libc::localtime_r(&now, &mut tm) }.is_null() {
        return Err("strftime_now: the local time is unknown".into());
    }
    let mut buf = vec![0u8; 1024];
    // SAFETY: buf has buf.len() writable bytes; cfmt is NUL-terminated; tm was filled above.
    let n = unsafe { libc::strftime(buf.as_mut_ptr().cast(), buf.len(), cfmt.as_ptr(), &tm) };
    if n == 0 && !fmt.is_empty() {
        return Err("strftime_now: the formatted time is empty or longer than 1024 bytes".into());
    }
    buf.truncate(n);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_the_date() {
        let y = super::strftime_now("%Y").unwrap();
        assert!(y.len() == 4 && y.starts_with("20"), "{y}");
        let d = super::strftime_now("%d %b %Y").unwrap();
        assert_eq!(d.len(), 11, "{d}");
        assert!(super::strftime_now("a\0b").is_err());
    }
}

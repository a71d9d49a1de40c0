//! What the benchmark programs share.

/// CPU seconds (all threads) used by the process so far.
pub fn cpu_seconds() -> f64 {
    // SAFETY: clock_gettime writes into the zeroed struct we own.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

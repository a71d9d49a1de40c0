//! The atomics and `Arc` the engine's lock-free parts are written with (`sys::sync`: std's in
//! the library, loom's under `--cfg loom`, so the loom tests (`loom_tests.rs`) explore every
//! interleaving of exactly the code the library runs). Also the futex wait/wake the blocking
//! calls use (a kernel wait queue on an atomic word: nothing is locked in user space).

pub(crate) use crate::sys::sync::{Arc, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Sleeps while `word` holds `expected`, at most `timeout`; returns early on `wake`, on a
/// spurious wake-up or when the value has already changed. Never called under loom.
#[cfg(not(loom))]
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: std::time::Duration) {
    let ts = libc::timespec { tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: `word` is a live, aligned 32-bit atomic for the duration of the call; FUTEX_WAIT
    // only reads it and the timespec lives on this stack frame.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, expected, &ts as *const libc::timespec);
    }
}

/// Wakes every thread sleeping in `futex_wait` on `word`.
#[cfg(not(loom))]
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned 32-bit atomic; FUTEX_WAKE does not access user memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX);
    }
}

/// A futex word: `notify` changes it and wakes its sleepers, `wait` sleeps until it changes.
pub(crate) struct Notify(AtomicU32);

impl Notify {
    pub(crate) fn new() -> Notify {
        Notify(AtomicU32::new(0))
    }

    /// The current value, to pass to `wait` after checking for work.
    pub(crate) fn seen(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }

    pub(crate) fn notify(&self) {
        self.0.fetch_add(1, Ordering::Release);
        #[cfg(not(loom))]
        futex_wake(&self.0);
    }

    /// Sleeps until `notify` is called after `seen` was read, or `timeout` passes.
    #[cfg(not(loom))]
    pub(crate) fn wait(&self, seen: u32, timeout: std::time::Duration) {
        if self.0.load(Ordering::Acquire) == seen {
            futex_wait(&self.0, seen, timeout);
        }
    }

    /// Under loom: gives the other threads a turn.
    #[cfg(loom)]
    pub(crate) fn wait(&self, _seen: u32, _timeout: std::time::Duration) {
        loom::thread::yield_now();
    }
}

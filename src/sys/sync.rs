//! The synchronisation primitives the library's lock-free parts are written with — atomics,
//! `Arc`, threads and parking, the spin hint, and an `UnsafeCell` with loom's closure API:
//! std's in normal builds, loom's under `--cfg loom`, so the loom tests (`scripts/loom.sh`)
//! explore every interleaving of exactly the code the library runs (the thread pool, the KV
//! cache's sequence table, the serving engine). Under loom a spin loop's hint is a yield to
//! the other threads (loom cannot explore an unbounded spin). Process-wide statics
//! (`sys::stats`) stay std atomics: loom's exist only inside a model.

#[cfg(loom)]
pub(crate) use loom::{
    cell::UnsafeCell,
    hint::spin_loop,
    sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    sync::Arc,
    thread,
};

#[cfg(not(loom))]
pub(crate) use std::{
    hint::spin_loop,
    sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    sync::Arc,
    thread,
};

/// Wakes `t` from `thread::park`. Under loom, first a yield to the other threads: loom's
/// `unpark` hands the waker's whole history to `t` at once, parked or not (std promises that
/// only to a `park` that then returns), and is no scheduling point; without the yield loom
/// would never run a spinning thread between the store that publishes work and the `unpark`
/// after it, and so would hide a publication that lacks Release/Acquire.
#[inline(always)]
pub(crate) fn unpark(t: &thread::Thread) {
    #[cfg(loom)]
    thread::yield_now();
    t.unpark();
}

/// `std::cell::UnsafeCell` with loom's API: the pointer is handed to a closure, so under loom
/// (`loom::cell::UnsafeCell`) each access is checked against the others — a read and a write
/// that are not ordered by happens-before fail the model as a data race.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(v: T) -> UnsafeCell<T> {
        UnsafeCell(std::cell::UnsafeCell::new(v))
    }

    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// A marker in memory that other threads read and that is freed later (an epoch-reclaimed
/// snapshot). Under loom `read` reads a cell and dropping the marker writes it, so a model
/// fails when the memory is read without being ordered after its creation (published without
/// Release/Acquire) or freed without every read being ordered before the free (a use after
/// free). Zero-sized and free in normal builds.
#[derive(Debug)]
pub(crate) struct AccessCheck(#[cfg(loom)] loom::cell::UnsafeCell<()>);

impl AccessCheck {
    #[inline(always)]
    pub(crate) fn new() -> AccessCheck {
        AccessCheck(
            #[cfg(loom)]
            loom::cell::UnsafeCell::new(()),
        )
    }

    #[inline(always)]
    pub(crate) fn read(&self) {
        #[cfg(loom)]
        self.0.with(|_| ());
    }
}

#[cfg(loom)]
impl Drop for AccessCheck {
    fn drop(&mut self) {
        // not while a failed model unwinds (loom's state is gone: a second panic would abort)
        if !std::thread::panicking() {
            self.0.with_mut(|_| ());
        }
    }
}

// SAFETY: under loom the marker's cell holds `()` and is only accessed through loom's checked
// `with`/`with_mut`, which report unordered accesses instead of racing; in normal builds it is
// an empty struct.
#[cfg(loom)]
unsafe impl Sync for AccessCheck {}

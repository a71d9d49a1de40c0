//! The library's heap: jemalloc as the global allocator (symbols prefixed `_rjem_`, so a host
//! program's own malloc is untouched), its statistics, and the purge that hands freed pages
//! back to the OS after a context or model is freed. Built without the `jemalloc` feature
//! (the memcheck build), the system allocator serves instead and the jemalloc figures read 0.
//! Also: fallible allocation for buffers sized by input.

use std::alloc::Layout;

use super::pages::ZeroIsValid;

#[cfg(feature = "jemalloc")]
#[global_allocator]
static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// A vector of `n` zeros, or an error naming `what` when memory is short. The memory comes
/// zeroed from the allocator (fresh pages for large sizes), not written here, so a large
/// request costs nothing until it is used.
pub fn try_zeroed<T: ZeroIsValid>(n: usize, what: &str) -> Result<Vec<T>, String> {
    let fail = || format!("cannot allocate {} bytes for {what}", n.saturating_mul(std::mem::size_of::<T>()));
    let layout = Layout::array::<T>(n).map_err(|_| fail())?;
    if layout.size() == 0 {
        return Ok(vec![zero(); n]);
    }
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if p.is_null() {
        return Err(fail());
    }
    // SAFETY: p was allocated by the global allocator with the layout of [T; n]; all n
    // elements are zero bytes, a valid T (ZeroIsValid); length and capacity are n.
    Ok(unsafe { Vec::from_raw_parts(p, n, n) })
}

fn zero<T: ZeroIsValid>() -> T {
    // SAFETY: ZeroIsValid promises the all-zero pattern is a valid T.
    unsafe { std::mem::zeroed() }
}

/// What jemalloc holds, in bytes: handed out to the program, resident in physical memory,
/// and retained (virtual memory kept for reuse, not resident).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapStats {
    pub allocated: u64,
    pub resident: u64,
    pub retained: u64,
}

/// Fresh heap statistics (jemalloc caches them; this refreshes the cache first).
#[cfg(feature = "jemalloc")]
pub fn heap_stats() -> HeapStats {
    use tikv_jemalloc_ctl::{epoch, stats};
    if epoch::advance().is_err() {
        return HeapStats::default();
    }
    HeapStats {
        allocated: stats::allocated::read().unwrap_or(0) as u64,
        resident: stats::resident::read().unwrap_or(0) as u64,
        retained: stats::retained::read().unwrap_or(0) as u64,
    }
}

#[cfg(not(feature = "jemalloc"))]
pub fn heap_stats() -> HeapStats {
    HeapStats::default()
}

/// Returns the dirty pages of every jemalloc arena to the OS (MADV_DONTNEED / munmap), so
/// that freeing a context or model really lowers the process's anonymous memory.
#[cfg(feature = "jemalloc")]
pub fn purge() {
    // MALLCTL_ARENAS_ALL (4096) addresses every arena.
    const PURGE_ALL: &[u8] = b"arena.4096.purge\0";
    // SAFETY: "arena.<i>.purge" is an action: it takes no old or new value, which is what the
    // NULL pointers and zero length say; the name is NUL-terminated.
    let rc = unsafe { tikv_jemalloc_sys::mallctl(PURGE_ALL.as_ptr().cast(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), 0) };
    if rc != 0 {
        crate::log_warn!("jemalloc purge failed (error {rc}); freed pages stay cached until reuse");
    }
}

#[cfg(not(feature = "jemalloc"))]
pub fn purge() {}

/// After a context or model is freed: lets the epoch reclaim replaced snapshots this thread
/// retired (each flush can advance the global epoch by one; two advances expire a bag), then
/// purges jemalloc, so the process's anonymous memory drops at once.
pub fn release_freed() {
    for _ in 0..3 {
        crossbeam_epoch::pin().flush();
    }
    purge();
}

/// Bytes this thread has allocated since it started (monotonic; 0 without jemalloc). Two
/// readings around a piece of code tell whether it allocated.
#[cfg(feature = "jemalloc")]
pub fn thread_allocated_bytes() -> u64 {
    tikv_jemalloc_ctl::thread::allocatedp::read().map(|p| p.get()).unwrap_or(0)
}

#[cfg(not(feature = "jemalloc"))]
pub fn thread_allocated_bytes() -> u64 {
    0
}

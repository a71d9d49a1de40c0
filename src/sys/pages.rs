//! Page-aligned buffers taken straight from the OS (anonymous private mappings): the KV cache
//! and owned model weights live here, so that freeing them is an munmap that returns the
//! memory at once, and clearing them is MADV_DONTNEED (the kernel hands back zero pages).
//! Fresh pages read as zero, so a new buffer costs nothing until it is written.

use std::marker::PhantomData;
use std::ptr::NonNull;

/// Element types whose all-zero bit pattern is a valid value (what a fresh page holds).
pub trait ZeroIsValid: Copy {}
impl ZeroIsValid for u8 {}
impl ZeroIsValid for u16 {}
impl ZeroIsValid for f32 {}
impl ZeroIsValid for i32 {}
impl ZeroIsValid for u32 {}
impl ZeroIsValid for usize {}
impl<A: ZeroIsValid, B: ZeroIsValid> ZeroIsValid for (A, B) {}

/// The memory the kernel could hand out now without swapping (`MemAvailable` of
/// /proc/meminfo), or None where that cannot be read.
pub fn available_memory() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `len` elements of `T` in their own anonymous mapping.
pub struct Pages<T: ZeroIsValid> {
    ptr: NonNull<T>,
    len: usize,
    /// Mapped length in bytes (0 when len is 0: nothing is mapped).
    bytes: usize,
    _owns: PhantomData<T>,
}

// SAFETY: Pages uniquely owns its mapping; access follows Rust's borrow rules through
// as_slice/as_mut_slice.
unsafe impl<T: ZeroIsValid + Send> Send for Pages<T> {}
// SAFETY: shared access only reads.
unsafe impl<T: ZeroIsValid + Sync> Sync for Pages<T> {}

impl<T: ZeroIsValid> Pages<T> {
    /// Maps `len` zeroed elements, or explains why it could not (never aborts).
    pub fn zeroed(len: usize, what: &str) -> Result<Pages<T>, String> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| format!("{what}: size overflows"))?;
        if bytes == 0 {
            return Ok(Pages { ptr: NonNull::dangling(), len, bytes: 0, _owns: PhantomData });
        }
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches
        // no existing memory; the result is checked for MAP_FAILED below.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        if p == libc::MAP_FAILED {
            return Err(format!("cannot allocate {bytes} bytes for {what}: {}", std::io::Error::last_os_error()));
        }
        let ptr = NonNull::new(p.cast::<T>()).ok_or_else(|| format!("cannot allocate {bytes} bytes for {what}"))?;
        Ok(Pages { ptr, len, bytes, _owns: PhantomData })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Asks for transparent huge pages (`MADV_HUGEPAGE`) for a large buffer written once and
    /// streamed often (repacked weights): fewer page faults filling it, fewer TLB misses
    /// reading it. Advice only: where huge pages are off, nothing changes.
    pub fn advise_huge(&self) {
        if self.bytes >= 2 << 20 {
            // SAFETY: the range is exactly this buffer's own mapping; the advice changes no
            // contents.
            unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.bytes, libc::MADV_HUGEPAGE) };
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes mapped for this buffer.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The buffer's start, with the mapping's own provenance (for writes by whoever holds
    /// the right to, such as `FileBytes::discard`).
    pub fn as_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }

    pub fn as_slice(&self) -> &[T] {
        // SAFETY: ptr is valid (or dangling with len 0) for len initialised elements: fresh
        // pages are zero, a valid T by ZeroIsValid.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as above; &mut self gives unique access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Sets every element to zero by giving the pages back to the kernel (they come back as
    /// zero pages when next touched), so a cleared buffer holds no resident memory.
    pub fn clear(&mut self) {
        if self.bytes == 0 {
            return;
        }
        // SAFETY: the range is exactly this buffer's own private anonymous mapping, for which
        // MADV_DONTNEED means "zero-fill on next access".
        let rc = unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.bytes, libc::MADV_DONTNEED) };
        if rc != 0 {
            self.as_mut_slice().iter_mut().for_each(|x| *x = zero());
        }
    }
}

fn zero<T: ZeroIsValid>() -> T {
    // SAFETY: ZeroIsValid promises the all-zero pattern is a valid T.
    unsafe { std::mem::zeroed() }
}

impl<T: ZeroIsValid> Drop for Pages<T> {
    fn drop(&mut self) {
        if self.bytes != 0 {
            // SAFETY: unmaps exactly the mapping made in `zeroed`; no borrow outlives self.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.bytes) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_pages_are_zero_and_clear_zeroes() {
        let mut p = Pages::<u16>::zeroed(10_000, "test").unwrap();
        assert!(p.as_slice().iter().all(|&x| x == 0));
        p.as_mut_slice().iter_mut().enumerate().for_each(|(i, x)| *x = i as u16 | 1);
        p.clear();
        assert!(p.as_slice().iter().all(|&x| x == 0));
        assert_eq!(p.bytes(), 20_000);
    }

    #[test]
    fn impossible_size_is_an_error() {
        assert!(Pages::<f32>::zeroed(usize::MAX / 2, "huge").is_err());
        assert!(Pages::<u8>::zeroed(1 << 50, "huge").err().is_some_and(|e| e.contains("huge")));
    }
}

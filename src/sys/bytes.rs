//! The bytes of a model file: a read-only memory mapping (default) or an owned, page-aligned
//! copy (`LLAMA_LOAD_MODE_NONE`). Whoever owns a `FileBytes` owns the mapping;
//! dropping it unmaps the file or frees the buffer.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::pages::Pages;
use super::stats;

pub enum FileBytes {
    Mapped(memmap2::Mmap),
    /// A private anonymous mapping (page-aligned: enough for any SIMD load and GGUF's
    /// alignment), filled once and then read-only; freed with munmap.
    Owned(Pages<u8>),
}

impl FileBytes {
    /// Maps the file read-only.
    pub fn map(path: &Path) -> Result<FileBytes, String> {
        let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let len = file.metadata().map_err(|e| format!("cannot stat {}: {e}", path.display()))?.len();
        if len == 0 {
            return Ok(FileBytes::owned(Pages::zeroed(0, "an empty file")?));
        }
        // SAFETY: the mapping is read-only; a model file changed underneath a running process is
        // outside what any mmap-based loader (upstream included) can defend against.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| format!("cannot mmap {}: {e}", path.display()))?;
        stats::MAPPED_BYTES.add(map.len() as i64);
        Ok(FileBytes::Mapped(map))
    }

    /// Reads the whole file into an owned aligned buffer.
    pub fn read(path: &Path) -> Result<FileBytes, String> {
        let mut file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let len = file.metadata().map_err(|e| format!("cannot stat {}: {e}", path.display()))?.len();
        let len = usize::try_from(len).map_err(|_| "file too large for this address space".to_string())?;
        let mut buf = Pages::zeroed(len, &format!("reading {}", path.display()))?;
        file.read_exact(buf.as_mut_slice()).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Ok(FileBytes::owned(buf))
    }

    /// Copies bytes already in memory into an owned aligned buffer (tests, fuzzing).
    pub fn from_slice(data: &[u8]) -> Result<FileBytes, String> {
        let mut buf = Pages::zeroed(data.len(), "the model bytes")?;
        buf.as_mut_slice().copy_from_slice(data);
        Ok(FileBytes::owned(buf))
    }

    /// An owned buffer already filled (derived tensors).
    pub fn from_pages(buf: Pages<u8>) -> FileBytes {
        FileBytes::owned(buf)
    }

    fn owned(buf: Pages<u8>) -> FileBytes {
        stats::OWNED_MODEL_BYTES.add(buf.bytes() as i64);
        FileBytes::Owned(buf)
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(m) => m,
            FileBytes::Owned(b) => b.as_slice(),
        }
    }

    pub fn is_mapped(&self) -> bool {
        matches!(self, FileBytes::Mapped(_))
    }

    /// Reads one byte of every page of `range` (what upstream's warmup run achieves for MoE
    /// models by using every expert once): afterwards it is resident, as far as RAM allows.
    pub fn touch(&self, range: std::ops::Range<usize>) {
        let s = &self.as_slice()[range];
        let mut acc = 0u8;
        for i in (0..s.len()).step_by(4096) {
            acc ^= s[i];
        }
        std::hint::black_box(acc);
    }

    /// Gives the whole pages inside `range` back to the OS (`MADV_DONTNEED`): bytes nobody
    /// reads again (weights repacked into a buffer of their own). A mapped file's pages would
    /// be read in again if touched; an owned buffer's would read as zero.
    pub fn release(&mut self, range: std::ops::Range<usize>) {
        // SAFETY: &mut self: no reference into the bytes is live.
        unsafe { self.discard(range) }
    }

    /// As [`FileBytes::release`] through a shared reference (several threads repacking
    /// different matrices).
    ///
    /// # Safety
    /// No reference to bytes of `range` may be live, nor any be read afterwards (an owned
    /// buffer's pages come back as zeros).
    pub unsafe fn discard(&self, range: std::ops::Range<usize>) {
        let page = page_size();
        let (start, end) = (range.start.next_multiple_of(page), range.end / page * page);
        if start >= end || end > self.as_slice().len() {
            return;
        }
        let p = match self {
            FileBytes::Mapped(m) => m.as_ptr() as *mut u8,
            FileBytes::Owned(b) => b.as_ptr(),
        };
        // SAFETY: whole pages inside this mapping that nobody reads again (the caller's
        // contract): a read-only file mapping drops its pages (read in again from the file if
        // touched), a private anonymous one zero-fills them; nothing else is changed. Advice
        // only: a failure leaves the pages resident, nothing more.
        unsafe { libc::madvise(p.add(start) as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    }

    /// Locks the bytes of `range` in RAM (`mlock`): read in now, never swapped out. Unlocked
    /// when the mapping goes (munmap unlocks). Fails with the reason, naming RLIMIT_MEMLOCK
    /// when that is what forbids it.
    pub fn lock(&self, range: std::ops::Range<usize>) -> Result<(), String> {
        let s = &self.as_slice()[range];
        if s.is_empty() {
            return Ok(());
        }
        // SAFETY: mlock only changes the residency of pages this mapping owns.
        if unsafe { libc::mlock(s.as_ptr() as *const libc::c_void, s.len()) } == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes the struct it is given.
        let limit = if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } == 0 { format!("{} bytes", lim.rlim_cur) } else { "unknown".into() };
        Err(format!("cannot lock {} bytes of the model in memory ({err}); RLIMIT_MEMLOCK is {limit}: raise it (ulimit -l) or load without mlock", s.len()))
    }
}

/// The OS's page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

impl Drop for FileBytes {
    fn drop(&mut self) {
        match self {
            FileBytes::Mapped(m) => stats::MAPPED_BYTES.add(-(m.len() as i64)),
            FileBytes::Owned(b) => stats::OWNED_MODEL_BYTES.add(-(b.bytes() as i64)),
        }
    }
}

//! The bytes of a model file: a read-only memory mapping (default) or an owned, 64-byte
//! aligned copy (`LLAMA_LOAD_MODE_NONE`). Whoever owns a `FileBytes` owns the mapping;
//! dropping it unmaps the file or frees the buffer.

use std::alloc::{self, Layout};
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::ptr::NonNull;

use super::stats;

/// Alignment of owned buffers: enough for any SIMD load and GGUF's default 32-byte alignment.
const OWNED_ALIGN: usize = 64;

pub enum FileBytes {
    Mapped(memmap2::Mmap),
    Owned(OwnedBuf),
}

/// A heap buffer with 64-byte alignment, filled once and then read-only.
pub struct OwnedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: OwnedBuf is a uniquely owned heap allocation with no interior mutability after construction.
unsafe impl Send for OwnedBuf {}
// SAFETY: see above; shared access is read-only.
unsafe impl Sync for OwnedBuf {}

impl OwnedBuf {
    /// Allocates `len` zeroed bytes, or returns None when the allocation fails (never aborts).
    pub fn zeroed(len: usize) -> Option<OwnedBuf> {
        if len == 0 {
            return Some(OwnedBuf { ptr: NonNull::<u64>::dangling().cast(), len: 0 });
        }
        let layout = Layout::from_size_align(len, OWNED_ALIGN).ok()?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        NonNull::new(ptr).map(|ptr| OwnedBuf { ptr, len })
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes (or dangling with len 0) for the life of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees unique access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for OwnedBuf {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: allocated in `zeroed` with exactly this layout.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), Layout::from_size_align_unchecked(self.len, OWNED_ALIGN)) };
        }
    }
}

impl FileBytes {
    /// Maps the file read-only.
    pub fn map(path: &Path) -> Result<FileBytes, String> {
        let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let len = file.metadata().map_err(|e| format!("cannot stat {}: {e}", path.display()))?.len();
        if len == 0 {
            return Ok(FileBytes::Owned(OwnedBuf::zeroed(0).expect("empty buffer")));
        }
        // SAFETY: the mapping is read-only; a model file changed underneath a running process is
        // outside what any mmap-based loader (upstream included) can defend against.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| format!("cannot mmap {}: {e}", path.display()))?;
        stats::mapped_bytes_add(map.len() as i64);
        Ok(FileBytes::Mapped(map))
    }

    /// Reads the whole file into an owned aligned buffer.
    pub fn read(path: &Path) -> Result<FileBytes, String> {
        let mut file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let len = file.metadata().map_err(|e| format!("cannot stat {}: {e}", path.display()))?.len();
        let len = usize::try_from(len).map_err(|_| "file too large for this address space".to_string())?;
        let mut buf = OwnedBuf::zeroed(len).ok_or_else(|| format!("cannot allocate {len} bytes to read {}", path.display()))?;
        file.read_exact(buf.as_mut_slice()).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Ok(FileBytes::Owned(buf))
    }

    /// Copies bytes already in memory into an owned aligned buffer (tests, fuzzing).
    pub fn from_slice(data: &[u8]) -> Result<FileBytes, String> {
        let mut buf = OwnedBuf::zeroed(data.len()).ok_or_else(|| format!("cannot allocate {} bytes", data.len()))?;
        buf.as_mut_slice().copy_from_slice(data);
        Ok(FileBytes::Owned(buf))
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
}

impl Drop for FileBytes {
    fn drop(&mut self) {
        if let FileBytes::Mapped(m) = self {
            stats::mapped_bytes_add(-(m.len() as i64));
        }
    }
}

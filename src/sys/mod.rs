//! sys: the bottom layer. The allocator, page mappings, file bytes (mapped or owned), the
//! logging sink, live-object counters and latency histograms, thread CPU affinity, and the
//! synchronisation primitives the lock-free parts use (std's, or loom's under `--cfg loom`).
//! Nothing here knows about models or tensors.

pub mod affinity;
pub mod alloc;
pub mod bytes;
pub mod log;
pub mod pages;
pub mod prometheus;
pub mod stats;
pub(crate) mod sync;

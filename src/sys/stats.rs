//! Live-object counters: plain atomics, readable from any thread at any time.
//! Counters only; nothing here owns memory.

use std::sync::atomic::{AtomicI64, Ordering};

static LIVE_MODELS: AtomicI64 = AtomicI64::new(0);
static LIVE_CONTEXTS: AtomicI64 = AtomicI64::new(0);
static MAPPED_BYTES: AtomicI64 = AtomicI64::new(0);
static KV_BYTES: AtomicI64 = AtomicI64::new(0);
static LIVE_SAMPLERS: AtomicI64 = AtomicI64::new(0);

pub fn models_add(d: i64) {
    LIVE_MODELS.fetch_add(d, Ordering::Relaxed);
}
pub fn contexts_add(d: i64) {
    LIVE_CONTEXTS.fetch_add(d, Ordering::Relaxed);
}
pub fn mapped_bytes_add(d: i64) {
    MAPPED_BYTES.fetch_add(d, Ordering::Relaxed);
}
pub fn kv_bytes_add(d: i64) {
    KV_BYTES.fetch_add(d, Ordering::Relaxed);
}
pub fn samplers_add(d: i64) {
    LIVE_SAMPLERS.fetch_add(d, Ordering::Relaxed);
}

/// A snapshot of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub models: i64,
    pub contexts: i64,
    pub mapped_bytes: i64,
    pub kv_bytes: i64,
    pub samplers: i64,
}

pub fn snapshot() -> Snapshot {
    Snapshot {
        models: LIVE_MODELS.load(Ordering::Relaxed),
        contexts: LIVE_CONTEXTS.load(Ordering::Relaxed),
        mapped_bytes: MAPPED_BYTES.load(Ordering::Relaxed),
        kv_bytes: KV_BYTES.load(Ordering::Relaxed),
        samplers: LIVE_SAMPLERS.load(Ordering::Relaxed),
    }
}

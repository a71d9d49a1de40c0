//! The table of live requests: id → the request's shared part. Submitters insert, the decode
//! loop removes, and cancellers, pollers and monitoring read it, all at once and without a
//! lock: the table is an immutable version published copy-on-write through a crossbeam-epoch
//! `Atomic`. A writer copies the current version, changes the copy and publishes it with one
//! compare-and-swap (retrying on a lost race); a reader pins an epoch and looks the id up in
//! whatever version it loaded. A replaced version is handed to `defer_destroy` and freed once
//! no pinned reader can hold it; versions alive are counted (`table_versions_live`), so tests
//! see them reclaimed.

use std::sync::Arc as StdArc;

use crossbeam_epoch::{self as epoch, Atomic, Owned};

use super::sync::{Arc, Ordering};
use crate::sys::stats::{EngineMetrics, ENGINES_ALL};

struct Version<T> {
    /// Sorted by id.
    entries: Vec<(u64, Arc<T>)>,
    metrics: StdArc<EngineMetrics>,
}

impl<T> Version<T> {
    fn new(entries: Vec<(u64, Arc<T>)>, metrics: &StdArc<EngineMetrics>) -> Owned<Version<T>> {
        for m in [&**metrics, &ENGINES_ALL] {
            m.table_versions_live.add(1);
            m.table_versions_published.add(1);
        }
        Owned::new(Version { entries, metrics: metrics.clone() })
    }

    fn find(&self, id: u64) -> Result<usize, usize> {
        self.entries.binary_search_by_key(&id, |e| e.0)
    }
}

impl<T> Drop for Version<T> {
    fn drop(&mut self) {
        for m in [&*self.metrics, &ENGINES_ALL] {
            m.table_versions_live.add(-1);
        }
    }
}

pub struct Table<T> {
    current: Atomic<Version<T>>,
    metrics: StdArc<EngineMetrics>,
}

// SAFETY: versions are immutable once published and reclaimed through the epoch; entries are
// `Arc<T>` handed between threads, so T must be Send + Sync.
unsafe impl<T: Send + Sync> Send for Table<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Table<T> {}

impl<T> Table<T> {
    pub fn new(metrics: StdArc<EngineMetrics>) -> Table<T> {
        Table { current: Atomic::from(Version::new(Vec::new(), &metrics)), metrics }
    }

    /// Publishes the version `change` makes from a copy of the current entries; retries while
    /// other writers publish first. `change` returns false to publish nothing.
    fn update(&self, mut change: impl FnMut(&mut Vec<(u64, Arc<T>)>) -> bool) -> bool {
        let guard = epoch::pin();
        let mut cur = self.current.load(Ordering::Acquire, &guard);
        loop {
            // SAFETY: loaded under `guard`; versions are reclaimed only through the epoch.
            let entries = &unsafe { cur.deref() }.entries;
            let mut copy = Vec::with_capacity(entries.len() + 1);
            copy.extend(entries.iter().map(|(id, e)| (*id, e.clone())));
            if !change(&mut copy) {
                return false;
            }
            let new = Version::new(copy, &self.metrics);
            match self.current.compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire, &guard) {
                Ok(_) => {
                    // SAFETY: `cur` is unreachable from the table now; readers that loaded it
                    // pinned an epoch, and defer_destroy waits for them.
                    unsafe { guard.defer_destroy(cur) };
                    // Hand this thread's retired versions to the global queue and collect what
                    // no reader can hold any more, so replaced versions do not wait in a
                    // thread's local bag (one flush per request change, not per token). Not under
                    // loom: collection is crossbeam's code, and its atomics would multiply the
                    // interleavings to explore beyond reach.
                    #[cfg(not(loom))]
                    guard.flush();
                    return true;
                }
                // The lost version is dropped here (never published, so never read).
                Err(e) => cur = e.current,
            }
        }
    }

    /// Any thread: adds `entry` under `id` (ids are unique; an existing id is kept).
    pub fn insert(&self, id: u64, entry: Arc<T>) -> bool {
        self.update(|v| match v.binary_search_by_key(&id, |e| e.0) {
            Ok(_) => false,
            Err(at) => {
                v.insert(at, (id, entry.clone()));
                true
            }
        })
    }

    /// Any thread: removes every id for which `gone` is true; returns whether any was removed.
    pub fn remove_where(&self, mut gone: impl FnMut(u64, &T) -> bool) -> bool {
        self.update(|v| {
            let before = v.len();
            v.retain(|(id, e)| !gone(*id, e));
            v.len() != before
        })
    }

    /// Any thread: the entry under `id`.
    pub fn get(&self, id: u64) -> Option<Arc<T>> {
        let guard = epoch::pin();
        // SAFETY: loaded under `guard` (see `update`).
        let v = unsafe { self.current.load(Ordering::Acquire, &guard).deref() };
        v.find(id).ok().map(|i| v.entries[i].1.clone())
    }

    /// Any thread: how many entries the current version holds.
    pub fn len(&self) -> usize {
        let guard = epoch::pin();
        // SAFETY: as in `get`.
        unsafe { self.current.load(Ordering::Acquire, &guard).deref() }.entries.len()
    }

    /// Any thread: calls `f` on every entry of the current version.
    pub fn for_each(&self, mut f: impl FnMut(u64, &Arc<T>)) {
        let guard = epoch::pin();
        // SAFETY: as in `get`.
        let v = unsafe { self.current.load(Ordering::Acquire, &guard).deref() };
        v.entries.iter().for_each(|(id, e)| f(*id, e));
    }
}

impl<T> Drop for Table<T> {
    fn drop(&mut self) {
        let current = std::mem::replace(&mut self.current, Atomic::null());
        // SAFETY: &mut self: no reader or writer is left, so the current version is ours.
        drop(unsafe { current.try_into_owned() });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn concurrent_inserts_and_removals_keep_every_entry_once() {
        let metrics = StdArc::new(EngineMetrics::new());
        let t = std::sync::Arc::new(Table::<u64>::new(metrics.clone()));
        let writers: Vec<_> = (0..4u64)
            .map(|w| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for i in 0..500u64 {
                        let id = w * 1000 + i;
                        assert!(t.insert(id, Arc::new(id)));
                        assert_eq!(t.get(id).as_deref(), Some(&id));
                        if i % 2 == 0 {
                            assert!(t.remove_where(|k, _| k == id));
                            assert!(t.get(id).is_none());
                        }
                    }
                })
            })
            .collect();
        writers.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(t.len(), 4 * 250);
        let mut ids = Vec::new();
        t.for_each(|id, e| {
            assert_eq!(id, **e);
            ids.push(id)
        });
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert!(!t.insert(1, Arc::new(1)), "an existing id is kept");
        drop(t);
        // Every replaced version is reclaimed once the epoch moves on. Other tests of this
        // process pin the same global epoch, which can hold it back for a while: flush until
        // the versions are gone, for at most 10 s.
        let t0 = std::time::Instant::now();
        while metrics.table_versions_live.get() != 0 && t0.elapsed() < std::time::Duration::from_secs(10) {
            epoch::pin().flush();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(metrics.table_versions_live.get(), 0);
    }
}

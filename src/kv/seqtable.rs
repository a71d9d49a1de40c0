//! The per-sequence table of a KV cache, readable from any thread while the owning context
//! decodes (`llama_memory_seq_pos_min/max`, `ds_context_stats`): which sequences hold cells,
//! and each one's position range.
//!
//! Which sequences exist is copy-on-write: a new snapshot is published through a
//! crossbeam-epoch `Atomic` when the set changes, readers pin an epoch and never block the
//! writer, and a replaced snapshot is reclaimed by the epoch once no reader can hold it
//! (live snapshots are counted in `stats::SEQ_SNAPSHOTS`). Registering a sequence that
//! exists changes nothing, so steady decoding publishes (and allocates) nothing. Each
//! sequence's (pos_min, pos_max) pair is packed in one atomic word, so a reader sees both
//! from the same moment.
//!
//! The atomics come from `sys::sync` (loom's under `--cfg loom`, crossbeam-epoch's under
//! `--cfg crossbeam_loom`): `loom_tests.rs` model-checks publication against readers.

use crossbeam_epoch::{self as epoch, Atomic, Owned};

use super::seqset::{SeqSet, MAX_SEQ};
use crate::sys::stats;
use crate::sys::sync::{AccessCheck, AtomicU64, Ordering};

/// One published version of the set of sequences that hold cells.
struct Registration {
    seqs: SeqSet,
    /// Under loom, every read of the snapshot must be ordered after its creation and before
    /// its free; nothing in normal builds.
    access: AccessCheck,
}

impl Registration {
    fn boxed(seqs: SeqSet) -> Owned<Registration> {
        stats::SEQ_SNAPSHOTS.add(1);
        stats::SEQ_SNAPSHOTS_PUBLISHED.add(1);
        Owned::new(Registration { seqs, access: AccessCheck::new() })
    }

    fn seqs(&self) -> &SeqSet {
        self.access.read();
        &self.seqs
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        stats::SEQ_SNAPSHOTS.add(-1);
    }
}

const EMPTY_RANGE: (i32, i32) = (-1, -1);

fn pack((min, max): (i32, i32)) -> u64 {
    (min as u32 as u64) | ((max as u32 as u64) << 32)
}

fn unpack(w: u64) -> (i32, i32) {
    (w as u32 as i32, (w >> 32) as u32 as i32)
}

pub struct SeqTable {
    registered: Atomic<Registration>,
    /// Per sequence id: pack(pos_min, pos_max), (-1, -1) when it holds no cell.
    ranges: Box<[AtomicU64]>,
    used_cells: AtomicU64,
    metadata_bytes: AtomicU64,
}

impl SeqTable {
    pub fn new(n_seq_max: usize) -> SeqTable {
        SeqTable {
            registered: Atomic::from(Registration::boxed(SeqSet::EMPTY)),
            ranges: (0..n_seq_max.min(MAX_SEQ)).map(|_| AtomicU64::new(pack(EMPTY_RANGE))).collect(),
            used_cells: AtomicU64::new(0),
            metadata_bytes: AtomicU64::new(0),
        }
    }

    /// Bytes of the table itself (the ranges and the current snapshot).
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<SeqTable>() + self.ranges.len() * 8 + std::mem::size_of::<Registration>()
    }

    /// Writer: publishes `seqs` as the registered set unless it is already the current one.
    /// Only the owning KV cache calls this (one writer).
    pub(super) fn register(&self, seqs: SeqSet) {
        let guard = epoch::pin();
        let current = self.registered.load(Ordering::Acquire, &guard);
        // SAFETY: the pointer was loaded under `guard`, and snapshots are only reclaimed
        // through the epoch after they are replaced, so it is valid while `guard` lives.
        if unsafe { current.as_ref() }.is_some_and(|r| *r.seqs() == seqs) {
            return;
        }
        let old = self.registered.swap(Registration::boxed(seqs), Ordering::AcqRel, &guard);
        // SAFETY: `old` is no longer reachable from the table; readers that loaded it pinned
        // an epoch, and defer_destroy waits for all of them before dropping it.
        unsafe { guard.defer_destroy(old) };
    }

    /// Writer: stores a sequence's position range.
    pub(super) fn set_range(&self, seq: usize, range: (i32, i32)) {
        self.ranges[seq].store(pack(range), Ordering::Release);
    }

    pub(super) fn set_used_cells(&self, n: usize) {
        self.used_cells.store(n as u64, Ordering::Relaxed);
    }

    pub(super) fn set_metadata_bytes(&self, n: usize) {
        self.metadata_bytes.store(n as u64, Ordering::Relaxed);
    }

    /// (pos_min, pos_max) of `seq`, (-1, -1) when it holds no cell. Any thread, any time.
    pub fn range(&self, seq: usize) -> (i32, i32) {
        let guard = epoch::pin();
        let reg = self.registered.load(Ordering::Acquire, &guard);
        // SAFETY: loaded under `guard`; reclamation waits for the guard (see `register`).
        let registered = unsafe { reg.as_ref() }.is_some_and(|r| r.seqs().contains(seq));
        match self.ranges.get(seq) {
            Some(w) if registered => unpack(w.load(Ordering::Acquire)),
            _ => EMPTY_RANGE,
        }
    }

    /// How many sequences hold cells. Any thread, any time.
    pub fn n_registered(&self) -> usize {
        let guard = epoch::pin();
        let reg = self.registered.load(Ordering::Acquire, &guard);
        // SAFETY: as in `range`.
        unsafe { reg.as_ref() }.map_or(0, |r| r.seqs().len())
    }

    pub fn used_cells(&self) -> usize {
        self.used_cells.load(Ordering::Relaxed) as usize
    }

    pub fn metadata_bytes(&self) -> usize {
        self.metadata_bytes.load(Ordering::Relaxed) as usize
    }
}

impl Drop for SeqTable {
    fn drop(&mut self) {
        let current = std::mem::replace(&mut self.registered, Atomic::null());
        // SAFETY: &mut self: no reader can hold the table any more (its owner and every
        // reader handle are gone), so the current snapshot can be dropped at once.
        drop(unsafe { current.try_into_owned() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_round_trips_negative_and_large_positions() {
        for r in [(-1, -1), (0, 0), (5, 1 << 30), (i32::MAX, i32::MAX), (-1, 7)] {
            assert_eq!(unpack(pack(r)), r);
        }
    }

    #[test]
    fn registering_the_same_set_publishes_nothing() {
        let t = SeqTable::new(4);
        let snapshot = || t.registered.load(Ordering::Acquire, &epoch::pin()).as_raw() as usize;
        let empty = snapshot();
        t.register(SeqSet::single(2));
        t.set_range(2, (0, 9));
        let first = snapshot();
        assert_ne!(first, empty);
        for _ in 0..1000 {
            t.register(SeqSet::single(2));
        }
        assert_eq!(snapshot(), first);
        assert_eq!(t.range(2), (0, 9));
        assert_eq!(t.range(1), (-1, -1));
        assert_eq!(t.range(200), (-1, -1));
        assert_eq!(t.n_registered(), 1);
    }
}

//! Model checks of the sequence table (`seqtable.rs`): loom runs the scenario under every
//! interleaving (and every weak-memory outcome it models) of the table's atomics and of
//! crossbeam-epoch's own (`--cfg crossbeam_loom`). Each snapshot carries a loom cell that every
//! read reads and its free writes (`sys::sync::AccessCheck`), so a reader that reads a snapshot
//! not published to it (no Release/Acquire) or one freed while it may still hold it fails the
//! model as a data race. Run with `scripts/loom.sh`.

use super::seqset::SeqSet;
use super::seqtable::SeqTable;
use crate::sys::stats::SEQ_SNAPSHOTS;
use crate::sys::sync::Arc;
use loom::thread;

const EMPTY: (i32, i32) = (-1, -1);

/// The owner registers sequence 1, then 2, then removes 1 — ranges first, then the set, as
/// `KvCache` does — while a reader on another thread asks how many sequences are registered
/// and then for both ranges. The reader only ever sees published values, never torn or freed
/// ones; once it has seen both sequences registered, sequence 2's range is the one published
/// before it (never the empty range of a stale word). Every snapshot, the three replaced ones
/// included, is freed by the end of each execution: none leaks.
///
/// When replaced snapshots are freed within an execution is not asserted here: under loom a
/// thread's crossbeam-epoch handle is finalized (its `Local` unpinned and unlinked) after
/// `join` returns, so the writer's later flushes may see the reader still pinned and keep the
/// garbage until the collector is dropped at the execution's end. `tests/readers.rs` measures
/// reclamation while a context runs.
///
/// crossbeam-epoch's atomics multiply the interleavings beyond reach (unbounded: over 15
/// minutes); at most 3 preemptions per execution unless `LOOM_MAX_PREEMPTIONS` says otherwise
/// (about 8 s; 4 preemptions about 55 s).
#[test]
fn readers_see_published_snapshots_and_none_leaks() {
    // Only this test creates sequence tables in the loom test binary, so the process-wide gauge
    // counts this model's snapshots alone.
    let start = SEQ_SNAPSHOTS.get();
    let mut model = loom::model::Builder::new();
    model.preemption_bound = model.preemption_bound.or(Some(3));
    model.check(move || {
        assert_eq!(SEQ_SNAPSHOTS.get(), start, "the previous execution leaked snapshots");
        let t = Arc::new(SeqTable::new(3));
        let reader = {
            let t = t.clone();
            thread::spawn(move || {
                let n = t.n_registered();
                let r2 = t.range(2);
                let r1 = t.range(1);
                assert!(r1 == EMPTY || r1 == (5, 6), "sequence 1: {r1:?}");
                assert!(r2 == EMPTY || r2 == (7, 9), "sequence 2: {r2:?}");
                // {1, 2} seen: every later snapshot holds 2, and its range was stored first
                if n == 2 {
                    assert_eq!(r2, (7, 9), "sequence 2 registered without its range");
                }
            })
        };
        t.set_range(1, (5, 6));
        t.register(SeqSet::single(1));
        t.set_range(2, (7, 9));
        let mut both = SeqSet::single(1);
        both.insert(2);
        t.register(both);
        t.set_range(1, EMPTY);
        t.register(SeqSet::single(2));
        reader.join().unwrap();
        assert_eq!((t.range(1), t.range(2), t.n_registered()), (EMPTY, (7, 9), 1));
    });
    assert_eq!(SEQ_SNAPSHOTS.get(), start, "snapshots leaked");
}

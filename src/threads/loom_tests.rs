//! Model checks of the thread pool: loom runs each scenario under every interleaving (and every
//! weak-memory outcome it models) of the pool's atomics, parking included. The job's cell and
//! the counters the jobs below write are loom cells: a read or write not ordered by
//! happens-before against another access fails the model as a data race, so "the caller
//! returns only after every index is done" is checked as a race, not only as a count; a lost
//! wake-up (a worker parked for good while the caller waits for it) fails as a model that
//! never ends. Run with `scripts/loom.sh`.

use super::ThreadPool;
use crate::sys::sync::UnsafeCell;

// In each model the counters and the job closures are declared before the pool, so they outlive
// its workers (the pool is dropped first, joining them): a worker that runs a closure late
// touches live loom cells, and loom reports the race instead of the test reading freed memory.

/// One counter per index (thread index or chunk), each a loom cell.
struct Hits(Vec<UnsafeCell<u32>>);

// SAFETY: the cells are only accessed through loom's checked `with`/`with_mut`; an access not
// ordered against another fails the model instead of racing.
unsafe impl Sync for Hits {}

impl Hits {
    fn new(n: usize) -> Hits {
        Hits((0..n).map(|_| UnsafeCell::new(0)).collect())
    }

    fn hit(&self, i: usize) {
        // SAFETY: loom checks that no other access is concurrent with this one.
        self.0[i].with_mut(|p| unsafe { *p += 1 });
    }

    fn counts(&self) -> Vec<u32> {
        // SAFETY: as in `hit`.
        self.0.iter().map(|c| c.with(|p| unsafe { *p })).collect()
    }
}

/// A job on three thread indices (the caller and two workers): every index runs exactly once,
/// with the job's thread count, and `run` returns only after all of them finished (the caller
/// reads each index's counter: a worker still writing it is a race). Three threads make too
/// many interleavings to explore them all (over 10 minutes); at most 3 preemptions per
/// execution unless `LOOM_MAX_PREEMPTIONS` says otherwise (about 13 s on a shared 2-core
/// machine; 4 preemptions about 80 s).
#[test]
fn run_runs_every_index_once_and_returns_after_all() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = model.preemption_bound.or(Some(3));
    model.check(|| {
        let hits = Hits::new(3);
        let job = |ith, nth| {
            assert_eq!(nth, 3);
            hits.hit(ith);
        };
        let pool = ThreadPool::new(3).unwrap();
        pool.run(&job);
        assert_eq!(hits.counts(), [1, 1, 1]);
    });
}

/// Two jobs in a row on two thread indices: a worker that is late for the first job (the
/// caller ran its index) never runs an index of the second job with the first job's closure,
/// and each job's indices run exactly once with that job's closure.
#[test]
fn consecutive_jobs_do_not_mix() {
    loom::model(|| {
        let (a, b) = (Hits::new(2), Hits::new(2));
        let (job_a, job_b) = (|ith, _| a.hit(ith), |ith, _| b.hit(ith));
        let pool = ThreadPool::new(2).unwrap();
        pool.run(&job_a);
        assert_eq!(a.counts(), [1, 1]);
        pool.run(&job_b);
        assert_eq!(a.counts(), [1, 1], "a late worker ran the first job's closure again");
        assert_eq!(b.counts(), [1, 1]);
    });
}

/// `run_chunks` with three chunks on two thread indices (shares 0..1 and 1..3): the owner of
/// the second share takes from its front while the first index, done with its own, takes from
/// its back; every chunk is handed out exactly once.
#[test]
fn run_chunks_hands_out_every_chunk_once() {
    loom::model(|| {
        let hits = Hits::new(3);
        let job = |ith, chunk| {
            assert!(ith < 2);
            hits.hit(chunk);
        };
        let pool = ThreadPool::new(2).unwrap();
        pool.run_chunks(3, &job);
        assert_eq!(hits.counts(), [1, 1, 1]);
    });
}

/// `run_on_workers` never runs on the caller, so the caller waits for the worker however late
/// it wakes: the wake-up (generation stored, then unpark; the worker checks the generation
/// before parking) must never be lost.
#[test]
fn run_on_workers_wakes_the_worker() {
    loom::model(|| {
        let hits = Hits::new(2);
        let job = |ith| hits.hit(ith);
        let pool = ThreadPool::new(2).unwrap();
        pool.run_on_workers(&job);
        assert_eq!(hits.counts(), [0, 1]);
    });
}

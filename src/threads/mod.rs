//! threads: a context's worker pool. `run` hands one job to every thread and returns when all
//! are done. Workers spin briefly on a generation counter, then park; no mutex, no allocation
//! per job. The pool knows nothing about models or kernels. Dropping it joins the workers.
//!
//! Each job has one slot per thread index `ith`. A worker that wakes claims its slot and runs
//! `f(ith, nth)`; when the caller has finished `f(0, nth)` it claims the slots no worker has
//! claimed yet and runs them itself. So a worker that the OS has not scheduled (the machine is
//! shared) never stalls a job: every index still runs exactly once, on whichever thread got it.
//!
//! The atomics, threads, parking and the job's cell come from `sys::sync`: loom's under
//! `--cfg loom`, where `loom_tests.rs` model-checks job publication, the slot claims, the done
//! count and `run_chunks`' shares.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::sys::pages::{Pages, ZeroIsValid};
use crate::sys::sync::thread::{self, JoinHandle, Thread};
use crate::sys::sync::{self, spin_loop, Arc, AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Spins before parking: long enough to cover the gap between two matmuls of one decode.
#[cfg(not(loom))]
const SPIN_ITERS: u32 = 20_000;
/// Under loom: one spin (a yield to the other threads), then park; loom explores both a
/// worker that sees the job while spinning and one that is woken from `park`.
#[cfg(loom)]
const SPIN_ITERS: u32 = 2;

/// Spins of the caller waiting for workers to finish before it yields its CPU: a worker that
/// has not finished a chunk within a few microseconds has most likely been preempted (the
/// machine is shared), and yielding lets it run again sooner.
const WAIT_SPIN_ITERS: u32 = 500;

type Job = *const (dyn Fn(usize, usize) + Sync);

struct Shared {
    /// The current job; written by the owner before `generation` is bumped, read by workers
    /// after they claimed their slot.
    job: sync::UnsafeCell<Option<Job>>,
    generation: AtomicU64,
    /// Per thread index: `2 * generation` while open, `2 * generation + 1` once claimed.
    slots: Box<[AtomicU64]>,
    /// Threads taking part in the current job.
    job_nth: AtomicUsize,
    /// Slots run by workers in the current job that have finished.
    done: AtomicUsize,
    stop: AtomicBool,
    panicked: AtomicBool,
    n_threads: usize,
    /// Threads that take part in jobs (≤ n_threads); the others skip them.
    active: AtomicUsize,
    /// Scratch for the code the pool runs: `BUFFER_KINDS` growable buffers per thread index.
    buffers: Box<[UnsafeCell<Pages<Line>>]>,
    /// Per thread index, the chunks of a [`ThreadPool::run_chunks`] job it has left.
    shares: Box<[Share]>,
}

/// The chunks `lo..hi` of one thread index's share, as `lo | hi << 32`, alone in its cache line:
/// the owner takes chunks from the front, other threads from the back, both by compare-and-swap.
#[repr(align(64))]
struct Share(AtomicU64);

impl Share {
    fn set(&self, lo: usize, hi: usize) {
        self.0.store(lo as u64 | (hi as u64) << 32, Ordering::Relaxed);
    }

    fn take_front(&self) -> Option<usize> {
        self.take(|lo, _| (lo, 1))
    }

    fn take_back(&self) -> Option<usize> {
        self.take(|_, hi| (hi - 1, 1 << 32))
    }

    /// Takes one chunk while the share is not empty: `pick(lo, hi)` names it and what to
    /// subtract from (for the front: add to) the packed word.
    fn take(&self, pick: impl Fn(u64, u64) -> (u64, u64)) -> Option<usize> {
        let mut v = self.0.load(Ordering::Relaxed);
        loop {
            let (lo, hi) = (v & 0xffff_ffff, v >> 32);
            if lo >= hi {
                return None;
            }
            let (chunk, step) = pick(lo, hi);
            let next = if step == 1 { v + 1 } else { v - step };
            match self.0.compare_exchange_weak(v, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(chunk as usize),
                Err(now) => v = now,
            }
        }
    }
}

/// 64 bytes, 64-byte aligned: the unit of the pool's scratch buffers.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct Line(pub [u8; 64]);

// a line of zero bytes is a valid Line
impl ZeroIsValid for Line {}

/// Scratch buffers per thread index (see [`ThreadPool::buffer`]).
pub(crate) const BUFFER_KINDS: usize = 3;

// SAFETY: `job` is only written by the owner between jobs (every slot claimed by a worker has
// been reported in `done`, so no worker reads it), and published through the slots'
// Release/Acquire.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw job pointer is only dereferenced during `run`, which outlives its use.
unsafe impl Send for Shared {}

pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<(JoinHandle<()>, Thread)>,
}

impl ThreadPool {
    /// A pool of `n_threads` (the caller's thread counts as one). Returns an error when the OS
    /// refuses to create a thread.
    pub fn new(n_threads: usize) -> Result<ThreadPool, String> {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            job: sync::UnsafeCell::new(None),
            generation: AtomicU64::new(0),
            slots: (0..n_threads).map(|_| AtomicU64::new(1)).collect(),
            job_nth: AtomicUsize::new(n_threads),
            done: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            n_threads,
            active: AtomicUsize::new(n_threads),
            buffers: (0..n_threads * BUFFER_KINDS).map(|_| UnsafeCell::new(Pages::zeroed(0, "pool buffer").expect("an empty mapping"))).collect(),
            shares: (0..n_threads).map(|_| Share(AtomicU64::new(0))).collect(),
        });
        let mut pool = ThreadPool { shared: shared.clone(), workers: Vec::with_capacity(n_threads - 1) };
        for ith in 1..n_threads {
            let s = shared.clone();
            let handle = thread::Builder::new()
                // at most 15 bytes: the kernel keeps no more of a thread name (ps, top, perf)
                .name(format!("ds-worker-{ith}"))
                .spawn(move || worker_loop(&s, ith))
                .map_err(|e| format!("cannot start worker thread: {e}"))?;
            let t = handle.thread().clone();
            pool.workers.push((handle, t));
        }
        Ok(pool)
    }

    pub fn n_threads(&self) -> usize {
        self.shared.n_threads
    }

    /// Scratch buffer `kind` (< BUFFER_KINDS) of thread index `ith`, at least `bytes` bytes,
    /// 64-byte aligned (page-aligned: its own mapping); its contents are not kept when it grows. The buffers belong to the pool, so they are
    /// freed with it (with the context), unlike thread-local storage on a caller's thread.
    /// Growing allocates; a context reaches its largest sizes during warm-up.
    ///
    /// # Safety
    /// One user at a time per (ith, kind): inside a job, the code running as index `ith`;
    /// outside jobs, the pool's owner. A pointer stays valid until the next call for the same
    /// (ith, kind) or the pool's drop; a job may read, through such a pointer, a buffer its
    /// owner filled before `run` if no index of the job asks for that (ith, kind).
    pub unsafe fn buffer(&self, ith: usize, kind: usize, bytes: usize) -> *mut u8 {
        assert!(ith < self.shared.n_threads && kind < BUFFER_KINDS);
        // SAFETY: the caller guarantees exclusive use of this (ith, kind) slot.
        let buf = unsafe { &mut *self.shared.buffers[ith * BUFFER_KINDS + kind].get() };
        let lines = bytes.div_ceil(64);
        if buf.len() < lines {
            // a mapping of its own, not the heap's: the buffers of a context's pool come and go
            // with it, and large heap blocks of sizes set by the model interleaved with the
            // context's other scratch fragment the allocator's extents (a 3.5 MiB step of
            // VmSize in tests/soak.rs)
            *buf = Pages::zeroed(lines, "pool buffer").unwrap_or_else(|e| panic!("{e}"));
        }
        buf.as_mut_slice().as_mut_ptr().cast()
    }

    /// Sets how many of the pool's threads take part in the next jobs (clamped to 1..=n_threads).
    pub fn set_active(&self, n: usize) {
        self.shared.active.store(n.clamp(1, self.shared.n_threads), Ordering::Relaxed);
    }

    /// Runs `f(ith, nth)` once for every `ith < nth` (ith 0 on the caller; the others on the
    /// workers, or on the caller when a worker has not picked its index up by the time the
    /// caller is done) and waits for all. A panic anywhere is re-raised here after all finished.
    pub fn run(&self, f: &(dyn Fn(usize, usize) + Sync)) {
        let s = &*self.shared;
        let nth = s.active.load(Ordering::Relaxed);
        if nth == 1 {
            f(0, 1);
            return;
        }
        let gen = self.publish(f, nth);
        let mut result = catch_unwind(AssertUnwindSafe(|| f(0, nth)));
        let mut by_workers = 0;
        for (ith, slot) in s.slots.iter().enumerate().take(nth).skip(1) {
            if slot.compare_exchange(2 * gen, 2 * gen + 1, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                let r = catch_unwind(AssertUnwindSafe(|| f(ith, nth)));
                if result.is_ok() {
                    result = r;
                }
            } else {
                by_workers += 1;
            }
        }
        self.wait_for_workers(by_workers);
        if let Err(p) = result {
            std::panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Ordering::Relaxed) {
            panic!("a worker thread panicked");
        }
    }

    /// Runs `f(ith, chunk)` once for every `chunk < n_chunks`. Thread index `ith` of `nth` owns
    /// the contiguous share `n_chunks·ith/nth .. n_chunks·(ith+1)/nth` and takes its chunks in
    /// order; when it has none left it takes chunks from the back of the other shares. So while
    /// the work is even each core streams one contiguous region (two cores taking turns over
    /// alternate chunks of a matrix read about 30% slower from DRAM on the Zen 5 machine this
    /// was measured on), and a late or slow thread still gets help at the end.
    pub fn run_chunks(&self, n_chunks: usize, f: &(dyn Fn(usize, usize) + Sync)) {
        assert!(n_chunks < 1 << 32, "too many chunks for one job");
        let s = &*self.shared;
        let nth = s.active.load(Ordering::Relaxed);
        for (ith, share) in s.shares.iter().enumerate().take(nth) {
            share.set(n_chunks * ith / nth, n_chunks * (ith + 1) / nth);
        }
        // the shares are published with the job (`run`'s Release stores, the workers' Acquire)
        self.run(&|ith, nth| {
            while let Some(chunk) = s.shares[ith].take_front() {
                f(ith, chunk);
            }
            for other in (1..nth).map(|k| (ith + k) % nth) {
                while let Some(chunk) = s.shares[other].take_back() {
                    f(ith, chunk);
                }
            }
        });
    }

    /// Runs `f(ith)` on every worker thread itself (ith 1..n_threads, whatever `set_active`
    /// says; never on the caller) and waits: for settings of the worker threads, such as their
    /// CPU affinity. A panic in `f` is re-raised here.
    pub fn run_on_workers(&self, f: &(dyn Fn(usize) + Sync)) {
        let n = self.shared.n_threads;
        if n == 1 {
            return;
        }
        let job = |ith: usize, _nth: usize| f(ith);
        self.publish(&job, n);
        self.wait_for_workers(n - 1);
        if self.shared.panicked.swap(false, Ordering::Relaxed) {
            panic!("a worker thread panicked");
        }
    }

    /// Bytes the pool's worker threads have allocated since they started, summed (jemalloc's
    /// per-thread counters, each read on its own worker through `run_on_workers`; 0 without
    /// jemalloc). Reading allocates nothing, so two readings around a piece of work tell
    /// whether any worker allocated in it (tests/registration.rs).
    pub fn workers_allocated_bytes(&self) -> u64 {
        let sum = AtomicU64::new(0);
        self.run_on_workers(&|_| {
            sum.fetch_add(crate::sys::alloc::thread_allocated_bytes(), Ordering::Relaxed);
        });
        sum.into_inner()
    }

    /// Hands job `f` with `nth` slots to the workers; returns its generation.
    fn publish(&self, f: &(dyn Fn(usize, usize) + Sync), nth: usize) -> u64 {
        let s = &*self.shared;
        let gen = s.generation.load(Ordering::Relaxed) + 1;
        // SAFETY: only the pointer's lifetime is erased; it is only used until the workers that
        // claimed a slot of this job report done (the callers of `publish` wait for that before
        // returning).
        let job: Job = unsafe { std::mem::transmute::<&(dyn Fn(usize, usize) + Sync), Job>(f) };
        // SAFETY: no worker reads `job` now (all slots of the previous job were claimed and the
        // claimed ones reported done, which this thread read with Acquire).
        s.job.with_mut(|j| unsafe { *j = Some(job) });
        s.job_nth.store(nth, Ordering::Relaxed);
        s.done.store(0, Ordering::Relaxed);
        for slot in &s.slots[1..nth] {
            slot.store(2 * gen, Ordering::Release);
        }
        s.generation.store(gen, Ordering::Release);
        for (_, t) in &self.workers[..nth - 1] {
            sync::unpark(t);
        }
        gen
    }

    /// Waits until `n` slots claimed by workers have been reported done.
    fn wait_for_workers(&self, n: usize) {
        let mut spins = 0u32;
        while self.shared.done.load(Ordering::Acquire) != n {
            spins += 1;
            if spins < WAIT_SPIN_ITERS {
                spin_loop();
            } else {
                thread::yield_now();
            }
        }
    }
}

fn worker_loop(s: &Shared, ith: usize) {
    let mut seen = 0u64;
    loop {
        let mut spins = 0u32;
        let gen = loop {
            let g = s.generation.load(Ordering::Acquire);
            if g != seen || s.stop.load(Ordering::Acquire) {
                break g;
            }
            spins += 1;
            if spins < SPIN_ITERS {
                spin_loop();
            } else {
                thread::park();
            }
        };
        if s.stop.load(Ordering::Acquire) {
            return;
        }
        seen = gen;
        // Claim this thread's slot of job `gen`; fails if the job is older or newer than that,
        // if this index does not take part, or if the caller already ran it.
        if s.slots[ith].compare_exchange(2 * gen, 2 * gen + 1, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            continue;
        }
        let nth = s.job_nth.load(Ordering::Relaxed);
        // SAFETY: the owner wrote `job` before the Release store of our slot that our claim
        // read with Acquire, and keeps the closure alive until we report done.
        let job = s.job.with(|j| unsafe { *j }).expect("job published");
        // SAFETY: see above.
        let f = unsafe { &*job };
        if catch_unwind(AssertUnwindSafe(|| f(ith, nth))).is_err() {
            s.panicked.store(true, Ordering::Relaxed);
        }
        s.done.fetch_add(1, Ordering::Release);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for (handle, t) in self.workers.drain(..) {
            sync::unpark(&t);
            let _ = handle.join();
        }
    }
}

/// A raw pointer to an output buffer that several threads write at disjoint indices.
#[derive(Clone, Copy)]
pub struct SharedOut<T> {
    ptr: *mut T,
    len: usize,
}
// SAFETY: callers guarantee disjoint writes (each index written by one thread) during a `run`.
unsafe impl<T: Send> Send for SharedOut<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SharedOut<T> {}

impl<T> SharedOut<T> {
    pub fn new(s: &mut [T]) -> Self {
        SharedOut { ptr: s.as_mut_ptr(), len: s.len() }
    }
    /// The base pointer; writes through it must respect the same disjointness contract.
    pub fn ptr(&self) -> *mut T {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// # Safety
    /// No other thread may access `range` while the returned slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, range: std::ops::Range<usize>) -> &mut [T] {
        assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: in bounds (checked above); exclusivity is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.end - range.start) }
    }
}

#[cfg(all(test, loom))]
mod loom_tests;

#[cfg(test)]
#[cfg(not(loom))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::thread;

    #[test]
    fn every_thread_runs_each_job_once() {
        let pool = ThreadPool::new(3).unwrap();
        for round in 0..200 {
            let hits = [AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)];
            pool.run(&|ith, nth| {
                assert_eq!(nth, 3);
                hits[ith].fetch_add(round + 1, Ordering::Relaxed);
            });
            for h in &hits {
                assert_eq!(h.load(Ordering::Relaxed), round + 1);
            }
        }
    }

    #[test]
    fn run_chunks_runs_every_chunk_once_and_owners_start_on_their_share() {
        let pool = ThreadPool::new(3).unwrap();
        for round in 0..600usize {
            let nth = 1 + round % 3;
            pool.set_active(nth);
            let n_chunks = [0, 1, 2, 5, 64, 1000][round % 6];
            let hits: Vec<AtomicUsize> = (0..n_chunks).map(|_| AtomicUsize::new(0)).collect();
            let first_taken: Vec<AtomicUsize> = (0..nth).map(|_| AtomicUsize::new(usize::MAX)).collect();
            pool.run_chunks(n_chunks, &|ith, chunk| {
                let _ = first_taken[ith].compare_exchange(usize::MAX, chunk, Ordering::Relaxed, Ordering::Relaxed);
                // one slow thread: the others finish its share from the back
                if round % 5 == 0 && ith == nth - 1 {
                    thread::sleep(std::time::Duration::from_micros(20));
                }
                hits[chunk].fetch_add(1, Ordering::Relaxed);
            });
            for (c, h) in hits.iter().enumerate() {
                assert_eq!(h.load(Ordering::Relaxed), 1, "round {round}: chunk {c} of {n_chunks}, {nth} threads");
            }
            // only the owner takes from the front of a share: an index begins with its share's
            // first chunk, or (when the others emptied its share first) outside its share
            for (ith, f) in first_taken.iter().enumerate() {
                let (lo, hi) = (n_chunks * ith / nth, n_chunks * (ith + 1) / nth);
                let f = f.load(Ordering::Relaxed);
                assert!(f == usize::MAX || f == lo || !(lo..hi).contains(&f), "round {round}: index {ith} began at {f} of {lo}..{hi}");
            }
        }
    }

    #[test]
    fn worker_panic_is_reported_to_the_caller() {
        let pool = ThreadPool::new(2).unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| pool.run(&|ith, _| assert!(ith == 0, "boom"))));
        assert!(r.is_err());
        let ok = AtomicUsize::new(0);
        pool.run(&|_, _| {
            ok.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(ok.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn every_index_runs_once_when_workers_are_slow() {
        let pool = ThreadPool::new(4).unwrap();
        for round in 0..2000usize {
            pool.set_active(1 + round % 4);
            let nth_want = 1 + round % 4;
            let hits = [AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)];
            pool.run(&|ith, nth| {
                assert_eq!(nth, nth_want);
                if round % 7 == 0 && ith == 0 {
                    thread::yield_now();
                }
                hits[ith].fetch_add(1, Ordering::Relaxed);
            });
            for (i, h) in hits.iter().enumerate() {
                assert_eq!(h.load(Ordering::Relaxed), (i < nth_want) as usize, "round {round} index {i}");
            }
        }
    }

    #[test]
    fn run_on_workers_runs_on_each_worker_thread() {
        let pool = ThreadPool::new(3).unwrap();
        pool.set_active(1);
        let names: [std::sync::OnceLock<String>; 3] = Default::default();
        pool.run_on_workers(&|ith| {
            names[ith].set(thread::current().name().unwrap_or("").to_string()).unwrap();
        });
        assert!(names[0].get().is_none(), "the caller ran a worker's index");
        assert_eq!(names[1].get().map(String::as_str), Some("ds-worker-1"));
        assert_eq!(names[2].get().map(String::as_str), Some("ds-worker-2"));
    }
}

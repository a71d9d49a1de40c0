//! The submission queue: any number of threads push requests, the decode loop takes them all
//! at once, in the order they were pushed. Lock-free and bounded.
//!
//! It is a Treiber stack with a take-all consumer: a push links its node in front of the
//! current head with one compare-and-swap; the consumer swaps the head with NULL, owns the
//! whole chain from then on, and reverses it. There is no compare-and-swap on the consumer's
//! side, so there is no ABA problem: a push's CAS compares the head's address only, and the
//! pusher never dereferences the old head (it only stores its address as `next`), so a node
//! freed and its address reused in between makes the CAS link to the node now at that
//! address, which is the current head — correct. crossbeam's queues would do as well, but they
//! use `core` atomics directly and cannot be model-checked; this one is (`loom_tests.rs`).
//!
//! The bound is a separate admission count: `push` reserves a place before linking and fails
//! (the value comes back) when `capacity` places are taken; the consumer gives places back
//! with `release` when requests leave its waiting list, so the count is "submitted and not yet
//! started", not only "not yet taken".

use std::ptr;

use super::sync::{AtomicPtr, AtomicUsize, Ordering};

struct Node<T> {
    value: T,
    next: *mut Node<T>,
}

pub struct SubmitQueue<T> {
    head: AtomicPtr<Node<T>>,
    reserved: AtomicUsize,
    capacity: usize,
}

// SAFETY: nodes are handed from pushers to the one consumer through the atomic head; values
// move between threads, so T must be Send.
unsafe impl<T: Send> Send for SubmitQueue<T> {}
// SAFETY: as above; `push` may run on many threads at once, `take_all` on one (documented).
unsafe impl<T: Send> Sync for SubmitQueue<T> {}

impl<T> SubmitQueue<T> {
    pub fn new(capacity: usize) -> SubmitQueue<T> {
        SubmitQueue { head: AtomicPtr::new(ptr::null_mut()), reserved: AtomicUsize::new(0), capacity }
    }

    /// Places taken (pushed and not yet released).
    pub fn len(&self) -> usize {
        self.reserved.load(Ordering::SeqCst)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Any thread: appends `value`, or gives it back when the queue is full.
    #[cfg(any(test, loom))]
    pub fn push(&self, value: T) -> Result<(), T> {
        if !self.try_reserve() {
            return Err(value);
        }
        self.link(value);
        Ok(())
    }

    /// Any thread: takes a place, or returns false when all `capacity` are taken. The place is
    /// filled by `link` or given back by `release`.
    pub fn try_reserve(&self) -> bool {
        // SeqCst: the engine's shutdown reads the count after publishing that it is closing,
        // and a submitter reads "closing" after reserving; one of them sees the other.
        let mut n = self.reserved.load(Ordering::SeqCst);
        loop {
            if n >= self.capacity {
                return false;
            }
            match self.reserved.compare_exchange_weak(n, n + 1, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return true,
                Err(now) => n = now,
            }
        }
    }

    /// Any thread, after a successful `try_reserve`: appends `value`.
    pub fn link(&self, value: T) {
        let node = Box::into_raw(Box::new(Node { value, next: ptr::null_mut() }));
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `node` is ours until the CAS below publishes it.
            unsafe { (*node).next = head };
            // Release: the consumer's Acquire swap sees the node's contents (and, through the
            // release sequence of the head, every node linked before it).
            match self.head.compare_exchange_weak(head, node, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }

    /// The consumer only (one thread at a time): moves everything pushed so far to `out`, in
    /// push order. Returns how many were taken. Their places stay reserved until `release`.
    pub fn take_all(&self, out: &mut Vec<T>) -> usize {
        let mut p = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        let start = out.len();
        while !p.is_null() {
            // SAFETY: the swap made the chain ours alone; every node came from Box::into_raw.
            let node = unsafe { Box::from_raw(p) };
            p = node.next;
            out.push(node.value);
        }
        out[start..].reverse();
        out.len() - start
    }

    /// Gives back `n` places (requests that left the waiting state).
    pub fn release(&self, n: usize) {
        self.reserved.fetch_sub(n, Ordering::SeqCst);
    }
}

impl<T> Drop for SubmitQueue<T> {
    fn drop(&mut self) {
        let mut p = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: &mut self: no pusher is left; the nodes came from Box::into_raw.
            let node = unsafe { Box::from_raw(p) };
            p = node.next;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_bounded_and_released() {
        let q = SubmitQueue::new(3);
        assert!(q.push(1).is_ok() && q.push(2).is_ok() && q.push(3).is_ok());
        assert_eq!(q.push(4), Err(4));
        let mut out = Vec::new();
        assert_eq!(q.take_all(&mut out), 3);
        assert_eq!(out, [1, 2, 3]);
        assert_eq!(q.push(5), Err(5), "places stay taken until released");
        q.release(2);
        assert!(q.push(6).is_ok() && q.push(7).is_ok());
        assert_eq!(q.push(8), Err(8));
        q.take_all(&mut out);
        assert_eq!(out, [1, 2, 3, 6, 7]);
    }

    #[test]
    fn many_producers_lose_and_duplicate_nothing() {
        let q = std::sync::Arc::new(SubmitQueue::new(usize::MAX));
        let producers: Vec<_> = (0..8u64)
            .map(|p| {
                let q = q.clone();
                std::thread::spawn(move || (0..20_000u64).for_each(|i| q.push(p << 32 | i).unwrap()))
            })
            .collect();
        let mut got = Vec::new();
        while producers.iter().any(|h| !h.is_finished()) {
            q.take_all(&mut got);
        }
        producers.into_iter().for_each(|h| h.join().unwrap());
        q.take_all(&mut got);
        assert_eq!(got.len(), 8 * 20_000);
        // Each producer's values arrive in its order.
        let mut next = [0u64; 8];
        for v in got {
            let (p, i) = ((v >> 32) as usize, v & 0xffff_ffff);
            assert_eq!(i, next[p], "producer {p} out of order");
            next[p] += 1;
        }
    }

    #[test]
    fn dropping_frees_what_was_never_taken() {
        let q = SubmitQueue::new(8);
        let v = std::sync::Arc::new(());
        q.push(v.clone()).unwrap();
        q.push(v.clone()).unwrap();
        drop(q);
        assert_eq!(std::sync::Arc::strong_count(&v), 1);
    }
}

//! A request's output buffer: a bounded ring of events, written by the decode loop only and
//! read by whoever polls the request (any thread; several at once take disjoint events).
//! Events are single atomic words, so a reader never sees half of one; the read position
//! advances by compare-and-swap on a counter that never wraps (no ABA), and a reader whose
//! copy raced with the writer reusing those slots loses its CAS and reads again, so each event
//! is delivered exactly once, in order.
//!
//! The last place is kept for the final event: tokens may fill `capacity - 1` places, so the
//! request's end always fits, also when nobody has read anything yet. When the ring is full
//! the decode loop pauses the request (it stays in its slot and generates nothing) until a
//! reader makes room: nothing is dropped and nothing grows.

use super::sync::{AtomicU64, Ordering};
use crate::sys::stats::FinishKind;

/// One output event of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A generated token and how many bytes of its piece belong to the output (fewer than the
    /// whole piece only for the token in which a stop string begins).
    Token { token: i32, n_piece: u32 },
    /// The request's last event.
    Finish(FinishKind),
}

const TAG_FINISH: u64 = 1 << 63;

impl Event {
    pub fn encode(self) -> u64 {
        match self {
            Event::Token { token, n_piece } => (token as u32 as u64) | ((n_piece.min(0x7fff_ffff) as u64) << 32),
            Event::Finish(kind) => TAG_FINISH | kind as u64,
        }
    }

    pub fn decode(w: u64) -> Event {
        if w & TAG_FINISH != 0 {
            Event::Finish(FinishKind::from_index(w & 0xff).unwrap_or(FinishKind::Error))
        } else {
            Event::Token { token: w as u32 as i32, n_piece: ((w >> 32) & 0x7fff_ffff) as u32 }
        }
    }
}

pub struct EventRing {
    slots: Box<[AtomicU64]>,
    /// Events read (advanced by readers).
    head: AtomicU64,
    /// Events written (advanced by the writer).
    tail: AtomicU64,
}

impl EventRing {
    /// A ring of `capacity` events (at least 2: one token and the final event).
    pub fn new(capacity: usize) -> EventRing {
        let capacity = capacity.max(2);
        EventRing { slots: (0..capacity).map(|_| AtomicU64::new(0)).collect(), head: AtomicU64::new(0), tail: AtomicU64::new(0) }
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Events written and not yet read.
    pub fn len(&self) -> usize {
        let t = self.tail.load(Ordering::Acquire);
        let h = self.head.load(Ordering::Acquire);
        t.saturating_sub(h) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writer only (the decode loop): appends `e`. A token needs a free place beyond the one
    /// kept for the final event; a final event always fits (the writer sends one at most).
    /// Returns false, writing nothing, when a token does not fit.
    pub fn push(&self, e: Event) -> bool {
        let t = self.tail.load(Ordering::Relaxed);
        // Acquire: readers' copies of the slots happen before this writer reuses them.
        let h = self.head.load(Ordering::Acquire);
        let limit = match e {
            Event::Token { .. } => self.slots.len() - 1,
            Event::Finish(_) => self.slots.len(),
        };
        if (t - h) as usize >= limit {
            return false;
        }
        self.slots[(t % self.slots.len() as u64) as usize].store(e.encode(), Ordering::Relaxed);
        // Release: a reader that sees the new tail sees the slot.
        self.tail.store(t + 1, Ordering::Release);
        true
    }

    /// Any thread: moves up to `out.len()` events, oldest first, into `out`; returns how many.
    pub fn pop(&self, out: &mut [Event]) -> usize {
        loop {
            let h = self.head.load(Ordering::Acquire);
            let t = self.tail.load(Ordering::Acquire);
            let n = ((t - h) as usize).min(out.len());
            if n == 0 {
                return 0;
            }
            for (i, o) in out[..n].iter_mut().enumerate() {
                *o = Event::decode(self.slots[((h + i as u64) % self.slots.len() as u64) as usize].load(Ordering::Relaxed));
            }
            // Success means no other reader advanced past h, so the writer cannot have reused
            // the slots copied above (it writes only beyond the head it reads).
            if self.head.compare_exchange(h, h + n as u64, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return n;
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_their_word() {
        for e in [
            Event::Token { token: 0, n_piece: 0 },
            Event::Token { token: 151_643, n_piece: 17 },
            Event::Token { token: i32::MAX, n_piece: 0x7fff_ffff },
            Event::Finish(FinishKind::Length),
            Event::Finish(FinishKind::Stop),
            Event::Finish(FinishKind::Eog),
            Event::Finish(FinishKind::Cancelled),
            Event::Finish(FinishKind::Error),
        ] {
            assert_eq!(Event::decode(e.encode()), e);
        }
    }

    #[test]
    fn the_last_place_is_kept_for_the_final_event() {
        let r = EventRing::new(3);
        let tok = |t| Event::Token { token: t, n_piece: 1 };
        assert!(r.push(tok(1)) && r.push(tok(2)));
        assert!(!r.push(tok(3)));
        assert!(r.push(Event::Finish(FinishKind::Cancelled)));
        let mut out = [tok(0); 8];
        assert_eq!(r.pop(&mut out[..2]), 2);
        assert_eq!(&out[..2], &[tok(1), tok(2)]);
        assert_eq!(r.pop(&mut out), 1);
        assert_eq!(out[0], Event::Finish(FinishKind::Cancelled));
        assert_eq!(r.pop(&mut out), 0);
    }

    #[test]
    fn concurrent_readers_get_each_event_once_in_order() {
        let r = std::sync::Arc::new(EventRing::new(16));
        const N: i32 = 100_000;
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    let mut buf = [Event::Finish(FinishKind::Error); 5];
                    loop {
                        let n = r.pop(&mut buf);
                        got.extend_from_slice(&buf[..n]);
                        if got.last() == Some(&Event::Finish(FinishKind::Length)) || buf[..n].contains(&Event::Finish(FinishKind::Length)) {
                            return got;
                        }
                        if n == 0 {
                            std::thread::yield_now();
                        }
                        if r.tail.load(Ordering::Acquire) == N as u64 + 1 && r.is_empty() {
                            return got;
                        }
                    }
                })
            })
            .collect();
        for t in 0..N {
            while !r.push(Event::Token { token: t, n_piece: 0 }) {
                std::thread::yield_now();
            }
        }
        assert!(r.push(Event::Finish(FinishKind::Length)));
        let all: Vec<Vec<Event>> = readers.into_iter().map(|h| h.join().unwrap()).collect();
        let mut tokens: Vec<i32> = Vec::new();
        for got in &all {
            let mine: Vec<i32> = got.iter().filter_map(|e| if let Event::Token { token, .. } = e { Some(*token) } else { None }).collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]), "a reader saw events out of order");
            tokens.extend(mine);
        }
        tokens.sort();
        assert_eq!(tokens, (0..N).collect::<Vec<_>>(), "events lost or duplicated");
        let finals = all.iter().flatten().filter(|e| matches!(e, Event::Finish(_))).count();
        assert_eq!(finals, 1);
    }
}

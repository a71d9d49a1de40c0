//! Model checks of the engine's lock-free parts: loom runs each scenario under every
//! interleaving (and every weak-memory outcome it models) of the atomics involved, with
//! crossbeam-epoch's own atomics under `crossbeam_loom`. Run with `scripts/loom.sh`.

use super::queue::SubmitQueue;
use super::ring::{Event, EventRing};
use super::sync::{Arc, AtomicBool, Ordering};
use super::table::Table;
use crate::sys::stats::{EngineMetrics, FinishKind};
use loom::thread;

fn tok(t: i32) -> Event {
    Event::Token { token: t, n_piece: 0 }
}

/// Two producers push while the consumer takes: every value arrives exactly once, each
/// producer's in its order.
#[test]
fn queue_loses_and_duplicates_nothing_and_keeps_order() {
    loom::model(|| {
        let q = Arc::new(SubmitQueue::new(8));
        let producers: Vec<_> = [(0, 2), (10, 1)]
            .into_iter()
            .map(|(base, n)| {
                let q = q.clone();
                thread::spawn(move || {
                    for i in 0..n {
                        q.push(base + i).unwrap();
                    }
                })
            })
            .collect();
        let mut got = Vec::new();
        q.take_all(&mut got);
        for p in producers {
            p.join().unwrap();
        }
        q.take_all(&mut got);
        let mut sorted = got.clone();
        sorted.sort();
        assert_eq!(sorted, [0, 1, 10]);
        let zero: Vec<_> = got.iter().filter(|&&v| v < 10).collect();
        assert_eq!(zero, [&0, &1], "a producer's values out of order");
    });
}

/// The admission bound holds under concurrent pushes, and released places are reusable.
#[test]
fn queue_bound_holds_under_races() {
    loom::model(|| {
        let q = Arc::new(SubmitQueue::new(1));
        let hs: Vec<_> = (0..2)
            .map(|i| {
                let q = q.clone();
                thread::spawn(move || q.push(i).is_ok())
            })
            .collect();
        let ok: usize = hs.into_iter().map(|h| h.join().unwrap() as usize).sum();
        assert_eq!(ok, 1);
        let mut got = Vec::new();
        assert_eq!(q.take_all(&mut got), 1);
        q.release(1);
        assert!(q.push(7).is_ok());
    });
}

/// A writer produces two tokens and the final event into a ring of three while two readers
/// take concurrently: each event is read exactly once, each reader's in order, and the
/// final event always fits.
#[test]
fn ring_delivers_each_event_once_in_order() {
    loom::model(|| {
        let r = Arc::new(EventRing::new(3));
        assert!(r.push(tok(1)));
        let writer = {
            let r = r.clone();
            thread::spawn(move || {
                // Two tokens fit in a ring of three, and the final event always does.
                assert!(r.push(tok(2)));
                assert!(r.push(Event::Finish(FinishKind::Length)));
            })
        };
        let reader = {
            let r = r.clone();
            thread::spawn(move || {
                let mut out = [tok(0); 2];
                let n = r.pop(&mut out);
                out[..n].to_vec()
            })
        };
        let mut mine = [tok(0); 3];
        let n = r.pop(&mut mine);
        let mut a = mine[..n].to_vec();
        writer.join().unwrap();
        let b = reader.join().unwrap();
        let n = r.pop(&mut mine);
        a.extend_from_slice(&mine[..n]);
        // Each reader's events are in stream order, and together they are the stream.
        let key = |e: &Event| match e {
            Event::Token { token, .. } => *token as usize,
            Event::Finish(_) => 100,
        };
        assert!(a.windows(2).all(|w| key(&w[0]) < key(&w[1])) && b.windows(2).all(|w| key(&w[0]) < key(&w[1])));
        let mut all: Vec<usize> = a.iter().chain(&b).map(key).collect();
        all.sort();
        assert_eq!(all, [1, 2, 100]);
    });
}

/// A full ring refuses a token until a reader makes room; the writer then succeeds. The
/// loop's pause protocol: the writer raises `paused` before checking for room, the reader
/// checks it after making room, so a wake-up cannot be lost.
#[test]
fn ring_full_pauses_and_the_reader_always_sees_the_pause() {
    loom::model(|| {
        let r = Arc::new(EventRing::new(2));
        let paused = Arc::new(AtomicBool::new(false));
        assert!(r.push(tok(1)));
        let reader = {
            let (r, paused) = (r.clone(), paused.clone());
            thread::spawn(move || {
                let mut out = [tok(0); 1];
                let n = r.pop(&mut out);
                loom::sync::atomic::fence(Ordering::SeqCst);
                (n, paused.load(Ordering::SeqCst))
            })
        };
        paused.store(true, Ordering::SeqCst);
        loom::sync::atomic::fence(Ordering::SeqCst);
        let room = r.capacity() - 1 - r.len();
        let (n, saw_pause) = reader.join().unwrap();
        assert_eq!(n, 1);
        // Either the writer saw the room, or the reader saw the pause (and wakes the loop).
        assert!(room > 0 || saw_pause, "lost wake-up");
        assert!(r.push(tok(2)));
    });
}

/// A submitter inserts while the loop removes another entry and then looks both up: the
/// insert lands, the removal takes only its id (a lost compare-and-swap retries on the newer
/// version), and every lookup reads a version that is still alive.
#[test]
fn table_inserts_and_removals_race_safely() {
    loom::model(|| {
        let t = Arc::new(Table::<u64>::new(std::sync::Arc::new(EngineMetrics::new())));
        assert!(t.insert(1, Arc::new(1)));
        let writer = {
            let t = t.clone();
            thread::spawn(move || {
                assert!(t.insert(2, Arc::new(2)));
                assert_eq!(t.get(2).as_deref(), Some(&2));
            })
        };
        assert!(t.remove_where(|id, _| id == 1));
        assert!(t.get(1).is_none());
        writer.join().unwrap();
        assert_eq!(t.get(2).as_deref(), Some(&2));
        assert_eq!(t.len(), 1);
    });
}

/// Two readers racing for one event: exactly one gets it.
#[test]
fn ring_two_readers_never_share_an_event() {
    loom::model(|| {
        let r = Arc::new(EventRing::new(3));
        assert!(r.push(tok(1)));
        let r2 = r.clone();
        let other = thread::spawn(move || r2.pop(&mut [tok(0); 2]));
        let n = r.pop(&mut [tok(0); 2]);
        assert_eq!(n + other.join().unwrap(), 1, "an event was read twice");
    });
}

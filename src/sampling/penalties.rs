//! Repetition penalties over the last `last_n` accepted tokens: repeat (divide positive logits,
//! multiply negative ones), frequency (per occurrence) and presence (once).

use std::collections::{HashMap, VecDeque};
use std::ffi::CStr;

use super::{Candidates, Sampler};

#[derive(Clone)]
pub struct Penalties {
    pub last_n: usize,
    pub repeat: f32,
    pub freq: f32,
    pub present: f32,
    /// The last `last_n` accepted tokens, oldest first.
    prev: VecDeque<i32>,
    /// How often each token occurs in `prev`.
    counts: HashMap<i32, i32>,
}

impl Penalties {
    pub fn new(last_n: usize, repeat: f32, freq: f32, present: f32) -> Penalties {
        // `counts` holds at most last_n + 1 tokens, but removals leave tombstones, and a table
        // out of free slots grows unless it is at most half full; with room for twice as many
        // it always rehashes in place instead, so accepting allocates nothing after
        // construction (tests/registration.rs; sized for last_n alone, each chain allocated
        // 2,560 bytes once, thousands of tokens in).
        Penalties { last_n, repeat, freq, present, prev: VecDeque::with_capacity(last_n), counts: HashMap::with_capacity(2 * (last_n + 1)) }
    }

    /// Upstream's rule for when the sampler is a no-op.
    pub fn is_disabled(last_n: i32, repeat: f32, freq: f32, present: f32) -> bool {
        last_n == 0 || (repeat == 1.0 && freq == 0.0 && present == 0.0)
    }
}

impl Sampler for Penalties {
    fn name(&self) -> &'static CStr {
        c"penalties"
    }
    fn accept(&mut self, token: i32) {
        if self.last_n == 0 {
            return;
        }
        *self.counts.entry(token).or_insert(0) += 1;
        if self.prev.len() >= self.last_n {
            if let Some(old) = self.prev.pop_front() {
                if let Some(c) = self.counts.get_mut(&old) {
                    *c -= 1;
                    if *c == 0 {
                        self.counts.remove(&old);
                    }
                }
            }
        }
        self.prev.push_back(token);
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        if Penalties::is_disabled(self.last_n as i32, self.repeat, self.freq, self.present) {
            return;
        }
        for t in cur.data.iter_mut() {
            let Some(&count) = self.counts.get(&t.id) else { continue };
            if t.logit <= 0.0 {
                t.logit *= self.repeat;
            } else {
                t.logit /= self.repeat;
            }
            t.logit -= count as f32 * self.freq + (count > 0) as i32 as f32 * self.present;
        }
        cur.sorted = false;
    }
    fn reset(&mut self) {
        self.prev.clear();
        self.counts.clear();
    }
    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        Box::new(self.clone())
    }
}

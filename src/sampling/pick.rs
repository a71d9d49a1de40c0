//! Samplers that choose the token: greedy (highest logit) and dist (a seeded random draw from
//! the softmax).

use std::ffi::CStr;

use super::rng::{resolve_seed, Mt19937};
use super::{Candidates, Sampler};

#[derive(Clone)]
pub struct Greedy;

impl Sampler for Greedy {
    fn name(&self) -> &'static CStr {
        c"greedy"
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        let mut best = 0;
        for i in 1..cur.len() {
            if cur.data[i].logit > cur.data[best].logit {
                best = i;
            }
        }
        cur.selected = if cur.is_empty() { -1 } else { best as i64 };
    }
    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        Box::new(self.clone())
    }
}

/// Draws from the softmax of the logits with its own Mersenne Twister: the same seed gives the
/// same tokens (and the same draws as upstream).
#[derive(Clone)]
pub struct Dist {
    seed: u32,
    seed_cur: u32,
    rng: Mt19937,
}

impl Dist {
    pub fn new(seed: u32) -> Dist {
        let seed_cur = resolve_seed(seed);
        Dist { seed, seed_cur, rng: Mt19937::new(seed_cur) }
    }
}

impl Sampler for Dist {
    fn name(&self) -> &'static CStr {
        c"dist"
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        if cur.is_empty() {
            cur.selected = -1;
            return;
        }
        cur.selected = 0;
        if cur.len() == 1 {
            // Upstream draws once per output even here, to keep its RNG aligned.
            self.rng.uniform_f64();
            cur.data[0].p = 1.0;
            return;
        }
        let max_l = if cur.sorted { cur.data[0].logit } else { cur.data.iter().fold(cur.data[0].logit, |m, t| m.max(t.logit)) };
        let mut sum = 0.0f64;
        for t in cur.data.iter_mut() {
            t.p = (t.logit - max_l).exp();
            sum += t.p as f64;
        }
        // One pass: find where the running sum crosses sum * u, normalizing as we go.
        let target = sum * self.rng.uniform_f64();
        let mut run = 0.0f64;
        let mut found = false;
        for (i, t) in cur.data.iter_mut().enumerate() {
            if !found {
                run += t.p as f64;
                if run >= target {
                    cur.selected = i as i64;
                    found = true;
                }
            }
            t.p = (t.p as f64 / sum) as f32;
        }
        if !found {
            cur.selected = cur.len() as i64 - 1;
        }
    }
    fn reset(&mut self) {
        self.seed_cur = resolve_seed(self.seed);
        self.rng.reseed(self.seed_cur);
    }
    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        Box::new(self.clone())
    }
    fn seed(&self) -> Option<u32> {
        Some(self.seed_cur)
    }
}

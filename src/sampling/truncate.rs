//! Samplers that cut the candidate list: top-k, top-p (nucleus), min-p, locally typical,
//! top-n-sigma and XTC. Each keeps its scratch between calls.

use std::ffi::CStr;

use super::ops::{partial_sort, softmax, sort_front, top_k};
use super::rng::{resolve_seed, Mt19937};
use super::{Candidates, Sampler, TokenData};

macro_rules! stateless_clone {
    () => {
        fn clone_box(&self) -> Box<dyn Sampler + Send> {
            Box::new(self.clone())
        }
    };
}

#[derive(Clone)]
pub struct TopK {
    pub k: i32,
}

impl Sampler for TopK {
    fn name(&self) -> &'static CStr {
        c"top-k"
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        top_k(cur, self.k);
    }
    stateless_clone!();
}

/// Keeps the smallest prefix (by probability) whose mass reaches `p`, at least `min_keep`.
#[derive(Clone)]
pub struct TopP {
    pub p: f32,
    pub min_keep: usize,
}

impl Sampler for TopP {
    fn name(&self) -> &'static CStr {
        c"top-p"
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        if self.p >= 1.0 || cur.is_empty() {
            return;
        }
        softmax(cur, false);
        // Sort lazily: the best 256 first (usually enough), everything only when needed.
        let mut sorted_upto = if cur.sorted { cur.len() } else { 256.min(cur.len()) };
        if !cur.sorted {
            sort_front(cur.data, sorted_upto);
        }
        let mut cum = 0.0f32;
        let mut last = cur.len();
        let mut i = 0;
        while i < cur.len() {
            if i == sorted_upto {
                // Everything behind the sorted front is no better than it: sort the rest.
                sort_front(&mut cur.data[i..], usize::MAX);
                sorted_upto = cur.len();
            }
            cum += cur.data[i].p;
            if cum >= self.p && i + 1 >= self.min_keep {
                last = i + 1;
                break;
            }
            i += 1;
        }
        if sorted_upto < last {
            sort_front(&mut cur.data[sorted_upto..], usize::MAX);
        }
        cur.sorted = true;
        cur.truncate(last);
    }
    stateless_clone!();
}

/// Keeps candidates whose probability is at least `p` times the best one's.
#[derive(Clone)]
pub struct MinP {
    pub p: f32,
    pub min_keep: usize,
}

impl Sampler for MinP {
    fn name(&self) -> &'static CStr {
        c"min-p"
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        if self.p <= 0.0 || cur.is_empty() {
            return;
        }
        if !cur.sorted {
            // Unsorted: keep matching tokens in their order, if there are enough of them.
            let max_logit = cur.data.iter().fold(-f32::MAX, |m, t| m.max(t.logit));
            let min_logit = max_logit + self.p.ln();
            let n = cur.data.iter().filter(|t| t.logit >= min_logit).count();
            if n > 0 && n >= self.min_keep {
                let mut w = 0;
                for r in 0..cur.len() {
                    if cur.data[r].logit >= min_logit {
                        cur.data[w] = cur.data[r];
                        w += 1;
                    }
                }
                cur.truncate(w);
                return;
            }
            let n = cur.len();
            partial_sort(cur, n);
        }
        let min_logit = cur.data[0].logit + self.p.ln();
        let mut i = 1;
        while i < cur.len() {
            if cur.data[i].logit < min_logit && i >= self.min_keep {
                break;
            }
            i += 1;
        }
        cur.truncate(i);
    }
    stateless_clone!();
}

/// Locally typical sampling: keeps the tokens whose surprise is closest to the entropy until
/// their mass exceeds `p`.
#[derive(Clone)]
pub struct Typical {
    pub p: f32,
    pub min_keep: usize,
    shifted: Vec<f32>,
    order: Vec<usize>,
    kept: Vec<TokenData>,
}

impl Typical {
    pub fn new(p: f32, min_keep: usize) -> Typical {
        Typical { p, min_keep, shifted: Vec::new(), order: Vec::new(), kept: Vec::new() }
    }
}

impl Sampler for Typical {
    fn name(&self) -> &'static CStr {
        c"typical"
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        if self.p >= 1.0 || cur.is_empty() {
            return;
        }
        softmax(cur, true);
        let entropy: f32 = cur.data.iter().fold(0.0, |e, t| e + -t.p * t.p.ln());
        self.shifted.clear();
        self.shifted.extend(cur.data.iter().map(|t| (-t.p.ln() - entropy).abs()));
        self.order.clear();
        self.order.extend(0..cur.len());
        let shifted = &self.shifted;
        // Ascending, NaN last (a total order: see ops::nan_lowest).
        self.order.sort_by(|&a, &b| shifted[a].total_cmp(&shifted[b]));
        let mut cum = 0.0f32;
        let mut last = self.order.len();
        for (i, &idx) in self.order.iter().enumerate() {
            cum += cur.data[idx].p;
            if cum > self.p && (self.min_keep == 0 || i + 1 >= self.min_keep) {
                last = i + 1;
                break;
            }
        }
        self.kept.clear();
        self.kept.extend(self.order[..last].iter().map(|&i| cur.data[i]));
        cur.data[..last].copy_from_slice(&self.kept);
        cur.truncate(last);
        cur.sorted = false;
    }
    stateless_clone!();
}

/// Top-nσ: masks (to -inf) logits more than `n` standard deviations below the maximum.
#[derive(Clone)]
pub struct TopNSigma {
    pub n: f32,
}

impl Sampler for TopNSigma {
    fn name(&self) -> &'static CStr {
        c"top-n-sigma"
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        if self.n <= 0.0 || cur.len() <= 1 {
            return;
        }
        let finite = || cur.data.iter().filter(|t| t.logit != f32::NEG_INFINITY);
        let max = finite().fold(cur.data[0].logit, |m, t| m.max(t.logit));
        let (sum, count) = finite().fold((0.0f32, 0usize), |(s, c), t| (s + t.logit, c + 1));
        let mean = if count > 0 { sum / count as f32 } else { 0.0 };
        // Upstream squares in double (pow) and accumulates in float.
        let acc = finite().fold(0.0f32, |a, t| (a as f64 + ((t.logit - mean) as f64).powi(2)) as f32);
        let std = if count > 0 { ((acc / count as f32) as f64).sqrt() as f32 } else { 0.0 };
        let floor = max - self.n * std;
        for t in cur.data.iter_mut() {
            if t.logit < floor {
                t.logit = f32::NEG_INFINITY;
            }
        }
    }
    stateless_clone!();
}

/// XTC ("exclude top choices"): with probability `probability`, removes every candidate above
/// `threshold` except the least likely of them.
#[derive(Clone)]
pub struct Xtc {
    pub probability: f32,
    pub threshold: f32,
    pub min_keep: usize,
    seed: u32,
    seed_cur: u32,
    rng: Mt19937,
}

impl Xtc {
    pub fn new(probability: f32, threshold: f32, min_keep: usize, seed: u32) -> Xtc {
        let seed_cur = resolve_seed(seed);
        Xtc { probability, threshold, min_keep, seed, seed_cur, rng: Mt19937::new(seed_cur) }
    }
}

impl Sampler for Xtc {
    fn name(&self) -> &'static CStr {
        c"xtc"
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        if self.probability <= 0.0 || self.threshold > 0.5 || cur.len() < 2 {
            return;
        }
        if self.rng.uniform_f32() > self.probability {
            return;
        }
        softmax(cur, true);
        let mut pos_last = 0;
        for (i, t) in cur.data.iter().enumerate() {
            if t.p >= self.threshold {
                pos_last = i;
            } else {
                break;
            }
        }
        if cur.len() - pos_last >= self.min_keep && pos_last > 0 {
            cur.skip(pos_last);
        }
    }
    fn reset(&mut self) {
        self.seed_cur = resolve_seed(self.seed);
        self.rng.reseed(self.seed_cur);
    }
    stateless_clone!();
}

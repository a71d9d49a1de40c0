//! Mirostat 1.0 and 2.0: pick tokens so that the observed surprise tracks a target `tau`,
//! adapting the cut-off `mu` with learning rate `eta`.

use std::ffi::CStr;

use super::ops::{softmax, top_k};
use super::rng::{resolve_seed, Mt19937};
use super::{Candidates, Sampler};

#[derive(Clone)]
pub struct Mirostat {
    pub n_vocab: i32,
    pub tau: f32,
    pub eta: f32,
    pub m: i32,
    pub mu: f32,
    seed: u32,
    seed_cur: u32,
    rng: Mt19937,
}

impl Mirostat {
    pub fn new(n_vocab: i32, seed: u32, tau: f32, eta: f32, m: i32) -> Mirostat {
        let seed_cur = resolve_seed(seed);
        Mirostat { n_vocab, tau, eta, m, mu: 2.0 * tau, seed, seed_cur, rng: Mt19937::new(seed_cur) }
    }
}

/// Draws from the candidates' `p`, records the choice and returns the observed surprise.
fn draw(cur: &mut Candidates<'_>, rng: &mut Mt19937) -> f32 {
    let idx = rng.discrete(cur.data.iter().map(|t| t.p));
    cur.selected = idx as i64;
    -cur.data[idx].p.log2()
}

impl Sampler for Mirostat {
    fn name(&self) -> &'static CStr {
        c"mirostat"
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        if cur.is_empty() {
            cur.selected = -1;
            return;
        }
        softmax(cur, true);
        // Estimate the Zipf exponent s_hat from the m most probable tokens.
        let (mut sum_ti_bi, mut sum_ti_sq) = (0.0f32, 0.0f32);
        let mut i = 0usize;
        // As upstream, `m - 1` is taken as size_t (m = 0 means no limit).
        let limit = (self.m as isize - 1) as usize;
        while i < limit && i + 1 < cur.len() {
            let t_i = ((i + 2) as f32 / (i + 1) as f32).ln();
            let b_i = (cur.data[i].p / cur.data[i + 1].p).ln();
            sum_ti_bi += t_i * b_i;
            sum_ti_sq += t_i * t_i;
            i += 1;
        }
        let s_hat = sum_ti_bi / sum_ti_sq;
        let epsilon_hat = s_hat - 1.0;
        let k = ((epsilon_hat * 2f32.powf(self.mu)) / (1.0 - (self.n_vocab as f32).powf(-epsilon_hat))).powf(1.0 / s_hat);
        // C++'s int(k) of a NaN or huge float is undefined; saturate like Rust's cast.
        top_k(cur, (k as i32).max(1));
        softmax(cur, true);
        let surprise = draw(cur, &mut self.rng);
        self.mu -= self.eta * (surprise - self.tau);
    }
    fn reset(&mut self) {
        self.mu = 2.0 * self.tau;
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

#[derive(Clone)]
pub struct MirostatV2 {
    pub tau: f32,
    pub eta: f32,
    pub mu: f32,
    seed: u32,
    seed_cur: u32,
    rng: Mt19937,
}

impl MirostatV2 {
    pub fn new(seed: u32, tau: f32, eta: f32) -> MirostatV2 {
        let seed_cur = resolve_seed(seed);
        MirostatV2 { tau, eta, mu: 2.0 * tau, seed, seed_cur, rng: Mt19937::new(seed_cur) }
    }
}

impl Sampler for MirostatV2 {
    fn name(&self) -> &'static CStr {
        c"mirostat-v2"
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        if cur.is_empty() {
            cur.selected = -1;
            return;
        }
        softmax(cur, true);
        // Drop the tokens more surprising than mu (keeping at least one).
        let keep = cur.data.iter().position(|t| -t.p.log2() > self.mu).unwrap_or(cur.len()).max(1);
        cur.truncate(keep);
        softmax(cur, true);
        let surprise = draw(cur, &mut self.rng);
        self.mu -= self.eta * (surprise - self.tau);
    }
    fn reset(&mut self) {
        self.mu = 2.0 * self.tau;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the api_sequence fuzzer (tests/data/regressions/api_sequence/): an empty
    /// candidate array reached softmax's non-empty assertion. Both variants now select nothing.
    #[test]
    fn empty_candidates_select_nothing() {
        let mut none: [crate::sampling::TokenData; 0] = [];
        let mut cur = Candidates::new(&mut none);
        MirostatV2::new(7, 5.0, 0.1).apply(&mut cur);
        assert_eq!(cur.selected, -1);
        let mut cur = Candidates::new(&mut none);
        Mirostat::new(480, 7, 5.0, 0.1, 100).apply(&mut cur);
        assert_eq!(cur.selected, -1);
    }
}

//! DRY ("don't repeat yourself"): penalizes tokens that would extend a sequence already seen in
//! the last `penalty_last_n` tokens, growing exponentially with the repeat length beyond
//! `allowed_length`. Sequence breakers (e.g. "\n", ":") stop a repeat from reaching across them.
//! Ported from upstream's algorithm (Z-algorithm over the reversed context).

use std::collections::{HashMap, VecDeque};
use std::ffi::CStr;

use super::{Candidates, Sampler};
use crate::tokenizer::Vocab;

const MAX_BREAKER_CHARS: usize = 40;
const MAX_BREAKER_TOKENS: usize = 20;

#[derive(Clone)]
pub struct Dry {
    pub multiplier: f32,
    pub base: f32,
    pub allowed_length: i32,
    pub penalty_last_n: usize,
    /// Head token → tails (token sequences after the head) of each breaker starting with it.
    breakers: HashMap<i32, Vec<Vec<i32>>>,
    last_tokens: VecDeque<i32>,
    repeat_count: Vec<i32>,
    max_token_repeat: HashMap<i32, i32>,
}

/// Every way `breaker` can start inside a token of `vocab`: tokens containing it whole get an
/// empty tail; tokens ending with a prefix of it get the tokenization of the rest.
fn breaker_sequences(vocab: &Vocab, breaker: &[u8], out: &mut HashMap<i32, Vec<Vec<i32>>>) {
    let mut word = Vec::new();
    let mut tail = Vec::new();
    for id in 0..vocab.n_tokens() as i32 {
        vocab.detokenize(&[id], false, true, &mut word);
        if word.windows(breaker.len()).any(|w| w == breaker) {
            out.entry(id).or_default().push(Vec::new());
            continue;
        }
        for pos in (0..word.len()).filter(|&p| word[p] == breaker[0]) {
            let overlap = (word.len() - pos).min(breaker.len());
            if word[pos..pos + overlap] != breaker[..overlap] {
                continue;
            }
            vocab.tokenize(&breaker[overlap..], false, false, &mut tail);
            tail.truncate(MAX_BREAKER_TOKENS);
            let seqs = out.entry(id).or_default();
            if !seqs.contains(&tail) {
                seqs.push(tail.clone());
            }
        }
    }
}

impl Dry {
    /// Whether parameters enable the sampler (upstream returns a no-op otherwise).
    pub fn is_enabled(multiplier: f32, base: f32, penalty_last_n: i32) -> bool {
        multiplier != 0.0 && base >= 1.0 && penalty_last_n != 0
    }

    /// Breakers given as text are mapped onto the vocabulary (truncated to 40 bytes each).
    pub fn new(vocab: &Vocab, multiplier: f32, base: f32, allowed_length: i32, penalty_last_n: usize, breakers: &[&[u8]]) -> Dry {
        let mut map = HashMap::new();
        for b in breakers.iter().filter(|b| !b.is_empty()) {
            breaker_sequences(vocab, &b[..b.len().min(MAX_BREAKER_CHARS)], &mut map);
        }
        Dry::with_token_breakers(multiplier, base, allowed_length, penalty_last_n, map)
    }

    /// Breakers given directly as head token → tails.
    pub fn with_token_breakers(multiplier: f32, base: f32, allowed_length: i32, penalty_last_n: usize, breakers: HashMap<i32, Vec<Vec<i32>>>) -> Dry {
        Dry {
            multiplier,
            base,
            allowed_length,
            penalty_last_n,
            breakers,
            last_tokens: VecDeque::with_capacity(penalty_last_n),
            repeat_count: Vec::with_capacity(penalty_last_n),
            max_token_repeat: HashMap::new(),
        }
    }

    /// The i-th token from the end of the context (0 = the last one).
    fn rat(&self, i: usize) -> i32 {
        self.last_tokens[self.last_tokens.len() - 1 - i]
    }

    /// How far back a repeat may reach: up to the most recent complete sequence breaker.
    fn repeat_limit(&self, last_n: usize) -> usize {
        for i in 0..last_n {
            let Some(tails) = self.breakers.get(&self.rat(i)) else { continue };
            let mut longest: i64 = -1;
            for tail in tails {
                let len = tail.len();
                if len as i64 > longest && len <= i && tail.iter().enumerate().all(|(o, &t)| t == self.rat(i - o - 1)) {
                    longest = len as i64;
                }
            }
            if longest >= 0 {
                return i - longest as usize;
            }
        }
        last_n
    }

    /// repeat_count[last - k] = length of the longest suffix of the context that also ends k
    /// tokens earlier (capped at `limit`), by the Z-algorithm over the reversed context.
    fn count_repeats(&mut self, n: usize, limit: usize) {
        let last = n - 1;
        let (mut lt, mut rt) = (0usize, 0usize);
        for k in 1..n {
            if k > rt {
                let mut len = 0;
                while len + k < n && self.rat(len) == self.rat(len + k) {
                    len += 1;
                }
                self.repeat_count[last - k] = len.min(limit) as i32;
                if len > 0 {
                    lt = k;
                    rt = k + len - 1;
                }
            } else {
                let p = k - lt;
                let right_len = rt - k + 1;
                if (self.repeat_count[last - p] as usize) < right_len {
                    self.repeat_count[last - k] = (self.repeat_count[last - p] as usize).min(limit) as i32;
                } else {
                    let mut i = rt + 1;
                    while i < n && self.rat(i) == self.rat(i - k) {
                        i += 1;
                    }
                    self.repeat_count[last - k] = (i - k).min(limit) as i32;
                    lt = k;
                    rt = i - 1;
                }
            }
        }
    }
}

impl Sampler for Dry {
    fn name(&self) -> &'static CStr {
        c"dry"
    }
    fn accept(&mut self, token: i32) {
        if !Dry::is_enabled(self.multiplier, self.base, self.penalty_last_n as i32) {
            return;
        }
        if self.last_tokens.len() == self.penalty_last_n {
            self.last_tokens.pop_front();
        }
        self.last_tokens.push_back(token);
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        if !Dry::is_enabled(self.multiplier, self.base, self.penalty_last_n as i32) {
            return;
        }
        let n = self.last_tokens.len().min(self.penalty_last_n);
        if n as i64 <= self.allowed_length as i64 {
            return;
        }
        self.repeat_count.clear();
        self.repeat_count.resize(n, 0);
        self.max_token_repeat.clear();
        let limit = self.repeat_limit(n);
        if (limit as i64) < self.allowed_length as i64 {
            return;
        }
        self.count_repeats(n, limit);
        // The token after each repeat would extend it: remember the longest repeat per token.
        for i in 0..n - 1 {
            let len = self.repeat_count[i];
            if len >= self.allowed_length {
                let token = self.rat(n - 2 - i);
                let e = self.max_token_repeat.entry(token).or_insert(len);
                *e = (*e).max(len);
            }
        }
        // Clamp the exponent so that base^exp stays below f32::MAX.
        let max_exponent = if self.base > 1.000_001 { (88.722_84f32 / self.base.ln()) as i32 } else { 0 };
        for t in cur.data.iter_mut() {
            let Some(&len) = self.max_token_repeat.get(&t.id) else { continue };
            let single_token_breaker = self.breakers.get(&t.id).is_some_and(|tails| tails.iter().any(|tail| tail.is_empty()));
            if single_token_breaker {
                continue;
            }
            let mut exp = len - self.allowed_length;
            if max_exponent > 0 && exp > max_exponent {
                exp = max_exponent;
            }
            // Upstream's std::pow(float, int) computes in double.
            t.logit -= (self.multiplier as f64 * (self.base as f64).powi(exp)) as f32;
        }
        cur.sorted = false;
    }
    fn reset(&mut self) {
        self.last_tokens.clear();
        self.repeat_count.clear();
        self.max_token_repeat.clear();
    }
    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        Box::new(self.clone())
    }
}

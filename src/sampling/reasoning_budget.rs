//! An end to thinking after N tokens, as llama.cpp's reasoning-budget sampler does it: the
//! tokens of the reasoning's start tag open the count (or the prompt already opened it), its end
//! tag's tokens close it, and when the budget runs out the end tag is forced token by token; the
//! sampler it wraps picks every other token.

use std::ffi::CStr;

use super::{Candidates, Sampler};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Waiting for the start tag.
    Idle,
    /// Inside the reasoning, this many tokens so far.
    Counting(usize),
    /// Forcing the end tag's token at this index.
    Forcing(usize),
    Done,
}

pub struct ReasoningBudget {
    inner: Box<dyn Sampler + Send>,
    start: Vec<i32>,
    end: Vec<i32>,
    budget: usize,
    state: State,
    open: bool,
    recent: Vec<i32>,
}

impl ReasoningBudget {
    /// `start` / `end`: the tags' tokens; `open`: the prompt opened the reasoning.
    pub fn new(inner: Box<dyn Sampler + Send>, start: Vec<i32>, end: Vec<i32>, budget: usize, open: bool) -> ReasoningBudget {
        let mut s = ReasoningBudget { inner, start, end, budget, state: State::Idle, open, recent: Vec::new() };
        s.restart();
        s
    }

    fn restart(&mut self) {
        self.recent.clear();
        self.state = if self.end.is_empty() {
            State::Done
        } else if self.open {
            self.counting(0)
        } else {
            State::Idle
        };
    }

    fn counting(&self, n: usize) -> State {
        if n >= self.budget {
            State::Forcing(0)
        } else {
            State::Counting(n)
        }
    }

    fn ends_with(&self, tag: &[i32]) -> bool {
        !tag.is_empty() && self.recent.ends_with(tag)
    }
}

impl Sampler for ReasoningBudget {
    fn name(&self) -> &'static CStr {
        c"reasoning-budget"
    }

    fn accept(&mut self, token: i32) {
        self.inner.accept(token);
        let keep = self.start.len().max(self.end.len());
        if self.recent.len() == keep && keep > 0 {
            self.recent.remove(0);
        }
        if keep > 0 {
            self.recent.push(token);
        }
        self.state = match self.state {
            State::Idle if self.ends_with(&self.start) => self.counting(0),
            State::Counting(_) if self.ends_with(&self.end) => State::Done,
            State::Counting(n) => self.counting(n + 1),
            State::Forcing(i) if i + 1 >= self.end.len() => State::Done,
            State::Forcing(i) => State::Forcing(i + 1),
            s => s,
        };
    }

    fn apply(&mut self, cur: &mut Candidates<'_>) {
        let State::Forcing(i) = self.state else { return self.inner.apply(cur) };
        let want = self.end[i];
        let mut at = -1;
        for (k, c) in cur.data.iter_mut().enumerate() {
            if c.id == want {
                at = k as i64;
            } else {
                c.logit = f32::NEG_INFINITY;
            }
        }
        cur.selected = at;
    }

    fn reset(&mut self) {
        self.inner.reset();
        self.restart();
    }

    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        Box::new(ReasoningBudget { inner: self.inner.clone_box(), start: self.start.clone(), end: self.end.clone(), budget: self.budget, state: self.state, open: self.open, recent: self.recent.clone() })
    }

    fn seed(&self) -> Option<u32> {
        self.inner.seed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::TokenData;

    /// Picks the highest logit.
    #[derive(Clone)]
    struct Top;
    impl Sampler for Top {
        fn name(&self) -> &'static CStr {
            c"top"
        }
        fn apply(&mut self, cur: &mut Candidates<'_>) {
            let best = cur.data.iter().enumerate().max_by(|a, b| a.1.logit.total_cmp(&b.1.logit)).map_or(-1, |(k, _)| k as i64);
            cur.selected = best;
        }
        fn clone_box(&self) -> Box<dyn Sampler + Send> {
            Box::new(self.clone())
        }
    }

    fn pick(s: &mut dyn Sampler, favourite: i32) -> i32 {
        let mut data: Vec<TokenData> = (0..10).map(|i| TokenData { id: i, logit: if i == favourite { 5.0 } else { 0.0 }, p: 0.0 }).collect();
        let mut cur = Candidates { data: &mut data, selected: -1, sorted: false };
        s.apply(&mut cur);
        let t = cur.data[cur.selected as usize].id;
        s.accept(t);
        t
    }

    #[test]
    fn the_end_tag_is_forced_after_the_budget() {
        // start tag [1], end tag [2, 3], budget 3; the model would write 7 forever.
        let mut s = ReasoningBudget::new(Box::new(Top), vec![1], vec![2, 3], 3, false);
        assert_eq!(pick(&mut s, 7), 7, "no reasoning yet: free");
        assert_eq!(pick(&mut s, 1), 1);
        let out: Vec<i32> = (0..6).map(|_| pick(&mut s, 7)).collect();
        assert_eq!(out, vec![7, 7, 7, 2, 3, 7]);
        // Opened by the prompt, budget 0: the end at once; a tag the model closes itself ends it.
        let mut s = ReasoningBudget::new(Box::new(Top), vec![1], vec![2], 0, true);
        assert_eq!(pick(&mut s, 7), 2);
        let mut s = ReasoningBudget::new(Box::new(Top), vec![1], vec![2], 5, true);
        assert_eq!((pick(&mut s, 7), pick(&mut s, 2)), (7, 2));
        assert_eq!((0..8).map(|_| pick(&mut s, 7)).collect::<Vec<_>>(), vec![7; 8]);
        s.reset();
        assert_eq!((0..6).map(|_| pick(&mut s, 7)).collect::<Vec<_>>(), vec![7, 7, 7, 7, 7, 2]);
    }
}

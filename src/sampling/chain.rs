//! A chain of samplers applied in order, with upstream's sampling-time counters. Generic over
//! the member type so the C API can chain its handles (including user-defined samplers).

use std::time::{Duration, Instant};

use super::{Candidates, Sampler, TokenData};

pub struct Chain<M> {
    pub members: Vec<M>,
    /// When set, sampling time is not measured (counts still are), as upstream.
    pub no_perf: bool,
    pub t_sample: Duration,
    pub n_sample: i32,
    /// The candidate buffer reused by every `sample` call on this chain.
    pub candidates: Vec<TokenData>,
}

impl<M> Chain<M> {
    pub fn new(no_perf: bool) -> Chain<M> {
        Chain { members: Vec::new(), no_perf, t_sample: Duration::ZERO, n_sample: 0, candidates: Vec::new() }
    }

    fn timed<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let start = (!self.no_perf).then(Instant::now);
        let r = f(self);
        if let Some(s) = start {
            self.t_sample += s.elapsed();
        }
        r
    }

    pub fn reset_perf(&mut self) {
        self.t_sample = Duration::ZERO;
        self.n_sample = 0;
    }
}

impl<M: Sampler> Chain<M> {
    pub fn accept(&mut self, token: i32) {
        self.timed(|c| c.members.iter_mut().for_each(|m| m.accept(token)));
        self.n_sample += 1;
    }

    pub fn apply(&mut self, cur: &mut Candidates<'_>) {
        self.timed(|c| c.members.iter_mut().for_each(|m| m.apply(cur)));
    }

    pub fn reset(&mut self) {
        self.members.iter_mut().for_each(|m| m.reset());
    }

    /// The seed of the last member that reports one (upstream's llama_sampler_get_seed).
    pub fn seed(&self) -> Option<u32> {
        self.members.iter().rev().find_map(|m| m.seed())
    }
}

/// Fills `buf` with one candidate per vocabulary entry from a logits row.
pub fn fill_candidates(buf: &mut Vec<TokenData>, logits: &[f32]) {
    buf.clear();
    buf.extend(logits.iter().enumerate().map(|(i, &logit)| TokenData { id: i as i32, logit, p: 0.0 }));
}

/// Applies `sampler` to a logits row, accepts and returns the chosen token: the engine's
/// llama_sampler_sample.
pub fn sample(sampler: &mut dyn Sampler, logits: &[f32], buf: &mut Vec<TokenData>) -> Result<i32, String> {
    fill_candidates(buf, logits);
    let mut cur = Candidates::new(buf);
    sampler.apply(&mut cur);
    if cur.selected < 0 || cur.selected as usize >= cur.len() {
        return Err(format!("the sampler chose no token (selected = {} of {} candidates); end the chain with greedy, dist or mirostat", cur.selected, cur.len()));
    }
    let token = cur.data[cur.selected as usize].id;
    sampler.accept(token);
    Ok(token)
}

impl Sampler for BoxChain {
    fn name(&self) -> &'static std::ffi::CStr {
        c"chain"
    }
    fn accept(&mut self, token: i32) {
        Chain::accept(self, token)
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        Chain::apply(self, cur)
    }
    fn reset(&mut self) {
        Chain::reset(self)
    }
    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        let mut c = BoxChain::new(self.no_perf);
        c.members = self.members.iter().map(|m| m.clone_box()).collect();
        Box::new(c)
    }
    fn seed(&self) -> Option<u32> {
        Chain::seed(self)
    }
}

/// A chain of engine samplers: what the CLI builds.
pub type BoxChain = Chain<Box<dyn Sampler + Send>>;

impl Sampler for Box<dyn Sampler + Send> {
    fn name(&self) -> &'static std::ffi::CStr {
        (**self).name()
    }
    fn accept(&mut self, token: i32) {
        (**self).accept(token)
    }
    fn apply(&mut self, cur: &mut Candidates<'_>) {
        (**self).apply(cur)
    }
    fn reset(&mut self) {
        (**self).reset()
    }
    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        (**self).clone_box()
    }
    fn seed(&self) -> Option<u32> {
        (**self).seed()
    }
}

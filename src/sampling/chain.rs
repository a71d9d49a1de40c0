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
    /// Why the chain cannot sample (a NULL member was added: some sampler's init failed).
    pub broken: Option<String>,
}

impl<M> Chain<M> {
    pub fn new(no_perf: bool) -> Chain<M> {
        Chain { members: Vec::new(), no_perf, t_sample: Duration::ZERO, n_sample: 0, candidates: Vec::new(), broken: None }
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

/// `sample` under a grammar, as llama.cpp's common sampler does it (`common_sampler_sample`
/// without `grammar_first`): the chain picks a token from the whole row; if `grammar` rejects
/// it, the row is filled again, the grammar applied first and the chain run again. Both accept
/// the token. So the emitted token is always one the grammar allows, and the cost of the
/// grammar's full pass is paid only when the unconstrained choice breaks it.
pub fn sample_constrained(sampler: &mut dyn Sampler, grammar: &mut dyn Sampler, logits: &[f32], buf: &mut Vec<TokenData>) -> Result<i32, String> {
    fn chosen(cur: &Candidates<'_>) -> Result<i32, String> {
        if cur.selected < 0 || cur.selected as usize >= cur.len() {
            return Err(format!("the sampler chose no token (selected = {} of {} candidates); end the chain with greedy, dist or mirostat", cur.selected, cur.len()));
        }
        Ok(cur.data[cur.selected as usize].id)
    }
    fill_candidates(buf, logits);
    let mut cur = Candidates::new(buf);
    sampler.apply(&mut cur);
    let mut token = chosen(&cur)?;
    // The grammar decides the picked token alone (upstream's rejection check).
    let mut one = [TokenData { id: token, logit: 1.0, p: 0.0 }];
    grammar.apply(&mut Candidates::new(&mut one));
    if one[0].logit == f32::NEG_INFINITY {
        fill_candidates(buf, logits);
        let mut cur = Candidates::new(buf);
        grammar.apply(&mut cur);
        sampler.apply(&mut cur);
        token = chosen(&cur)?;
    }
    grammar.accept(token);
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

/// The usual CPU sampling settings, as llama.cpp's common sampler applies them.
#[derive(Clone, Copy, Debug)]
pub struct CommonParams {
    /// ≤ 0: greedy.
    pub temperature: f32,
    /// ≤ 0: off.
    pub top_k: i32,
    /// ≥ 1: off.
    pub top_p: f32,
    /// ≤ 0: off.
    pub min_p: f32,
    /// 1: off.
    pub repeat_penalty: f32,
    pub repeat_last_n: i32,
    pub seed: u32,
    /// 0: off.
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
}

impl CommonParams {
    pub fn check(&self) -> Result<(), String> {
        let finite = [self.temperature, self.top_p, self.min_p, self.repeat_penalty, self.frequency_penalty, self.presence_penalty].iter().all(|v| v.is_finite());
        if !finite {
            return Err("sampling parameters must be finite numbers".into());
        }
        if !(0.0..=1.0).contains(&self.min_p.max(0.0)) || self.top_p < 0.0 {
            return Err(format!("top_p = {} and min_p = {} must lie in [0, 1]", self.top_p, self.min_p));
        }
        if self.repeat_last_n < -1 {
            return Err(format!("repeat_last_n = {} must be -1 (whole context), 0 (off) or positive", self.repeat_last_n));
        }
        if self.repeat_penalty <= 0.0 {
            return Err(format!("repeat_penalty = {} must be positive (1 is off)", self.repeat_penalty));
        }
        Ok(())
    }

    /// penalties, top-k, top-p, min-p, temperature, then a seeded draw (mt19937, as upstream);
    /// temperature ≤ 0 is greedy. `n_ctx` sizes the penalty window for repeat_last_n = -1.
    pub fn build(&self, n_ctx: usize) -> BoxChain {
        use super::penalties::Penalties;
        use super::pick::{Dist, Greedy};
        use super::temp::Temp;
        use super::truncate::{MinP, TopK, TopP};
        let mut c = BoxChain::new(true);
        let last_n = if self.repeat_last_n < 0 { n_ctx } else { self.repeat_last_n as usize };
        if !Penalties::is_disabled(last_n.min(i32::MAX as usize) as i32, self.repeat_penalty, self.frequency_penalty, self.presence_penalty) {
            c.members.push(Box::new(Penalties::new(last_n, self.repeat_penalty, self.frequency_penalty, self.presence_penalty)));
        }
        if self.temperature <= 0.0 {
            c.members.push(Box::new(Greedy));
            return c;
        }
        if self.top_k > 0 {
            c.members.push(Box::new(TopK { k: self.top_k }));
        }
        if self.top_p < 1.0 {
            c.members.push(Box::new(TopP { p: self.top_p, min_keep: 1 }));
        }
        if self.min_p > 0.0 {
            c.members.push(Box::new(MinP { p: self.min_p, min_keep: 1 }));
        }
        c.members.push(Box::new(Temp { temp: self.temperature }));
        c.members.push(Box::new(Dist::new(self.seed)));
        c
    }
}

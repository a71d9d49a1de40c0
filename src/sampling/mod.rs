//! sampling: turns a row of logits into a token, with llama.cpp's samplers and their exact
//! semantics (src/llama-sampler.cpp of b11312). Each sampler is a value implementing
//! [`Sampler`] and owns all of its state (including its RNG); nothing here is global.
//! Samplers work in place on a [`Candidates`] view of the caller's array and keep their
//! scratch buffers between calls, so sampling allocates nothing per token after warm-up.

pub mod chain;
pub mod dry;
pub mod grammar;
pub mod infill;
pub mod init;
pub mod mirostat;
pub mod ops;
pub mod penalties;
pub mod pick;
pub mod reasoning_budget;
pub mod rng;
pub mod temp;
pub mod truncate;
pub mod logit_bias;

use std::ffi::CStr;

/// One candidate token: llama.h's `llama_token_data` (same layout; the API casts between them).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct TokenData {
    pub id: i32,
    pub logit: f32,
    pub p: f32,
}

/// A view of a caller's `llama_token_data_array`: samplers shrink `data` from either end
/// (top-k cuts the tail, XTC drops the head as upstream does by moving the data pointer),
/// reorder it, and set `selected`.
pub struct Candidates<'a> {
    pub data: &'a mut [TokenData],
    /// Index into `data` of the chosen token, -1 when none has been chosen.
    pub selected: i64,
    /// Whether `data` is sorted by descending logit.
    pub sorted: bool,
}

impl<'a> Candidates<'a> {
    pub fn new(data: &'a mut [TokenData]) -> Candidates<'a> {
        Candidates { data, selected: -1, sorted: false }
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Keeps the first `n` candidates.
    pub fn truncate(&mut self, n: usize) {
        let data = std::mem::take(&mut self.data);
        let n = n.min(data.len());
        self.data = &mut data[..n];
    }

    /// Drops the first `n` candidates.
    pub fn skip(&mut self, n: usize) {
        let data = std::mem::take(&mut self.data);
        let n = n.min(data.len());
        self.data = &mut data[n..];
    }
}

/// A sampler with upstream's life cycle: `apply` filters or picks, `accept` records the token
/// that was finally chosen, `reset` returns to the initial state (re-seeding RNGs).
pub trait Sampler {
    /// The name `llama_sampler_name` reports (upstream's, e.g. "top-k", or "?top-k" for a no-op).
    fn name(&self) -> &'static CStr;
    fn accept(&mut self, _token: i32) {}
    fn apply(&mut self, cur: &mut Candidates<'_>);
    fn reset(&mut self) {}
    /// A copy with the same configuration and current state.
    fn clone_box(&self) -> Box<dyn Sampler + Send>;
    /// The seed in use, for samplers that draw random numbers and report it (dist, mirostat).
    fn seed(&self) -> Option<u32> {
        None
    }
}

/// A sampler that does nothing: what upstream returns for parameters that disable a sampler
/// (e.g. top_k(0) is "?top-k"), so the chain still shows it.
#[derive(Clone)]
pub struct Noop {
    pub name: &'static CStr,
}

impl Sampler for Noop {
    fn name(&self) -> &'static CStr {
        self.name
    }
    fn apply(&mut self, _cur: &mut Candidates<'_>) {}
    fn clone_box(&self) -> Box<dyn Sampler + Send> {
        Box::new(self.clone())
    }
}

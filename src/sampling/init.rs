//! The samplers as upstream's `llama_sampler_init_*` make them: the sampler, or the named
//! no-op ("?top-k", ...) when the parameters disable it. One copy of those decisions, shared
//! by llama.h's init functions (src/api/sampling.rs) and the common chain
//! ([`super::chain::CommonParams::build`]).

use std::sync::Arc;

use super::dry::Dry;
use super::infill::Infill;
use super::logit_bias::LogitBias;
use super::mirostat::{Mirostat, MirostatV2};
use super::penalties::Penalties;
use super::pick::{Dist, Greedy};
use super::temp::{Temp, TempExt};
use super::truncate::{MinP, TopK, TopNSigma, TopP, Typical, Xtc};
use super::{Noop, Sampler};
use crate::model::Model;
use crate::tokenizer::Vocab;

pub type Boxed = Box<dyn Sampler + Send>;

fn noop(name: &'static std::ffi::CStr) -> Boxed {
    Box::new(Noop { name })
}

pub fn greedy() -> Boxed {
    Box::new(Greedy)
}

pub fn dist(seed: u32) -> Boxed {
    Box::new(Dist::new(seed))
}

pub fn top_k(k: i32) -> Boxed {
    if k <= 0 {
        return noop(c"?top-k");
    }
    Box::new(TopK { k })
}

pub fn top_p(p: f32, min_keep: usize) -> Boxed {
    if p >= 1.0 {
        return noop(c"?top-p");
    }
    Box::new(TopP { p, min_keep })
}

pub fn min_p(p: f32, min_keep: usize) -> Boxed {
    if p <= 0.0 {
        return noop(c"?min-p");
    }
    Box::new(MinP { p, min_keep })
}

pub fn typical(p: f32, min_keep: usize) -> Boxed {
    if p >= 1.0 {
        return noop(c"?typical");
    }
    Box::new(Typical::new(p, min_keep))
}

pub fn temp(t: f32) -> Boxed {
    if t == 1.0 {
        return noop(c"?temp");
    }
    Box::new(Temp { temp: t })
}

pub fn temp_ext(t: f32, delta: f32, exponent: f32) -> Boxed {
    if t == 1.0 && delta <= 0.0 {
        return noop(c"?temp-ext");
    }
    Box::new(TempExt { temp: t, delta, exponent })
}

pub fn xtc(p: f32, t: f32, min_keep: usize, seed: u32) -> Boxed {
    if p <= 0.0 || t > 0.5 {
        return noop(c"?xtc");
    }
    Box::new(Xtc::new(p, t, min_keep, seed))
}

pub fn top_n_sigma(n: f32) -> Boxed {
    if n <= 0.0 {
        return noop(c"?top-n-sigma");
    }
    Box::new(TopNSigma { n })
}

pub fn mirostat(n_vocab: i32, seed: u32, tau: f32, eta: f32, m: i32) -> Boxed {
    Box::new(Mirostat::new(n_vocab, seed, tau, eta, m))
}

pub fn mirostat_v2(seed: u32, tau: f32, eta: f32) -> Boxed {
    Box::new(MirostatV2::new(seed, tau, eta))
}

/// A negative `last_n` counts as 0 (off), as upstream clamps it.
pub fn penalties(last_n: i32, repeat: f32, freq: f32, present: f32) -> Boxed {
    let last_n = last_n.max(0);
    if Penalties::is_disabled(last_n, repeat, freq, present) {
        return noop(c"?penalties");
    }
    Box::new(Penalties::new(last_n as usize, repeat, freq, present))
}

/// A negative `last_n` counts as 0 (off), as upstream clamps it. The vocabulary is read only
/// when the sampler is enabled (to map the breakers onto tokens).
pub fn dry(vocab: &Vocab, multiplier: f32, base: f32, allowed_length: i32, last_n: i32, breakers: &[&[u8]]) -> Boxed {
    let last_n = last_n.max(0);
    if !Dry::is_enabled(multiplier, base, last_n) {
        return noop(c"?dry");
    }
    Box::new(Dry::new(vocab, multiplier, base, allowed_length, last_n as usize, breakers))
}

pub fn logit_bias(biases: Vec<(i32, f32)>) -> Boxed {
    if biases.is_empty() {
        return noop(c"?logit-bias");
    }
    Box::new(LogitBias::new(biases))
}

pub fn infill(model: &Arc<Model>) -> Boxed {
    Box::new(Infill::new(Arc::clone(model)))
}

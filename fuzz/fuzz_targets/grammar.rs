//! Arbitrary GBNF text (and trigger patterns) through llama_sampler_init_grammar /
//! _lazy_patterns on the DeepSeek-R1 vocabulary, then arbitrary token sequences: tokens the
//! grammar allows (picked from an apply) and arbitrary ids, accepted one by one, with a clone
//! and a reset on the way. At every step the allowed set (from the trie walk, or decided per
//! candidate when there are few) must equal the direct per-token computation (upstream's
//! algorithm) on a sample of the candidates.
//!
//! Input: byte 0 = mode (bit 0: lazy with a pattern), then the grammar up to a NUL, then (lazy)
//! the pattern up to a NUL, then 4-byte steps.
#![no_main]

use std::sync::{Arc, OnceLock};

use deepseek::api::handles::{llama_model, llama_vocab};
use deepseek::api::model::{
    llama_model_default_params, llama_model_get_vocab, llama_model_load_from_file,
};
use deepseek::api::sampling::*;
use deepseek::api::types::{llama_token_data, llama_token_data_array};
use deepseek::sampling::grammar::sampler::GrammarSampler;
use deepseek::sampling::{Candidates, Sampler, TokenData};
use libfuzzer_sys::fuzz_target;

struct Vocab(*const llama_vocab);
// SAFETY: a vocabulary is immutable after loading and may be used from any thread.
unsafe impl Send for Vocab {}
// SAFETY: as above.
unsafe impl Sync for Vocab {}

fn vocab() -> &'static Vocab {
    static VOCAB: OnceLock<Vocab> = OnceLock::new();
    VOCAB.get_or_init(|| {
        deepseek_fuzz::install_log_guard();
        let mut p = llama_model_default_params();
        p.vocab_only = true;
        let path = deepseek_fuzz::fixture("vocab/deepseek-r1-qwen.gguf");
        // SAFETY: a NUL-terminated path.
        let m: *mut llama_model = unsafe { llama_model_load_from_file(path.as_ptr(), p) };
        assert!(!m.is_null());
        Vocab(llama_model_get_vocab(m))
    })
}

fn split_nul(d: &[u8]) -> (&[u8], &[u8]) {
    match d.iter().position(|&b| b == 0) {
        Some(i) => (&d[..i], &d[i + 1..]),
        None => (d, &[]),
    }
}

fuzz_target!(
    init: {
        // Loading the vocabulary and building its piece trie take seconds under the sanitizer:
        // done before the first input, so the per-input timeout measures the grammar only.
        // SAFETY: a live vocab handle.
        let _ = unsafe { &*vocab().0 }.vocab().grammar_trie();
    },
    |data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let v = vocab().0;
    // SAFETY: a live vocab handle.
    let vref = unsafe { &*v };
    let n_vocab = vref.vocab().n_tokens();
    let (grammar, rest) = split_nul(rest);
    let (pattern, steps) = if mode & 1 == 1 { split_nul(rest) } else { (&[][..], rest) };
    let g = std::ffi::CString::new(grammar).unwrap();
    let pat = std::ffi::CString::new(pattern).unwrap();
    let s = if mode & 1 == 1 {
        let mut pats = [pat.as_ptr()];
        // SAFETY: valid strings and arrays.
        unsafe { llama_sampler_init_grammar_lazy_patterns(v, g.as_ptr(), c"root".as_ptr(), pats.as_mut_ptr(), 1, std::ptr::null(), 0) }
    } else {
        // SAFETY: valid strings.
        unsafe { llama_sampler_init_grammar(v, g.as_ptr(), c"root".as_ptr()) }
    };
    // The engine sampler alongside, for the differential check.
    let words: [&[u8]; 0] = [];
    let pats: Vec<&[u8]> = if mode & 1 == 1 { vec![pattern] } else { vec![] };
    let engine = GrammarSampler::new(Arc::clone(&vref.model), Some(grammar), b"root", mode & 1 == 1, &words, &pats, &[]);
    assert_eq!(s.is_null(), engine.is_err() && !grammar.is_empty(), "C init and engine init disagree");
    if s.is_null() {
        return;
    }
    let mut engine = engine.unwrap();
    let mut s = s;
    let mut cands: Vec<llama_token_data> = Vec::with_capacity(5200);
    for (i, step) in steps.chunks_exact(4).take(12).enumerate() {
        let x = u32::from_le_bytes([step[0], step[1], step[2], step[3]]);
        if i == 3 {
            let c = llama_sampler_clone(s);
            // SAFETY: s came from an init and is not in a chain.
            unsafe { llama_sampler_free(s) };
            s = c;
        }
        // Candidates: the 4,096 lowest ids (single bytes and the commonest merges), a spread of
        // others, and the end-of-generation tokens (the last ids); the walk covers every token.
        cands.clear();
        // one step in four walks the trie (over 5,000 candidates), the others decide a few
        // candidates directly (as llama.cpp's common sampler checks its pick)
        let few = x & 3 != 0;
        cands.extend((0..if few { 16 } else { 4096 }).chain((0..if few { 16 } else { 512u32 }).map(|k| (x.wrapping_mul(2654435761).wrapping_add(k.wrapping_mul(40503)) % n_vocab as u32) as i32)).chain(n_vocab as i32 - if few { 16 } else { 500 }..n_vocab as i32).map(|id| llama_token_data { id, logit: 0.0, p: 0.0 }));
        // The engine sampler applied to the same candidates: the C sampler must reach the same
        // decisions, and where a state is beyond the bounds both end the grammar alike (the
        // direct computation, which never holds a whole state, is then no reference).
        let mut mirror: Vec<TokenData> = cands.iter().map(|c| TokenData { id: c.id, logit: c.logit, p: c.p }).collect();
        engine.apply(&mut Candidates::new(&mut mirror));
        let mut arr = llama_token_data_array { data: cands.as_mut_ptr(), size: cands.len(), selected: -1, sorted: false };
        llama_sampler_apply(s, &mut arr);
        for (c, e) in cands.iter().zip(&mirror) {
            assert_eq!(c.logit.is_finite(), e.logit.is_finite(), "token {}: the C sampler and the engine's sampler disagree", c.id);
        }
        let allowed: Vec<i32> = cands.iter().filter(|c| c.logit.is_finite()).map(|c| c.id).collect();
        // the trie walk against the direct computation, on a sample of the candidates
        for k in 0..if engine.is_dead() { 0 } else { 64usize } {
            let c = cands[(x as usize).wrapping_add(k * 977) % cands.len()];
            if let Some(slow) = engine.allowed_slow(c.id) {
                let Ok(slow) = slow else { break };
                assert_eq!(c.logit.is_finite(), slow, "token {}: trie and direct computation disagree", c.id);
            }
        }
        let tok = if x & 0x8000_0000 != 0 || allowed.is_empty() {
            (x & 0x7FFF_FFFF) as i32 % (n_vocab as i32 + 8)
        } else {
            allowed[(x as usize) % allowed.len()]
        };
        llama_sampler_accept(s, tok);
        engine.accept(tok);
    }
    llama_sampler_reset(s);
    // SAFETY: s came from an init and is not in a chain.
    unsafe { llama_sampler_free(s) };
});

//! The sampler API on hand-made candidate arrays, through the C entry points, against values
//! computed here independently (f64 reference formulas, brute force), plus the chain, the
//! interface for user samplers, seeds and the distribution of `dist`.

mod common;

use std::ffi::CStr;

use deepseek::api::perf::*;
use deepseek::api::sampling::*;
use deepseek::api::types::*;

/// A candidate array over `logits` (ids 0..n), owned by the test.
struct Cands {
    data: Vec<llama_token_data>,
}

impl Cands {
    fn new(logits: &[f32]) -> Cands {
        Cands { data: logits.iter().enumerate().map(|(i, &l)| llama_token_data { id: i as i32, logit: l, p: 0.0 }).collect() }
    }
    /// Applies `s` and returns the surviving candidates and the selected index.
    fn apply(&mut self, s: *mut llama_sampler) -> (Vec<llama_token_data>, i64) {
        let mut arr = llama_token_data_array { data: self.data.as_mut_ptr(), size: self.data.len(), selected: -1, sorted: false };
        llama_sampler_apply(s, &mut arr);
        // SAFETY: the sampler left data/size inside our vector.
        let out = unsafe { std::slice::from_raw_parts(arr.data, arr.size) }.to_vec();
        (out, arr.selected)
    }
}

fn ids(v: &[llama_token_data]) -> Vec<i32> {
    v.iter().map(|t| t.id).collect()
}

fn free(s: *mut llama_sampler) {
    // SAFETY: s came from an init function and is not in a chain.
    unsafe { llama_sampler_free(s) }
}

fn softmax64(logits: &[f32]) -> Vec<f64> {
    let m = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = logits.iter().map(|&l| (l as f64 - m).exp()).collect();
    let z: f64 = e.iter().sum();
    e.iter().map(|x| x / z).collect()
}

/// Ids sorted by descending logit (ties by id).
fn order(logits: &[f32]) -> Vec<i32> {
    let mut o: Vec<i32> = (0..logits.len() as i32).collect();
    o.sort_by(|&a, &b| logits[b as usize].partial_cmp(&logits[a as usize]).unwrap().then(a.cmp(&b)));
    o
}

const LOGITS: [f32; 8] = [1.5, -0.25, 3.0, 0.5, 2.25, -1.0, 0.0, 1.0];

#[test]
fn greedy_picks_the_argmax() {
    let s = llama_sampler_init_greedy();
    let (_, sel) = Cands::new(&LOGITS).apply(s);
    assert_eq!(sel, common::argmax(&LOGITS) as i64);
    assert_eq!(unsafe { CStr::from_ptr(llama_sampler_name(s)) }.to_str().unwrap(), "greedy");
    free(s);
}

#[test]
fn top_k_keeps_the_k_best_in_order() {
    for k in [1, 3, 8, 20] {
        let s = llama_sampler_init_top_k(k);
        let (out, _) = Cands::new(&LOGITS).apply(s);
        let expect: Vec<i32> = order(&LOGITS).into_iter().take(k as usize).collect();
        assert_eq!(ids(&out), expect, "k = {k}");
        free(s);
    }
    // k <= 0 is upstream's no-op "?top-k".
    let s = llama_sampler_init_top_k(0);
    assert_eq!(unsafe { CStr::from_ptr(llama_sampler_name(s)) }.to_str().unwrap(), "?top-k");
    assert_eq!(Cands::new(&LOGITS).apply(s).0.len(), LOGITS.len());
    free(s);
}

#[test]
fn top_p_keeps_the_smallest_prefix_reaching_p() {
    let probs = softmax64(&LOGITS);
    for p in [0.3f32, 0.5, 0.8, 0.95, 0.999] {
        let mut cum = 0.0;
        let mut expect = Vec::new();
        for id in order(&LOGITS) {
            expect.push(id);
            cum += probs[id as usize];
            if cum >= p as f64 {
                break;
            }
        }
        let s = llama_sampler_init_top_p(p, 1);
        let (out, _) = Cands::new(&LOGITS).apply(s);
        assert_eq!(ids(&out), expect, "p = {p}");
        for t in &out {
            assert!((t.p as f64 - probs[t.id as usize]).abs() < 1e-6);
        }
        free(s);
    }
}

#[test]
fn top_p_on_a_large_vocabulary_matches_a_full_sort() {
    // More than 1024 candidates exercises the partial-sort path.
    let logits: Vec<f32> = (0..5000).map(|i| ((i * 7919) % 1000) as f32 / 97.0 - ((i * 31) % 17) as f32 * 0.01).collect();
    let probs = softmax64(&logits);
    let s = llama_sampler_init_top_p(0.9, 1);
    let (out, _) = Cands::new(&logits).apply(s);
    let mut cum = 0.0;
    let mut n = 0;
    for id in order(&logits) {
        n += 1;
        cum += probs[id as usize];
        if cum >= 0.9 {
            break;
        }
    }
    assert!((out.len() as i64 - n as i64).abs() <= 1, "kept {} vs {n}", out.len());
    assert!(out.windows(2).all(|w| w[0].logit >= w[1].logit));
    free(s);
}

#[test]
fn min_p_keeps_tokens_within_p_of_the_best() {
    let probs = softmax64(&LOGITS);
    let pmax = probs.iter().cloned().fold(0.0, f64::max);
    for p in [0.05f32, 0.2, 0.5, 0.9] {
        let mut expect: Vec<i32> = (0..LOGITS.len() as i32).filter(|&i| probs[i as usize] >= p as f64 * pmax).collect();
        let s = llama_sampler_init_min_p(p, 1);
        let (out, _) = Cands::new(&LOGITS).apply(s);
        let mut got = ids(&out);
        got.sort();
        expect.sort();
        assert_eq!(got, expect, "p = {p}");
        free(s);
    }
}

#[test]
fn typical_keeps_tokens_nearest_the_entropy() {
    let probs = softmax64(&LOGITS);
    let entropy: f64 = probs.iter().map(|p| -p * p.ln()).sum();
    let mut by_typicality: Vec<usize> = (0..probs.len()).collect();
    by_typicality.sort_by(|&a, &b| (-probs[a].ln() - entropy).abs().partial_cmp(&(-probs[b].ln() - entropy).abs()).unwrap());
    for p in [0.2f32, 0.5, 0.9] {
        let mut cum = 0.0;
        let mut expect = Vec::new();
        for &i in &by_typicality {
            expect.push(i as i32);
            cum += probs[i];
            if cum > p as f64 {
                break;
            }
        }
        let s = llama_sampler_init_typical(p, 1);
        let (out, _) = Cands::new(&LOGITS).apply(s);
        assert_eq!(ids(&out), expect, "p = {p}");
        free(s);
    }
}

#[test]
fn temp_scales_and_zero_keeps_only_the_max() {
    let s = llama_sampler_init_temp(0.5);
    let (out, _) = Cands::new(&LOGITS).apply(s);
    for (t, l) in out.iter().zip(LOGITS) {
        assert_eq!(t.logit, l / 0.5);
    }
    free(s);
    let s = llama_sampler_init_temp(0.0);
    let (out, _) = Cands::new(&LOGITS).apply(s);
    let best = common::argmax(&LOGITS);
    for t in &out {
        assert_eq!(t.logit, if t.id as usize == best { LOGITS[best] } else { f32::NEG_INFINITY });
    }
    free(s);
}

#[test]
fn temp_ext_uses_the_entropy_scaled_temperature() {
    let (t, delta, exponent) = (1.0f32, 0.5f32, 1.0f32);
    let probs = softmax64(&LOGITS);
    let entropy: f64 = probs.iter().map(|p| -p * p.ln()).sum();
    let max_entropy = (LOGITS.len() as f64).ln();
    let dyn_t = (t - delta) as f64 + (2.0 * delta as f64) * (entropy / max_entropy).powf(exponent as f64);
    let expect = softmax64(&LOGITS.map(|l| (l as f64 / dyn_t) as f32));
    let s = llama_sampler_init_temp_ext(t, delta, exponent);
    let (out, _) = Cands::new(&LOGITS).apply(s);
    for tok in &out {
        assert!((tok.logit as f64 - LOGITS[tok.id as usize] as f64 / dyn_t).abs() < 1e-4);
        assert!((tok.p as f64 - expect[tok.id as usize]).abs() < 1e-5);
    }
    free(s);
}

#[test]
fn xtc_removes_all_top_choices_but_the_least_likely() {
    let probs = softmax64(&LOGITS);
    let threshold = 0.1f32;
    let above: Vec<i32> = order(&LOGITS).into_iter().filter(|&i| probs[i as usize] >= threshold as f64).collect();
    assert!(above.len() >= 2, "the test needs several tokens above the threshold");
    let s = llama_sampler_init_xtc(1.0, threshold, 1, 42);
    let (out, _) = Cands::new(&LOGITS).apply(s);
    let expect: Vec<i32> = order(&LOGITS).into_iter().skip(above.len() - 1).collect();
    assert_eq!(ids(&out), expect);
    free(s);
}

#[test]
fn top_n_sigma_masks_logits_below_max_minus_n_std() {
    let mean = LOGITS.iter().map(|&l| l as f64).sum::<f64>() / LOGITS.len() as f64;
    let std = (LOGITS.iter().map(|&l| (l as f64 - mean).powi(2)).sum::<f64>() / LOGITS.len() as f64).sqrt();
    let floor = 3.0 - 1.0 * std;
    let s = llama_sampler_init_top_n_sigma(1.0);
    let (out, _) = Cands::new(&LOGITS).apply(s);
    for t in &out {
        let l = LOGITS[t.id as usize];
        assert_eq!(t.logit, if (l as f64) < floor { f32::NEG_INFINITY } else { l }, "token {}", t.id);
    }
    free(s);
}

#[test]
fn penalties_follow_the_repeat_frequency_presence_formula() {
    let (repeat, freq, present) = (1.5f32, 0.25f32, 0.5f32);
    let history = [2, 4, 2, 6, 2, 0];
    let last_n = 4; // the window is the last four accepted tokens: 2, 6, 2, 0
    let s = llama_sampler_init_penalties(LOGITS.len() as i32, last_n, repeat, freq, present);
    for t in history {
        llama_sampler_accept(s, t);
    }
    let window = &history[history.len() - last_n as usize..];
    let (out, _) = Cands::new(&LOGITS).apply(s);
    for t in &out {
        let l = LOGITS[t.id as usize];
        let count = window.iter().filter(|&&x| x == t.id).count() as f32;
        let expect = if count == 0.0 { l } else { (if l <= 0.0 { l * repeat } else { l / repeat }) - count * freq - present };
        assert!((t.logit - expect).abs() < 1e-6, "token {}: {} vs {expect}", t.id, t.logit);
    }
    free(s);
}

#[test]
fn logit_bias_adds_to_the_named_tokens() {
    let biases = [llama_logit_bias { token: 3, bias: 2.5 }, llama_logit_bias { token: 7, bias: -1.0 }];
    // SAFETY: two entries.
    let s = unsafe { llama_sampler_init_logit_bias(LOGITS.len() as i32, 2, biases.as_ptr()) };
    let mut c = Cands::new(&LOGITS);
    c.data.reverse(); // shuffled ids take the search path
    let (out, _) = c.apply(s);
    for t in &out {
        let b = biases.iter().find(|b| b.token == t.id).map_or(0.0, |b| b.bias);
        assert_eq!(t.logit, LOGITS[t.id as usize] + b);
    }
    free(s);
}

/// Brute force: the longest n such that the context's last n tokens also occur right before an
/// earlier occurrence of `t`.
fn longest_repeat_before(ctx: &[i32], t: i32) -> usize {
    let n = ctx.len();
    let mut best = 0;
    for j in 0..n {
        if ctx[j] != t {
            continue;
        }
        let mut len = 0;
        while len < j && ctx[j - 1 - len] == ctx[n - 1 - len] {
            len += 1;
        }
        best = best.max(len);
    }
    best
}

#[test]
fn dry_penalizes_tokens_that_extend_a_repeat() {
    use deepseek::sampling::dry::Dry;
    use deepseek::sampling::{Candidates, Sampler, TokenData};
    let ctx = [1, 2, 3, 3, 2, 3, 4, 1, 2, 3];
    let (mult, base, allowed) = (0.8f32, 1.75f32, 2);
    let mut dry = Dry::with_token_breakers(mult, base, allowed, 64, Default::default());
    for t in ctx {
        dry.accept(t);
    }
    let mut data: Vec<TokenData> = (0..6).map(|i| TokenData { id: i, logit: 1.0, p: 0.0 }).collect();
    dry.apply(&mut Candidates::new(&mut data));
    for t in &data {
        let len = longest_repeat_before(&ctx, t.id) as i32;
        let expect = if len >= allowed { 1.0 - mult * base.powi(len - allowed) } else { 1.0 };
        assert!((t.logit - expect).abs() < 1e-6, "token {}: {} vs {expect} (repeat {len})", t.id, t.logit);
    }
    // A single-token breaker is never penalized.
    let mut breakers = std::collections::HashMap::new();
    breakers.insert(3, vec![vec![]]);
    let mut dry = Dry::with_token_breakers(mult, base, allowed, 64, breakers);
    for t in [1, 2, 5, 1, 2] {
        dry.accept(t);
    }
    let mut data: Vec<TokenData> = (0..6).map(|i| TokenData { id: i, logit: 1.0, p: 0.0 }).collect();
    dry.apply(&mut Candidates::new(&mut data));
    assert!((data[5].logit - (1.0 - mult)).abs() < 1e-6, "5 extends '1 2' → penalized");
}

#[test]
fn mirostat_v2_draws_within_mu_and_updates_mu() {
    use deepseek::sampling::mirostat::MirostatV2;
    use deepseek::sampling::{Candidates, Sampler, TokenData};
    let (tau, eta) = (3.0f32, 0.1f32);
    let mut m = MirostatV2::new(7, tau, eta);
    let probs = softmax64(&LOGITS);
    for _ in 0..20 {
        let mu = m.mu;
        let allowed: Vec<i32> = order(&LOGITS).into_iter().take_while(|&i| -(probs[i as usize]).log2() <= mu as f64).collect();
        let allowed = if allowed.is_empty() { vec![order(&LOGITS)[0]] } else { allowed };
        let z: f64 = allowed.iter().map(|&i| probs[i as usize]).sum();
        let mut data: Vec<TokenData> = LOGITS.iter().enumerate().map(|(i, &l)| TokenData { id: i as i32, logit: l, p: 0.0 }).collect();
        let mut cur = Candidates::new(&mut data);
        m.apply(&mut cur);
        let tok = cur.data[cur.selected as usize].id;
        assert!(allowed.contains(&tok), "token {tok} beyond mu {mu}");
        let surprise = -(probs[tok as usize] / z).log2();
        assert!((m.mu as f64 - (mu as f64 - eta as f64 * (surprise - tau as f64))).abs() < 1e-4);
    }
}

/// Pearson's chi-square of observed counts against expected probabilities.
fn chi_square(counts: &[u32], probs: &[f64]) -> f64 {
    let n: u32 = counts.iter().sum();
    counts.iter().zip(probs).map(|(&o, &p)| (o as f64 - n as f64 * p).powi(2) / (n as f64 * p)).sum()
}

#[test]
fn dist_frequencies_match_the_softmax() {
    let logits = [0.0f32, 1.0, 2.0, 0.5, -0.5];
    let probs = softmax64(&logits);
    let s = llama_sampler_init_dist(1234);
    let mut counts = [0u32; 5];
    for _ in 0..20000 {
        let (out, sel) = Cands::new(&logits).apply(s);
        counts[out[sel as usize].id as usize] += 1;
    }
    // 4 degrees of freedom: P(chi2 > 18.47) = 0.001.
    let chi2 = chi_square(&counts, &probs);
    assert!(chi2 < 18.47, "chi-square {chi2} for counts {counts:?}");
    free(s);
}

#[test]
fn same_seed_same_tokens_and_reset_replays() {
    let draw = |s: *mut llama_sampler| -> Vec<i32> {
        (0..50).map(|_| {
            let (out, sel) = Cands::new(&LOGITS).apply(s);
            out[sel as usize].id
        }).collect()
    };
    let (a, b) = (llama_sampler_init_dist(99), llama_sampler_init_dist(99));
    let first = draw(a);
    assert_eq!(first, draw(b));
    assert_eq!(llama_sampler_get_seed(a), 99);
    llama_sampler_reset(a);
    assert_eq!(draw(a), first);
    let c = llama_sampler_init_dist(100);
    assert_ne!(draw(c), first);
    // LLAMA_DEFAULT_SEED draws a seed and reports it.
    let r = llama_sampler_init_dist(LLAMA_DEFAULT_SEED);
    assert_ne!(llama_sampler_get_seed(r), LLAMA_DEFAULT_SEED);
    for s in [a, b, c, r] {
        free(s);
    }
}

#[test]
fn chain_applies_members_in_order_and_owns_them() {
    let chain = llama_sampler_chain_init(llama_sampler_chain_params { no_perf: false });
    llama_sampler_chain_add(chain, llama_sampler_init_top_k(3));
    llama_sampler_chain_add(chain, llama_sampler_init_temp(0.7));
    llama_sampler_chain_add(chain, llama_sampler_init_dist(5));
    assert_eq!(llama_sampler_chain_n(chain), 3);
    assert_eq!(llama_sampler_chain_get(chain, -1), chain);
    assert!(llama_sampler_chain_get(chain, 3).is_null());
    let name = |s| unsafe { CStr::from_ptr(llama_sampler_name(s)) }.to_str().unwrap().to_string();
    assert_eq!(name(llama_sampler_chain_get(chain, 1)), "temp");
    assert_eq!(name(chain), "chain");
    assert_eq!(llama_sampler_get_seed(chain), 5);
    let top3 = &order(&LOGITS)[..3];
    let clone = llama_sampler_clone(chain);
    let mut tokens = Vec::new();
    for _ in 0..30 {
        let (out, sel) = Cands::new(&LOGITS).apply(chain);
        let tok = out[sel as usize].id;
        assert!(top3.contains(&tok));
        llama_sampler_accept(chain, tok);
        tokens.push(tok);
    }
    let replay: Vec<i32> = (0..30).map(|_| {
        let (out, sel) = Cands::new(&LOGITS).apply(clone);
        llama_sampler_accept(clone, out[sel as usize].id);
        out[sel as usize].id
    }).collect();
    assert_eq!(tokens, replay, "a clone continues with the same RNG state");
    let perf = llama_perf_sampler(chain);
    assert_eq!(perf.n_sample, 30);
    assert!(perf.t_sample_ms > 0.0);
    llama_perf_sampler_reset(chain);
    assert_eq!(llama_perf_sampler(chain).n_sample, 0);
    // Removing hands ownership back.
    let temp = llama_sampler_chain_remove(chain, 1);
    assert_eq!(name(temp), "temp");
    assert_eq!(llama_sampler_chain_n(chain), 2);
    free(temp);
    free(chain);
    free(clone);
}

// A user-defined sampler through llama_sampler_init: bans token 2 and counts accepts.
struct Ban {
    accepted: u32,
}
unsafe extern "C" fn ban_name(_: *const llama_sampler) -> *const std::ffi::c_char {
    c"ban2".as_ptr()
}
unsafe extern "C" fn ban_apply(_: *mut llama_sampler, cur: *mut llama_token_data_array) {
    let cur = unsafe { &mut *cur };
    for i in 0..cur.size {
        let t = unsafe { &mut *cur.data.add(i) };
        if t.id == 2 {
            t.logit = f32::NEG_INFINITY;
        }
    }
}
unsafe extern "C" fn ban_accept(s: *mut llama_sampler, _: llama_token) {
    unsafe { (*((*s).ctx as *mut Ban)).accepted += 1 };
}
unsafe extern "C" fn ban_free(s: *mut llama_sampler) {
    drop(unsafe { Box::from_raw((*s).ctx as *mut Ban) });
}

#[test]
fn user_defined_samplers_chain_like_builtins() {
    let iface = Box::leak(Box::new(llama_sampler_i {
        name: Some(ban_name),
        accept: Some(ban_accept),
        apply: Some(ban_apply),
        reset: None,
        clone: None,
        free: Some(ban_free),
        backend_init: None,
        backend_accept: None,
        backend_apply: None,
        backend_set_input: None,
        backend_reset: None,
        copy_state: None,
    }));
    let state = Box::into_raw(Box::new(Ban { accepted: 0 }));
    let user = llama_sampler_init(iface, state.cast());
    let chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(chain, user);
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    let (out, sel) = Cands::new(&LOGITS).apply(chain);
    let second_best = order(&LOGITS)[1];
    assert_eq!(out[sel as usize].id, second_best, "token 2 (the argmax) is banned");
    llama_sampler_accept(chain, second_best);
    assert_eq!(unsafe { (*state).accepted }, 1);
    free(chain);
}

#[test]
fn adaptive_p_is_refused_and_grammar_needs_a_vocab() {
    assert!(llama_sampler_init_adaptive_p(0.5, 0.9, 1).is_null());
    // SAFETY: valid strings (the vocab is NULL on purpose).
    assert!(unsafe { llama_sampler_init_grammar(std::ptr::null(), c"root ::= \"a\"".as_ptr(), c"root".as_ptr()) }.is_null());
}

/// llama-cpp-python's `Llama.create_completion` chain (penalties, top_k 40, typical 1.0,
/// top_p 0.95, min_p 0.05, temperature 0.8, dist) over SmolLM2-135M through
/// llama_sampler_sample, with the context and sampler perf counters.
#[test]
fn python_style_chain_over_a_real_model() {
    use deepseek::api::context::*;
    use deepseek::api::model::*;
    use deepseek::api::vocab::*;
    let path = common::models_dir().join("smollm2-135m-instruct-q4_1.gguf");
    let m = common::load_model(&path);
    let v = llama_model_get_vocab(m);
    let n_vocab = llama_vocab_n_tokens(v);
    let run = |seed: u32| -> (Vec<i32>, llama_perf_context_data, llama_perf_sampler_data, usize) {
        let mut p = llama_context_default_params();
        p.n_ctx = 128;
        p.n_threads = 2;
        p.n_threads_batch = 2;
        p.no_perf = false;
        let c = llama_init_from_model(m, p);
        let chain = llama_sampler_chain_init(llama_sampler_chain_params { no_perf: false });
        for s in [
            llama_sampler_init_penalties(n_vocab, 64, 1.1, 0.0, 0.0),
            llama_sampler_init_top_k(40),
            llama_sampler_init_typical(1.0, 1),
            llama_sampler_init_top_p(0.95, 1),
            llama_sampler_init_min_p(0.05, 1),
            llama_sampler_init_temp(0.8),
            llama_sampler_init_dist(seed),
        ] {
            llama_sampler_chain_add(chain, s);
        }
        let prompt = "The capital of France is";
        let text = std::ffi::CString::new(prompt).unwrap();
        let mut toks = vec![0i32; 64];
        // SAFETY: valid text and token buffer.
        let k = unsafe { llama_tokenize(v, text.as_ptr(), prompt.len() as i32, toks.as_mut_ptr(), 64, true, true) } as usize;
        let mut batch = common::Batch::new(64, 1);
        for (i, &t) in toks[..k].iter().enumerate() {
            batch.add(t, i as i32, 0, i + 1 == k);
        }
        let mut out = Vec::new();
        for step in 0..4 {
            // SAFETY: a valid batch for this context.
            assert_eq!(unsafe { llama_decode(c, batch.0) }, 0);
            let row = common::logits_row(c, -1, n_vocab as usize);
            let tok = llama_sampler_sample(chain, c, -1);
            // Penalties can only lower up to 64 tokens, so the choice is among the raw top 40 + 64.
            let rank = row.iter().filter(|&&l| l > row[tok as usize]).count();
            assert!(rank < 104, "step {step}: token {tok} has raw rank {rank}");
            out.push(tok);
            batch.clear();
            batch.add(tok, (k + step) as i32, 0, true);
        }
        let perf = (llama_perf_context(c), llama_perf_sampler(chain));
        // SAFETY: created above, freed once (the chain frees its members).
        unsafe {
            llama_sampler_free(chain);
            llama_free(c);
        }
        (out, perf.0, perf.1, k)
    };
    let (a, ctx_perf, smpl_perf, n_prompt) = run(4242);
    let (b, _, _, _) = run(4242);
    assert_eq!(a, b, "same seed, same tokens");
    assert_eq!(ctx_perf.n_p_eval as usize, n_prompt);
    assert_eq!(ctx_perf.n_eval, 3, "three single-token decodes after the prompt");
    assert!(ctx_perf.t_p_eval_ms > 0.0 && ctx_perf.t_eval_ms > 0.0 && ctx_perf.t_load_ms > 0.0);
    assert_eq!(smpl_perf.n_sample, 4);
    assert!(smpl_perf.t_sample_ms > 0.0);
    // SAFETY: loaded above, freed once.
    unsafe { llama_model_free(m) };
}

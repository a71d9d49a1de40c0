//! The serving engine's unified KV pool (`EngineParams::kv_unified`, llama-server's default):
//! one stream of cells for every slot. A sequence may use more than an even share; requests
//! are admitted by free cells, first come first served; idle slots' cached prefixes are
//! evicted for a new request; a shared prefix's cells are shared, not copied; `max_tokens`
//! past what fits ends with Length; when the pool runs out under several generating
//! sequences the latest admitted ends with Length and the others go on, nobody's tokens
//! changed; the KV gauges follow; a sequence's greedy text does not depend on what runs
//! beside it.

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use deepseek::engine::{Engine, EngineParams, Event, EventView, FinishInfo, FinishKind, Prompt, Request};
use deepseek::model::Model;

fn greedy() -> Box<dyn deepseek::sampling::Sampler + Send> {
    Box::new(deepseek::sampling::pick::Greedy)
}

fn smollm2() -> Arc<Model> {
    Arc::new(Model::load(&models_dir().join("smollm2-135m-instruct-q4_1.gguf"), true).expect("scripts/fetch-models.sh smollm2"))
}

/// `n` tokens of plain text (distinct per `seed`), tokenized by the model.
fn text_tokens(model: &Model, seed: usize, n: usize) -> Vec<i32> {
    let words = ["river", "stone", "quiet", "lamp", "orbit", "maple", "signal", "harbor", "copper", "window", "meadow", "thunder"];
    let mut text = format!("Story {seed}:");
    let mut t = Vec::new();
    let mut i = seed * 7 + 1;
    loop {
        t.clear();
        model.vocab.tokenize(text.as_bytes(), true, false, &mut t);
        if t.len() >= n {
            t.truncate(n);
            return t;
        }
        text.push(' ');
        text.push_str(words[i % words.len()]);
        i = i * 31 + 17;
    }
}

/// What a request produced, in event order, and its totals.
#[derive(Debug, Clone, Default)]
struct Out {
    tokens: Vec<i32>,
    info: FinishInfo,
}

/// An event tagged with its request's tag, as the decode thread delivered it.
enum Ev {
    Token(usize, i32),
    Done(usize, FinishInfo),
}

fn submit(e: &Engine, tag: usize, prompt: &[i32], max_tokens: i32, tx: &mpsc::Sender<Ev>) -> u64 {
    let tx = tx.clone();
    let cb = Box::new(move |v: &EventView<'_>| {
        match v.event {
            Event::Token { token, .. } => tx.send(Ev::Token(tag, token)).unwrap(),
            Event::Finish(_) => tx.send(Ev::Done(tag, v.finish.unwrap())).unwrap(),
        }
        true
    });
    e.submit(Request { prompt: Prompt::Tokens(prompt.to_vec()), sampler: greedy(), max_tokens, stop_tokens: vec![], stop_strings: vec![], ignore_eos: true, callback: Some(cb), user_data: tag, n_probs: 0, grammar: None, reuse_prefix: true, slot: None, tag: None, t_max_predict: None, progress: None }).unwrap()
}

/// Waits for `n` requests to finish; returns each tag's output and the order of (tag, is_final)
/// events.
fn collect(rx: &mpsc::Receiver<Ev>, n: usize, tags: usize) -> (Vec<Out>, Vec<(usize, bool)>) {
    let mut out = vec![Out::default(); tags];
    let mut order = Vec::new();
    let mut done = 0;
    while done < n {
        match rx.recv_timeout(Duration::from_secs(120)).expect("an event within two minutes (no deadlock)") {
            Ev::Token(t, tok) => {
                out[t].tokens.push(tok);
                order.push((t, false));
            }
            Ev::Done(t, info) => {
                out[t].info = info;
                order.push((t, true));
                done += 1;
            }
        }
    }
    (out, order)
}

fn lcp(a: &[i32], b: &[i32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn run_alone(e: &Engine, prompt: &[i32], max_tokens: i32) -> Out {
    let (tx, rx) = mpsc::channel();
    submit(e, 0, prompt, max_tokens, &tx);
    collect(&rx, 1, 1).0.remove(0)
}

fn pool(model: &Arc<Model>, n_seq_max: u32, n_ctx: u32) -> Engine {
    Engine::new(model.clone(), &EngineParams { n_seq_max, n_ctx, n_threads: 2, n_batch: 512, n_ubatch: 512, ..Default::default() }).unwrap()
}

/// The used-cell gauge once the loop has updated it (it does so at the end of the turn that
/// delivered the final events).
fn used_settled(e: &Engine, want: i64) -> i64 {
    let t0 = std::time::Instant::now();
    while e.metrics().kv_cells_used.get() != want && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(2));
    }
    e.metrics().kv_cells_used.get()
}

fn gauges_match(e: &Engine) {
    let m = e.metrics();
    assert_eq!(m.kv_cells_total.get(), e.n_ctx() as i64);
    assert!(m.kv_cells_used.get() >= 0 && m.kv_cells_used.get() <= m.kv_cells_total.get(), "used {} of {}", m.kv_cells_used.get(), m.kv_cells_total.get());
}

#[test]
fn a_prompt_longer_than_an_even_share_is_served() {
    let model = smollm2();
    let e = pool(&model, 4, 1024);
    assert!(e.kv_unified());
    assert_eq!((e.n_ctx(), e.n_ctx_seq()), (1024, 1024));
    let share = (e.n_ctx() / e.n_seq_max()) as usize;
    let prompt = text_tokens(&model, 1, share + share / 2);
    let o = run_alone(&e, &prompt, 8);
    assert_eq!((o.info.reason, o.info.n_generated as usize), (Some(FinishKind::Length), 8));
    // The per-slot layout refuses it: its slot holds the even share only.
    let split = Engine::new(model.clone(), &EngineParams { n_seq_max: 4, n_ctx: 1024, kv_unified: false, n_threads: 2, ..Default::default() }).unwrap();
    assert!(!split.kv_unified());
    assert_eq!(split.n_ctx_seq() as usize, share);
    let (tx, _rx) = mpsc::channel();
    let cb = Box::new(move |_: &EventView<'_>| tx.send(()).is_ok());
    let r = split.submit(Request { prompt: Prompt::Tokens(prompt.clone()), sampler: greedy(), max_tokens: 8, stop_tokens: vec![], stop_strings: vec![], ignore_eos: true, callback: Some(cb), user_data: 0, n_probs: 0, grammar: None, reuse_prefix: true, slot: None, tag: None, t_max_predict: None, progress: None });
    assert!(matches!(r, Err(deepseek::engine::SubmitError::Invalid(_))), "{r:?}");
    // And the pool refuses a prompt that cannot fit in it at all, with the reason.
    let whole = text_tokens(&model, 2, e.n_ctx() as usize);
    let (tx, _rx) = mpsc::channel();
    let cb = Box::new(move |_: &EventView<'_>| tx.send(()).is_ok());
    match e.submit(Request { prompt: Prompt::Tokens(whole), sampler: greedy(), max_tokens: 8, stop_tokens: vec![], stop_strings: vec![], ignore_eos: true, callback: Some(cb), user_data: 0, n_probs: 0, grammar: None, reuse_prefix: true, slot: None, tag: None, t_max_predict: None, progress: None }) {
        Err(deepseek::engine::SubmitError::Invalid(m)) => assert!(m.contains(&e.n_ctx_seq().to_string()), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn admission_waits_for_free_cells_then_proceeds() {
    let model = smollm2();
    // Slots free, cells for one of A and B at a time: B waits for A's cells.
    let (a, b) = (text_tokens(&model, 3, 300), text_tokens(&model, 4, 300));
    let e = Engine::new(model.clone(), &EngineParams { n_seq_max: 3, n_ctx: 512, n_threads: 2, n_batch: 512, n_ubatch: 512, ..Default::default() }).unwrap();
    let c = text_tokens(&model, 12, 10);
    let (tx, rx) = mpsc::channel();
    submit(&e, 0, &a, 64, &tx);
    submit(&e, 1, &b, 64, &tx);
    // C would fit beside A, but B came first: first come, first served (B is not starved).
    submit(&e, 2, &c, 8, &tx);
    let (out, order) = collect(&rx, 3, 3);
    for o in &out[..2] {
        assert_eq!((o.info.reason, o.info.n_generated), (Some(FinishKind::Length), 64));
    }
    let a_done = order.iter().position(|&x| x == (0, true)).unwrap();
    let b_first = order.iter().position(|&x| x == (1, false)).unwrap();
    let c_first = order.iter().position(|&x| x == (2, false)).unwrap();
    assert!(a_done < b_first, "B started before A's cells were free");
    assert!(b_first < c_first, "C passed B in the queue");
    assert_eq!(out[2].info.n_generated, 8);
    // B waited for room, not for a slot: with room for both they overlap.
    let big = pool(&model, 2, 1024);
    let (tx, rx) = mpsc::channel();
    submit(&big, 0, &a, 64, &tx);
    submit(&big, 1, &b, 64, &tx);
    let (out2, order) = collect(&rx, 2, 2);
    let a_done = order.iter().position(|&x| x == (0, true)).unwrap();
    let b_first = order.iter().position(|&x| x == (1, false)).unwrap();
    assert!(b_first < a_done, "with room for both, B runs beside A");
    // Waiting changed nothing in B's text.
    assert_eq!(out[1].tokens, out2[1].tokens);
    gauges_match(&e);
}

#[test]
fn idle_slot_cache_is_evicted_for_a_new_request() {
    let model = smollm2();
    let e = pool(&model, 2, 512);
    let (a, b) = (text_tokens(&model, 5, 400), text_tokens(&model, 6, 400));
    let first = run_alone(&e, &a, 8);
    // A's cells stay cached in its idle slot ...
    let want = (first.info.n_prompt + first.info.n_generated - 1) as i64;
    assert_eq!(used_settled(&e, want), want);
    // ... and B, which needs them, gets them.
    let second = run_alone(&e, &b, 8);
    assert_eq!((second.info.reason, second.info.n_generated), (Some(FinishKind::Length), 8));
    // A's cells are gone (evicted): A again reuses no more than it shares with B's; with
    // room, its whole prompt but the last token is reused.
    let again = run_alone(&e, &a, 8);
    assert_eq!(again.info.n_cached as usize, lcp(&a, &b));
    assert_eq!(again.tokens, first.tokens);
    let roomy = pool(&model, 2, 1024);
    run_alone(&roomy, &a, 8);
    run_alone(&roomy, &b, 8);
    assert_eq!(run_alone(&roomy, &a, 8).info.n_cached as usize, a.len() - 1);
    gauges_match(&e);
}

#[test]
fn a_shared_prefix_gives_the_tokens_of_a_fresh_decode() {
    let model = smollm2();
    let common_part = text_tokens(&model, 7, 200);
    let with = |seed: usize| {
        let mut p = common_part.clone();
        p.extend(text_tokens(&model, seed, 12).into_iter().skip(1));
        p
    };
    let (p0, p1, p2) = (with(8), with(9), with(10));
    let fresh = |p: &[i32]| run_alone(&pool(&model, 4, 1024), p, 24);
    let (f1, f2) = (fresh(&p1), fresh(&p2));
    let each = |o: &Out| (o.info.n_prompt + o.info.n_generated - 1) as i64;
    assert_eq!(f1.info.n_cached, 0);
    let e = pool(&model, 4, 1024);
    let first = run_alone(&e, &p0, 24);
    let cells_one = used_settled(&e, each(&first));
    // Both share P0's cached prefix, one after the other and at once.
    let (tx, rx) = mpsc::channel();
    submit(&e, 1, &p1, 24, &tx);
    submit(&e, 2, &p2, 24, &tx);
    let (out, _) = collect(&rx, 2, 3);
    assert_eq!(first.info.n_cached, 0);
    for (o, f) in [(&out[1], &f1), (&out[2], &f2)] {
        assert_eq!(o.info.n_cached as usize, lcp(&p0, if o.tokens == f1.tokens { &p1 } else { &p2 }), "the common prefix is reused");
        assert!(o.info.n_cached as usize >= common_part.len());
        assert_eq!(o.tokens, f.tokens, "sharing changed the greedy text");
    }
    // Shared, not copied: the pool holds the prefix once.
    assert_eq!(cells_one, each(&first));
    let shared = (lcp(&p0, &p1) + lcp(&p0, &p2)) as i64;
    let want = each(&first) + each(&out[1]) + each(&out[2]) - shared;
    assert_eq!(used_settled(&e, want), want);
}

#[test]
fn max_tokens_past_the_pool_ends_with_length() {
    let model = smollm2();
    for cap in [0u32, 128] {
        let e = Engine::new(model.clone(), &EngineParams { n_seq_max: 2, n_ctx: 256, kv_unified_per_slot: cap, n_threads: 2, ..Default::default() }).unwrap();
        let limit = e.n_ctx_seq();
        assert_eq!(limit, if cap == 0 { e.n_ctx() } else { cap });
        let prompt = text_tokens(&model, 11, 40);
        let o = run_alone(&e, &prompt, 10 * e.n_ctx() as i32);
        assert_eq!(o.info.reason, Some(FinishKind::Length));
        // Every cell the sequence may hold is used; its last token needs none.
        assert_eq!(o.info.n_prompt + o.info.n_generated, limit + 1);
        gauges_match(&e);
    }
}

#[test]
fn the_pool_running_out_under_several_generators_cuts_the_latest_and_keeps_every_token() {
    let model = smollm2();
    let prompts: Vec<Vec<i32>> = (0..3).map(|i| text_tokens(&model, 20 + i, 40)).collect();
    let want = 200;
    // Each alone, with room: the text every run must keep to.
    let reference: Vec<Out> = prompts.iter().map(|p| run_alone(&pool(&model, 1, 512), p, want)).collect();
    // Three at once in 256 cells: 3 × 240 do not fit.
    let e = pool(&model, 3, 256);
    let (tx, rx) = mpsc::channel();
    for (i, p) in prompts.iter().enumerate() {
        submit(&e, i, p, want, &tx);
    }
    let (out, _) = collect(&rx, 3, 3);
    let mut total = 0;
    for (i, o) in out.iter().enumerate() {
        assert_eq!(o.info.reason, Some(FinishKind::Length), "request {i}");
        assert!(o.tokens.len() as i32 <= want && !o.tokens.is_empty());
        assert_eq!(o.tokens[..], reference[i].tokens[..o.tokens.len()], "request {i}'s tokens changed");
        total += o.info.n_prompt + o.info.n_generated - 1;
    }
    // Someone was cut short (the pool could not hold them all) and the first admitted got the
    // most; no request's cells were lost.
    assert!(out.iter().any(|o| (o.tokens.len() as i32) < want));
    assert!(out[0].tokens.len() >= out[1].tokens.len() && out[0].tokens.len() >= out[2].tokens.len(), "{:?}", out.iter().map(|o| o.tokens.len()).collect::<Vec<_>>());
    assert!(total as usize >= e.n_ctx() as usize - 3, "the pool was used up: {total}");
    gauges_match(&e);
    // And the engine serves on.
    let next = run_alone(&e, &prompts[0], 16);
    assert_eq!(next.tokens[..], reference[0].tokens[..16]);
}

#[test]
fn kv_gauges_return_to_idle_when_requests_end() {
    let model = smollm2();
    let e = Engine::new(model.clone(), &EngineParams { n_seq_max: 4, n_ctx: 1024, n_threads: 2, prefix_reuse: false, ..Default::default() }).unwrap();
    let m = e.metrics();
    assert_eq!((m.kv_cells_total.get(), m.kv_cells_used.get()), (1024, 0));
    let (tx, rx) = mpsc::channel();
    for i in 0..4 {
        submit(&e, i, &text_tokens(&model, 30 + i, 50 + 10 * i), 20, &tx);
    }
    let (out, _) = collect(&rx, 4, 4);
    assert_eq!(m.running.get(), 0);
    // What stays is the idle slots' caches, every cell counted once.
    let cached: u32 = out.iter().map(|o| o.info.n_prompt + o.info.n_generated - 1).sum();
    assert_eq!(used_settled(&e, cached as i64), cached as i64);
    // An engine's gauges leave the process-wide sum when it goes.
    drop(e);
}

/// `prompt`'s greedy text alone and with three others running beside it.
fn alone_and_beside(model: Arc<Model>, n_gen: i32) {
    let prompt = text_tokens(&model, 40, 24);
    let others: Vec<Vec<i32>> = (0..3).map(|i| text_tokens(&model, 41 + i, 10 + 37 * i)).collect();
    let e = pool(&model, 4, 1024);
    let alone = run_alone(&e, &prompt, n_gen);
    let e = pool(&model, 4, 1024);
    let (tx, rx) = mpsc::channel();
    // One starts before it, two after it: its cells are interleaved with theirs.
    submit(&e, 1, &others[0], n_gen + 20, &tx);
    submit(&e, 0, &prompt, n_gen, &tx);
    submit(&e, 2, &others[1], n_gen + 10, &tx);
    submit(&e, 3, &others[2], n_gen, &tx);
    let (out, _) = collect(&rx, 4, 4);
    assert_eq!(out[0].tokens, alone.tokens, "{}: greedy text beside others differs", model.hp.arch.name());
    assert_eq!(out[0].tokens.len() as i32, n_gen);
}

#[test]
fn greedy_text_alone_equals_beside_three_others() {
    alone_and_beside(smollm2(), 48);
    for f in ["tiny/tiny-llama-f32.gguf", "tiny/tiny-qwen2-f16.gguf"] {
        alone_and_beside(Arc::new(Model::load(&data(f), true).unwrap()), 32);
    }
}

#[test]
fn the_per_slot_layout_is_kept_for_no_kv_unified() {
    let model = smollm2();
    let e = Engine::new(model.clone(), &EngineParams { n_seq_max: 2, n_ctx_seq: 256, kv_unified: false, n_threads: 2, ..Default::default() }).unwrap();
    assert!(!e.kv_unified());
    assert_eq!((e.n_ctx(), e.n_ctx_seq()), (512, 256));
    let o = run_alone(&e, &text_tokens(&model, 50, 40), 1000);
    assert_eq!((o.info.reason, o.info.n_prompt + o.info.n_generated), (Some(FinishKind::Length), 257));
}


/// `reuse_prefix: false` (llama-server's `cache_prompt: false`): the prompt is computed whole
/// although a slot holds it, and the answer is the one the cached run gives.
#[test]
fn a_request_may_refuse_cached_prefixes() {
    let model = smollm2();
    let e = Engine::new(model.clone(), &EngineParams { n_seq_max: 2, n_ctx: 1024, n_threads: 2, ..EngineParams::default() }).unwrap();
    let prompt = text_tokens(&model, 3, 60);
    let run = |reuse: bool| {
        let (tx, rx) = mpsc::channel();
        let cb = Box::new(move |v: &EventView<'_>| {
            match v.event {
                Event::Token { token, .. } => tx.send(Ev::Token(0, token)).unwrap(),
                Event::Finish(_) => tx.send(Ev::Done(0, v.finish.unwrap())).unwrap(),
            }
            true
        });
        e.submit(Request { prompt: Prompt::Tokens(prompt.clone()), sampler: greedy(), max_tokens: 8, stop_tokens: vec![], stop_strings: vec![], ignore_eos: true, callback: Some(cb), user_data: 0, n_probs: 0, grammar: None, reuse_prefix: reuse, slot: None, tag: None, t_max_predict: None, progress: None }).unwrap();
        collect(&rx, 1, 1).0.remove(0)
    };
    let first = run(true);
    assert_eq!(first.info.n_cached, 0);
    let cached = run(true);
    assert!(cached.info.n_cached > 0, "the second run reuses the first's cells");
    let fresh = run(false);
    assert_eq!(fresh.info.n_cached, 0, "cache_prompt false computes the whole prompt");
    assert_eq!(fresh.tokens, first.tokens);
    assert_eq!(cached.tokens, first.tokens);
}

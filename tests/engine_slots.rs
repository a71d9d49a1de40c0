//! Slot control in the serving engine (llama-server's `/slots`): `slots` reports each slot's
//! request, running or last; a request may be pinned to a slot (`id_slot`); a slot's cached
//! prompt can be erased, saved to a file and restored into another slot — after which a
//! request there reuses the restored cells and gives the tokens a fresh engine gives; a bad
//! file is refused and leaves the slot empty and usable. In both KV layouts (one pool, a
//! stream per slot).

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use deepseek::engine::{ControlReply, Engine, EngineParams, Event, EventView, FinishInfo, Prompt, Request, SlotAction, SubmitError};
use deepseek::model::Model;

fn greedy() -> Box<dyn deepseek::sampling::Sampler + Send> {
    Box::new(deepseek::sampling::pick::Greedy)
}

fn smollm2() -> Arc<Model> {
    Arc::new(Model::load(&models_dir().join("smollm2-135m-instruct-q4_1.gguf"), true).expect("scripts/fetch-models.sh smollm2"))
}

fn engine(model: &Arc<Model>, unified: bool) -> Engine {
    let p = EngineParams { n_seq_max: 3, kv_unified: unified, n_ctx_seq: 512, n_threads: 2, ..EngineParams::default() };
    Engine::new(model.clone(), &p).unwrap()
}

fn tokens(model: &Model, text: &str) -> Vec<i32> {
    let mut t = Vec::new();
    model.vocab.tokenize(text.as_bytes(), true, false, &mut t);
    t
}

/// Runs one greedy request to its end; (tokens, totals).
fn run(e: &Engine, prompt: &[i32], max_tokens: i32, slot: Option<u32>) -> (Vec<i32>, FinishInfo) {
    run_with(e, prompt, max_tokens, slot, None, true)
}

/// `run` with a generation time limit, and with or without reusing cached prefixes.
fn run_with(e: &Engine, prompt: &[i32], max_tokens: i32, slot: Option<u32>, t_max_predict: Option<Duration>, reuse_prefix: bool) -> (Vec<i32>, FinishInfo) {
    let (tx, rx) = mpsc::channel();
    let cb = Box::new(move |v: &EventView<'_>| {
        match v.event {
            Event::Token { token, .. } => tx.send(Err(token)).unwrap(),
            Event::Finish(_) => tx.send(Ok(v.finish.unwrap())).unwrap(),
        }
        true
    });
    e.submit(Request { prompt: Prompt::Tokens(prompt.to_vec()), sampler: greedy(), max_tokens, stop_tokens: vec![], stop_strings: vec![], ignore_eos: true, callback: Some(cb), user_data: 0, n_probs: 0, grammar: None, reuse_prefix, slot, tag: Some("{\"tag\":1}".into()), t_max_predict, progress: None }).unwrap();
    let mut out = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(120)).expect("the request ends") {
            Err(t) => out.push(t),
            Ok(info) => return (out, info),
        }
    }
}

fn slots(e: &Engine) -> Vec<deepseek::engine::SlotInfo> {
    match e.control_wait(None) {
        ControlReply::Slots(s) => s,
        other => panic!("slots: {other:?}"),
    }
}

#[test]
fn slots_report_running_and_finished_requests() {
    let model = smollm2();
    let e = engine(&model, true);
    let s = slots(&e);
    assert_eq!(s.len(), 3);
    assert!(s.iter().all(|s| !s.is_processing && s.task.is_none() && s.n_ctx == e.n_ctx_seq()));

    let prompt = tokens(&model, "The quick brown fox jumps over the lazy dog because");
    let (out, info) = run(&e, &prompt, 6, Some(1));
    assert_eq!(out.len(), 6);
    let s = slots(&e);
    let t = s[1].task.as_ref().expect("slot 1 ran the request");
    assert!(!s[1].is_processing);
    assert_eq!((t.n_prompt_tokens as usize, t.n_decoded, t.n_remain, t.has_next_token), (prompt.len(), 0, -1, false));
    assert_eq!(t.n_prompt_processed + t.n_prompt_cached, prompt.len() as u32);
    assert_eq!(t.n_prompt_cached, info.n_cached);
    assert_eq!(t.tag.as_deref(), Some("{\"tag\":1}"));
    assert!(s[0].task.is_none() && s[2].task.is_none(), "the pinned request ran in slot 1 only");

    // A polled request whose events are not read pauses when its ring is full, with its
    // slot busy: slots reports it running, with its budget.
    let id = e.submit(Request { prompt: Prompt::Tokens(prompt.clone()), sampler: greedy(), max_tokens: 200, stop_tokens: vec![], stop_strings: vec![], ignore_eos: true, callback: None, user_data: 0, n_probs: 0, grammar: None, reuse_prefix: true, slot: Some(2), tag: None, t_max_predict: None, progress: None }).unwrap();
    let running = (0..400).find_map(|_| {
        let s = slots(&e);
        let t = s[2].task.clone().filter(|t| t.id == id && t.n_decoded > 0)?;
        Some((s[2].is_processing, t))
    });
    let (busy, t) = running.expect("slot 2 reports the running request");
    assert!(busy && t.has_next_token);
    assert_eq!(t.n_remain, 200 - t.n_decoded as i64);
    e.cancel(id).unwrap();
}

#[test]
fn a_pinned_request_waits_for_its_slot_and_bad_slots_are_refused() {
    let model = smollm2();
    let e = engine(&model, true);
    let p = tokens(&model, "Once upon a time");
    let r = e.submit(Request { prompt: Prompt::Tokens(p.clone()), sampler: greedy(), max_tokens: 4, stop_tokens: vec![], stop_strings: vec![], ignore_eos: true, callback: None, user_data: 0, n_probs: 0, grammar: None, reuse_prefix: true, slot: Some(3), tag: None, t_max_predict: None, progress: None });
    assert!(matches!(r, Err(SubmitError::Invalid(ref m)) if m.contains("slot 3")), "{r:?}");
    match e.control_wait(Some((7, SlotAction::Erase))) {
        ControlReply::Error(deepseek::engine::ControlError::InvalidSlot(_)) => {}
        other => panic!("{other:?}"),
    }
    // Two requests pinned to the same slot run one after the other, both whole.
    let (a, b) = std::thread::scope(|sc| {
        let a = sc.spawn(|| run(&e, &p, 12, Some(0)));
        let b = sc.spawn(|| run(&e, &p, 12, Some(0)));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(a.0, b.0);
    assert_eq!((a.0.len(), b.0.len()), (12, 12));
}

fn save_restore_round_trip(unified: bool) {
    let model = smollm2();
    let dir = std::env::temp_dir().join(format!("ds-slots-{}-{unified}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("slot1.bin");
    let e = engine(&model, unified);
    let prompt = tokens(&model, "What is the capital of France? The capital of France is");
    let (first, _) = run(&e, &prompt, 8, Some(1));
    let cached = slots(&e)[1].n_cached_tokens;
    assert!(cached >= prompt.len(), "{cached}");
    let (n_saved, n_written) = match e.control_wait(Some((1, SlotAction::Save(file.clone())))) {
        ControlReply::Saved { n_tokens, n_bytes, .. } => (n_tokens, n_bytes),
        other => panic!("save: {other:?}"),
    };
    assert_eq!(n_saved, cached);
    assert_eq!(std::fs::metadata(&file).unwrap().len() as usize, n_written);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "no temporary file is left beside the slot file");

    match e.control_wait(Some((0, SlotAction::Restore(file.clone())))) {
        ControlReply::Restored { n_tokens, n_bytes, .. } => assert_eq!((n_tokens, n_bytes), (n_saved, n_written)),
        other => panic!("restore: {other:?}"),
    }
    match e.control_wait(Some((1, SlotAction::Erase))) {
        ControlReply::Erased { n_erased } => assert_eq!(n_erased, cached),
        other => panic!("erase: {other:?}"),
    }
    assert_eq!(slots(&e)[1].n_cached_tokens, 0);
    assert_eq!(slots(&e)[0].n_cached_tokens, cached);

    // The conversation goes on in slot 0 from the restored cells: only the new tokens are
    // computed, and the answer is what the same conversation gives in the slot that computed
    // those cells (restored cells are the saved ones, bit for bit).
    let mut next = prompt.clone();
    next.extend_from_slice(&first[..cached - prompt.len()]);
    next.extend(tokens(&model, " Paris. And Germany?").into_iter().skip(1));
    let (cont, info) = run(&e, &next, 8, Some(0));
    assert_eq!(info.n_cached as usize, cached, "the restored cells are reused");
    let same = engine(&model, unified);
    assert_eq!(run(&same, &prompt, 8, Some(1)).0, first);
    let (want, same_info) = run(&same, &next, 8, Some(1));
    assert_eq!(same_info.n_cached, info.n_cached);
    assert_eq!(cont, want, "restored cells give the tokens of the cells they were saved from");
    let fresh = engine(&model, unified);
    let (whole, _) = run(&fresh, &next, 8, None);

    // A bad file is refused; the slot is left empty and serves the next request.
    let bad = dir.join("bad.bin");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&bad, &bytes).unwrap();
    match e.control_wait(Some((0, SlotAction::Restore(bad)))) {
        ControlReply::Error(err) => assert!(err.to_string().starts_with("Unable to restore slot"), "{err}"),
        other => panic!("truncated restore: {other:?}"),
    }
    assert_eq!(slots(&e)[0].n_cached_tokens, 0);
    match e.control_wait(Some((0, SlotAction::Restore(dir.join("missing.bin"))))) {
        ControlReply::Error(err) => assert!(err.to_string().contains("missing.bin"), "{err}"),
        other => panic!("missing restore: {other:?}"),
    }
    let (again, info) = run(&e, &next, 8, Some(0));
    assert_eq!(info.n_cached, 0, "nothing is cached any more");
    assert_eq!(again, whole, "the emptied slot computes the whole prompt, as a fresh engine");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn save_restore_erase_in_the_pool() {
    save_restore_round_trip(true);
}

#[test]
fn save_restore_erase_per_slot_streams() {
    save_restore_round_trip(false);
}

#[test]
fn a_slot_action_on_a_busy_slot_waits_for_its_request() {
    let model = smollm2();
    let e = engine(&model, true);
    let prompt = tokens(&model, "Count: one two three");
    // Polled, unread: its slot stays busy until it is cancelled.
    let id = e.submit(Request { prompt: Prompt::Tokens(prompt), sampler: greedy(), max_tokens: 100, stop_tokens: vec![], stop_strings: vec![], ignore_eos: true, callback: None, user_data: 0, n_probs: 0, grammar: None, reuse_prefix: true, slot: Some(0), tag: None, t_max_predict: None, progress: None }).unwrap();
    while !slots(&e)[0].is_processing {
        std::thread::sleep(Duration::from_millis(5));
    }
    let (tx, rx) = mpsc::channel();
    e.slot_action(0, SlotAction::Erase, Box::new(move |r| tx.send(r).unwrap()));
    assert!(rx.recv_timeout(Duration::from_millis(300)).is_err(), "the erase waits while the slot is busy");
    e.cancel(id).unwrap();
    match rx.recv_timeout(Duration::from_secs(30)).expect("the erase runs once the slot is free") {
        ControlReply::Erased { n_erased } => assert!(n_erased > 0),
        other => panic!("{other:?}"),
    }
    assert_eq!(slots(&e)[0].n_cached_tokens, 0);
}

/// llama-server's `t_max_predict_ms`: past the time limit, generation ends with Length at the
/// next token whose piece holds a newline — here a limit already passed at the first token, so
/// the output is the unlimited output up to its first newline.
#[test]
fn the_generation_time_limit_ends_at_a_newline() {
    let model = smollm2();
    let e = engine(&model, true);
    let prompt = tokens(&model, "Shopping list:\n1. apples\n2. pears\n3.");
    let (free, _) = run(&e, &prompt, 40, None);
    let first_nl = free.iter().position(|&t| e.piece(t).contains(&b'\n')).expect("the unlimited output has a newline");
    let (out, info) = run_with(&e, &prompt, 40, None, Some(Duration::from_nanos(1)), false);
    assert_eq!(out, free[..=first_nl].to_vec());
    assert_eq!(info.reason, Some(deepseek::engine::FinishKind::Length));
}

/// llama-server's `return_progress`: the prompt's progress is reported when the request takes
/// its slot (the cached prefix only) and after every step that computed some of it, growing,
/// the last one whole, all before the first token.
#[test]
fn prompt_progress_is_reported_per_step_before_the_first_token() {
    let model = smollm2();
    let p = EngineParams { n_seq_max: 2, n_ctx_seq: 512, n_batch: 16, n_ubatch: 16, n_threads: 2, ..EngineParams::default() };
    let e = Engine::new(model.clone(), &p).unwrap();
    let prompt = tokens(&model, &"the quick brown fox jumps over the lazy dog ".repeat(6));
    assert!(prompt.len() > 40, "{}", prompt.len());
    for round in 0..2 {
        let (tx, rx) = mpsc::channel();
        let tx2 = tx.clone();
        let cb = Box::new(move |v: &EventView<'_>| {
            match v.event {
                Event::Token { token, .. } => tx.send((Some(token), None, v.finish)).unwrap(),
                Event::Finish(_) => tx.send((None, None, v.finish)).unwrap(),
            }
            true
        });
        let progress: deepseek::engine::ProgressCallback = Box::new(move |p: &deepseek::engine::PromptProgress| tx2.send((None, Some(*p), None)).unwrap());
        e.submit(Request { prompt: Prompt::Tokens(prompt.clone()), sampler: greedy(), max_tokens: 3, stop_tokens: vec![], stop_strings: vec![], ignore_eos: true, callback: Some(cb), user_data: 0, n_probs: 0, grammar: None, reuse_prefix: true, slot: None, tag: None, t_max_predict: None, progress: Some(progress) }).unwrap();
        let mut seen = Vec::new();
        let mut tokens_before_done = 0;
        let info = loop {
            let (tok, prog, fin) = rx.recv_timeout(Duration::from_secs(60)).unwrap();
            if let Some(p) = prog {
                assert_eq!(tokens_before_done, 0, "progress after a token");
                seen.push(p);
            }
            if tok.is_some() {
                tokens_before_done += 1;
            }
            if let Some(i) = fin {
                break i;
            }
        };
        let first = seen[0];
        assert_eq!((first.total as usize, first.cache, first.processed, first.time_ms), (prompt.len(), info.n_cached, info.n_cached, 0.0), "round {round}");
        assert!(seen.windows(2).all(|w| w[1].processed > w[0].processed && w[1].cache == w[0].cache && w[1].time_ms >= w[0].time_ms), "{seen:?}");
        assert_eq!(seen.last().unwrap().processed as usize, prompt.len());
        let computed = prompt.len() - info.n_cached as usize;
        assert_eq!(seen.len(), 1 + computed.div_ceil(16), "one report per step of at most n_batch = 16 prompt tokens: {seen:?}");
        if round == 1 {
            assert!(info.n_cached > 0, "the second round reuses the first's cells");
        }
    }
}

//! The serving engine's per-token probabilities (`Request::n_probs`, what the server's
//! `logprobs` report) against a reference computed here: a plain context decoding the same
//! tokens, and the log-softmax of its logits taken in f64 over the whole sorted vocabulary.
//! Also through a stop string, whose matcher holds tokens back: each event still carries
//! its own token's probabilities.

mod common;

use std::sync::mpsc;
use std::sync::Arc;

use common::*;
use deepseek::batch::BatchInput;
use deepseek::context::{Context, ContextParams};
use deepseek::engine::{Engine, EngineParams, Event, EventView, Prompt, Request, TokenProbs};
use deepseek::model::Model;

fn greedy() -> Box<dyn deepseek::sampling::Sampler + Send> {
    Box::new(deepseek::sampling::pick::Greedy)
}

fn ctx_params() -> ContextParams {
    ContextParams {
        n_ctx: 512,
        n_batch: 512,
        n_ubatch: 512,
        n_seq_max: 1,
        n_threads: 2,
        n_threads_batch: 2,
        ..ContextParams::default()
    }
}

/// (token, log-probability) of the whole vocabulary, most likely first.
fn reference_logprobs(logits: &[f32]) -> Vec<(i32, f64)> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = max + logits.iter().map(|&l| (l as f64 - max).exp()).sum::<f64>().ln();
    let mut v: Vec<(i32, f64)> = logits.iter().enumerate().map(|(i, &l)| (i as i32, l as f64 - lse)).collect();
    v.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap().then(a.0.cmp(&b.0)));
    v
}

fn run(stop: Option<&str>, n_probs: u32) -> Vec<(i32, Vec<u8>, TokenProbs)> {
    let model = Arc::new(Model::load(&models_dir().join("smollm2-135m-instruct-q4_1.gguf"), true).expect("scripts/fetch-models.sh smollm2"));
    let mut prompt = Vec::new();
    model.vocab.tokenize(b"The three primary colors are", true, false, &mut prompt);
    let engine = Engine::new(model.clone(), &EngineParams { n_seq_max: 2, n_ctx_seq: 512, n_threads: 2, ..Default::default() }).unwrap();
    let (tx, rx) = mpsc::channel();
    let cb = Box::new(move |v: &EventView<'_>| {
        match v.event {
            Event::Token { token, .. } => tx.send(Some((token, v.piece.to_vec(), *v.probs.expect("probabilities on every token event")))).unwrap(),
            Event::Finish(_) => tx.send(None).unwrap(),
        }
        true
    });
    let stop_strings = stop.map(|s| vec![s.as_bytes().to_vec()]).unwrap_or_default();
    engine
        .submit(Request { prompt: Prompt::Tokens(prompt.clone()), sampler: greedy(), max_tokens: 24, stop_tokens: vec![], stop_strings, ignore_eos: true, callback: Some(cb), user_data: 0, n_probs, grammar: None, reuse_prefix: true, slot: None, tag: None, t_max_predict: None, progress: None })
        .unwrap();
    let mut out = Vec::new();
    while let Some(e) = rx.recv_timeout(std::time::Duration::from_secs(60)).unwrap() {
        out.push(e);
    }
    // The reference: the same tokens through a plain context, one at a time.
    let mut ctx = Context::new(model.clone(), &ctx_params()).unwrap();
    ctx.decode(&BatchInput { tokens: &prompt, pos: None, seq_ids: None, logits: None }, None).unwrap();
    for (i, (token, _, p)) in out.iter().enumerate() {
        let logits = ctx.logits_row(-1).unwrap().to_vec();
        let reference = reference_logprobs(&logits);
        assert_eq!(p.token, *token);
        assert_eq!(reference[0].0, *token, "token {i}: greedy takes the most likely token");
        let want = reference.iter().find(|r| r.0 == *token).unwrap().1;
        assert!((p.logprob as f64 - want).abs() < 2e-3, "token {i}: logprob {} vs {want}", p.logprob);
        assert_eq!(p.top().len(), n_probs as usize);
        for (k, &(t, lp)) in p.top().iter().enumerate() {
            assert!((lp as f64 - reference[k].1).abs() < 2e-3, "token {i}, rank {k}: {lp} vs {}", reference[k].1);
            // Ids must agree unless two candidates are too close to call.
            let gap_ok = reference.get(k + 1).is_none_or(|n| reference[k].1 - n.1 > 2e-3) && (k == 0 || reference[k - 1].1 - reference[k].1 > 2e-3);
            if gap_ok {
                assert_eq!(t, reference[k].0, "token {i}, rank {k}");
            }
        }
        ctx.decode(&BatchInput { tokens: &[*token], pos: None, seq_ids: None, logits: None }, None).unwrap();
    }
    out
}

#[test]
fn token_events_carry_the_softmax_of_the_logits() {
    let out = run(None, 5);
    assert_eq!(out.len(), 24);
}

#[test]
fn probabilities_stay_with_their_tokens_through_a_stop_string() {
    let full = run(None, 3);
    let text: Vec<u8> = full.iter().flat_map(|e| e.1.clone()).collect();
    // A stop string that begins inside the output, after the first few tokens.
    let at = full[..4].iter().map(|e| e.1.len()).sum::<usize>();
    let stop = String::from_utf8_lossy(&text[at..(at + 6).min(text.len())]).into_owned();
    let cut = run(Some(&stop), 3);
    assert!(cut.len() < full.len() && cut.len() >= 4, "stopped after {} tokens", cut.len());
    for (a, b) in cut.iter().zip(&full) {
        assert_eq!(a.0, b.0);
        assert_eq!(a.2.logprob, b.2.logprob);
    }
}

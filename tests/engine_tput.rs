//! A timing run (ignored by default): 8 concurrent greedy requests of 128 tokens on
//! qwen2.5-coder-0.5b through the engine's Rust API; prints generated tokens per second.
//! `cargo test --profile ci --test engine_tput -- --ignored --nocapture`

mod common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use common::*;
use deepseek::engine::{Engine, EngineParams, Event, EventView, Prompt, Request};
use deepseek::model::Model;

fn greedy() -> Box<dyn deepseek::sampling::Sampler + Send> {
    Box::new(deepseek::sampling::pick::Greedy)
}

#[test]
#[ignore]
fn tput_8x128() {
    let model = Arc::new(Model::load(&models_dir().join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"), true).expect("scripts/fetch-models.sh qwen05"));
    let engine = Engine::new(model.clone(), &EngineParams { n_seq_max: 8, n_ctx_seq: 2048, n_threads: 2, ..Default::default() }).unwrap();
    let cpu = || {
        // SAFETY: rusage is plain integers, for which all zeroes is a value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes the struct it is given.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    };
    let round = |k: usize| {
        let (tx, rx) = mpsc::channel();
        let c0 = cpu();
        let t0 = Instant::now();
        for i in 0..8 {
            let mut prompt = Vec::new();
            model.vocab.tokenize(format!("Request {k}-{i}: write a function that sorts a list of {i} numbers in Python").as_bytes(), true, false, &mut prompt);
            // TPUT_PROMPT=n: prompts padded to n tokens (long contexts).
            let pad: usize = std::env::var("TPUT_PROMPT").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
            let mut j = 0;
            while prompt.len() < pad {
                prompt.push(prompt[1 + (j * 7 + i) % 12]);
                j += 1;
            }
            let tx = tx.clone();
            let cb = Box::new(move |v: &EventView<'_>| {
                if let Event::Finish(_) = v.event {
                    tx.send(v.finish.unwrap().n_generated).unwrap();
                }
                true
            });
            engine.submit(Request { prompt: Prompt::Tokens(prompt), sampler: greedy(), max_tokens: 128, stop_tokens: vec![], stop_strings: vec![], ignore_eos: true, callback: Some(cb), user_data: 0, n_probs: 0, grammar: None, reuse_prefix: true, slot: None, tag: None, t_max_predict: None, progress: None }).unwrap();
        }
        let n: u32 = (0..8).map(|_| rx.recv().unwrap()).sum();
        let s = t0.elapsed().as_secs_f64();
        (n, s, cpu() - c0)
    };
    round(0);
    for k in 1..=3 {
        let (n, s, c) = round(k);
        println!("TPUT round {k}: {n} tokens in {s:.3} s = {:.1} tok/s; cpu {c:.2} s = {:.2} ms/token", n as f64 / s, c * 1e3 / n as f64);
    }
}

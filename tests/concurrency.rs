//! Many threads, each with its own context on one shared model, mixing prefill and decode:
//! every thread's logits equal a serial run's bit for bit, and a watchdog turns a hang into a
//! failure.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use deepseek::batch::BatchInput;
use deepseek::context::{Context, ContextParams};
use deepseek::model::Model;

fn params() -> ContextParams {
    ContextParams {
        n_ctx: 256,
        n_batch: 64,
        n_ubatch: 16,
        n_seq_max: 1,
        n_threads: 2,
        n_threads_batch: 2,
        rope_scaling: None,
        rope_freq_base: 0.0,
        rope_freq_scale: 0.0,
        yarn_ext_factor: -1.0,
        yarn_attn_factor: -1.0,
        yarn_beta_fast: -1.0,
        yarn_beta_slow: -1.0,
        yarn_orig_ctx: 0,
        embeddings: false,
        kv_unified: false,
    }
}

/// A prompt of 20..50 tokens (prefill over several micro-batches) then 6 single-token decodes;
/// returns every produced logits row.
fn session(model: &Arc<Model>, seed: i32) -> Vec<Vec<f32>> {
    let mut ctx = Context::new(Arc::clone(model), &params()).unwrap();
    let len = 20 + (seed * 7 % 31) as usize;
    let prompt: Vec<i32> = (0..len as i32).map(|i| (i * 41 + seed * 13) % 470).collect();
    let mut rows = Vec::new();
    ctx.decode(&BatchInput { tokens: &prompt, pos: None, seq_ids: None, logits: None }, None).unwrap();
    rows.push(ctx.logits_row(-1).unwrap().to_vec());
    for step in 0..6 {
        let t = [(seed * 5 + step) % 470];
        ctx.decode(&BatchInput { tokens: &t, pos: None, seq_ids: None, logits: None }, None).unwrap();
        rows.push(ctx.logits_row(-1).unwrap().to_vec());
    }
    rows
}

fn check(rel: &str) {
    let model = Arc::new(Model::load(&std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel), true).unwrap());
    const THREADS: i32 = 6;
    let serial: Vec<_> = (0..THREADS).map(|s| session(&model, s)).collect();
    let (tx, rx) = mpsc::channel();
    let handles: Vec<_> = (0..THREADS)
        .map(|s| {
            let (m, tx) = (Arc::clone(&model), tx.clone());
            std::thread::spawn(move || tx.send((s, session(&m, s))).unwrap())
        })
        .collect();
    for _ in 0..THREADS {
        let (s, rows) = rx.recv_timeout(Duration::from_secs(300)).unwrap_or_else(|_| panic!("{rel}: a session hung (watchdog)"));
        assert!(rows == serial[s as usize], "{rel}: thread {s} differs from the serial run");
    }
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn threads_on_a_shared_dense_model_match_a_serial_run() {
    check("tiny/tiny-qwen2-q4_k_m.gguf");
}

#[test]
fn threads_on_a_shared_deepseek2_model_match_a_serial_run() {
    check("deepseek2/tiny-deepseek3-q8_0.gguf");
}

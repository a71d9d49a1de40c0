//! Raw bytes as a GGUF file, through parsing and model construction; a model that loads gets a
//! context and decodes a few tokens, then everything is freed.
#![no_main]

use std::sync::Arc;

use deepseek::batch::BatchInput;
use deepseek::context::{Context, ContextParams};
use deepseek::gguf::GgufFile;
use deepseek::model::Model;
use libfuzzer_sys::fuzz_target;

fn params() -> ContextParams {
    ContextParams { n_ctx: 64, n_batch: 16, n_ubatch: 8, n_seq_max: 2, n_threads: 1, n_threads_batch: 1, ..ContextParams::default() }
}

fuzz_target!(|data: &[u8]| {
    static GUARD: std::sync::Once = std::sync::Once::new();
    GUARD.call_once(deepseek_fuzz::install_log_guard);
    let Ok(file) = GgufFile::from_slice(data) else { return };
    let Ok(model) = Model::from_file(file) else { return };
    let model = Arc::new(model);
    let Ok(mut ctx) = Context::new(Arc::clone(&model), &params()) else { return };
    let n_vocab = model.hp.n_vocab as i32;
    let tokens: Vec<i32> = (0..12).map(|i| (i * 7919) % n_vocab.max(1)).collect();
    let _ = ctx.decode(&BatchInput { tokens: &tokens, pos: None, seq_ids: None, logits: None }, None);
    let _ = ctx.decode(&BatchInput { tokens: &tokens[..1], pos: None, seq_ids: None, logits: None }, None);
});

//! Raw bytes as a GGUF file, through parsing and model construction; a model that loads gets a
//! context and decodes a few tokens, then everything is freed. Bytes that start with `SPLT`
//! are a split set: the shard count (one byte), the lengths of all shards but the last (u32 LE
//! each), then the shards, joined as the first shard of a split model brings the others.
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

fn parse(data: &[u8]) -> Result<GgufFile, String> {
    let Some(rest) = data.strip_prefix(b"SPLT") else { return GgufFile::from_slice(data) };
    let (&count, mut rest) = rest.split_first().ok_or("no shard count")?;
    let mut shards = Vec::new();
    for _ in 1..count.clamp(1, 8) {
        let (len, tail) = rest.split_first_chunk::<4>().ok_or("no shard length")?;
        let len = (u32::from_le_bytes(*len) as usize).min(tail.len());
        shards.push(&tail[..len]);
        rest = &tail[len..];
    }
    shards.push(rest);
    GgufFile::from_slices(&shards)
}

fuzz_target!(|data: &[u8]| {
    static GUARD: std::sync::Once = std::sync::Once::new();
    GUARD.call_once(deepseek_fuzz::install_log_guard);
    let Ok(file) = parse(data) else { return };
    let Ok(model) = Model::from_file(file) else { return };
    let model = Arc::new(model);
    let Ok(mut ctx) = Context::new(Arc::clone(&model), &params()) else { return };
    let n_vocab = model.hp.n_vocab as i32;
    let tokens: Vec<i32> = (0..12).map(|i| (i * 7919) % n_vocab.max(1)).collect();
    let _ = ctx.decode(&BatchInput { tokens: &tokens, pos: None, seq_ids: None, logits: None }, None);
    let _ = ctx.decode(&BatchInput { tokens: &tokens[..1], pos: None, seq_ids: None, logits: None }, None);
});

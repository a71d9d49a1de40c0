//! deepseek2 files in the legacy layout (one `attn_kv_b` per block, no `key_length_mla`): by
//! default run as llama.cpp b11312 runs them — keys and values decompressed per head and cached
//! as multi-head K/V (their golden logits are in tests/golden_logits.rs, strict); with
//! `DEEPSEEK_LEGACY_MLA=absorb`, `attn_kv_b` is split into `attn_k_b` / `attn_v_b` at load and the
//! file runs as MLA with a cache of kv_lora_rank + rope dims per token and layer: F32 logits
//! within the float tolerance of upstream's (the two forms are the same product in another
//! order; quantized files round differently there — docs/IMPLEMENTED.md says so).
//!
//! One test: the variable is read at model load, and this binary has no other test that
//! could load a model while it is set.

mod common;

use std::sync::Arc;

use common::golden::{check_files, Tolerance};
use common::*;
use deepseek::context::{Context, ContextParams};
use deepseek::model::Model;

fn cache_bytes_per_token(model: &Arc<Model>) -> usize {
    let p = ContextParams {
        n_ctx: 256,
        n_batch: 64,
        n_ubatch: 64,
        n_seq_max: 1,
        ..ContextParams::default()
    };
    let ctx = Context::new(Arc::clone(model), &p).unwrap();
    ctx.kv.bytes() / ctx.n_ctx as usize
}

#[test]
fn legacy_files_run_expanded_by_default_and_absorbed_on_request() {
    let file = data("deepseek-family/tiny-deepseek2-legacy-f32.gguf");
    let g = |ext: &str| {
        data(&format!(
            "deepseek-family/golden/tiny-deepseek2-legacy-f32.{ext}"
        ))
    };

    // Default: upstream's cache, every head's K (key_length) and V (value_length), F16.
    let expanded = Arc::new(Model::load(&file, true).unwrap());
    let (hp, m) = (&expanded.hp, expanded.hp.mla.as_ref().unwrap());
    assert!(m.legacy && m.expanded);
    assert_eq!(
        cache_bytes_per_token(&expanded),
        hp.n_layer * hp.n_head * (hp.head_dim_k + hp.head_dim_v) * 2
    );
    let small = hp.n_layer * (m.kv_lora_rank + hp.n_rot) * 2;
    drop(expanded);

    // SAFETY: the only test of this binary: no other thread reads the environment now.
    unsafe { std::env::set_var("DEEPSEEK_LEGACY_MLA", "absorb") };
    let absorbed = Arc::new(Model::load(&file, true).unwrap());
    let m = absorbed.hp.mla.as_ref().unwrap();
    assert!(m.legacy && !m.expanded);
    assert_eq!(cache_bytes_per_token(&absorbed), small);
    drop(absorbed);
    check_files(
        "tiny-deepseek2-legacy-f32 (absorbed)",
        &file,
        &g("json"),
        &g("f32"),
        Tolerance::Float,
    );
    // SAFETY: as above.
    unsafe { std::env::remove_var("DEEPSEEK_LEGACY_MLA") };
}

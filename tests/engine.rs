//! Engine properties beyond the golden scenarios, on the tiny fixture models through the Rust
//! API: thread count does not change results, shifting a sequence's positions re-rotates the
//! cached keys (dense, MLA and deepseek32's indexer keys), deepseek2's latent KV cache holds
//! kv_lora_rank + rope dims per token and layer, no values (deepseek32's also its indexer key),
//! and deepseek32 with a top-k that covers the context is deepseek2.

mod common;

use std::sync::Arc;

use common::data;
use deepseek::batch::BatchInput;
use deepseek::context::{Context, ContextParams};
use deepseek::model::Model;

fn params(threads: i32) -> ContextParams {
    ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 256,
        n_seq_max: 1,
        n_threads: threads,
        n_threads_batch: threads,
        ..ContextParams::default()
    }
}

fn load(rel: &str) -> Arc<Model> {
    Arc::new(Model::load(&data(rel), true).unwrap())
}

fn tokens(n: usize) -> Vec<i32> {
    (0..n as i32).map(|i| (i * 37 + 11) % 400).collect()
}

fn decode(ctx: &mut Context, toks: &[i32], pos: Option<&[i32]>) {
    ctx.decode(&BatchInput { tokens: toks, pos, seq_ids: None, logits: None }, None).unwrap();
}

const MODELS: [&str; 5] = ["tiny/tiny-qwen2-f32.gguf", "tiny/tiny-llama-q8_0.gguf", "deepseek2/tiny-deepseek3-f32.gguf", "deepseek-family/tiny-deepseek32-f32.gguf", "deepseek-family/tiny-deepseek2-legacy-f32.gguf"];

#[test]
fn results_do_not_depend_on_the_thread_count() {
    for rel in MODELS {
        let model = load(rel);
        let mut outs = Vec::new();
        for threads in [1, 2, 3] {
            let mut ctx = Context::new(Arc::clone(&model), &params(threads)).unwrap();
            decode(&mut ctx, &tokens(24), None);
            decode(&mut ctx, &[5], None);
            outs.push(ctx.logits_row(-1).unwrap().to_vec());
        }
        assert_eq!(outs[0], outs[1], "{rel}: 1 vs 2 threads");
        assert_eq!(outs[0], outs[2], "{rel}: 1 vs 3 threads");
    }
}

/// Layer 0's cached keys of the first `n` cells. (Deeper layers' keys also depend on attention
/// outputs, which differ by rounding between two position ranges, and quantized activations
/// amplify that; layer 0's depend only on the tokens and the rotation.)
fn k_rows(ctx: &Context, n: usize) -> Vec<f32> {
    (0..n).flat_map(|c| ctx.kv.k_row(0, c).iter().map(|&h| deepseek::quant::f16_to_f32(h))).collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn shifting_positions_rerotates_cached_keys() {
    for rel in MODELS {
        let model = load(rel);
        let toks = tokens(16);
        // A: positions 0..16, then the sequence shifted by +7; B: positions 7..23 from the start.
        let mut a = Context::new(Arc::clone(&model), &params(2)).unwrap();
        decode(&mut a, &toks, None);
        let before = k_rows(&a, 16);
        a.kv.seq_add(0, 0, -1, 7);
        assert_eq!((a.kv.seq_pos_min(0), a.kv.seq_pos_max(0)), (7, 22));
        let after = k_rows(&a, 16);
        let mut b = Context::new(Arc::clone(&model), &params(2)).unwrap();
        let pos: Vec<i32> = (7..23).collect();
        decode(&mut b, &toks, Some(&pos));
        let want = k_rows(&b, 16);
        let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let (err, unshifted) = (max_abs_diff(&after, &want), max_abs_diff(&before, &want));
        // F16 storage rounds twice on the shifted path: allow a few F16 steps at this magnitude.
        assert!(err <= scale * 4e-3, "{rel}: shifted keys differ by {err} (scale {scale})");
        assert!(unshifted > 20.0 * err, "{rel}: the shift must change the keys ({unshifted} vs {err})");
        // And the next token sees the same thing either way.
        decode(&mut a, &[9], None);
        decode(&mut b, &[9], None);
        // The row tolerance for the weight type (tests/data/README.md, Tolerances: quantized
        // activations amplify rounding).
        let min_cos = if rel.contains("f32") { 0.9999 } else { 0.998 };
        let cos = common::cosine(a.logits_row(-1).unwrap(), b.logits_row(-1).unwrap());
        assert!(cos >= min_cos, "{rel}: logits after a shift differ (cosine {cos})");
    }
}

#[test]
fn mla_cache_holds_the_latent_and_rope_key_only() {
    let model = load("deepseek2/tiny-deepseek3-f32.gguf");
    let hp = &model.hp;
    let m = hp.mla.as_ref().unwrap();
    let ctx = Context::new(Arc::clone(&model), &params(1)).unwrap();
    let cells = ctx.n_ctx as usize;
    let per_token = ctx.kv.bytes() / cells;
    assert_eq!(per_token, hp.n_layer * (m.kv_lora_rank + hp.n_rot) * 2);
    // A plain multi-head F16 cache would hold every head's K (qk_head) and V (v_head).
    let mha = hp.n_layer * hp.n_head * (m.qk_head + m.v_head) * 2;
    eprintln!("deepseek3 tiny: MLA cache {per_token} B/token vs {mha} B/token for plain multi-head K/V");
    assert!(per_token < mha);
}

#[test]
fn deepseek32_cache_rows_add_the_indexer_key() {
    let model = load("deepseek-family/tiny-deepseek32-f32.gguf");
    let hp = &model.hp;
    let (m, x) = (hp.mla.as_ref().unwrap(), hp.indexer.as_ref().unwrap());
    let ctx = Context::new(Arc::clone(&model), &params(1)).unwrap();
    assert_eq!(ctx.kv.bytes() / ctx.n_ctx as usize, hp.n_layer * (m.kv_lora_rank + hp.n_rot + x.head_size) * 2);
}

/// The tiny deepseek32 file rebuilt: as deepseek2 (its keys renamed, the indexer's keys and
/// tensors dropped), or as deepseek32 with another top-k.
fn deepseek32_as(v2: bool, top_k: u32) -> Arc<Model> {
    use deepseek::gguf::{GgufFile, GgufValue, GgufWriter};
    let f = GgufFile::open(&data("deepseek-family/tiny-deepseek32-f32.gguf"), true).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in f.kvs() {
        match k.strip_prefix("deepseek32.") {
            Some(rest) if v2 && rest.starts_with("attention.indexer.") => {}
            Some(rest) if v2 => {
                w.kv(&format!("deepseek2.{rest}"), v.clone());
            }
            Some("attention.indexer.top_k") => {
                w.kv(k, GgufValue::U32(top_k));
            }
            _ if v2 && k == "general.architecture" => {
                w.kv(k, GgufValue::Str("deepseek2".into()));
            }
            _ => {
                w.kv(k, v.clone());
            }
        }
    }
    for t in f.tensors().iter().filter(|t| !(v2 && t.name.contains(".indexer."))) {
        w.tensor(&t.name, &t.dims, t.ty, f.tensor_data(t).to_vec());
    }
    let model = Model::from_file(GgufFile::from_slice(&w.to_bytes()).unwrap()).unwrap();
    assert_eq!(model.hp.arch.name(), if v2 { "deepseek2" } else { "deepseek32" });
    Arc::new(model)
}

/// With a top-k of at least the context every token keeps every cell: the same logits as
/// deepseek2 on the same weights, bit for bit, in prefill and decode. With the file's top-k (8)
/// the rows of tokens that see more than 8 cells differ.
#[test]
fn deepseek32_with_a_top_k_covering_the_context_is_deepseek2() {
    let run = |model: &Arc<Model>| {
        let mut ctx = Context::new(Arc::clone(model), &params(2)).unwrap();
        let toks = tokens(40);
        let logits = [1i8; 40];
        ctx.decode(&BatchInput { tokens: &toks, pos: None, seq_ids: None, logits: Some(&logits) }, None).unwrap();
        let mut rows: Vec<Vec<f32>> = (0..40).map(|i| ctx.logits_row(i).unwrap().to_vec()).collect();
        for t in [5, 9, 13] {
            decode(&mut ctx, &[t], None);
            rows.push(ctx.logits_row(-1).unwrap().to_vec());
        }
        rows
    };
    let dense = run(&deepseek32_as(true, 0));
    assert_eq!(run(&deepseek32_as(false, 256)), dense, "top-k 256 (the whole context) vs deepseek2");
    assert_eq!(run(&deepseek32_as(false, 1000)), dense, "top-k 1000 vs deepseek2");
    let sparse = run(&deepseek32_as(false, 8));
    for (i, (s, d)) in sparse.iter().zip(&dense).enumerate() {
        if i < 8 {
            assert_eq!(s, d, "row {i}: a token that sees at most 8 cells keeps them all");
        } else {
            assert_ne!(s, d, "row {i}: the indexer drops cells");
        }
    }
}

/// A file that keeps its multi-token-prediction block (`nextn_predict_layers` = 1, the block
/// after the trunk's, as b11312's converter writes V3.2 by default) runs only the trunk, as
/// upstream does: the same logits as the file without it, bit for bit.
#[test]
fn nextn_blocks_are_not_run_as_trunk_blocks() {
    use deepseek::gguf::{GgufFile, GgufValue, GgufWriter};
    use deepseek::quant::GgmlType;
    for rel in ["deepseek-family/tiny-deepseek32-f32.gguf", "deepseek2/tiny-deepseek3-f32.gguf"] {
        let f = GgufFile::open(&data(rel), true).unwrap();
        let arch = f.get_str("general.architecture").unwrap().to_string();
        let n_layer = f.get_u32(&format!("{arch}.block_count")).unwrap() as usize;
        let e = f.get_u32(&format!("{arch}.embedding_length")).unwrap() as usize;
        let mut w = GgufWriter::new();
        for (k, v) in f.kvs() {
            w.kv(k, v.clone());
        }
        w.kv(&format!("{arch}.block_count"), GgufValue::U32(n_layer as u32 + 1));
        w.kv(&format!("{arch}.nextn_predict_layers"), GgufValue::U32(1));
        let last = format!("blk.{}.", n_layer - 1);
        for t in f.tensors() {
            w.tensor(&t.name, &t.dims, t.ty, f.tensor_data(t).to_vec());
        }
        // the draft block: the last trunk block's tensors again, plus NextN's own
        for t in f.tensors().iter().filter(|t| t.name.starts_with(&last)) {
            w.tensor(&t.name.replacen(&last, &format!("blk.{n_layer}."), 1), &t.dims, t.ty, f.tensor_data(t).to_vec());
        }
        let f32s = |n: usize| (0..n).flat_map(|i| (0.01 * (i % 7) as f32).to_le_bytes()).collect::<Vec<u8>>();
        w.tensor(&format!("blk.{n_layer}.nextn.eh_proj.weight"), &[2 * e, e], GgmlType::F32, f32s(2 * e * e));
        w.tensor(&format!("blk.{n_layer}.nextn.enorm.weight"), &[e], GgmlType::F32, f32s(e));
        w.tensor(&format!("blk.{n_layer}.nextn.hnorm.weight"), &[e], GgmlType::F32, f32s(e));
        let with_mtp = Arc::new(Model::from_file(GgufFile::from_slice(&w.to_bytes()).unwrap()).unwrap());
        assert_eq!(with_mtp.hp.n_layer, n_layer, "{rel}");
        let run = |model: &Arc<Model>| {
            let mut ctx = Context::new(Arc::clone(model), &params(2)).unwrap();
            decode(&mut ctx, &tokens(20), None);
            decode(&mut ctx, &[7], None);
            ctx.logits_row(-1).unwrap().to_vec()
        };
        assert_eq!(run(&with_mtp), run(&load(rel)), "{rel}: the NextN block must not run");
    }
}

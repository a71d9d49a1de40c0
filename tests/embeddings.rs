//! Embeddings and pooling against llama.cpp b11312 (tests/data/embeddings: its embed.c, run on
//! upstream's libllama by gen.sh): per-token hidden states (pooling NONE), MEAN, CLS and LAST
//! pooling with causal attention, MEAN and LAST with non-causal attention, three sequences in
//! one batch. And the API around them: llama_pooling_type, llama_get_embeddings_seq for
//! sequences with and without tokens, llama_set_embeddings between batches,
//! llama_set_causal_attn, and the refusals (RANK without a classification head, non-causal
//! attention on MLA, a non-causal batch larger than n_ubatch).

mod common;

use common::*;
use deepseek::api::context::*;
use deepseek::api::misc::{llama_get_causal_attn, llama_model_cls_label};
use deepseek::api::model::{llama_model_free, llama_model_n_cls_out, llama_model_n_embd};
use deepseek::api::types::*;
use deepseek::api::handles::{llama_context, llama_model};

const LEN: [usize; 3] = [7, 12, 5];

fn token(s: usize, i: usize) -> i32 {
    ((i * 53 + 7 * s + 3) % 400) as i32
}

fn context(m: *mut llama_model, pooling: llama_pooling_type, causal: bool) -> *mut llama_context {
    let mut p = llama_context_default_params();
    (p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max, p.n_threads, p.n_threads_batch) = (256, 256, 256, 3, 2, 2);
    p.embeddings = true;
    p.pooling_type = pooling;
    p.attention_type = if causal { llama_attention_type::LLAMA_ATTENTION_TYPE_CAUSAL } else { llama_attention_type::LLAMA_ATTENTION_TYPE_NON_CAUSAL };
    let c = llama_init_from_model(m, p);
    assert!(!c.is_null());
    c
}

/// The three sequences in one batch, every token an output.
fn decode_all(c: *mut llama_context) -> i32 {
    let mut b = Batch::new(64, 1);
    for (s, &len) in LEN.iter().enumerate() {
        for i in 0..len {
            b.add(token(s, i), i as i32, s as i32, true);
        }
    }
    // SAFETY: a valid batch.
    unsafe { llama_decode(c, b.0) }
}

fn vector(p: *const f32, n: usize) -> Vec<f32> {
    assert!(!p.is_null());
    // SAFETY: the library's buffer holds n floats.
    unsafe { std::slice::from_raw_parts(p, n) }.to_vec()
}

/// (cases' vectors in embed.c's order) for our library.
fn ours(m: *mut llama_model, n_embd: usize) -> Vec<Vec<f32>> {
    use llama_pooling_type::*;
    let mut out = Vec::new();
    for (pooling, causal) in [(LLAMA_POOLING_TYPE_NONE, true), (LLAMA_POOLING_TYPE_MEAN, true), (LLAMA_POOLING_TYPE_CLS, true), (LLAMA_POOLING_TYPE_LAST, true), (LLAMA_POOLING_TYPE_MEAN, false), (LLAMA_POOLING_TYPE_LAST, false)] {
        let c = context(m, pooling, causal);
        assert_eq!(llama_pooling_type(c) as i32, pooling as i32);
        assert_eq!(llama_get_causal_attn(c), causal);
        assert_eq!(decode_all(c), 0);
        if pooling == LLAMA_POOLING_TYPE_NONE {
            for i in 0..LEN.iter().sum::<usize>() {
                out.push(vector(llama_get_embeddings_ith(c, i as i32), n_embd));
            }
            assert!(llama_get_embeddings_seq(c, 0).is_null(), "no sequence embeddings without pooling");
        } else {
            for s in 0..3 {
                out.push(vector(llama_get_embeddings_seq(c, s), n_embd));
            }
        }
        // SAFETY: freed once.
        unsafe { llama_free(c) };
    }
    out
}

/// Every vector's cosine with upstream's at least `min_cosine` (causal cases) or
/// `min_cosine_nc` (the non-causal ones: a causal model run non-causally is far from its
/// training, and the small differences of quantized activations grow more), and its largest
/// |difference| relative to its largest |value| at most `max_rel`. The bounds are twice the
/// distance measured on the AVX-512 level when they were set (2026-12-02), which is of the
/// size of the logits' differences in tests/golden_logits.rs and tests/real_models.rs.
fn compare(rel: &str, min_cosine: f64, min_cosine_nc: f64, max_rel: f32) {
    let m = load_model(&if rel.starts_with("tiny") { data(&format!("tiny/{rel}.gguf")) } else { models_dir().join(format!("{rel}.gguf")) });
    let n_embd = llama_model_n_embd(m) as usize;
    let golden = read_f32s(&data(&format!("embeddings/{rel}.f32")));
    let ours = ours(m, n_embd);
    assert_eq!(golden.len(), ours.len() * n_embd, "{rel}: vector count");
    let (mut worst_cos, mut worst_nc, mut worst_rel) = (1.0f64, 1.0f64, 0.0f32);
    // vectors 0..24 NONE, 24..33 MEAN/CLS/LAST causal, 33..39 MEAN/LAST non-causal
    let first_nc = LEN.iter().sum::<usize>() + 9;
    for (i, v) in ours.iter().enumerate() {
        let g = &golden[i * n_embd..(i + 1) * n_embd];
        if i < first_nc {
            worst_cos = worst_cos.min(cosine(v, g));
        } else {
            worst_nc = worst_nc.min(cosine(v, g));
        }
        let scale = g.iter().fold(0.0f32, |a, x| a.max(x.abs()));
        worst_rel = worst_rel.max(v.iter().zip(g).fold(0.0f32, |a, (x, y)| a.max((x - y).abs())) / scale);
    }
    eprintln!("{rel}: {} vectors, min cosine {worst_cos:.8} (non-causal {worst_nc:.8}), max |Δ|/max|x| {worst_rel:.2e}", ours.len());
    assert!(worst_cos >= min_cosine && worst_nc >= min_cosine_nc && worst_rel <= max_rel, "{rel}: min cosine {worst_cos} (non-causal {worst_nc}), max relative difference {worst_rel}");
    // SAFETY: freed once.
    unsafe { llama_model_free(m) };
}

#[test]
fn pooled_embeddings_match_llama_cpp_f32() {
    compare("tiny-qwen2-f32", 0.999_999, 0.999_998, 2e-3);
}

#[test]
fn pooled_embeddings_match_llama_cpp_q8_0() {
    compare("tiny-llama-q8_0", 0.9995, 0.9995, 5e-2);
}

#[test]
fn pooled_embeddings_match_llama_cpp_real_model() {
    compare("smollm2-135m-instruct-q4_1", 0.997, 0.987, 0.12);
}

/// Pooling RANK on a model without a classification head, as b11312 computes it: the hidden
/// state of each sequence's last token (causal attention) or first (non-causal), its first
/// `n_cls_out` (1) values — against upstream's (embed.c's `rank` mode: each sequence alone; here
/// all three in one batch, each sequence's own value), within `max_rel` of the size of that
/// layer's vectors (the largest |value| of upstream's LAST-pooled vector of the sequence, the
/// bound `compare` uses for whole vectors).
fn compare_rank(rel: &str, max_rel: f32) {
    use llama_pooling_type::*;
    let m = load_model(&if rel.starts_with("tiny") { data(&format!("tiny/{rel}.gguf")) } else { models_dir().join(format!("{rel}.gguf")) });
    let n_embd = llama_model_n_embd(m) as usize;
    assert_eq!(llama_model_n_cls_out(m), 1);
    let golden = read_f32s(&data(&format!("embeddings/{rel}.rank.f32")));
    let vectors = read_f32s(&data(&format!("embeddings/{rel}.f32")));
    assert_eq!(golden.len(), 6);
    let mut worst = 0.0f32;
    for (k, causal) in [true, false].into_iter().enumerate() {
        let c = context(m, LLAMA_POOLING_TYPE_RANK, causal);
        assert_eq!(decode_all(c), 0);
        let ranks: Vec<f32> = (0..3).map(|s| vector(llama_get_embeddings_seq(c, s), 1)[0]).collect();
        // SAFETY: freed once.
        unsafe { llama_free(c) };
        if causal {
            // the same hidden state LAST pooling returns whole
            let c = context(m, LLAMA_POOLING_TYPE_LAST, true);
            assert_eq!(decode_all(c), 0);
            for (s, &r) in ranks.iter().enumerate() {
                assert_eq!(r.to_bits(), vector(llama_get_embeddings_seq(c, s as i32), n_embd)[0].to_bits(), "{rel}: RANK of sequence {s} is not its LAST vector's first value");
            }
            // SAFETY: freed once.
            unsafe { llama_free(c) };
        }
        for (s, &r) in ranks.iter().enumerate() {
            // upstream's LAST vectors: 24 NONE, then MEAN/CLS/LAST causal, MEAN/LAST non-causal
            let last = (if causal { 30 } else { 36 }) + s;
            let scale = vectors[last * n_embd..(last + 1) * n_embd].iter().fold(0.0f32, |a, x| a.max(x.abs()));
            let g = golden[k * 3 + s];
            worst = worst.max((r - g).abs() / scale);
            assert!((r - g).abs() <= max_rel * scale, "{rel}: RANK (causal {causal}) of sequence {s}: {r}, upstream {g} (scale {scale})");
        }
    }
    eprintln!("{rel}: RANK max |Δ|/max|x| {worst:.2e}");
    // SAFETY: freed once.
    unsafe { llama_model_free(m) };
}

#[test]
fn rank_pooling_matches_llama_cpp() {
    compare_rank("tiny-qwen2-f32", 2e-3);
    compare_rank("smollm2-135m-instruct-q4_1", 0.12);
}

#[test]
fn embeddings_api_behaves_as_upstream() {
    use llama_pooling_type::*;
    let m = load_model(&data("tiny/tiny-qwen2-f32.gguf"));
    let n_embd = llama_model_n_embd(m) as usize;
    // the model's own pooling (none in the file) when unspecified
    let c = context(m, LLAMA_POOLING_TYPE_UNSPECIFIED, true);
    assert_eq!(llama_pooling_type(c) as i32, LLAMA_POOLING_TYPE_NONE as i32);
    // SAFETY: freed once.
    unsafe { llama_free(c) };

    let c = context(m, LLAMA_POOLING_TYPE_LAST, true);
    // only sequence 1 in this batch: 0 and 2 have no embedding
    let mut b = Batch::new(16, 1);
    for i in 0..LEN[1] {
        b.add(token(1, i), i as i32, 1, true);
    }
    // SAFETY: a valid batch.
    assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
    let last = vector(llama_get_embeddings_seq(c, 1), n_embd);
    assert!(llama_get_embeddings_seq(c, 0).is_null() && llama_get_embeddings_seq(c, 2).is_null());
    assert!(llama_get_embeddings_seq(c, 7).is_null() && llama_get_embeddings_seq(c, -1).is_null());
    // LAST is the last token's hidden state
    assert_eq!(last, vector(llama_get_embeddings_ith(c, LEN[1] as i32 - 1), n_embd));

    // embeddings off for the next batch: logits only; on again: sequence embeddings again
    llama_set_embeddings(c, false);
    b.clear();
    b.add(token(0, 0), 0, 0, true);
    // SAFETY: a valid batch.
    assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
    assert!(llama_get_embeddings_seq(c, 0).is_null(), "embeddings are off");
    llama_set_embeddings(c, true);
    b.clear();
    b.add(token(0, 1), 1, 0, true);
    // SAFETY: a valid batch.
    assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
    assert!(!llama_get_embeddings_seq(c, 0).is_null());

    // non-causal on a multi-head model: allowed, and changes the result of a multi-token batch
    llama_set_causal_attn(c, false);
    assert!(!llama_get_causal_attn(c));
    deepseek::api::memory::llama_memory_clear(llama_get_memory(c), true);
    b.clear();
    for i in 0..LEN[1] {
        b.add(token(1, i), i as i32, 1, true);
    }
    // SAFETY: a valid batch.
    assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
    assert_ne!(vector(llama_get_embeddings_seq(c, 1), n_embd), last, "non-causal attention sees the later tokens");
    // SAFETY: freed once.
    unsafe { llama_free(c) };

    // a non-causal batch must fit one micro-batch
    let mut p = llama_context_default_params();
    (p.n_ctx, p.n_batch, p.n_ubatch, p.embeddings, p.pooling_type) = (256, 64, 8, true, LLAMA_POOLING_TYPE_MEAN);
    p.attention_type = llama_attention_type::LLAMA_ATTENTION_TYPE_NON_CAUSAL;
    let c = llama_init_from_model(m, p);
    assert!(!c.is_null());
    // SAFETY: a valid batch.
    let (rc, log) = common::log::logged(|| unsafe { llama_decode(c, b.0) });
    assert_eq!(rc, -1);
    assert!(log.contains("n_ubatch"), "{log}");
    // SAFETY: freed once.
    unsafe { llama_free(c) };

    // RANK without a classification head: one value per sequence, no labels (as upstream)
    assert_eq!(llama_model_n_cls_out(m), 1);
    assert!(llama_model_cls_label(m, 0).is_null());
    let c = context(m, LLAMA_POOLING_TYPE_RANK, true);
    assert_eq!(llama_pooling_type(c) as i32, LLAMA_POOLING_TYPE_RANK as i32);
    // SAFETY: freed once.
    unsafe { llama_free(c) };
    // SAFETY: freed once.
    unsafe { llama_model_free(m) };

    // MLA attends causally only
    let m = load_model(&data("deepseek2/tiny-deepseek2-lite-q8_0.gguf"));
    let mut p = llama_context_default_params();
    p.attention_type = llama_attention_type::LLAMA_ATTENTION_TYPE_NON_CAUSAL;
    let (c, log) = common::log::logged(|| llama_init_from_model(m, p));
    assert!(c.is_null() && log.contains("non-causal"), "{log}");
    let c = new_context(m, 256, 1, 2);
    let (_, log) = common::log::logged(|| llama_set_causal_attn(c, false));
    assert!(log.contains("non-causal") && llama_get_causal_attn(c), "{log}");
    // SAFETY: freed once.
    unsafe {
        llama_free(c);
        llama_model_free(m);
    }
}

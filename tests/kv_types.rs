//! KV cache types (`type_k` / `type_v`): llama.cpp b11312's scenarios A–D with each cache type
//! against llama.cpp's own logits with the same types (`tests/data/kv_types`, made by gen.sh
//! there), and what a caller gets around them: the refusals upstream makes, states that carry
//! the types, memory per cell, and shifts of quantized keys.

mod common;

use common::golden::{check_rows, run_scenarios_with, Tolerance};
use common::json::Json;
use common::*;
use deepseek::api::context::*;
use deepseek::api::memory::*;
use deepseek::api::model::llama_model_free;
use deepseek::api::state::*;
use deepseek::api::types::ggml_type;

/// ggml type ids of the cache types.
const F32: i32 = 0;
const F16: i32 = 1;
const Q4_0: i32 = 2;
const Q4_1: i32 = 3;
const Q5_0: i32 = 6;
const Q5_1: i32 = 7;
const Q8_0: i32 = 8;
const IQ4_NL: i32 = 20;
const BF16: i32 = 30;

fn ty(id: i32) -> ggml_type {
    // SAFETY: ggml_type is a C enum of i32; every id used here is one of its values.
    unsafe { std::mem::transmute::<i32, ggml_type>(id) }
}

fn with_types(k: i32, v: i32) -> impl Fn(&mut deepseek::api::types::llama_context_params) {
    move |p| {
        p.type_k = ty(k);
        p.type_v = ty(v);
    }
}

/// Runs the scenarios on `model` (a path under tests/data) with the cache types and holds the
/// rows to llama.cpp's rows with the same types (`golden`, a name in tests/data/kv_types).
fn check(model: &str, golden: &str, k: i32, v: i32, tol: Tolerance) {
    let dir = data("kv_types");
    let g = Json::parse(&std::fs::read_to_string(dir.join(format!("{golden}.json"))).unwrap());
    let (rows, _) = run_scenarios_with(load_model(&data(model)), &g, false, &with_types(k, v));
    check_rows(golden, &rows, &g, &dir.join(format!("{golden}.f32")), tol);
}

macro_rules! golden {
    ($($name:ident => $model:expr, $golden:expr, $k:expr, $v:expr, $tol:expr;)*) => { $(#[test] fn $name() { check($model, $golden, $k, $v, $tol); })* };
}

golden! {
    qwen2_f32_cache => "tiny/tiny-qwen2-f32.gguf", "tiny-qwen2-f32-kv-f32", F32, F32, Tolerance::Float;
    qwen2_bf16_cache => "tiny/tiny-qwen2-f32.gguf", "tiny-qwen2-f32-kv-bf16", BF16, BF16, Tolerance::Float;
    qwen2_q8_0_cache => "tiny/tiny-qwen2-f32.gguf", "tiny-qwen2-f32-kv-q8_0", Q8_0, Q8_0, Tolerance::Float;
    qwen2_q4_0_cache => "tiny/tiny-qwen2-f32.gguf", "tiny-qwen2-f32-kv-q4_0", Q4_0, Q4_0, Tolerance::Float;
    qwen2_q4_1_cache => "tiny/tiny-qwen2-f32.gguf", "tiny-qwen2-f32-kv-q4_1", Q4_1, Q4_1, Tolerance::Float;
    qwen2_q5_0_cache => "tiny/tiny-qwen2-f32.gguf", "tiny-qwen2-f32-kv-q5_0", Q5_0, Q5_0, Tolerance::Float;
    qwen2_q5_1_cache => "tiny/tiny-qwen2-f32.gguf", "tiny-qwen2-f32-kv-q5_1", Q5_1, Q5_1, Tolerance::Float;
    qwen2_iq4_nl_cache => "tiny/tiny-qwen2-f32.gguf", "tiny-qwen2-f32-kv-iq4_nl", IQ4_NL, IQ4_NL, Tolerance::Float;
    qwen2_q8_0_keys_f16_values => "tiny/tiny-qwen2-f32.gguf", "tiny-qwen2-f32-kv-q8_0-f16", Q8_0, F16, Tolerance::Float;
    qwen2_f16_keys_q4_0_values => "tiny/tiny-qwen2-f32.gguf", "tiny-qwen2-f32-kv-f16-q4_0", F16, Q4_0, Tolerance::Float;
    llama_q8_0_cache => "tiny/tiny-llama-q8_0.gguf", "tiny-llama-q8_0-kv-q8_0", Q8_0, Q8_0, Tolerance::Quantized;
    deepseek_moe_q8_0_cache => "deepseek-family/tiny-deepseek-moe-f32.gguf", "tiny-deepseek-moe-f32-kv-q8_0", Q8_0, Q8_0, Tolerance::Float;
    deepseek2_lite_q8_0_cache => "deepseek2/tiny-deepseek2-lite-f32.gguf", "tiny-deepseek2-lite-f32-kv-q8_0", Q8_0, Q8_0, Tolerance::Float;
    deepseek2_lite_q4_0_cache => "deepseek2/tiny-deepseek2-lite-f32.gguf", "tiny-deepseek2-lite-f32-kv-q4_0", Q4_0, Q4_0, Tolerance::Float;
    deepseek3_q8_0_cache => "deepseek2/tiny-deepseek3-q8_0.gguf", "tiny-deepseek3-q8_0-kv-q8_0", Q8_0, Q8_0, Tolerance::Quantized;
}

/// The contexts upstream refuses are refused, each with its reason.
#[test]
fn refusals_name_their_reason() {
    let cases: [(&str, i32, i32, i32, &str); 5] = [
        // (model, type_k, type_v, flash_attn_type, reason)
        ("tiny/tiny-qwen2-f32.gguf", Q8_0, Q4_0, 0, "quantized V cache (q4_0) requires flash_attn to be enabled"),
        ("tiny/tiny-qwen2-f32.gguf", 12, F16, -1, "type_k = 12 is not a KV cache type"),
        ("deepseek2/tiny-deepseek2-lite-f32.gguf", Q8_0, F16, -1, "does not support different K (q8_0) and V (f16) cache types"),
        ("deepseek-family/tiny-deepseek32-f32.gguf", Q8_0, Q8_0, -1, "keeps its indexer keys in the KV cache's rows"),
        ("deepseek-family/tiny-deepseek4-f32.gguf", BF16, BF16, -1, "are not supported for it"),
    ];
    for (model, k, v, fa, reason) in cases {
        let m = load_model(&data(model));
        let (c, logs) = common::log::logged(|| {
            let mut p = deepseek::api::context::llama_context_default_params();
            p.n_ctx = 256;
            p.type_k = ty(k);
            p.type_v = ty(v);
            // SAFETY: flash_attn_type is a C enum of i32 and -1..=1 are its values.
            p.flash_attn_type = unsafe { std::mem::transmute::<i32, deepseek::api::types::llama_flash_attn_type>(fa) };
            llama_init_from_model(m, p)
        });
        assert!(c.is_null(), "{model} {k}/{v}: a context was made");
        assert!(logs.contains(reason), "{model} {k}/{v}: no '{reason}' in {logs}");
        // SAFETY: loaded above, freed once.
        unsafe { llama_model_free(m) };
    }
}

fn decode_prompt(c: *mut deepseek::api::handles::llama_context, toks: &[i32], pos0: i32, seq: i32) {
    let mut b = Batch::new(toks.len() as i32, 1);
    for (i, &t) in toks.iter().enumerate() {
        b.add(t, pos0 + i as i32, seq, i == toks.len() - 1);
    }
    // SAFETY: b is a valid batch of this test.
    assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
}

/// A state of a quantized cache restores the next logits bit for bit; its size is the cache
/// type's (Q8_0 rows are 34/64 of F16's); a state saved with other cache types is refused with
/// the field that differs, and leaves the context unchanged.
#[test]
fn states_carry_the_cache_types() {
    let m = load_model(&data("tiny/tiny-qwen2-f32.gguf"));
    let prompt: Vec<i32> = (0..40).map(|i| (i * 37 + 11) % 400).collect();
    let size_of = |k: i32, v: i32| {
        let c = new_context_with(m, 256, 1, 2, &with_types(k, v));
        decode_prompt(c, &prompt, 0, 0);
        let n = llama_state_seq_get_size(c, 0);
        // SAFETY: freed once.
        unsafe { llama_free(c) };
        n
    };
    let (f16, q8, q4) = (size_of(F16, F16), size_of(Q8_0, Q8_0), size_of(Q4_0, Q4_0));
    // rows: 40 cells × 2 layers × (K + V) × 128 values
    let rows = |bytes_per_64: usize| 40 * 2 * 2 * 128 / 64 * bytes_per_64;
    assert_eq!(f16 - q8, rows(128) - rows(68), "F16 {f16} / Q8_0 {q8}");
    assert_eq!(f16 - q4, rows(128) - rows(36), "F16 {f16} / Q4_0 {q4}");

    let c = new_context_with(m, 256, 1, 2, &with_types(Q8_0, Q4_1));
    decode_prompt(c, &prompt, 0, 0);
    // SAFETY: live context; buffers of the sizes asked.
    let state = unsafe {
        let mut buf = vec![0u8; llama_state_get_size(c)];
        assert_eq!(llama_state_get_data(c, buf.as_mut_ptr(), buf.len()), buf.len());
        buf
    };
    decode_prompt(c, &[7], 40, 0);
    let want = logits_row(c, 0, 480);
    let other = new_context_with(m, 256, 1, 2, &with_types(Q8_0, Q4_1));
    // SAFETY: live contexts; the state buffer from above.
    unsafe {
        assert_eq!(llama_state_set_data(other, state.as_ptr(), state.len()), state.len());
    }
    decode_prompt(other, &[7], 40, 0);
    assert_eq!(logits_row(other, 0, 480), want, "restored Q8_0/Q4_1 cache");
    let f16_ctx = new_context_with(m, 256, 1, 2, &with_types(F16, F16));
    decode_prompt(f16_ctx, &prompt[..5], 0, 0);
    // SAFETY: as above.
    let (read, logs) = common::log::logged(|| unsafe { llama_state_set_data(f16_ctx, state.as_ptr(), state.len()) });
    assert_eq!(read, 0);
    assert!(logs.contains("K cache type: 8 != 1"), "{logs}");
    assert_eq!(llama_memory_seq_pos_max(llama_get_memory(f16_ctx), 0), 4, "a refused state changed the cache");
    // SAFETY: freed once each.
    unsafe {
        llama_free(c);
        llama_free(other);
        llama_free(f16_ctx);
        llama_model_free(m);
    }
}

/// Shifting a sequence of a quantized, rotated cache (dequantize, rotate back, rope, rotate,
/// quantize: upstream's `build_rope_shift`) gives the logits of the same tokens decoded at the
/// shifted positions, within what one more quantization of the keys changes. (A shift that
/// roped the keys in their rotated basis, or left them rotated twice, breaks them: far below.)
#[test]
fn quantized_keys_shift() {
    let m = load_model(&data("tiny/tiny-qwen2-f32.gguf"));
    let prompt: Vec<i32> = (0..30).map(|i| (i * 53 + 5) % 400).collect();
    // floors: F16 and Q8_0 measured 0.9999999 / 0.99996, Q5_1 0.9978 (its 5-bit keys quantized
    // twice; on this random model a Q5_1 cache alone moves rows to cosine 0.05 of F16's)
    for (k, floor) in [(F16, 0.99999), (Q8_0, 0.9995), (Q5_1, 0.995)] {
        let shifted = new_context_with(m, 256, 1, 2, &with_types(k, F16));
        decode_prompt(shifted, &prompt, 0, 0);
        let mem = llama_get_memory(shifted);
        llama_memory_seq_add(mem, 0, 0, -1, 10);
        assert_eq!(llama_memory_seq_pos_max(mem, 0), 39);
        decode_prompt(shifted, &[9], 40, 0);
        let fresh = new_context_with(m, 256, 1, 2, &with_types(k, F16));
        decode_prompt(fresh, &prompt, 10, 0);
        decode_prompt(fresh, &[9], 40, 0);
        let cos = cosine(&logits_row(shifted, 0, 480), &logits_row(fresh, 0, 480));
        eprintln!("type {k}: shifted vs fresh cosine {cos:.7}");
        assert!(cos > floor, "type {k}: shifted vs fresh cosine {cos} < {floor}");
        // SAFETY: freed once each.
        unsafe {
            llama_free(shifted);
            llama_free(fresh);
        }
    }
    // SAFETY: freed once.
    unsafe { llama_model_free(m) };
}

/// `ds_context_stats` counts the cache's real bytes: 2 layers × 256 cells × K and V rows of 128
/// values in each type.
#[test]
fn stats_count_each_types_bytes() {
    use deepseek::api::stats::ds_context_stats;
    let m = load_model(&data("tiny/tiny-qwen2-f32.gguf"));
    // bytes per 32 values
    for (k, v, k32, v32) in [(F32, F32, 128, 128), (F16, F16, 64, 64), (BF16, Q8_0, 64, 34), (Q4_0, Q4_1, 18, 20), (Q5_0, IQ4_NL, 22, 18), (Q5_1, Q5_1, 24, 24)] {
        let c = new_context_with(m, 256, 1, 2, &with_types(k, v));
        let mut s = Default::default();
        assert_eq!(ds_context_stats(c, &mut s), 0);
        let want = 2 * (256 * 128 / 32 * (k32 + v32));
        assert_eq!(s.kv_bytes, want, "type_k {k} type_v {v}");
        // SAFETY: freed once.
        unsafe { llama_free(c) };
    }
    // SAFETY: freed once.
    unsafe { llama_model_free(m) };
}

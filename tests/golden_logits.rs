//! Golden logits: every tiny model of tests/data/tiny runs llama.cpp's scenarios A–D through the
//! C API and must reproduce llama.cpp b11312's logits within DESIGN.md §5's tolerances.

mod common;

use common::json::Json;
use common::*;
use deepseek::api::context::{llama_decode, llama_free, llama_get_memory};
use deepseek::api::memory::*;
use deepseek::api::model::{llama_model_free, llama_model_get_vocab};
use deepseek::api::vocab::llama_vocab_n_tokens;

/// Runs scenarios A–D and returns the produced rows in the reference's order.
fn run_scenarios(model_path: &std::path::Path, g: &Json) -> Vec<Vec<f32>> {
    run_scenarios_on(load_model(model_path), g)
}

/// As `run_scenarios` on a loaded model, which it frees.
fn run_scenarios_on(m: *mut deepseek::api::handles::llama_model, g: &Json) -> Vec<Vec<f32>> {
    let n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m)) as usize;
    assert_eq!(n_vocab, g.get("n_vocab").num() as usize);
    let c = new_context(m, 256, 4, 2);
    let mem = llama_get_memory(c);
    let mut rows = Vec::new();
    let mut b = Batch::new(64, 4);

    // A: 40 tokens of sequence 0 in one batch, logits everywhere.
    for (i, &t) in g.get("A_tokens").i32s().iter().enumerate() {
        b.add(t, i as i32, 0, true);
    }
    // SAFETY: b is a valid batch from llama_batch_init.
    assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
    for i in 0..40 {
        rows.push(logits_row(c, i, n_vocab));
    }
    // B: the reference's greedy continuation, one token at a time.
    for (s, &t) in g.get("B_tokens").i32s().iter().enumerate() {
        b.clear();
        b.add(t, 40 + s as i32, 0, true);
        // SAFETY: as above.
        assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
        rows.push(logits_row(c, 0, n_vocab));
    }
    // C: three interleaved sequences, logits at the last token of each.
    llama_memory_clear(mem, true);
    let seqs: Vec<Vec<i32>> = (0..3).map(|s| g.get(&format!("C_seq{s}_tokens")).i32s()).collect();
    b.clear();
    let mut last = [0i32; 3];
    for i in 0..20 {
        for s in 0..3 {
            if i < seqs[s].len() {
                last[s] = b.0.n_tokens;
                b.add(seqs[s][i], i as i32, s as i32, i == seqs[s].len() - 1);
            }
        }
    }
    // SAFETY: as above.
    assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
    for s in 0..3 {
        rows.push(logits_row(c, last[s], n_vocab));
    }
    // D: copy seq 0 to 3, cut seq 1 at pos 3, then one token each for seqs 1 and 3.
    llama_memory_seq_cp(mem, 0, 3, -1, -1);
    assert!(llama_memory_seq_rm(mem, 1, 3, -1));
    assert_eq!(llama_memory_seq_pos_max(mem, 1), 2);
    assert_eq!(llama_memory_seq_pos_max(mem, 3), 11);
    let d = g.get("D_tokens");
    b.clear();
    b.add(d.get("seq1_pos3").num() as i32, 3, 1, true);
    b.add(d.get("seq3_pos12").num() as i32, 12, 3, true);
    // SAFETY: as above.
    assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
    rows.push(logits_row(c, 0, n_vocab));
    rows.push(logits_row(c, 1, n_vocab));
    drop(b);
    // SAFETY: handles from this test, freed once.
    unsafe {
        llama_free(c);
        llama_model_free(m);
    }
    rows
}

/// The dense models' tolerances (DESIGN.md §5).
fn check(model: &str) {
    let float = model.ends_with("f32") || model.ends_with("f16") || model.ends_with("bf16");
    let tol = if float { Tolerance::Float } else { Tolerance::Quantized };
    check_files(model, &data(&format!("tiny/{model}.gguf")), &data(&format!("golden/{model}.json")), &data(&format!("golden/{model}.f32")), tol);
}

/// deepseek2: F32 strictly; quantized loosely, since a rounding difference can flip an expert.
fn check_deepseek2(model: &str) {
    let tol = if model.ends_with("f32") { Tolerance::Float } else { Tolerance::QuantizedMoe };
    let dir = data("deepseek2");
    check_files(model, &dir.join(format!("{model}.gguf")), &dir.join(format!("golden/{model}.json")), &dir.join(format!("golden/{model}.f32")), tol);
}

/// The DeepSeek family beyond deepseek2 (tests/data/deepseek-family, copied from the shared
/// fixtures): MoE, so tolerances as deepseek2's.
fn check_family(model: &str) {
    let tol = if model.ends_with("f32") { Tolerance::Float } else { Tolerance::QuantizedMoe };
    let dir = data("deepseek-family");
    check_files(model, &dir.join(format!("{model}.gguf")), &dir.join(format!("golden/{model}.json")), &dir.join(format!("golden/{model}.f32")), tol);
}

#[derive(Clone, Copy, PartialEq)]
enum Tolerance {
    /// Every row's cosine ≥ 0.9999; same argmax where the reference's top-2 gap > 0.5% of the range.
    Float,
    /// Every row ≥ 0.998, median ≥ 0.9995; same argmax where the gap > 2% of the range.
    Quantized,
    /// Median cosine ≥ 0.995 and the same argmax on ≥ 80% of rows.
    QuantizedMoe,
}

fn check_files(model: &str, gguf: &std::path::Path, json: &std::path::Path, f32s: &std::path::Path, tol: Tolerance) {
    let g = Json::parse(&std::fs::read_to_string(json).unwrap());
    let n_vocab = g.get("n_vocab").num() as usize;
    let reference = read_f32s(f32s);
    let rows = run_scenarios(gguf, &g);
    assert_eq!(rows.len() * n_vocab, reference.len());
    let (min_cos, gap) = match tol {
        Tolerance::Float => (0.9999, 0.005),
        Tolerance::Quantized => (0.998, 0.02),
        Tolerance::QuantizedMoe => (-1.0, f64::INFINITY),
    };
    let mut cosines = Vec::new();
    let mut failures = Vec::new();
    let mut argmax_equal = 0;
    for (r, ours) in rows.iter().enumerate() {
        let want = &reference[r * n_vocab..(r + 1) * n_vocab];
        let cos = cosine(ours, want);
        cosines.push(cos);
        argmax_equal += (argmax(ours) == argmax(want)) as usize;
        if cos < min_cos {
            failures.push(format!("row {r}: cosine {cos:.6} < {min_cos}"));
        }
        if top2_gap_fraction(want) > gap && argmax(ours) != argmax(want) {
            failures.push(format!("row {r}: argmax {} != reference {}", argmax(ours), argmax(want)));
        }
    }
    cosines.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let median = cosines[cosines.len() / 2];
    match tol {
        Tolerance::Float => {}
        Tolerance::Quantized if median < 0.9995 => failures.push(format!("median cosine {median:.6} < 0.9995")),
        Tolerance::Quantized => {}
        Tolerance::QuantizedMoe => {
            if median < 0.995 {
                failures.push(format!("median cosine {median:.6} < 0.995"));
            }
            if argmax_equal * 5 < rows.len() * 4 {
                failures.push(format!("argmax equal on {argmax_equal}/{} rows (< 80%)", rows.len()));
            }
        }
    }
    eprintln!("{model}: min cosine {:.6}, median {median:.6}, argmax equal {argmax_equal}/{}", cosines[0], rows.len());
    assert!(failures.is_empty(), "{model}:\n{}", failures.join("\n"));
}

macro_rules! golden {
    ($($name:ident => $file:expr),* $(,)?) => { $(#[test] fn $name() { check($file); })* };
}

golden! {
    qwen2_f32 => "tiny-qwen2-f32",
    qwen2_f16 => "tiny-qwen2-f16",
    qwen2_bf16 => "tiny-qwen2-bf16",
    qwen2_q8_0 => "tiny-qwen2-q8_0",
    qwen2_q4_0 => "tiny-qwen2-q4_0",
    qwen2_q4_1 => "tiny-qwen2-q4_1",
    qwen2_q5_0 => "tiny-qwen2-q5_0",
    qwen2_q5_1 => "tiny-qwen2-q5_1",
    qwen2_q2_k => "tiny-qwen2-q2_k",
    qwen2_q3_k_m => "tiny-qwen2-q3_k_m",
    qwen2_q4_k_m => "tiny-qwen2-q4_k_m",
    qwen2_q5_k_m => "tiny-qwen2-q5_k_m",
    qwen2_q6_k => "tiny-qwen2-q6_k",
    llama_f32 => "tiny-llama-f32",
    llama_f16 => "tiny-llama-f16",
    llama_q8_0 => "tiny-llama-q8_0",
    llama_q4_0 => "tiny-llama-q4_0",
    llama_q4_k_m => "tiny-llama-q4_k_m",
    llama_q6_k => "tiny-llama-q6_k",
}

macro_rules! golden_deepseek2 {
    ($($name:ident => $file:expr),* $(,)?) => { $(#[test] fn $name() { check_deepseek2($file); })* };
}

golden_deepseek2! {
    deepseek2_lite_f32 => "tiny-deepseek2-lite-f32",
    deepseek2_lite_q8_0 => "tiny-deepseek2-lite-q8_0",
    deepseek2_lite_q4_k_m => "tiny-deepseek2-lite-q4_k_m",
    deepseek3_f32 => "tiny-deepseek3-f32",
    deepseek3_q8_0 => "tiny-deepseek3-q8_0",
    deepseek3_q4_k_m => "tiny-deepseek3-q4_k_m",
}

macro_rules! golden_family {
    ($($name:ident => $file:expr),* $(,)?) => { $(#[test] fn $name() { check_family($file); })* };
}

// DeepSeek-MoE 16B / V1 (`deepseek`): multi-head attention + the shared MoE block.
golden_family! {
    deepseek_moe_f32 => "tiny-deepseek-moe-f32",
    deepseek_moe_q8_0 => "tiny-deepseek-moe-q8_0",
    deepseek_moe_q4_k_m => "tiny-deepseek-moe-q4_k_m",
}

// deepseek2 in the legacy layout (one attn_kv_b per block, converted before absorption): split
// into attn_k_b / attn_v_b at load and run as MLA, against upstream's non-absorbed logits.
golden_family! {
    deepseek2_legacy_f32 => "tiny-deepseek2-legacy-f32",
    deepseek2_legacy_q8_0 => "tiny-deepseek2-legacy-q8_0",
    deepseek2_legacy_q4_k_m => "tiny-deepseek2-legacy-q4_k_m",
}

/// Split models (tests/data/splits, cut by upstream's llama-gguf-split): loaded from the first
/// shard, which brings the others, against upstream's logits for the same call.
fn check_split(model: &str, count: usize, tol: Tolerance) {
    let dir = data("splits");
    let first = dir.join(format!("{model}-00001-of-{count:05}.gguf"));
    check_files(model, &first, &dir.join(format!("golden/{model}.json")), &dir.join(format!("golden/{model}.f32")), tol);
}

#[test]
fn split_qwen2_q8_0() {
    check_split("tiny-qwen2-q8_0", 3, Tolerance::Quantized);
}

/// The first shard holds metadata only (`--no-tensor-first-split`).
#[test]
fn split_qwen2_q2_k_metadata_only_first_shard() {
    check_split("tiny-qwen2-q2_k-meta1", 3, Tolerance::Quantized);
}

#[test]
fn split_deepseek3_q4_k_m() {
    check_split("tiny-deepseek3-q4_k_m", 4, Tolerance::QuantizedMoe);
}

/// A split model gives the unsplit file's logits bit for bit (upstream's do too), loaded from the first shard or
/// from the explicit list (`llama_model_load_from_splits`); the list must have every shard.
#[test]
fn split_equals_unsplit() {
    use deepseek::api::model::{llama_model_default_params, llama_model_load_from_splits};
    let g = Json::parse(&std::fs::read_to_string(data("splits/golden/tiny-qwen2-q8_0.json")).unwrap());
    let unsplit = run_scenarios(&data("tiny/tiny-qwen2-q8_0.gguf"), &g);
    let first = run_scenarios(&data("splits/tiny-qwen2-q8_0-00001-of-00003.gguf"), &g);
    let names: Vec<std::ffi::CString> = (1..=3)
        .map(|i| std::ffi::CString::new(data(&format!("splits/tiny-qwen2-q8_0-{i:05}-of-00003.gguf")).to_str().unwrap()).unwrap())
        .collect();
    let mut ptrs: Vec<*const std::ffi::c_char> = names.iter().map(|c| c.as_ptr()).collect();
    // SAFETY: three NUL-terminated paths.
    let m = unsafe { llama_model_load_from_splits(ptrs.as_mut_ptr(), 3, llama_model_default_params()) };
    assert!(!m.is_null());
    let listed = run_scenarios_on(m, &g);
    assert!(unsplit == first && first == listed, "split and unsplit logits differ");
    // SAFETY: two of the three paths: refused (tests/splits.rs checks the reasons).
    assert!(unsafe { llama_model_load_from_splits(ptrs.as_mut_ptr(), 2, llama_model_default_params()) }.is_null());
}

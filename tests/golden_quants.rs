//! Golden logits of the IQ, ternary, FP4 and 1/2-bit types: the tiny qwen2 models of
//! `tests/data/quants` (copied from the shared fixtures' `quants/`: every weight in one type,
//! `tiny-qwen2-pure-TYPE`, and llama-quantize's own recipes, which mix them with K-quants) run
//! llama.cpp's scenarios A–D through the C API and must reproduce llama.cpp b11312's logits
//! within the quantized tolerances of tests/data/README.md (Tolerances). The goldens were made on
//! an AVX2-only machine with one thread (tests/data/README.md: generators, machines, regeneration).

mod common;

use common::golden::{check_files, check_moe_files, Tolerance};
use common::*;

fn check(model: &str) {
    let dir = data("quants");
    check_files(model, &dir.join(format!("{model}.gguf")), &dir.join(format!("golden/{model}.json")), &dir.join(format!("golden/{model}.f32")), Tolerance::Quantized);
}

/// The DeepSeek-V3-shaped model (deepseek2: MLA + MoE) in the community recipes: the quantized
/// tolerance, a row excused only by a near-tie of llama.cpp's own router (its trace beside the
/// golden).
fn check_moe(model: &str) {
    let dir = data("quants");
    let g = |ext: &str| dir.join(format!("golden/{model}.{ext}"));
    check_moe_files(model, &dir.join(format!("{model}.gguf")), &g("json"), &g("f32"), &g("router"));
}

#[test]
fn deepseek3_ud_iq1_s() {
    check_moe("tiny-deepseek3-ud-iq1_s");
}

#[test]
fn deepseek3_iq2_xxs() {
    check_moe("tiny-deepseek3-iq2_xxs");
}

#[test]
fn deepseek3_iq3_xxs() {
    check_moe("tiny-deepseek3-iq3_xxs");
}

#[test]
fn deepseek3_iq4_xs() {
    check_moe("tiny-deepseek3-iq4_xs");
}

#[test]
fn deepseek3_mxfp4_moe() {
    check_moe("tiny-deepseek3-mxfp4_moe");
}

macro_rules! golden {
    ($($name:ident => $file:expr),* $(,)?) => { $(#[test] fn $name() { check($file); })* };
}

// every 2-D weight in the type (token_embd Q2_K for iq1_s, iq2_xxs, iq2_xs; see the README)
golden! {
    pure_iq1_s => "tiny-qwen2-pure-iq1_s",
    pure_iq1_m => "tiny-qwen2-pure-iq1_m",
    pure_iq2_xxs => "tiny-qwen2-pure-iq2_xxs",
    pure_iq2_xs => "tiny-qwen2-pure-iq2_xs",
    pure_iq2_s => "tiny-qwen2-pure-iq2_s",
    pure_iq3_xxs => "tiny-qwen2-pure-iq3_xxs",
    pure_iq3_s => "tiny-qwen2-pure-iq3_s",
    pure_iq4_nl => "tiny-qwen2-pure-iq4_nl",
    pure_iq4_xs => "tiny-qwen2-pure-iq4_xs",
    pure_tq1_0 => "tiny-qwen2-pure-tq1_0",
    pure_tq2_0 => "tiny-qwen2-pure-tq2_0",
    pure_mxfp4 => "tiny-qwen2-pure-mxfp4",
    pure_nvfp4 => "tiny-qwen2-pure-nvfp4",
    pure_q1_0 => "tiny-qwen2-pure-q1_0",
    pure_q2_0 => "tiny-qwen2-pure-q2_0",
}

// llama-quantize's recipes: the types mixed with K-quants (and each other)
golden! {
    recipe_iq1_s => "tiny-qwen2-iq1_s",
    recipe_iq1_m => "tiny-qwen2-iq1_m",
    recipe_iq2_xxs => "tiny-qwen2-iq2_xxs",
    recipe_iq2_xs => "tiny-qwen2-iq2_xs",
    recipe_iq2_s => "tiny-qwen2-iq2_s",
    recipe_iq2_m => "tiny-qwen2-iq2_m",
    recipe_iq3_xxs => "tiny-qwen2-iq3_xxs",
    recipe_iq3_xs => "tiny-qwen2-iq3_xs",
    recipe_iq3_m => "tiny-qwen2-iq3_m",
    recipe_q2_0 => "tiny-qwen2-q2_0",
    recipe_q2_k_s => "tiny-qwen2-q2_k_s",
}

/// TQ1_0 and TQ2_0 hold the same ternary values in two packings: upstream's logits are
/// bitwise identical, so ours must be too (at every kernel level).
#[test]
fn tq1_0_equals_tq2_0() {
    let dir = data("quants");
    let g = common::json::Json::parse(&std::fs::read_to_string(dir.join("golden/tiny-qwen2-pure-tq1_0.json")).unwrap());
    let a = common::golden::run_scenarios(&dir.join("tiny-qwen2-pure-tq1_0.gguf"), &g);
    let b = common::golden::run_scenarios(&dir.join("tiny-qwen2-pure-tq2_0.gguf"), &g);
    assert!(a == b, "tq1_0 and tq2_0 logits differ");
}

//! Real models, teacher-forced on llama.cpp's greedy continuations (tests/data/generate): over
//! the reference's top-5 logits at every step, mean |Δ| ≤ 0.25 and p95 ≤ 0.6, and the same
//! top-1 wherever the reference's top-1/top-2 margin is ≥ 1.0. The models come from
//! scripts/fetch-models.sh (the test command runs it first).

mod common;

use common::json::Json;
use common::*;
use deepseek::api::batch::llama_batch_get_one;
use deepseek::api::context::{llama_decode, llama_free};
use deepseek::api::model::{llama_model_free, llama_model_get_vocab};
use deepseek::api::vocab::{llama_tokenize, llama_vocab_n_tokens};

fn check(name: &str) {
    let path = models_dir().join(format!("{name}.gguf"));
    assert!(path.exists(), "{} is missing: run scripts/fetch-models.sh", path.display());
    let m = load_model(&path);
    let n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m)) as usize;
    let text = std::fs::read_to_string(data(&format!("generate/{name}.jsonl"))).unwrap();
    let (mut deltas, mut top1_misses, mut steps_total) = (Vec::new(), Vec::new(), 0);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let g = Json::parse(line);
        let mut prompt = g.get("prompt_tokens").i32s();
        // The prompt text tokenizes (add_special, parse_special) to the reference's ids.
        let text = g.get("prompt").str();
        let mut ids = vec![0i32; text.len() + 8];
        // SAFETY: text and ids are valid for the lengths passed.
        let n = unsafe { llama_tokenize(llama_model_get_vocab(m), text.as_ptr() as *const _, text.len() as i32, ids.as_mut_ptr(), ids.len() as i32, true, true) };
        assert!(n >= 0, "llama_tokenize failed: {n}");
        assert_eq!(&ids[..n as usize], &prompt[..], "{name}: tokenization of {text:?}");
        let c = new_context(m, 512, 1, 2);
        // SAFETY: prompt outlives the decode call.
        assert_eq!(unsafe { llama_decode(c, llama_batch_get_one(prompt.as_mut_ptr(), prompt.len() as i32)) }, 0);
        for (s, step) in g.get("steps").arr().iter().enumerate() {
            let ours = logits_row(c, -1, n_vocab);
            let top5: Vec<(usize, f32)> = step.get("top5").arr().iter().map(|p| (p.arr()[0].num() as usize, p.arr()[1].num() as f32)).collect();
            for &(id, logit) in &top5 {
                deltas.push((ours[id] - logit).abs() as f64);
            }
            if top5[0].1 - top5[1].1 >= 1.0 && argmax(&ours) != top5[0].0 {
                top1_misses.push(format!("{:?} step {s}: ours {} ref {}", g.get("prompt").str(), argmax(&ours), top5[0].0));
            }
            steps_total += 1;
            let mut t = step.get("token").num() as i32;
            // SAFETY: t outlives the decode call.
            assert_eq!(unsafe { llama_decode(c, llama_batch_get_one(&mut t, 1)) }, 0);
        }
        // SAFETY: context from this test, freed once.
        unsafe { llama_free(c) };
    }
    // SAFETY: model from this test, freed once.
    unsafe { llama_model_free(m) };
    deltas.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mean = deltas.iter().sum::<f64>() / deltas.len() as f64;
    let p95 = deltas[deltas.len() * 95 / 100];
    eprintln!("{name}: {steps_total} steps, mean |Δ| {mean:.4}, p95 {p95:.4}, top-1 misses at clear margins: {}", top1_misses.len());
    assert!(mean <= 0.25, "{name}: mean |Δ| {mean} > 0.25");
    assert!(p95 <= 0.6, "{name}: p95 |Δ| {p95} > 0.6");
    assert!(top1_misses.is_empty(), "{name}: {}", top1_misses.join("\n"));
}

#[test]
fn smollm2_135m_q4_1() {
    check("smollm2-135m-instruct-q4_1");
}

#[test]
fn qwen25_coder_05b_q4_k_m() {
    check("qwen2.5-coder-0.5b-instruct-q4_k_m");
}

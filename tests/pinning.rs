//! ds_context_pin_threads: each worker thread ends up allowed exactly the CPU it was given
//! (read back from /proc), unpinning gives them the caller's whole set again, decoding gives
//! the same logits pinned and unpinned, and a NULL context is an error. Own binary: it reads
//! the affinity of every thread of the process.

mod common;

use common::*;
use deepseek::api::batch::llama_batch_get_one;
use deepseek::api::context::{ds_context_pin_threads, llama_decode, llama_free, llama_get_memory};
use deepseek::api::memory::llama_memory_clear;
use deepseek::api::model::{llama_model_free, llama_model_get_vocab};
use deepseek::api::vocab::llama_vocab_n_tokens;

/// `Cpus_allowed_list` of every thread named like the pool's workers ("ds-worker-N"), as
/// sorted CPU lists.
fn worker_affinities() -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else { continue };
        if !comm.starts_with("ds-worker-") {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap();
        let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string();
        out.push(parse_cpu_list(&list));
    }
    out.sort();
    out
}

/// "0-2,5" → [0, 1, 2, 5]
fn parse_cpu_list(list: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

fn decode_logits(c: *mut deepseek::api::handles::llama_context, n_vocab: usize) -> Vec<f32> {
    let mut prompt: Vec<i32> = (0..24).map(|i| 5 + (i * 37) % 400).collect();
    // SAFETY: live context; the batch points into `prompt`, alive for the call.
    unsafe {
        llama_memory_clear(llama_get_memory(c), true);
        assert_eq!(llama_decode(c, llama_batch_get_one(prompt.as_mut_ptr(), prompt.len() as i32)), 0);
    }
    logits_row(c, -1, n_vocab)
}

#[test]
fn workers_get_one_cpu_each_and_results_do_not_change() {
    let caller = parse_cpu_list(
        std::fs::read_to_string("/proc/thread-self/status").unwrap().lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim(),
    );
    let m = load_model(&data("tiny/tiny-qwen2-q8_0.gguf"));
    let n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m)) as usize;
    let threads = 3;
    let c = new_context(m, 64, 1, threads);
    let before = decode_logits(c, n_vocab);

    // (pinning runs a job on every worker itself, so by now each has started and named itself)
    assert_eq!(ds_context_pin_threads(c, true), 0);
    let mut want: Vec<Vec<usize>> = (1..threads as usize).map(|i| vec![caller[i % caller.len()]]).collect();
    want.sort();
    assert_eq!(worker_affinities(), want, "caller may run on {caller:?}");
    assert_eq!(decode_logits(c, n_vocab), before, "pinned decode differs");

    assert_eq!(ds_context_pin_threads(c, false), 0);
    assert_eq!(worker_affinities(), vec![caller.clone(); threads as usize - 1]);
    assert_eq!(decode_logits(c, n_vocab), before, "unpinned decode differs");

    assert_eq!(ds_context_pin_threads(std::ptr::null_mut(), true), -1);
    // SAFETY: live handles, freed once.
    unsafe {
        llama_free(c);
        llama_model_free(m);
    }
    assert!(worker_affinities().is_empty(), "llama_free left worker threads behind");
}

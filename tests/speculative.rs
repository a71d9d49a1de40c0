//! Speculative decoding as llama-speculative and `llama-server -md` drive it, through the C API:
//! a draft context proposes tokens, the target verifies them in one batch (logits for every
//! position), rejected drafts are cut from both caches with `llama_memory_seq_rm`, and the
//! output must be the target's own greedy generation. The draft deliberately proposes a wrong
//! token now and then (its second choice on a fixed pattern of positions), so rejection — and
//! the cut of cells already written to the target's cache — happens many times, as with a real
//! draft model of another size (upstream's `llama-speculative` on the 1.5B target with the 0.5B
//! draft is the benchmark in `scripts/check-upstream-suites.sh`).
//!
//! Checked two ways: token for token against plain greedy decoding (one token per decode), and
//! teacher-forced: every emitted token is the target's argmax for its prefix decoded one token at
//! a time, or within 2% of the row's range of it (verification decodes several tokens at once,
//! which changes the matrix products' summation order, as in `c_tests/engine_stress.c`).

mod common;

use common::*;
use deepseek::api::context::{llama_decode, llama_free, llama_get_memory};
use deepseek::api::memory::llama_memory_seq_rm;
use deepseek::api::model::{llama_model_free, llama_model_get_vocab};
use deepseek::api::vocab::{llama_tokenize, llama_vocab_n_tokens};

const N_GEN: usize = 40;
const N_DRAFT: usize = 5;

fn tokenize(m: *mut deepseek::api::handles::llama_model, text: &str) -> Vec<i32> {
    let vocab = llama_model_get_vocab(m);
    let mut toks = vec![0i32; 256];
    // SAFETY: text and toks outlive the call; toks holds 256 entries.
    let n = unsafe { llama_tokenize(vocab, text.as_ptr().cast(), text.len() as i32, toks.as_mut_ptr(), 256, true, true) };
    assert!(n > 0, "tokenize failed: {n}");
    toks.truncate(n as usize);
    toks
}

fn decode(c: *mut deepseek::api::handles::llama_context, b: &Batch) {
    // SAFETY: the batch's arrays hold n_tokens entries.
    assert_eq!(unsafe { llama_decode(c, b.0) }, 0, "llama_decode failed");
}

/// The index of the second-largest logit.
fn second(v: &[f32]) -> usize {
    let first = argmax(v);
    (0..v.len()).filter(|&i| i != first).fold(usize::MAX, |best, i| if best == usize::MAX || v[i] > v[best] { i } else { best })
}

/// Plain greedy decoding, one token per decode; also returns each step's logits row.
fn greedy(m: *mut deepseek::api::handles::llama_model, prompt: &[i32], forced: Option<&[i32]>, n_vocab: usize) -> (Vec<i32>, Vec<Vec<f32>>) {
    let c = new_context(m, 512, 1, 2);
    let mut b = Batch::new(512, 1);
    for (i, &t) in prompt.iter().enumerate() {
        b.add(t, i as i32, 0, i + 1 == prompt.len());
    }
    decode(c, &b);
    let (mut out, mut rows) = (Vec::new(), Vec::new());
    for i in 0..N_GEN {
        let row = logits_row(c, -1, n_vocab);
        let next = forced.map_or(argmax(&row) as i32, |f| f[i]);
        rows.push(row);
        out.push(next);
        b.clear();
        b.add(next, (prompt.len() + i) as i32, 0, true);
        decode(c, &b);
    }
    // SAFETY: freed once.
    unsafe { llama_free(c) };
    (out, rows)
}

/// Speculative greedy decoding; returns the tokens and (accepted, rejected) draft counts.
fn speculative(m: *mut deepseek::api::handles::llama_model, prompt: &[i32], n_vocab: usize) -> (Vec<i32>, usize, usize) {
    let (tgt, dft) = (new_context(m, 512, 1, 2), new_context(m, 512, 1, 2));
    let mut b = Batch::new(512, 1);
    // both caches take the prompt but its last token, which starts the first draft round
    let (head, mut last) = (&prompt[..prompt.len() - 1], prompt[prompt.len() - 1]);
    for &c in &[tgt, dft] {
        b.clear();
        for (i, &t) in head.iter().enumerate() {
            b.add(t, i as i32, 0, false);
        }
        decode(c, &b);
    }
    let mut n_past = head.len();
    let mut dft_len = head.len();
    let mut all: Vec<i32> = prompt.to_vec();
    let (mut out, mut accepted, mut rejected) = (Vec::new(), 0, 0);
    while out.len() < N_GEN {
        // after a round where every draft was accepted the draft's cache lacks the last one
        if dft_len < n_past {
            b.clear();
            for p in dft_len..n_past {
                b.add(all[p], p as i32, 0, false);
            }
            decode(dft, &b);
        }
        // draft N_DRAFT tokens after `last`; on positions where (pos % 7 == 3) the draft proposes
        // its second choice, a token the target will usually reject
        let mut drafts = Vec::new();
        let mut t = last;
        for j in 0..N_DRAFT {
            b.clear();
            b.add(t, (n_past + j) as i32, 0, true);
            decode(dft, &b);
            let row = logits_row(dft, -1, n_vocab);
            t = if (n_past + j) % 7 == 3 { second(&row) } else { argmax(&row) } as i32;
            drafts.push(t);
        }
        // verify `last` and the drafts in one batch, logits for every position
        b.clear();
        b.add(last, n_past as i32, 0, true);
        for (j, &d) in drafts.iter().enumerate() {
            b.add(d, (n_past + 1 + j) as i32, 0, true);
        }
        decode(tgt, &b);
        let mut a = 0;
        loop {
            let tok = argmax(&logits_row(tgt, a as i32, n_vocab)) as i32;
            out.push(tok);
            all.push(tok);
            last = tok;
            if a < N_DRAFT && drafts[a] == tok && out.len() < N_GEN {
                a += 1;
            } else {
                break;
            }
        }
        accepted += a;
        rejected += (a < N_DRAFT) as usize;
        // keep `last`'s predecessor and the accepted drafts; cut the rest from both caches
        let keep = (n_past + a + 1) as i32;
        for &c in &[tgt, dft] {
            assert!(llama_memory_seq_rm(llama_get_memory(c), 0, keep, -1), "seq_rm from {keep}");
        }
        dft_len = (n_past + N_DRAFT).min(keep as usize);
        n_past += a + 1;
    }
    out.truncate(N_GEN);
    for c in [tgt, dft] {
        // SAFETY: freed once.
        unsafe { llama_free(c) };
    }
    (out, accepted, rejected)
}

#[test]
fn speculative_greedy_equals_plain_greedy_on_the_real_0_5b_model() {
    let m = load_model(&models_dir().join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"));
    let n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m)) as usize;
    let prompt = tokenize(m, "<|im_start|>user\nWrite a Python function that returns the n-th Fibonacci number.<|im_end|>\n<|im_start|>assistant\n");
    let (plain, _) = greedy(m, &prompt, None, n_vocab);
    let (spec, accepted, rejected) = speculative(m, &prompt, n_vocab);
    eprintln!("speculative: {accepted} drafts accepted, {rejected} rounds with a rejection; {} of {N_GEN} tokens equal plain greedy's", plain.iter().zip(&spec).take_while(|(a, b)| a == b).count());
    assert!(accepted >= N_GEN / 2, "too few drafts accepted ({accepted}): the draft is the target itself");
    assert!(rejected >= 3, "too few rejections ({rejected}): the cut of rejected cells was hardly exercised");
    // teacher-forced against one-token-at-a-time decoding of the same tokens
    let (_, rows) = greedy(m, &prompt, Some(&spec), n_vocab);
    for (i, (&t, row)) in spec.iter().zip(&rows).enumerate() {
        let best = argmax(row);
        let range = row.iter().cloned().fold(f32::MIN, f32::max) - row.iter().cloned().fold(f32::MAX, f32::min);
        assert!(t as usize == best || row[best] - row[t as usize] <= 0.02 * range, "token {i}: speculative chose {t}, the target's argmax is {best} ({} vs {}, range {range})", row[t as usize], row[best]);
    }
    // where the two runs agree up to a near-tie, they agree exactly on a model this size
    assert_eq!(spec, plain, "speculative output differs from plain greedy");
    // SAFETY: every context on it is freed.
    unsafe { llama_model_free(m) };
}

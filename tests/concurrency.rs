//! Threads, shared models: 8 threads, each with its own contexts on models shared by all, run
//! randomised scripts (prompts of 1–300 tokens in batches of up to 64, up to 8 sequences per
//! context, multi-sequence single-token steps, seq_rm, seq_cp, context re-creation). Every
//! logit is bit-identical to running the same scripts one after another on one thread, and a
//! watchdog fails the test when any step takes more than 10 s (a deadlock). One variant runs
//! two models with different RoPE settings interleaved on the same threads: a shared RoPE
//! cache would corrupt one of them.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use deepseek::api::context::{llama_decode, llama_free, llama_get_logits_ith, llama_get_memory};
use deepseek::api::handles::{llama_context, llama_model};
use deepseek::api::memory::{llama_memory_seq_cp, llama_memory_seq_rm};
use deepseek::api::model::{llama_model_free, llama_model_get_vocab};
use deepseek::api::vocab::llama_vocab_n_tokens;

const THREADS: usize = 8;
const N_SEQ: usize = 8;
const N_CTX_SEQ: i32 = 512;
const STEP_LIMIT: Duration = Duration::from_secs(10);

/// One operation of a script, on lane `lane` (a context on model `lane`).
#[derive(Clone, Debug)]
enum Op {
    /// A prompt on one sequence, decoded in chunks of `chunk` tokens starting at `pos`.
    Prompt { lane: usize, seq: i32, pos: i32, tokens: Vec<i32>, chunk: usize },
    /// One token for each of several sequences in a single batch: (seq, pos, token).
    Step { lane: usize, tokens: Vec<(i32, i32, i32)> },
    Rm { lane: usize, seq: i32, p0: i32, p1: i32 },
    Cp { lane: usize, src: i32, dst: i32 },
    Recreate { lane: usize },
}

/// xorshift64*: a seeded generator, so the scripts are the same in both runs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A script of `n_ops` operations over `lanes` contexts, tracking each sequence's next position
/// so every batch is valid.
/// `cut[lane]`: whether the lane's model can remove the tail of a sequence (deepseek4's cache
/// removes whole sequences only: there the script removes from position 0).
fn script(seed: u64, n_ops: usize, max_prompt: usize, lanes: usize, n_vocab: &[usize], cut: &[bool]) -> Vec<Op> {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut next_pos = vec![[0i32; N_SEQ]; lanes];
    let mut ops = Vec::new();
    while ops.len() < n_ops {
        let lane = rng.below(lanes);
        let np = &mut next_pos[lane];
        match rng.below(10) {
            0..=2 => {
                let seq = rng.below(N_SEQ);
                let len = 1 + rng.below(max_prompt);
                if np[seq] + len as i32 > N_CTX_SEQ {
                    ops.push(Op::Rm { lane, seq: seq as i32, p0: -1, p1: -1 });
                    np[seq] = 0;
                }
                let tokens = (0..len).map(|_| rng.below(n_vocab[lane]) as i32).collect();
                ops.push(Op::Prompt { lane, seq: seq as i32, pos: np[seq], tokens, chunk: 1 + rng.below(64) });
                np[seq] += len as i32;
            }
            3..=6 => {
                let k = 1 + rng.below(N_SEQ);
                let mut seqs: Vec<usize> = (0..N_SEQ).filter(|&s| np[s] < N_CTX_SEQ).collect();
                while seqs.len() > k {
                    seqs.remove(rng.below(seqs.len()));
                }
                if seqs.is_empty() {
                    continue;
                }
                let tokens = seqs.iter().map(|&s| (s as i32, np[s], rng.below(n_vocab[lane]) as i32)).collect();
                seqs.iter().for_each(|&s| np[s] += 1);
                ops.push(Op::Step { lane, tokens });
            }
            7 => {
                let seq = rng.below(N_SEQ);
                let p0 = if cut[lane] { rng.below(np[seq] as usize + 1) as i32 } else { 0 };
                ops.push(Op::Rm { lane, seq: seq as i32, p0, p1: -1 });
                np[seq] = p0;
            }
            8 => {
                let (src, dst) = (rng.below(N_SEQ), rng.below(N_SEQ));
                if src == dst {
                    continue;
                }
                ops.push(Op::Rm { lane, seq: dst as i32, p0: -1, p1: -1 });
                ops.push(Op::Cp { lane, src: src as i32, dst: dst as i32 });
                np[dst] = np[src];
            }
            _ => {
                ops.push(Op::Recreate { lane });
                *np = [0; N_SEQ];
            }
        }
    }
    ops
}

fn context(m: *mut llama_model, n_threads: i32) -> *mut llama_context {
    let c = new_context(m, N_CTX_SEQ as u32 * N_SEQ as u32, N_SEQ as u32, n_threads);
    assert!(!c.is_null());
    c
}

/// FNV-1a over the bits of every output row of the last decode.
fn hash_outputs(c: *mut llama_context, rows: usize, n_vocab: usize, h: &mut u64) {
    for r in 0..rows {
        let p = llama_get_logits_ith(c, r as i32 - rows as i32);
        assert!(!p.is_null());
        // SAFETY: each output row holds n_vocab logits.
        for x in unsafe { std::slice::from_raw_parts(p, n_vocab) } {
            for b in x.to_bits().to_le_bytes() {
                *h = (*h ^ b as u64).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
}

fn decode(c: *mut llama_context, batch: &Batch, what: &Op) {
    // SAFETY: the batch's arrays hold n_tokens entries.
    let rc = unsafe { llama_decode(c, batch.0) };
    assert_eq!(rc, 0, "llama_decode failed for {what:?}");
}

/// Runs a script; one hash per decode call. `progress` holds the start time (ms since
/// `epoch`) of the step in flight, u64::MAX between steps.
fn run(models: &[(*mut llama_model, usize)], ops: &[Op], n_threads: i32, progress: &AtomicU64, epoch: Instant) -> Vec<u64> {
    let mut ctxs: Vec<_> = models.iter().map(|&(m, _)| context(m, n_threads)).collect();
    let mut batch = Batch::new(64, 1);
    let mut hashes = Vec::new();
    for op in ops {
        progress.store(epoch.elapsed().as_millis() as u64, Ordering::SeqCst);
        match op {
            Op::Prompt { lane, seq, pos, tokens, chunk } => {
                for (i, part) in tokens.chunks(*chunk).enumerate() {
                    batch.clear();
                    for (j, &t) in part.iter().enumerate() {
                        batch.add(t, pos + (i * chunk + j) as i32, *seq, j + 1 == part.len());
                    }
                    decode(ctxs[*lane], &batch, op);
                    let mut h = 0xcbf2_9ce4_8422_2325;
                    hash_outputs(ctxs[*lane], 1, models[*lane].1, &mut h);
                    hashes.push(h);
                }
            }
            Op::Step { lane, tokens } => {
                batch.clear();
                for &(s, p, t) in tokens {
                    batch.add(t, p, s, true);
                }
                decode(ctxs[*lane], &batch, op);
                let mut h = 0xcbf2_9ce4_8422_2325;
                hash_outputs(ctxs[*lane], tokens.len(), models[*lane].1, &mut h);
                hashes.push(h);
            }
            Op::Rm { lane, seq, p0, p1 } => {
                assert!(llama_memory_seq_rm(llama_get_memory(ctxs[*lane]), *seq, *p0, *p1));
            }
            Op::Cp { lane, src, dst } => llama_memory_seq_cp(llama_get_memory(ctxs[*lane]), *src, *dst, -1, -1),
            Op::Recreate { lane } => {
                // SAFETY: freed once, replaced at once.
                unsafe { llama_free(ctxs[*lane]) };
                ctxs[*lane] = context(models[*lane].0, n_threads);
            }
        }
        progress.store(u64::MAX, Ordering::SeqCst);
    }
    for c in ctxs {
        // SAFETY: freed once.
        unsafe { llama_free(c) };
    }
    hashes
}

/// Raw model handles shared by the threads (the model is immutable and Sync).
#[derive(Clone, Copy)]
struct Shared(*mut llama_model);
// SAFETY: llama_model is immutable after loading and may be used from any thread.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

fn check(rels: &[&str], n_ops: usize) {
    let paths: Vec<std::path::PathBuf> = rels.iter().map(|r| data(r)).collect();
    check_paths(&paths, n_ops, 300);
}

/// `check` on model files anywhere, with prompts of at most `max_prompt` tokens.
fn check_paths(paths: &[std::path::PathBuf], n_ops: usize, max_prompt: usize) {
    let rels: Vec<String> = paths.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    let models: Vec<(Shared, usize)> = paths
        .iter()
        .map(|r| {
            let m = load_model(r);
            (Shared(m), llama_vocab_n_tokens(llama_model_get_vocab(m)) as usize)
        })
        .collect();
    let vocab: Vec<usize> = models.iter().map(|m| m.1).collect();
    let cut: Vec<bool> = rels.iter().map(|r| !r.contains("deepseek4")).collect();
    let scripts: Vec<Vec<Op>> = (0..THREADS).map(|t| script(t as u64 + 1, n_ops, max_prompt, models.len(), &vocab, &cut)).collect();
    let threads_of = |t: usize| 1 + (t % 2) as i32;
    let epoch = Instant::now();
    let idle = AtomicU64::new(u64::MAX);
    let raw: Vec<(*mut llama_model, usize)> = models.iter().map(|&(m, v)| (m.0, v)).collect();
    let serial: Vec<Vec<u64>> = scripts.iter().enumerate().map(|(t, s)| run(&raw, s, threads_of(t), &idle, epoch)).collect();
    let serial_time = epoch.elapsed();

    let progress: Arc<Vec<AtomicU64>> = Arc::new((0..THREADS).map(|_| AtomicU64::new(u64::MAX)).collect());
    let started = Instant::now();
    let handles: Vec<_> = scripts
        .into_iter()
        .enumerate()
        .map(|(t, ops)| {
            let (models, progress) = (models.clone(), Arc::clone(&progress));
            std::thread::spawn(move || {
                let raw: Vec<(*mut llama_model, usize)> = models.iter().map(|&(m, v)| (m.0, v)).collect();
                run(&raw, &ops, threads_of(t), &progress[t], epoch)
            })
        })
        .collect();
    while !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(50));
        let now = epoch.elapsed().as_millis() as u64;
        for (t, p) in progress.iter().enumerate() {
            let since = p.load(Ordering::SeqCst);
            assert!(since == u64::MAX || now.saturating_sub(since) <= STEP_LIMIT.as_millis() as u64, "{rels:?}: thread {t} has been in one step for over {STEP_LIMIT:?} (deadlock?)");
        }
    }
    for (t, h) in handles.into_iter().enumerate() {
        let hashes = h.join().expect("a script thread panicked");
        assert_eq!(hashes.len(), serial[t].len());
        if let Some(i) = (0..hashes.len()).find(|&i| hashes[i] != serial[t][i]) {
            panic!("{rels:?}: thread {t}, decode {i}: logits differ from the serial run");
        }
    }
    eprintln!("{rels:?}: {THREADS} threads × {n_ops} operations; serial {:.2} s, threaded {:.2} s", serial_time.as_secs_f64(), started.elapsed().as_secs_f64());
    for (m, _) in models {
        // SAFETY: every context on it is freed; freed once.
        unsafe { llama_model_free(m.0) };
    }
}

#[test]
fn eight_threads_on_one_dense_model_match_a_serial_run() {
    check(&["tiny/tiny-qwen2-q4_k_m.gguf"], 60);
}

#[test]
fn eight_threads_on_one_deepseek2_model_match_a_serial_run() {
    check(&["deepseek2/tiny-deepseek3-q8_0.gguf"], 40);
}

#[test]
fn eight_threads_on_one_legacy_deepseek2_model_match_a_serial_run() {
    // the legacy layout run as upstream runs it (per-head K/V decompressed and cached)
    check(&["deepseek-family/tiny-deepseek2-legacy-q8_0.gguf"], 20);
}

#[test]
fn eight_threads_on_one_deepseek32_model_match_a_serial_run() {
    // prompts of up to 300 tokens against an indexer top-k of 8: sparse attention throughout
    check(&["deepseek-family/tiny-deepseek32-q8_0.gguf"], 40);
}

#[test]
fn eight_threads_on_one_deepseek4_model_match_a_serial_run() {
    // prompts of up to 300 tokens: CSA rows chosen by the indexer, HCA blocks, micro-batches of
    // up to 64 tokens splitting compressor blocks
    check(&["deepseek-family/tiny-deepseek4-q8_0.gguf"], 40);
}

#[test]
fn two_models_with_different_rope_interleaved_on_the_same_threads() {
    // qwen2: NEOX RoPE, base 1e6; llama: NORM RoPE, base 1e4; deepseek2-lite: YaRN-scaled.
    check(&["tiny/tiny-qwen2-q8_0.gguf", "tiny/tiny-llama-q8_0.gguf", "deepseek2/tiny-deepseek2-lite-q8_0.gguf"], 60);
}

#[test]
fn eight_threads_on_the_real_0_5b_model_match_a_serial_run() {
    // Qwen2.5-Coder-0.5B: 896-wide rows and a 151,936-token output matrix, so every matmul is
    // split into many chunks over each context's two threads (the tiny models' fit in one or
    // two); briefly: prompts of at most 48 tokens
    check_paths(&[models_dir().join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")], 10, 48);
}

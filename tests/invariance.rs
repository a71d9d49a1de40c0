//! Batch invariance (issue 55, docs/NUMERICS.md): at the default numerics a sequence's logits are
//! a function of its own tokens. A prompt's last-token logits row must be bit for bit the same
//! however the prompt reached the model — one batch; N−1 + 1; chunks of 7; interleaved with
//! another sequence's prompt; its last token beside other sequences' decode steps; after a
//! prefix copied with `llama_memory_seq_cp`; `n_ubatch` 16; 1, 2 and 3 threads over a ≥ 600-token
//! context — and 24 greedy tokens the same alone, after a split prefill and beside five
//! generating sequences (the multi-sequence ways also in one unified KV stream). Every
//! DeepSeek-family fixture of tests/data (with the IQ, K-quant and
//! FP4 mixes), dense fixtures of the types whose upstream order depends on the batch, and the
//! real SmolLM2 / Qwen2.5-Coder-0.5B files (scripts/fetch-models.sh), at this process's kernel
//! level; `every_kernel_level` runs this binary again at each lower level the machine has.

mod common;

use common::*;
use deepseek::api::context::{llama_decode, llama_free, llama_get_memory};
use deepseek::api::handles::{llama_context, llama_model};
use deepseek::api::memory::llama_memory_seq_cp;
use deepseek::api::model::{llama_model_free, llama_model_get_vocab};
use deepseek::api::vocab::{llama_tokenize, llama_vocab_n_tokens};

/// Prompt tokens of the short ways (the 40-token prompt).
const N: usize = 40;
/// Tokens of the long prompt of the thread-count way (over upstream's 512-cell split-KV bound).
const LONG: usize = 640;
/// Greedy tokens compared.
const GREEDY: usize = 24;
/// Other sequences beside the one compared.
const OTHERS: usize = 5;

const TEXT: &str = "The city of Lyon lies where the Rhône meets the Saône. Its old town climbs the hill of Fourvière, and its silk weavers once worked in tall houses whose passages, the traboules, still cross from street to street. Every December the windows fill with candles. ";

struct Model {
    m: *mut llama_model,
    n_vocab: usize,
    /// The text's tokens, repeated to LONG and more.
    tokens: Vec<i32>,
}

impl Model {
    fn load(path: &std::path::Path) -> Model {
        assert!(path.exists(), "{} is missing (real models: run scripts/fetch-models.sh)", path.display());
        let m = load_model(path);
        let vocab = llama_model_get_vocab(m);
        let n_vocab = llama_vocab_n_tokens(vocab) as usize;
        let text = TEXT.repeat(64);
        let mut ids = vec![0i32; text.len() + 8];
        // SAFETY: text and ids are valid for the lengths passed.
        let n = unsafe { llama_tokenize(vocab, text.as_ptr() as *const _, text.len() as i32, ids.as_mut_ptr(), ids.len() as i32, false, false) };
        assert!(n as usize > LONG + 8 * N, "{}: {n} tokens", path.display());
        ids.truncate(n as usize);
        Model { m, n_vocab, tokens: ids }
    }

    /// Prompt `k` (0: the one compared; 1..: the other sequences'): N tokens from its own place.
    fn prompt(&self, k: usize) -> &[i32] {
        let at = if k == 0 { 0 } else { LONG + (k - 1) * (N + 3) };
        &self.tokens[at..at + N]
    }

    fn context(&self, n_ctx: u32, n_seq: u32, threads: i32, n_ubatch: Option<u32>) -> Ctx {
        self.context_kv(n_ctx, n_seq, threads, n_ubatch, false)
    }

    /// With `unified`, one KV stream for every sequence (`kv_unified`, the server's pool).
    fn context_kv(&self, n_ctx: u32, n_seq: u32, threads: i32, n_ubatch: Option<u32>, unified: bool) -> Ctx {
        let c = new_context_with(self.m, n_ctx, n_seq, threads, &|p| {
            if let Some(u) = n_ubatch {
                p.n_ubatch = u;
            }
            p.kv_unified = unified;
        });
        Ctx { c, n_vocab: self.n_vocab, b: Batch::new(n_ctx as i32, n_seq as i32) }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // SAFETY: loaded by Model::load, freed once, after every context made from it.
        unsafe { llama_model_free(self.m) };
    }
}

struct Ctx {
    c: *mut llama_context,
    n_vocab: usize,
    b: Batch,
}

impl Ctx {
    /// Decodes `(token, pos, seq, output)` in one llama_decode call; returns the logits rows
    /// of the entries with an output, in batch order.
    fn decode(&mut self, items: &[(i32, usize, usize, bool)]) -> Vec<Vec<f32>> {
        self.b.clear();
        for &(t, p, s, o) in items {
            self.b.add(t, p as i32, s as i32, o);
        }
        // SAFETY: b is a valid batch from llama_batch_init, large enough.
        assert_eq!(unsafe { llama_decode(self.c, self.b.0) }, 0);
        items.iter().enumerate().filter(|(_, it)| it.3).map(|(i, _)| logits_row(self.c, i as i32, self.n_vocab)).collect()
    }

    /// `tokens` of `seq` from position `from` in batches of `chunk`; the last token's row.
    fn prefill(&mut self, seq: usize, from: usize, tokens: &[i32], chunk: usize) -> Vec<f32> {
        let mut last = Vec::new();
        for (k, part) in tokens.chunks(chunk).enumerate() {
            let at = from + k * chunk;
            let items: Vec<_> = part.iter().enumerate().map(|(i, &t)| (t, at + i, seq, k * chunk + i + 1 == tokens.len())).collect();
            if let Some(r) = self.decode(&items).pop() {
                last = r;
            }
        }
        last
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: made by Model::context, freed once.
        unsafe { llama_free(self.c) };
    }
}

/// Cells of the short ways' contexts: per sequence room for a prompt and its greedy tokens.
const SHORT_CTX: u32 = ((OTHERS + 1) * 128) as u32;

fn one_batch(m: &Model) -> Vec<f32> {
    m.context(SHORT_CTX, OTHERS as u32 + 1, 2, None).prefill(0, 0, m.prompt(0), N)
}

fn max_delta(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The row must be the one-batch row's bits.
fn same(m: &Model, way: &str, row: &[f32]) {
    let base = one_batch(m);
    let differ = base.iter().zip(row).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
    assert_eq!(differ, 0, "{way}: {differ} of {} logits differ from the one-batch prefill's (max |Δ| {})", base.len(), max_delta(&base, row));
}

fn split_last(m: &Model) {
    let mut c = m.context(SHORT_CTX, OTHERS as u32 + 1, 2, None);
    c.prefill(0, 0, &m.prompt(0)[..N - 1], N);
    let row = c.prefill(0, N - 1, &m.prompt(0)[N - 1..], 1);
    same(m, "N−1 + 1", &row);
}

fn chunks_of_7(m: &Model) {
    let row = m.context(SHORT_CTX, OTHERS as u32 + 1, 2, None).prefill(0, 0, m.prompt(0), 7);
    same(m, "chunks of 7", &row);
}

fn interleaved(m: &Model, unified: bool) {
    let mut c = m.context_kv(SHORT_CTX, OTHERS as u32 + 1, 2, None, unified);
    let (p0, p1) = (m.prompt(0), m.prompt(1));
    let items: Vec<_> = (0..N).flat_map(|i| [(p0[i], i, 0, i == N - 1), (p1[i], i, 1, i == N - 1)]).collect();
    let rows = c.decode(&items);
    same(m, "interleaved with another prompt", &rows[0]);
}

fn beside_decode_steps(m: &Model, unified: bool) {
    let mut c = m.context_kv(SHORT_CTX, OTHERS as u32 + 1, 2, None, unified);
    for s in 1..=OTHERS {
        c.prefill(s, 0, m.prompt(s), N);
    }
    c.prefill(0, 0, &m.prompt(0)[..N - 1], N);
    let mut items = vec![(m.prompt(0)[N - 1], N - 1, 0, true)];
    items.extend((1..=OTHERS).map(|s| (m.tokens[s * 11], N, s, true)));
    let rows = c.decode(&items);
    same(m, "last token beside five decode steps", &rows[0]);
}

fn after_seq_cp(m: &Model) {
    let mut c = m.context(SHORT_CTX, OTHERS as u32 + 1, 2, None);
    let p = N * 3 / 5;
    c.prefill(1, 0, &m.prompt(0)[..p], N);
    llama_memory_seq_cp(llama_get_memory(c.c), 1, 0, -1, -1);
    let row = c.prefill(0, p, &m.prompt(0)[p..], N);
    same(m, "after a prefix copied with seq_cp", &row);
}

fn n_ubatch_16(m: &Model) {
    let row = m.context(SHORT_CTX, OTHERS as u32 + 1, 2, Some(16)).prefill(0, 0, m.prompt(0), N);
    same(m, "n_ubatch 16", &row);
}

/// 1, 2 and 3 threads over LONG cells: the last token decoded alone (upstream's split-KV
/// decode) and the whole prompt in one batch give the same row at every thread count.
fn threads_long(m: &Model) {
    let long = &m.tokens[..LONG];
    let base = m.context(768, 1, 2, None).prefill(0, 0, long, LONG);
    for threads in 1..=3 {
        let mut c = m.context(768, 1, threads, None);
        c.prefill(0, 0, &long[..LONG - 1], 128);
        let row = c.prefill(0, LONG - 1, &long[LONG - 1..], 1);
        let differ = base.iter().zip(&row).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differ, 0, "{threads} threads, {LONG} cells: {differ} logits differ from the one-batch row (max |Δ| {})", max_delta(&base, &row));
    }
}

/// GREEDY tokens of sequence 0 after its prompt went in `chunk`-token batches, with `others`
/// sequences generating beside it (their prompts in the same first batches, then one step of
/// every sequence per batch).
fn greedy(m: &Model, chunk: usize, others: usize, unified: bool) -> Vec<i32> {
    let mut c = m.context_kv(SHORT_CTX, OTHERS as u32 + 1, 2, None, unified);
    let mut next = vec![0i32; others + 1];
    if others == 0 {
        next[0] = argmax(&c.prefill(0, 0, m.prompt(0), chunk)) as i32;
    } else {
        let items: Vec<_> = (0..=others).flat_map(|s| m.prompt(s).iter().enumerate().map(move |(i, &t)| (t, i, s, i == N - 1))).collect();
        for (s, row) in c.decode(&items).iter().enumerate() {
            next[s] = argmax(row) as i32;
        }
    }
    let mut out = vec![next[0]];
    for step in 0..GREEDY - 1 {
        let items: Vec<_> = (0..=others).map(|s| (next[s], N + step, s, true)).collect();
        for (s, row) in c.decode(&items).iter().enumerate() {
            next[s] = argmax(row) as i32;
        }
        out.push(next[0]);
    }
    out
}

fn greedy_ways(m: &Model) {
    let alone = greedy(m, N, 0, false);
    assert_eq!(greedy(m, 7, 0, false), alone, "24 greedy tokens after a prefill in chunks of 7");
    assert_eq!(greedy(m, N, OTHERS, false), alone, "24 greedy tokens beside five generating sequences");
    assert_eq!(greedy(m, N, OTHERS, true), alone, "24 greedy tokens beside five generating sequences in one unified KV stream");
}

macro_rules! ways {
    ($($model:ident => $path:expr),* $(,)?) => { $(
        mod $model {
            use super::*;
            fn m() -> Model {
                Model::load(&$path)
            }
            #[test] fn split_last() { super::split_last(&m()) }
            #[test] fn chunks_of_7() { super::chunks_of_7(&m()) }
            #[test] fn interleaved() { super::interleaved(&m(), false) }
            #[test] fn interleaved_unified_kv() { super::interleaved(&m(), true) }
            #[test] fn beside_decode_steps() { super::beside_decode_steps(&m(), false) }
            #[test] fn beside_decode_steps_unified_kv() { super::beside_decode_steps(&m(), true) }
            #[test] fn after_seq_cp() { super::after_seq_cp(&m()) }
            #[test] fn n_ubatch_16() { super::n_ubatch_16(&m()) }
            #[test] fn threads_long() { super::threads_long(&m()) }
            #[test] fn greedy() { super::greedy_ways(&m()) }
        }
    )* };
}

fn real(name: &str) -> std::path::PathBuf {
    models_dir().join(format!("{name}.gguf"))
}

ways! {
    // DeepSeek family: deepseek2 (MLA + MoE, V2-Lite and V3 shapes)
    deepseek2_lite_f32 => data("deepseek2/tiny-deepseek2-lite-f32.gguf"),
    deepseek2_lite_q8_0 => data("deepseek2/tiny-deepseek2-lite-q8_0.gguf"),
    deepseek2_lite_q4_k_m => data("deepseek2/tiny-deepseek2-lite-q4_k_m.gguf"),
    deepseek3_f32 => data("deepseek2/tiny-deepseek3-f32.gguf"),
    deepseek3_q8_0 => data("deepseek2/tiny-deepseek3-q8_0.gguf"),
    deepseek3_q4_k_m => data("deepseek2/tiny-deepseek3-q4_k_m.gguf"),
    deepseek3_q6_k => data("deepseek2/tiny-deepseek3-q6_k.gguf"),
    // deepseek (V1 MoE), the legacy MLA layout, deepseek32 (DSA), deepseek4
    deepseek_moe_f32 => data("deepseek-family/tiny-deepseek-moe-f32.gguf"),
    deepseek_moe_q8_0 => data("deepseek-family/tiny-deepseek-moe-q8_0.gguf"),
    deepseek_moe_q4_k_m => data("deepseek-family/tiny-deepseek-moe-q4_k_m.gguf"),
    deepseek2_legacy_f32 => data("deepseek-family/tiny-deepseek2-legacy-f32.gguf"),
    deepseek2_legacy_q8_0 => data("deepseek-family/tiny-deepseek2-legacy-q8_0.gguf"),
    deepseek2_legacy_q4_k_m => data("deepseek-family/tiny-deepseek2-legacy-q4_k_m.gguf"),
    deepseek32_f32 => data("deepseek-family/tiny-deepseek32-f32.gguf"),
    deepseek32_q8_0 => data("deepseek-family/tiny-deepseek32-q8_0.gguf"),
    deepseek32_q4_k_m => data("deepseek-family/tiny-deepseek32-q4_k_m.gguf"),
    deepseek4_f32 => data("deepseek-family/tiny-deepseek4-f32.gguf"),
    deepseek4_q8_0 => data("deepseek-family/tiny-deepseek4-q8_0.gguf"),
    deepseek4_q4_k_m => data("deepseek-family/tiny-deepseek4-q4_k_m.gguf"),
    // the V3 shape in the community IQ / FP4 recipes (mixed with K-quants)
    deepseek3_ud_iq1_s => data("quants/tiny-deepseek3-ud-iq1_s.gguf"),
    deepseek3_iq2_xxs => data("quants/tiny-deepseek3-iq2_xxs.gguf"),
    deepseek3_iq3_xxs => data("quants/tiny-deepseek3-iq3_xxs.gguf"),
    deepseek3_iq4_xs => data("quants/tiny-deepseek3-iq4_xs.gguf"),
    deepseek3_mxfp4_moe => data("quants/tiny-deepseek3-mxfp4_moe.gguf"),
    // dense types whose upstream order depends on the row count: repacked (Q4_0, Q4_K, IQ4_NL),
    // tinyBLAS (Q8_0, F16), tiled (Q4_1 and others)
    qwen2_q4_0 => data("tiny/tiny-qwen2-q4_0.gguf"),
    qwen2_q4_1 => data("tiny/tiny-qwen2-q4_1.gguf"),
    qwen2_q4_k_m => data("tiny/tiny-qwen2-q4_k_m.gguf"),
    qwen2_q8_0 => data("tiny/tiny-qwen2-q8_0.gguf"),
    qwen2_f16 => data("tiny/tiny-qwen2-f16.gguf"),
    qwen2_iq4_nl => data("quants/tiny-qwen2-pure-iq4_nl.gguf"),
    qwen2_q2_k_s => data("quants/tiny-qwen2-q2_k_s.gguf"),
    // real models
    smollm2_q4_1 => real("smollm2-135m-instruct-q4_1"),
    qwen05_q4_k_m => real("qwen2.5-coder-0.5b-instruct-q4_k_m"),
}

/// Runs this binary's other tests again at each kernel level below this process's (in child
/// processes with `DEEPSEEK_KERNELS` set, where this test does nothing).
#[test]
fn every_kernel_level() {
    use deepseek::kernels::simd::{level, Level};
    if std::env::var_os("DEEPSEEK_INVARIANCE_CHILD").is_some() {
        return;
    }
    // (the scalar level's real-model runs take most of an hour on two shared cores: the tiny
    // fixtures there; `DEEPSEEK_KERNELS=scalar DEEPSEEK_INVARIANCE_CHILD=1` runs them all)
    let levels: &[(Level, &str, &[&str])] = &[(Level::Avx2, "avx2", &[]), (Level::Scalar, "scalar", &["--skip", "smollm2", "--skip", "qwen05"])];
    for &(lv, name, skip) in levels.iter().filter(|(lv, _, _)| *lv < level()) {
        let out = std::process::Command::new(std::env::current_exe().unwrap()).args(["--skip", "every_kernel_level"]).args(skip).env("DEEPSEEK_KERNELS", name).env("DEEPSEEK_INVARIANCE_CHILD", "1").output().unwrap();
        assert!(out.status.success(), "at {lv:?}:\n{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }
}

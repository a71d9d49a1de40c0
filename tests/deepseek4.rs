//! deepseek4 (V4) beyond its golden scenarios: results do not depend on the thread count or on
//! how a prompt is split into micro-batches (compressor blocks straddling them); the memory API
//! behaves as upstream b11312's `llama_kv_cache_dsv4` (partial removal and copies refused with
//! nothing changed, no shifts, `seq_pos_min` = `seq_pos_max`, whole copies carrying the
//! compressed caches, a sequence removed or emptied by `seq_keep` decoded again equal to a
//! fresh one, gaps in positions refused); the
//! cache holds the raw keys plus the compressed rows and compressor rings.

mod common;

use std::sync::Arc;

use common::*;
use deepseek::api::context::{llama_decode, llama_free, llama_get_memory};
use deepseek::api::memory::*;
use deepseek::api::model::llama_model_free;
use deepseek::batch::BatchInput;
use deepseek::context::{Context, ContextParams};
use deepseek::model::Model;

const F32: &str = "deepseek-family/tiny-deepseek4-f32.gguf";

fn params(threads: i32, n_ubatch: u32) -> ContextParams {
    ContextParams { n_ctx: 512, n_batch: 512, n_ubatch, n_seq_max: 1, n_threads: threads, n_threads_batch: threads, ..ContextParams::default() }
}

fn tokens(n: usize) -> Vec<i32> {
    (0..n as i32).map(|i| (i * 37 + 11) % 470).collect()
}

/// Logits of every position of a `n`-token prompt decoded in one call, then of one more token.
fn run(model: &Arc<Model>, threads: i32, n_ubatch: u32, n: usize) -> Vec<Vec<f32>> {
    let mut ctx = Context::new(Arc::clone(model), &params(threads, n_ubatch)).unwrap();
    let toks = tokens(n);
    let all = vec![1i8; n];
    ctx.decode(&BatchInput { tokens: &toks, pos: None, seq_ids: None, logits: Some(&all) }, None).unwrap();
    let mut rows: Vec<Vec<f32>> = (0..n as i32).map(|i| ctx.logits_row(i).unwrap().to_vec()).collect();
    ctx.decode(&BatchInput { tokens: &[7], pos: None, seq_ids: None, logits: None }, None).unwrap();
    rows.push(ctx.logits_row(-1).unwrap().to_vec());
    rows
}

#[test]
fn results_do_not_depend_on_threads_or_micro_batches() {
    let model = Arc::new(Model::load(&data(F32), true).unwrap());
    // 260 tokens: CSA blocks and the first two HCA blocks complete, some inside a micro-batch.
    let base = run(&model, 1, 512, 260);
    for threads in [2, 3] {
        let other = run(&model, threads, 512, 260);
        assert_eq!(other[..260], base[..260], "{threads} threads vs 1");
        // The decode step after the prompt takes upstream's split-KV kernel (one token over a
        // raw + compressed view of 512 cells), which splits the view in one chunk per thread
        // and merges the chunks' F16 accumulators: llama.cpp's decode depends on the thread
        // count by those roundings, and so does ours.
        let cos = cosine(&other[260], &base[260]);
        assert!(cos >= 0.9999, "{threads} threads vs 1, the decode step: cosine {cos}");
    }
    // Micro-batches of 90 and of 7 tokens: blocks of 4 and of 128 straddle them, so the
    // compressor rings carry their tokens across; matrix products of other row counts sum in
    // another order, so the rows agree to rounding, not bit for bit. Attention takes upstream's
    // tiled kernel (F32 query and accumulator) for micro-batches of 64 tokens or more and its
    // one-chunk kernel (F16 query and accumulator) below, as llama.cpp does, so each split is
    // compared with one that takes the same kernel: 90 with the whole prompt, 7 with 63.
    let one_chunk = run(&model, 2, 63, 260);
    for (ub, against) in [(90, &base), (7, &one_chunk)] {
        let split = run(&model, 2, ub, 260);
        for (r, (a, b)) in split.iter().zip(against).enumerate() {
            let cos = cosine(a, b);
            assert!(cos >= 0.99999, "n_ubatch {ub}, row {r}: cosine {cos}");
        }
    }
    // and the two kernels agree to the F16 roundings of the one-chunk one
    for (r, (a, b)) in one_chunk.iter().zip(&base).enumerate() {
        let cos = cosine(a, b);
        assert!(cos >= 0.99, "n_ubatch 63 vs 512, row {r}: cosine {cos}");
    }
}

#[test]
fn memory_operations_behave_as_upstreams_dsv4_cache() {
    let m = load_model(&data(F32));
    let c = new_context(m, 256, 4, 2);
    let mem = llama_get_memory(c);
    let mut b = Batch::new(64, 4);
    let toks = tokens(40);
    let decode = |b: &Batch| {
        // SAFETY: a valid batch from llama_batch_init.
        assert_eq!(unsafe { llama_decode(c, b.0) }, 0);
    };
    for (i, &t) in toks.iter().enumerate() {
        b.add(t, i as i32, 0, i == toks.len() - 1);
    }
    decode(&b);
    let fresh = logits_row(c, -1, 480);
    assert!(!llama_memory_can_shift(mem));
    assert_eq!((llama_memory_seq_pos_min(mem, 0), llama_memory_seq_pos_max(mem, 0)), (39, 39), "seq_pos_min reports the last position");
    // Refused, and nothing changed.
    assert!(!llama_memory_seq_rm(mem, 0, 10, -1));
    assert!(!llama_memory_seq_rm(mem, 0, 0, 20));
    assert!(!llama_memory_seq_rm(mem, -1, 5, -1));
    llama_memory_seq_cp(mem, 0, 1, 0, 20);
    llama_memory_seq_add(mem, 0, 0, -1, 5);
    llama_memory_seq_div(mem, 0, 0, -1, 2);
    assert_eq!(llama_memory_seq_pos_max(mem, 0), 39);
    assert_eq!(llama_memory_seq_pos_max(mem, 1), -1);
    // Removing nothing past the end succeeds.
    assert!(llama_memory_seq_rm(mem, 0, 40, -1));
    // The sequence still continues exactly: compare with a fresh context fed 41 tokens.
    b.clear();
    b.add(5, 40, 0, true);
    decode(&b);
    let continued = logits_row(c, 0, 480);
    // A whole copy carries the compressed caches: seq 2 continues as seq 0 did.
    llama_memory_seq_cp(mem, 0, 2, -1, -1);
    b.clear();
    b.add(9, 41, 0, true);
    b.add(9, 41, 2, true);
    decode(&b);
    assert_eq!(logits_row(c, 0, 480), logits_row(c, 1, 480), "a copied sequence continues as its source");
    // Whole removal: decoded again, the sequence equals a fresh context's result.
    assert!(llama_memory_seq_rm(mem, 0, -1, -1));
    assert_eq!(llama_memory_seq_pos_max(mem, 0), -1);
    b.clear();
    for (i, &t) in toks.iter().enumerate() {
        b.add(t, i as i32, 0, i == toks.len() - 1);
    }
    decode(&b);
    assert_eq!(logits_row(c, -1, 480), fresh, "seq 0 decoded again after its removal");
    b.clear();
    b.add(5, 40, 0, true);
    decode(&b);
    assert_eq!(logits_row(c, 0, 480), continued);
    // seq_keep empties every other sequence, compressed caches included: decoded token by token
    // (each step upstream's split-KV kernel over a view of 512 cells), seq 2 gives what a fresh
    // context's sequence decoded token by token gives.
    llama_memory_seq_keep(mem, 0);
    assert_eq!(llama_memory_seq_pos_max(mem, 2), -1);
    let fresh_steps = {
        let c2 = new_context(m, 256, 4, 2);
        let mut b2 = Batch::new(64, 4);
        for (i, &t) in toks.iter().enumerate() {
            b2.clear();
            b2.add(t, i as i32, 0, i == toks.len() - 1);
            // SAFETY: a valid batch from llama_batch_init.
            assert_eq!(unsafe { llama_decode(c2, b2.0) }, 0);
        }
        let row = logits_row(c2, 0, 480);
        drop(b2);
        // SAFETY: a context from this test, freed once.
        unsafe { llama_free(c2) };
        row
    };
    for (i, &t) in toks.iter().enumerate() {
        b.clear();
        b.add(t, i as i32, 2, i == toks.len() - 1);
        decode(&b);
    }
    assert_eq!(logits_row(c, 0, 480), fresh_steps, "seq 2 after seq_keep(0), decoded token by token");
    // Positions must continue the sequence; a gap is refused.
    b.clear();
    b.add(5, 45, 0, true);
    // SAFETY: as above.
    assert_ne!(unsafe { llama_decode(c, b.0) }, 0);
    drop(b);
    // SAFETY: handles from this test, freed once.
    unsafe {
        llama_free(c);
        llama_model_free(m);
    }
}

#[test]
fn cache_holds_raw_keys_compressed_rows_and_rings() {
    let model = Arc::new(Model::load(&data(F32), true).unwrap());
    let hp = &model.hp;
    let d4 = hp.dsv4.as_ref().unwrap();
    let (d, id) = (hp.head_dim_k, hp.indexer.as_ref().unwrap().head_size);
    let ctx = Context::new(Arc::clone(&model), &params(1, 512)).unwrap();
    let cells = ctx.kv.shape.n_cells;
    let raw = hp.n_layer * cells * d * 2;
    let compressed: usize = d4
        .ratios
        .iter()
        .map(|&r| match r {
            0 => 0,
            4 => cells.div_ceil(4) * (d + id) * 2 + 8 * 2 * (2 * d + 2 * id) * 4,
            _ => cells.div_ceil(r) * d * 2 + r * 2 * d * 4,
        })
        .sum();
    assert_eq!(ctx.kv.bytes(), raw + compressed);
}

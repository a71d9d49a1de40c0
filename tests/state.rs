//! State save/restore through the C API: after restoring into a fresh context, the next
//! logits are bit-identical to the original context's; bad bytes are refused and leave the
//! context as it was.

mod common;

use std::ffi::CString;

use common::*;
use deepseek::api::batch::llama_batch_get_one;
use deepseek::api::context::{llama_decode, llama_free, llama_get_memory};
use deepseek::api::handles::llama_context;
use deepseek::api::memory::llama_memory_seq_pos_max;
use deepseek::api::model::llama_model_free;
use deepseek::api::state::*;

const MODELS: [&str; 6] = ["tiny/tiny-qwen2-q8_0.gguf", "tiny/tiny-llama-q4_k_m.gguf", "deepseek2/tiny-deepseek2-lite-q8_0.gguf", "deepseek-family/tiny-deepseek2-legacy-q8_0.gguf", "deepseek-family/tiny-deepseek32-q8_0.gguf", "deepseek-family/tiny-deepseek4-q8_0.gguf"];

fn prompt() -> Vec<i32> {
    (0..30).map(|i| (i * 53 + 7) % 470).collect()
}

fn decode_one(c: *mut llama_context, tok: i32) -> Vec<f32> {
    let mut t = tok;
    // SAFETY: t outlives the call.
    assert_eq!(unsafe { llama_decode(c, llama_batch_get_one(&mut t, 1)) }, 0);
    logits_row(c, -1, 480)
}

fn state_of(c: *mut llama_context) -> Vec<u8> {
    let n = llama_state_get_size(c);
    let mut buf = vec![0u8; n];
    // SAFETY: buf holds n bytes.
    assert_eq!(unsafe { llama_state_get_data(c, buf.as_mut_ptr(), n) }, n);
    buf
}

#[test]
fn context_state_round_trip_is_bit_identical() {
    for rel in MODELS {
        let m = load_model(&data(rel));
        let a = new_context(m, 256, 1, 2);
        let mut p = prompt();
        // SAFETY: p outlives the call.
        assert_eq!(unsafe { llama_decode(a, llama_batch_get_one(p.as_mut_ptr(), p.len() as i32)) }, 0);
        let saved = state_of(a);
        let before = logits_row(a, -1, 480);

        let b = new_context(m, 256, 1, 2);
        // SAFETY: saved holds its length.
        assert_eq!(unsafe { llama_state_set_data(b, saved.as_ptr(), saved.len()) }, saved.len());
        assert_eq!(logits_row(b, -1, 480), before, "{rel}: restored outputs");
        assert_eq!(decode_one(a, 11), decode_one(b, 11), "{rel}: next logits after restore");

        // Garbage and truncated states are refused; the context keeps working as before.
        let c = new_context(m, 256, 1, 2);
        let mut bad = saved.clone();
        bad[9] ^= 0x40;
        // SAFETY: buffers hold their lengths.
        unsafe {
            assert_eq!(llama_state_set_data(c, bad.as_ptr(), bad.len()), 0);
            assert_eq!(llama_state_set_data(c, saved.as_ptr(), saved.len() / 2), 0);
            assert_eq!(llama_state_set_data(c, saved.as_ptr(), 3), 0);
        }
        assert_eq!(llama_memory_seq_pos_max(llama_get_memory(c), 0), -1);
        // SAFETY: handles from this test, freed once.
        unsafe {
            llama_free(a);
            llama_free(b);
            llama_free(c);
            llama_model_free(m);
        }
    }
}

#[test]
fn sequence_state_moves_between_contexts_and_sequences() {
    for rel in MODELS {
        let m = load_model(&data(rel));
        let a = new_context(m, 256, 1, 2);
        let mut p = prompt();
        // SAFETY: p outlives the call.
        assert_eq!(unsafe { llama_decode(a, llama_batch_get_one(p.as_mut_ptr(), p.len() as i32)) }, 0);
        let n = llama_state_seq_get_size(a, 0);
        let mut buf = vec![0u8; n];
        // SAFETY: buf holds n bytes.
        assert_eq!(unsafe { llama_state_seq_get_data(a, buf.as_mut_ptr(), n, 0) }, n);

        // Into sequence 1 of a two-sequence context, continued with a seq-1 batch.
        let b = new_context(m, 256, 2, 2);
        // SAFETY: buf holds n bytes.
        assert_eq!(unsafe { llama_state_seq_set_data(b, buf.as_ptr(), n, 1) }, n);
        assert_eq!(llama_memory_seq_pos_max(llama_get_memory(b), 1), 29);
        let mut batch = Batch::new(1, 2);
        batch.add(11, 30, 1, true);
        // SAFETY: a valid batch.
        assert_eq!(unsafe { llama_decode(b, batch.0) }, 0);
        assert_eq!(decode_one(a, 11), logits_row(b, 0, 480), "{rel}: sequence state restored into seq 1");

        // Files: save with the token list, load it back.
        let path = std::env::temp_dir().join(format!("ds-state-{}-{}.bin", std::process::id(), rel.replace('/', "_")));
        let cpath = CString::new(path.to_str().unwrap()).unwrap();
        let c = new_context(m, 256, 1, 2);
        let mut toks = vec![0i32; 64];
        let mut n_toks = 0usize;
        // SAFETY: valid pointers and lengths.
        unsafe {
            assert!(llama_state_save_file(a, cpath.as_ptr(), p.as_ptr(), p.len()));
            assert!(!llama_state_load_file(c, cpath.as_ptr(), toks.as_mut_ptr(), 3, &mut n_toks));
            assert!(llama_state_load_file(c, cpath.as_ptr(), toks.as_mut_ptr(), toks.len(), &mut n_toks));
        }
        assert_eq!(&toks[..n_toks], &p[..]);
        assert_eq!(decode_one(a, 12), decode_one(c, 12), "{rel}: session file round trip");
        let _ = std::fs::remove_file(&path);

        // Sequence files, as llama-server's slot restore reads them: first without a token buffer
        // (b11312: the token count and the header's size, nothing restored), then for real, into
        // the free sequence 0 of the two-sequence context.
        let spath = std::env::temp_dir().join(format!("ds-seq-state-{}-{}.bin", std::process::id(), rel.replace('/', "_")));
        let cspath = CString::new(spath.to_str().unwrap()).unwrap();
        let mut count = 0usize;
        // SAFETY: valid pointers and lengths (NULL tokens_out with capacity 0 is the query).
        unsafe {
            assert!(llama_state_seq_save_file(a, cspath.as_ptr(), 0, p.as_ptr(), p.len()) > 0);
            let head = llama_state_seq_load_file(b, cspath.as_ptr(), 0, std::ptr::null_mut(), 0, &mut count);
            assert!(head > 0 && count == p.len(), "{rel}: the query answered {head} bytes, {count} tokens");
            assert_eq!(llama_memory_seq_pos_max(llama_get_memory(b), 0), -1, "{rel}: the query restored something");
            assert_eq!(llama_state_seq_load_file(b, cspath.as_ptr(), 0, toks.as_mut_ptr(), 3, &mut count), 0, "{rel}: capacity 3");
            let read = llama_state_seq_load_file(b, cspath.as_ptr(), 0, toks.as_mut_ptr(), toks.len(), &mut count);
            assert_eq!(read as u64, std::fs::metadata(&spath).unwrap().len(), "{rel}: bytes read");
        }
        assert_eq!(&toks[..count], &p[..]);
        let mut batch = Batch::new(1, 2);
        batch.add(13, 32, 0, true);
        // SAFETY: a valid batch.
        assert_eq!(unsafe { llama_decode(b, batch.0) }, 0);
        assert_eq!(decode_one(a, 13), logits_row(b, 0, 480), "{rel}: sequence file round trip into seq 0");
        let _ = std::fs::remove_file(&spath);
        // SAFETY: handles from this test, freed once.
        unsafe {
            llama_free(a);
            llama_free(b);
            llama_free(c);
            llama_model_free(m);
        }
    }
}

fn seq_state(c: *mut llama_context, seq: i32) -> Vec<u8> {
    let n = llama_state_seq_get_size(c, seq);
    let mut buf = vec![0u8; n];
    // SAFETY: buf holds n bytes.
    assert_eq!(unsafe { llama_state_seq_get_data(c, buf.as_mut_ptr(), n, seq) }, n);
    buf
}

/// As upstream's test-save-load-state (tests 6 and 9): a sequence whose cells interleave
/// another's, saved and restored after the other is removed (so into other cells), serialises
/// to the same bytes; a state damaged in its data (not only its header) is refused, leaving
/// the sequence empty and the other sequences' logits as they were.
#[test]
fn sequence_state_is_cell_independent_and_damage_is_refused() {
    use deepseek::api::memory::llama_memory_seq_rm;
    for rel in MODELS {
        let m = load_model(&data(rel));
        let mut p = deepseek::api::context::llama_context_default_params();
        (p.n_ctx, p.n_seq_max, p.kv_unified, p.n_threads, p.n_threads_batch) = (256, 2, true, 2, 2);
        let c = deepseek::api::context::llama_init_from_model(m, p);
        assert!(!c.is_null());
        let mut batch = Batch::new(1, 2);
        for (tok, pos, seq) in [(5, 0, 0), (6, 1, 0), (5, 0, 1), (6, 1, 1), (7, 2, 0), (7, 2, 1)] {
            batch.clear();
            batch.add(tok, pos, seq, true);
            // SAFETY: a valid batch.
            assert_eq!(unsafe { llama_decode(c, batch.0) }, 0);
        }
        let before = seq_state(c, 1);
        let mem = llama_get_memory(c);
        assert!(llama_memory_seq_rm(mem, 0, -1, -1));
        // SAFETY: before holds its length.
        assert_eq!(unsafe { llama_state_seq_set_data(c, before.as_ptr(), before.len(), 1) }, before.len());
        assert_eq!(seq_state(c, 1), before, "{rel}: restored into other cells, the state reads back the same");

        // seq 0 again, its logits as reference; then a damaged seq-1 state must change nothing
        let seq0_logits = |batch: &mut Batch| {
            assert!(llama_memory_seq_rm(mem, 0, -1, -1));
            for (tok, pos) in [(5, 0), (6, 1)] {
                batch.clear();
                batch.add(tok, pos, 0, true);
                // SAFETY: a valid batch.
                assert_eq!(unsafe { llama_decode(c, batch.0) }, 0);
            }
            logits_row(c, 0, 480)
        };
        let reference = seq0_logits(&mut batch);
        let mut bad = before.clone();
        let (lo, hi) = (bad.len() / 3, bad.len() * 3 / 4);
        bad[lo..hi].fill(0xff);
        assert!(llama_memory_seq_rm(mem, 1, -1, -1));
        // SAFETY: bad holds its length.
        let (rc, log) = common::log::logged(|| unsafe { llama_state_seq_set_data(c, bad.as_ptr(), bad.len(), 1) });
        assert_eq!(rc, 0, "{rel}: a damaged state is refused");
        assert!(log.contains("damaged"), "{rel}: {log}");
        assert_eq!(llama_memory_seq_pos_max(mem, 1), -1, "{rel}: the failed restore left the sequence empty");
        assert_eq!(seq0_logits(&mut batch), reference, "{rel}: seq 0's logits are as before the failed restore");
        // SAFETY: handles from this test, freed once.
        unsafe {
            llama_free(c);
            llama_model_free(m);
        }
    }
}

/// The `_ext` calls' flags: upstream's standard KV cache ignores them, and so do ours — the
/// same bytes with and without PARTIAL_ONLY or ON_DEVICE (there is no device memory), which
/// restore the sequence — and each flag is said once in the log, not silently dropped.
#[test]
fn state_seq_ext_flags_are_said_and_change_nothing() {
    use deepseek::api::types::{LLAMA_STATE_SEQ_FLAGS_ON_DEVICE, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY};
    let m = load_model(&data("tiny/tiny-qwen2-f32.gguf"));
    let c = new_context(m, 256, 1, 2);
    let mut p = prompt();
    // SAFETY: p outlives the call.
    assert_eq!(unsafe { llama_decode(c, llama_batch_get_one(p.as_mut_ptr(), p.len() as i32)) }, 0);
    let plain = seq_state(c, 0);
    for (flag, name) in [(LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY, "LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY"), (LLAMA_STATE_SEQ_FLAGS_ON_DEVICE, "LLAMA_STATE_SEQ_FLAGS_ON_DEVICE")] {
        let (bytes, log) = common::log::logged(|| {
            let n = llama_state_seq_get_size_ext(c, 0, flag);
            let mut buf = vec![0u8; n];
            // SAFETY: buf holds n bytes.
            assert_eq!(unsafe { llama_state_seq_get_data_ext(c, buf.as_mut_ptr(), n, 0, flag) }, n);
            buf
        });
        assert_eq!(bytes, plain, "{name} changed the state");
        assert!(log.contains(name), "{name} not said: {log}");
        let want = decode_one(c, 5);
        assert!(deepseek::api::memory::llama_memory_seq_rm(llama_get_memory(c), 0, -1, -1));
        // SAFETY: bytes holds a state of its length.
        assert_eq!(unsafe { llama_state_seq_set_data_ext(c, bytes.as_ptr(), bytes.len(), 0, flag) }, bytes.len());
        assert_eq!(decode_one(c, 5), want, "{name}: the restored sequence");
        assert!(deepseek::api::memory::llama_memory_seq_rm(llama_get_memory(c), 0, 30, -1));
    }
    // SAFETY: freed once each.
    unsafe {
        llama_free(c);
        llama_model_free(m);
    }
}

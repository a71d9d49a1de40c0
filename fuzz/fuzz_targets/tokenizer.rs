//! Arbitrary bytes through llama_tokenize with every add_special/parse_special combination on
//! the DeepSeek-R1 vocabulary, and arbitrary token ids through llama_detokenize and
//! llama_token_to_piece (with every flag combination and short buffers).
#![no_main]

use std::sync::OnceLock;

use deepseek::api::handles::{llama_model, llama_vocab};
use deepseek::api::model::{llama_model_default_params, llama_model_get_vocab, llama_model_load_from_file};
use deepseek::api::vocab::{llama_detokenize, llama_token_to_piece, llama_tokenize, llama_vocab_n_tokens};
use libfuzzer_sys::fuzz_target;

struct Vocab(*const llama_vocab);
// SAFETY: a vocabulary is immutable after loading and may be used from any thread.
unsafe impl Send for Vocab {}
// SAFETY: as above.
unsafe impl Sync for Vocab {}

fn vocab() -> &'static Vocab {
    static VOCAB: OnceLock<Vocab> = OnceLock::new();
    VOCAB.get_or_init(|| {
        deepseek_fuzz::install_log_guard();
        let mut p = llama_model_default_params();
        p.vocab_only = true;
        let path = deepseek_fuzz::fixture("vocab/deepseek-r1-qwen.gguf");
        // SAFETY: a NUL-terminated path.
        let m: *mut llama_model = unsafe { llama_model_load_from_file(path.as_ptr(), p) };
        assert!(!m.is_null());
        Vocab(llama_model_get_vocab(m))
    })
}

fuzz_target!(|data: &[u8]| {
    let v = vocab().0;
    let mut toks = vec![0i32; data.len() + 4];
    for (add, parse) in [(false, false), (true, false), (false, true), (true, true)] {
        // SAFETY: data and toks are valid for the lengths passed.
        let n = unsafe { llama_tokenize(v, data.as_ptr().cast(), data.len() as i32, toks.as_mut_ptr(), toks.len() as i32, add, parse) };
        assert!(n >= 0 && n as usize <= toks.len(), "tokenize returned {n} for {} bytes", data.len());
        let n = n as usize;
        // A too-small output buffer reports the size needed.
        if n > 1 {
            // SAFETY: as above, with a shorter capacity.
            let m = unsafe { llama_tokenize(v, data.as_ptr().cast(), data.len() as i32, toks.as_mut_ptr(), (n - 1) as i32, add, parse) };
            assert_eq!(m, -(n as i32));
        }
        let mut text = vec![0u8; data.len() + 16];
        // SAFETY: toks holds n ids; text is writable for its length.
        let mut len = unsafe { llama_detokenize(v, toks.as_ptr(), n as i32, text.as_mut_ptr().cast(), text.len() as i32, false, parse) };
        if len < 0 && len != i32::MIN {
            // Too small: the negative value is the size needed.
            text.resize(-len as usize, 0);
            // SAFETY: as above, with the size asked for.
            len = unsafe { llama_detokenize(v, toks.as_ptr(), n as i32, text.as_mut_ptr().cast(), text.len() as i32, false, parse) };
        }
        assert!(len >= 0, "detokenize of our own tokens failed: {len}");
    }
    // The bytes as token ids, valid or not.
    let n_vocab = llama_vocab_n_tokens(v);
    let ids: Vec<i32> = data.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let mut text = vec![0u8; 64];
    for (remove, unparse) in [(false, false), (true, true)] {
        // SAFETY: ids and text are valid for the lengths passed.
        let len = unsafe { llama_detokenize(v, ids.as_ptr(), ids.len() as i32, text.as_mut_ptr().cast(), text.len() as i32, remove, unparse) };
        if ids.iter().all(|&t| (0..n_vocab).contains(&t)) {
            assert!(len != i32::MIN, "detokenize of valid ids failed");
        }
    }
    let mut piece = [0u8; 8];
    for &t in ids.iter().take(64) {
        for special in [false, true] {
            // SAFETY: piece is writable for 8 bytes.
            unsafe { llama_token_to_piece(v, t, piece.as_mut_ptr().cast(), piece.len() as i32, (t & 3) as i32, special) };
        }
    }
});

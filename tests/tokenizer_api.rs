//! The tokenizer behind the C API under hostile input (random bytes, invalid UTF-8, lone
//! surrogates, 1 MB, empty, buffers too small, NULL pointers, invalid ids) and from many
//! threads at once: never a crash, documented results, identical ids on every thread.

mod common;

use std::sync::Arc;

use common::*;
use deepseek::api::handles::llama_vocab;
use deepseek::api::model::{llama_model_free, llama_model_get_vocab};
use deepseek::api::vocab::*;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn tokenize(v: *const llama_vocab, text: &[u8], add: bool, special: bool) -> Vec<i32> {
    // First ask for the size with an empty buffer, then fill a buffer of exactly that size.
    // SAFETY: text holds its length; a NULL buffer with capacity 0 is allowed.
    let need = unsafe { llama_tokenize(v, text.as_ptr() as *const _, text.len() as i32, std::ptr::null_mut(), 0, add, special) };
    if need >= 0 {
        return Vec::new();
    }
    let mut out = vec![0i32; (-need) as usize];
    // SAFETY: out holds -need ids.
    let n = unsafe { llama_tokenize(v, text.as_ptr() as *const _, text.len() as i32, out.as_mut_ptr(), out.len() as i32, add, special) };
    assert_eq!(n, -need, "second call must return the size the first one asked for");
    out
}

fn detokenize(v: *const llama_vocab, ids: &[i32]) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 16];
    loop {
        // SAFETY: ids and buf hold their lengths.
        let n = unsafe { llama_detokenize(v, ids.as_ptr(), ids.len() as i32, buf.as_mut_ptr() as *mut _, buf.len() as i32, false, false) };
        if n == i32::MIN {
            return None;
        }
        if n < 0 {
            buf.resize((-n) as usize, 0);
            continue;
        }
        buf.truncate(n as usize);
        return Some(buf);
    }
}

#[test]
fn hostile_input_through_the_c_api() {
    let m = load_model(&data("tiny/tiny-qwen2-q8_0.gguf"));
    let v = llama_model_get_vocab(m);
    let n_vocab = llama_vocab_n_tokens(v);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..400 {
        let len = (rng.next() % 300) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        for (add, special) in [(false, false), (true, false), (false, true), (true, true)] {
            let ids = tokenize(v, &bytes, add, special);
            assert!(ids.iter().all(|&t| t >= 0 && t < n_vocab), "round {round}: id out of range");
            assert!(detokenize(v, &ids).is_some());
        }
    }
    // Valid UTF-8 round-trips (clean-up of spaces does not apply to this vocabulary).
    for s in ["", " ", "héllo wörld", "数字 123 456", "\u{1F600} emoji", "a\u{FFFD}b", "tabs\t\tand\nnewlines\r\n"] {
        assert_eq!(detokenize(v, &tokenize(v, s.as_bytes(), false, false)).unwrap(), s.as_bytes(), "{s:?}");
    }
    // CESU-8 style surrogate halves are invalid UTF-8: tokenized without crashing.
    let _ = tokenize(v, b"\xed\xa0\x80\xed\xb0\x80", false, false);
    // 1 MB of one character class.
    let big = vec![b'a'; 1 << 20];
    assert!(!tokenize(v, &big, false, false).is_empty());
    // Arbitrary ids: valid ones give pieces, invalid ones an error value, never a crash.
    let mut piece = [0u8; 4];
    for id in [-5, -1, 0, 1, n_vocab - 1, n_vocab, i32::MAX] {
        // SAFETY: piece holds 4 bytes.
        let r = unsafe { llama_token_to_piece(v, id, piece.as_mut_ptr() as *mut _, piece.len() as i32, 0, true) };
        if id < 0 || id >= n_vocab {
            assert_eq!(r, 0, "invalid id {id}");
        }
    }
    assert!(detokenize(v, &[0, n_vocab, 1]).is_none(), "an invalid id in detokenize is refused");
    // NULL pointers and negative lengths.
    // SAFETY: the calls check their pointers.
    unsafe {
        assert_eq!(llama_tokenize(std::ptr::null(), b"x".as_ptr() as *const _, 1, std::ptr::null_mut(), 0, false, false), i32::MIN);
        assert_eq!(llama_tokenize(v, std::ptr::null(), 5, std::ptr::null_mut(), 0, false, false), i32::MIN);
        assert_eq!(llama_tokenize(v, b"x".as_ptr() as *const _, -1, std::ptr::null_mut(), 0, false, false), i32::MIN);
        assert_eq!(llama_tokenize(v, std::ptr::null(), 0, std::ptr::null_mut(), 0, false, false), 0);
        assert_eq!(llama_token_to_piece(std::ptr::null(), 1, piece.as_mut_ptr() as *mut _, 4, 0, false), 0);
        assert!(llama_vocab_get_text(v, n_vocab).is_null());
        assert!(llama_vocab_get_text(v, 0) as usize != 0);
        llama_model_free(m);
    }
}

#[test]
fn eight_threads_tokenize_like_one() {
    let file = deepseek::gguf::GgufFile::open(&data("vocab/deepseek-r1-qwen.gguf"), true).unwrap();
    let vocab = Arc::new(deepseek::tokenizer::Vocab::from_gguf(&file).unwrap());
    let corpus = std::fs::read_to_string(data("tokenize/deepseek-r1-qwen.jsonl")).unwrap();
    let texts: Vec<String> = corpus.lines().filter(|l| !l.trim().is_empty()).map(|l| common::json::Json::parse(l).get("text").str().to_string()).collect();
    assert!(texts.len() > 40);
    let serial: Vec<Vec<i32>> = texts
        .iter()
        .map(|t| {
            let mut out = Vec::new();
            vocab.tokenize(t.as_bytes(), true, true, &mut out);
            out
        })
        .collect();
    let handles: Vec<_> = (0..8)
        .map(|k| {
            let (vocab, texts) = (Arc::clone(&vocab), texts.clone());
            std::thread::spawn(move || {
                let mut all = Vec::new();
                for round in 0..20 {
                    for (i, t) in texts.iter().enumerate() {
                        if (i + k + round) % 3 == 0 {
                            let mut out = Vec::new();
                            vocab.tokenize(t.as_bytes(), true, true, &mut out);
                            all.push((i, out));
                        }
                    }
                }
                all
            })
        })
        .collect();
    for h in handles {
        for (i, ids) in h.join().unwrap() {
            assert_eq!(ids, serial[i], "text {i} tokenized differently on a thread");
        }
    }
}

#[test]
fn vocab_only_models_tokenize_and_their_contexts_refuse_to_decode() {
    use deepseek::api::context::{llama_context_default_params, llama_init_from_model};
    use deepseek::api::model::{llama_model_default_params, llama_model_load_from_file};
    let path = std::ffi::CString::new(data("vocab/deepseek-r1-qwen.gguf").to_str().unwrap()).unwrap();
    let mut mp = llama_model_default_params();
    // SAFETY: a NUL-terminated path.
    assert!(unsafe { llama_model_load_from_file(path.as_ptr(), mp) }.is_null(), "a file without tensors is not a full model");
    mp.vocab_only = true;
    // SAFETY: as above.
    let m = unsafe { llama_model_load_from_file(path.as_ptr(), mp) };
    assert!(!m.is_null());
    let v = llama_model_get_vocab(m);
    assert_eq!(llama_vocab_n_tokens(v), 152064);
    let corpus = std::fs::read_to_string(data("tokenize/deepseek-r1-qwen.jsonl")).unwrap();
    for line in corpus.lines().filter(|l| !l.trim().is_empty()).take(20) {
        let j = common::json::Json::parse(line);
        let text = j.get("text").str();
        assert_eq!(tokenize(v, text.as_bytes(), true, true), j.get("ids_special").i32s(), "{text:?}");
    }
    // as upstream: a context can be made (its tokenizer tests make one), but it cannot decode
    let c = llama_init_from_model(m, llama_context_default_params());
    assert!(!c.is_null(), "upstream gives a vocab-only model a context");
    let mut tok = [1i32];
    // SAFETY: tok outlives the call.
    let (rc, log) = common::log::logged(|| unsafe { deepseek::api::context::llama_decode(c, deepseek::api::batch::llama_batch_get_one(tok.as_mut_ptr(), 1)) });
    assert_eq!(rc, -1);
    assert!(log.contains("vocab_only"), "the refusal names the reason: {log}");
    // SAFETY: freed once.
    unsafe { deepseek::api::context::llama_free(c) };
    // SAFETY: freed once.
    unsafe { llama_model_free(m) };
}


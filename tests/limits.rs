//! Resource limits: absurd context sizes, a 100 MB prompt and a model whose declared sizes
//! exceed memory end in a clean failure with a logged reason (or, for the prompt, in a correct
//! result), never in an abort from a failed allocation. A caught panic fails it (tests/common/log.rs).

mod common;

use std::ffi::CString;

use common::*;
use deepseek::api::context::{llama_context_default_params, llama_free, llama_init_from_model, llama_n_ctx};
use deepseek::api::model::{llama_model_default_params, llama_model_free, llama_model_get_vocab, llama_model_load_from_file};
use deepseek::api::vocab::{llama_detokenize, llama_tokenize};
use deepseek::gguf::{GgufFile, GgufValue, GgufWriter};

use common::log::logged;

#[test]
fn limits_fail_cleanly() {
    let m = load_model(&data("tiny/tiny-qwen2-q8_0.gguf"));

    // Contexts: each absurd request → NULL and its own reason (the KV cache ones: the page
    // mapping refused, not a caught panic or an allocation abort).
    type Set = fn(&mut deepseek::api::types::llama_context_params);
    let absurd: [(&str, Set, &str); 5] = [
        ("n_ctx = u32::MAX", |p| p.n_ctx = u32::MAX, "llama_init_from_model: n_ctx = 4294967295 is too large"),
        ("n_ctx = 2^31", |p| p.n_ctx = 1 << 31, "llama_init_from_model: cannot allocate 549755813888 bytes for the KV cache"),
        ("n_seq_max = 10^6", |p| p.n_seq_max = 1_000_000, "llama_init_from_model: n_seq_max = 1000000 must be between 1 and 256"),
        ("n_threads = 10^6", |p| p.n_threads = 1_000_000, "llama_init_from_model: n_threads = 1000000 is beyond what this library supports"),
        (
            "n_ctx = 2^28 with n_batch = n_ubatch = u32::MAX",
            |p| {
                p.n_ctx = 1 << 28;
                p.n_batch = u32::MAX;
                p.n_ubatch = u32::MAX;
            },
            "llama_init_from_model: cannot allocate 68719476736 bytes for the KV cache",
        ),
    ];
    for (what, set, reason) in absurd {
        let mut p = llama_context_default_params();
        set(&mut p);
        let (c, log) = logged(|| llama_init_from_model(m, p));
        assert!(c.is_null(), "{what}: created a context of n_ctx {}", llama_n_ctx(c));
        assert!(log.contains(reason), "{what}: expected '{reason}', logged: {log:?}");
        eprintln!("{what}: {}", log.trim());
    }
    // Large batches within a sane context are clamped, as upstream does.
    let mut p = llama_context_default_params();
    p.n_ctx = 512;
    p.n_batch = u32::MAX;
    p.n_ubatch = u32::MAX;
    let c = llama_init_from_model(m, p);
    assert!(!c.is_null());
    // SAFETY: freed once.
    unsafe { llama_free(c) };

    // A 100 MB prompt: sized with a short buffer (negative count), then tokenized whole, and it
    // detokenizes back to the same bytes.
    let vocab = llama_model_get_vocab(m);
    let unit = "Resource limits: a long prompt, 长的提示 ... 12345 ";
    let text = unit.repeat(100 * 1024 * 1024 / unit.len());
    let mut small = [0i32; 16];
    // SAFETY: text and small are valid for the lengths passed.
    let need = unsafe { llama_tokenize(vocab, text.as_ptr().cast(), text.len() as i32, small.as_mut_ptr(), 16, false, false) };
    assert!(need < -16, "{need}");
    let mut toks = vec![0i32; -need as usize];
    // SAFETY: as above.
    let n = unsafe { llama_tokenize(vocab, text.as_ptr().cast(), text.len() as i32, toks.as_mut_ptr(), toks.len() as i32, false, false) };
    assert_eq!(n, -need);
    let mut back = vec![0u8; text.len() + 16];
    // SAFETY: toks holds n ids; back is writable for its length.
    let len = unsafe { llama_detokenize(vocab, toks.as_ptr(), n, back.as_mut_ptr().cast(), back.len() as i32, false, false) };
    assert_eq!(&back[..len as usize], text.as_bytes());
    // A prompt longer than i32::MAX bytes cannot be passed through llama.h at all; a negative
    // length is refused.
    // SAFETY: the length is rejected before the text is read.
    let (r, log) = logged(|| unsafe { llama_tokenize(vocab, text.as_ptr().cast(), -5, toks.as_mut_ptr(), 4, false, false) });
    assert!(r < 0 && log.contains("llama_tokenize: text_len = -5 is negative"), "negative text length: {r} {log:?}");
    // SAFETY: freed once.
    unsafe { llama_model_free(m) };

    // A model whose training context would need more KV memory than the machine has: a
    // context at n_ctx = 0 (the training context) fails with a reason.
    let f = GgufFile::open(&data("tiny/tiny-qwen2-q8_0.gguf"), true).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in f.kvs() {
        w.kv(k, if k == "qwen2.context_length" { GgufValue::U32(u32::MAX) } else { v.clone() });
    }
    for t in f.tensors() {
        w.tensor(&t.name, &t.dims, t.ty, f.tensor_data(t).to_vec());
    }
    let path = std::env::temp_dir().join(format!("deepseek-limits-{}.gguf", std::process::id()));
    w.write(&path).unwrap();
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    let m = unsafe { llama_model_load_from_file(cpath.as_ptr(), llama_model_default_params()) };
    assert!(!m.is_null());
    let mut p = llama_context_default_params();
    p.n_ctx = 0;
    let (c, log) = logged(|| llama_init_from_model(m, p));
    assert!(c.is_null() && log.contains("llama_init_from_model: n_ctx = 4294967295 is too large"), "{log:?}");
    eprintln!("training context 2^32-1: {}", log.trim());
    // SAFETY: freed once.
    unsafe { llama_model_free(m) };
    let _ = std::fs::remove_file(path);
}

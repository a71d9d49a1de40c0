//! Tokenizing a million distinct words leaves the process's memory flat: the tokenizer keeps
//! no per-word cache. Alone in its binary so no other test allocates beside it.

use std::path::PathBuf;

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel)
}

/// Anonymous memory of this process in KiB.
fn anonymous_kib() -> u64 {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
    text.lines().find(|l| l.starts_with("Anonymous:")).and_then(|l| l.split_whitespace().nth(1)).unwrap().parse().unwrap()
}

#[test]
fn a_million_distinct_words_leave_memory_flat() {
    // The tokenizer keeps no per-word cache (BPE is fast enough without one): tokenizing a
    // million distinct words must not grow the process.
    let file = deepseek::gguf::GgufFile::open(&data("vocab/ggml-vocab-deepseek-llm.gguf"), true).unwrap();
    let vocab = deepseek::tokenizer::Vocab::from_gguf(&file).unwrap();
    let mut out = Vec::new();
    let mut word = String::new();
    let mut tokenize_words = |from: u64, to: u64| {
        for i in from..to {
            word.clear();
            let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            for _ in 0..6 {
                word.push((b'a' + (x % 26) as u8) as char);
                x /= 26;
            }
            vocab.tokenize(word.as_bytes(), false, false, &mut out);
            assert!(!out.is_empty());
        }
    };
    tokenize_words(0, 10_000);
    let before = anonymous_kib();
    tokenize_words(10_000, 1_000_000);
    let after = anonymous_kib();
    assert!(after <= before + 1024, "anonymous memory grew from {before} KiB to {after} KiB over a million distinct words");
}

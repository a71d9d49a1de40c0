//! Split models through the C API: every broken set of shards is refused with its reason
//! logged (a shard missing, one of another model, out of order, the wrong count, not the first
//! shard, a truncated shard), and a good set loads whichever way it is given. The shards are
//! upstream's (tests/data/splits, llama-gguf-split); the broken sets are copies of them in a
//! temporary directory. (The log guard of tests/common/log.rs fails it on a caught panic.)

mod common;

use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};

use common::*;
use deepseek::api::model::{llama_model_default_params, llama_model_free, llama_model_load_from_file, llama_model_load_from_splits, llama_model_n_params};

fn c(p: &Path) -> CString {
    CString::new(p.to_str().unwrap()).unwrap()
}

/// Loads `paths` (one: llama_model_load_from_file; several: _from_splits): the model (freed)
/// or None, and what was logged.
fn load(paths: &[PathBuf]) -> (Option<u64>, String) {
    let names: Vec<CString> = paths.iter().map(|p| c(p)).collect();
    let mut ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    // SAFETY: NUL-terminated paths, as many as passed.
    let (m, log) = common::log::logged(|| unsafe {
        if paths.len() == 1 {
            llama_model_load_from_file(ptrs[0], llama_model_default_params())
        } else {
            llama_model_load_from_splits(ptrs.as_mut_ptr(), ptrs.len(), llama_model_default_params())
        }
    });
    if m.is_null() {
        return (None, log);
    }
    let n = llama_model_n_params(m);
    // SAFETY: freed once.
    unsafe { llama_model_free(m) };
    (Some(n), log)
}

fn refused(paths: &[PathBuf], reason: &str) {
    let (m, log) = load(paths);
    assert!(m.is_none(), "loaded a broken set {paths:?}");
    assert!(log.contains(reason), "expected '{reason}' in the log, got: {log}");
    eprintln!("refused: {}", log.trim());
}

/// A copy of the shards of `model` (count of them) in a fresh directory under `name`.
fn copy_set(dir: &Path, model: &str, name: &str, count: usize) -> Vec<PathBuf> {
    (1..=count)
        .map(|i| {
            let to = dir.join(format!("{name}-{i:05}-of-{count:05}.gguf"));
            std::fs::copy(data(&format!("splits/{model}-{i:05}-of-{count:05}.gguf")), &to).unwrap();
            to
        })
        .collect()
}

#[test]
fn split_sets() {
    let dir = std::env::temp_dir().join(format!("ds-splits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    // Good sets: from the first shard, and from the explicit list; the same model either way.
    let good = copy_set(&dir, "tiny-qwen2-q8_0", "good", 3);
    let (a, _) = load(&good[..1]);
    let (b, _) = load(&good);
    assert!(a.is_some() && a == b);

    // Not the first shard.
    refused(&good[1..2], "model must be loaded with the first split");
    // The list in the wrong order, too short, or empty.
    refused(&[good[0].clone(), good[2].clone(), good[1].clone()], "invalid split file idx: 2");
    refused(&good[..2], "invalid split count, given: 2 splits, but expected 3");
    // SAFETY: an empty list.
    let (m, log) = common::log::logged(|| unsafe { llama_model_load_from_splits(std::ptr::null_mut(), 0, llama_model_default_params()) });
    assert!(m.is_null() && log.contains("list of splits is empty"), "{log}");

    // A shard missing.
    let missing = copy_set(&dir, "tiny-qwen2-q8_0", "missing", 3);
    std::fs::remove_file(&missing[1]).unwrap();
    refused(&missing[..1], "failed to load GGUF split 2 of 3");

    // A shard of another model in its place (the q2_k set is also cut in 3 and also has 27
    // tensors, but its shard 2 starts again at output.weight).
    let swapped = copy_set(&dir, "tiny-qwen2-q8_0", "swapped", 3);
    std::fs::copy(data("splits/tiny-qwen2-q2_k-meta1-00002-of-00003.gguf"), &swapped[1]).unwrap();
    refused(&swapped[..1], "tensor 'output.weight' is duplicated (in shards 1 and 2)");

    // A shard of a set cut in another number of pieces.
    let mixed = copy_set(&dir, "tiny-qwen2-q8_0", "mixed", 3);
    std::fs::copy(data("splits/tiny-deepseek3-q4_k_m-00002-of-00004.gguf"), &mixed[1]).unwrap();
    refused(&mixed[..1], "is not a shard of this model");

    // A truncated shard.
    let cut = copy_set(&dir, "tiny-qwen2-q8_0", "cut", 3);
    let bytes = std::fs::read(&cut[2]).unwrap();
    std::fs::write(&cut[2], &bytes[..bytes.len() - 1000]).unwrap();
    refused(&cut[..1], "beyond the end of the file");

    // The first shard under a name that does not say which shard it is.
    let odd = dir.join("odd.gguf");
    std::fs::copy(&good[0], &odd).unwrap();
    refused(&[odd], "invalid split file name");

    std::fs::remove_dir_all(&dir).unwrap();
}

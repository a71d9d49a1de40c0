//! Shared helpers for the integration tests: fixture paths, the C API driven from Rust, and
//! the comparison metrics of tests/data/README.md (Tolerances).
#![allow(dead_code)]

pub mod golden;
pub mod json;
pub mod log;
pub mod malformed;

use std::ffi::CString;
use std::path::PathBuf;

use deepseek::api::batch::{llama_batch_free, llama_batch_init};
use deepseek::api::context::*;
use deepseek::api::handles::{llama_context, llama_model};
use deepseek::api::model::*;
use deepseek::api::types::{llama_batch, llama_context_params};

pub fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel)
}

/// Directory of the real models fetched by scripts/fetch-models.sh.
pub fn models_dir() -> PathBuf {
    std::env::var_os("DEEPSEEK_MODELS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/deepseek/models"))
}

pub fn load_model(path: &std::path::Path) -> *mut llama_model {
    let c = CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let m = unsafe { llama_model_load_from_file(c.as_ptr(), llama_model_default_params()) };
    assert!(!m.is_null(), "cannot load {}", path.display());
    m
}

pub fn new_context(m: *mut llama_model, n_ctx: u32, n_seq: u32, threads: i32) -> *mut llama_context {
    new_context_with(m, n_ctx, n_seq, threads, &|_| {})
}

/// As [`new_context`], with `edit` changing the parameters last.
pub fn new_context_with(m: *mut llama_model, n_ctx: u32, n_seq: u32, threads: i32, edit: &dyn Fn(&mut llama_context_params)) -> *mut llama_context {
    let mut p = llama_context_default_params();
    p.n_ctx = n_ctx;
    p.n_batch = n_ctx;
    p.n_ubatch = n_ctx;
    p.n_seq_max = n_seq;
    p.n_threads = threads;
    p.n_threads_batch = threads;
    edit(&mut p);
    let c = llama_init_from_model(m, p);
    assert!(!c.is_null());
    c
}

/// A batch owned by the test, freed on drop.
pub struct Batch(pub llama_batch);

impl Batch {
    pub fn new(cap: i32, n_seq: i32) -> Batch {
        Batch(llama_batch_init(cap, 0, n_seq))
    }
    pub fn clear(&mut self) {
        self.0.n_tokens = 0;
    }
    pub fn add(&mut self, tok: i32, pos: i32, seq: i32, out: bool) {
        let b = &mut self.0;
        let i = b.n_tokens as usize;
        // SAFETY: i < capacity in every test that uses it.
        unsafe {
            *b.token.add(i) = tok;
            *b.pos.add(i) = pos;
            *b.n_seq_id.add(i) = 1;
            *(*b.seq_id.add(i)) = seq;
            *b.logits.add(i) = out as i8;
        }
        b.n_tokens += 1;
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        // SAFETY: allocated by llama_batch_init.
        unsafe { llama_batch_free(self.0) };
    }
}

pub fn logits_row(c: *mut llama_context, i: i32, n_vocab: usize) -> Vec<f32> {
    let p = llama_get_logits_ith(c, i);
    assert!(!p.is_null(), "no logits for {i}");
    // SAFETY: llama_get_logits_ith returns n_vocab floats.
    unsafe { std::slice::from_raw_parts(p, n_vocab) }.to_vec()
}

pub fn read_f32s(path: &std::path::Path) -> Vec<f32> {
    std::fs::read(path).unwrap().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (&x, &y) in a.iter().zip(b) {
        ab += x as f64 * y as f64;
        aa += (x as f64).powi(2);
        bb += (y as f64).powi(2);
    }
    ab / (aa.sqrt() * bb.sqrt())
}

pub fn argmax(v: &[f32]) -> usize {
    v.iter().enumerate().fold(0, |best, (i, &x)| if x > v[best] { i } else { best })
}

/// The reference's top-2 gap as a fraction of the row's range.
pub fn top2_gap_fraction(v: &[f32]) -> f64 {
    let mut s: Vec<f32> = v.to_vec();
    s.sort_by(|a, b| b.partial_cmp(a).unwrap());
    let range = (s[0] - s[s.len() - 1]) as f64;
    (s[0] - s[1]) as f64 / range
}

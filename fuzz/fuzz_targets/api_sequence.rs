//! A fuzzer-chosen program of C API calls on a tiny model: llama_decode with arbitrary batches
//! (invalid ids, positions, sequence ids, output flags, sizes), every memory operation with
//! arbitrary arguments, state get/set with arbitrary or corrupted bytes, logits lookups, context
//! re-creation, and sampler chains applied to arbitrary logits (NaN and infinities included).
#![no_main]

use std::sync::OnceLock;

use deepseek::api::batch::{llama_batch_free, llama_batch_init};
use deepseek::api::context::*;
use deepseek::api::handles::{llama_context, llama_model};
use deepseek::api::memory::*;
use deepseek::api::model::{llama_model_default_params, llama_model_load_from_file};
use deepseek::api::sampling::*;
use deepseek::api::state::*;
use deepseek::api::types::{llama_sampler_chain_params, llama_token_data, llama_token_data_array};
use libfuzzer_sys::fuzz_target;

const N_SEQ: i32 = 4;

struct Model(*mut llama_model);
// SAFETY: a model is immutable after loading and may be used from any thread.
unsafe impl Send for Model {}
// SAFETY: as above.
unsafe impl Sync for Model {}

fn model() -> *mut llama_model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            deepseek_fuzz::install_log_guard();
            let path = deepseek_fuzz::fixture("tiny/tiny-qwen2-q4_0.gguf");
            // SAFETY: a NUL-terminated path.
            let m = unsafe { llama_model_load_from_file(path.as_ptr(), llama_model_default_params()) };
            assert!(!m.is_null());
            Model(m)
        })
        .0
}

fn context() -> *mut llama_context {
    let mut p = llama_context_default_params();
    p.n_ctx = 64 * N_SEQ as u32;
    p.n_batch = 16;
    p.n_ubatch = 8;
    p.n_seq_max = N_SEQ as u32;
    p.n_threads = 1;
    p.n_threads_batch = 1;
    let c = llama_init_from_model(model(), p);
    assert!(!c.is_null());
    c
}

/// Reads the program's bytes.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }
    fn i32_small(&mut self) -> i32 {
        self.u8() as i8 as i32
    }
    fn i32(&mut self) -> i32 {
        i32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn f32(&mut self) -> f32 {
        f32::from_bits(self.i32() as u32)
    }
}

fn decode(c: *mut llama_context, inp: &mut Input) {
    let n = inp.u8() % 20;
    let batch = llama_batch_init(20, 0, 2);
    let mut b = batch;
    b.n_tokens = n as i32;
    for i in 0..n as usize {
        let tok = if inp.u8() & 7 == 0 { inp.i32() } else { inp.u8() as i32 * 2 };
        let pos = if inp.u8() & 7 == 0 { inp.i32() } else { i as i32 + inp.i32_small().max(0) };
        let n_seq = 1 + (inp.u8() & 1) as i32;
        // SAFETY: the batch has room for 20 tokens with 2 sequence ids each.
        unsafe {
            *b.token.add(i) = tok;
            *b.pos.add(i) = pos;
            *b.n_seq_id.add(i) = n_seq;
            for s in 0..n_seq as usize {
                *(*b.seq_id.add(i)).add(s) = inp.i32_small() % (N_SEQ + 2);
            }
            *b.logits.add(i) = inp.u8() as i8;
        }
    }
    if inp.u8() & 3 == 0 {
        b.pos = std::ptr::null_mut();
    }
    // SAFETY: the batch's arrays hold n_tokens entries (or pos is NULL, which llama.h allows).
    let rc = unsafe { llama_decode(c, b) };
    assert!(matches!(rc, -1..=2), "llama_decode returned {rc}");
    // SAFETY: allocated by llama_batch_init above (its own pointers, not b's).
    unsafe { llama_batch_free(batch) };
}

fn state(c: *mut llama_context, inp: &mut Input) {
    let size = llama_state_get_size(c);
    let mut buf = vec![0u8; size];
    // SAFETY: buf is writable for size bytes.
    let written = unsafe { llama_state_get_data(c, buf.as_mut_ptr(), buf.len()) };
    assert!(written <= size);
    let flips = inp.u8() % 4;
    for _ in 0..flips {
        if !buf.is_empty() {
            let at = inp.i32() as u32 as usize % buf.len();
            buf[at] ^= 1 << (inp.u8() % 8);
        }
    }
    if inp.u8() & 1 == 0 {
        buf.truncate(inp.i32() as u32 as usize % (buf.len() + 1));
    }
    // SAFETY: buf is readable for its length.
    unsafe { llama_state_set_data(c, buf.as_ptr(), buf.len()) };
    let seq = inp.i32_small() % (N_SEQ + 1);
    let size = llama_state_seq_get_size(c, seq);
    let mut sbuf = vec![0u8; size.min(1 << 20)];
    // SAFETY: sbuf is writable for its length.
    unsafe { llama_state_seq_get_data(c, sbuf.as_mut_ptr(), sbuf.len(), seq) };
    if let Some(b) = sbuf.first_mut() {
        *b ^= inp.u8();
    }
    // SAFETY: sbuf is readable for its length.
    unsafe { llama_state_seq_set_data(c, sbuf.as_ptr(), sbuf.len(), inp.i32_small() % (N_SEQ + 1)) };
}

fn sample(c: *mut llama_context, inp: &mut Input) {
    let chain = llama_sampler_chain_init(llama_sampler_chain_params { no_perf: true });
    let kinds = inp.u8();
    for bit in 0..8 {
        if kinds & (1 << bit) == 0 {
            continue;
        }
        let s = match bit {
            0 => llama_sampler_init_top_k(inp.i32_small()),
            1 => llama_sampler_init_top_p(inp.f32(), inp.u8() as usize),
            2 => llama_sampler_init_min_p(inp.f32(), inp.u8() as usize),
            3 => llama_sampler_init_temp_ext(inp.f32(), inp.f32(), inp.f32()),
            4 => llama_sampler_init_typical(inp.f32(), inp.u8() as usize),
            5 => llama_sampler_init_penalties(480, inp.i32_small(), inp.f32(), inp.f32(), inp.f32()),
            6 => llama_sampler_init_xtc(inp.f32(), inp.f32(), inp.u8() as usize, inp.i32() as u32),
            _ => llama_sampler_init_top_n_sigma(inp.f32()),
        };
        if !s.is_null() {
            llama_sampler_chain_add(chain, s);
        }
    }
    let last = if inp.u8() & 1 == 0 { llama_sampler_init_dist(inp.i32() as u32) } else { llama_sampler_init_mirostat_v2(inp.i32() as u32, inp.f32(), inp.f32()) };
    llama_sampler_chain_add(chain, last);
    let n = inp.u8() as usize % 64;
    let mut data: Vec<llama_token_data> = (0..n).map(|i| llama_token_data { id: if inp.u8() == 0 { inp.i32() } else { i as i32 }, logit: inp.f32(), p: 0.0 }).collect();
    let mut arr = llama_token_data_array { data: data.as_mut_ptr(), size: data.len(), selected: -1, sorted: inp.u8() & 1 == 1 };
    llama_sampler_apply(chain, &mut arr);
    assert!(arr.size <= n && (arr.selected == -1 || (arr.selected as usize) < arr.size.max(1)));
    llama_sampler_accept(chain, inp.i32());
    llama_sampler_sample(chain, c, inp.i32_small());
    // SAFETY: the chain (and its members) is freed once.
    unsafe { llama_sampler_free(chain) };
}

fuzz_target!(|data: &[u8]| {
    let mut c = context();
    let mut inp = Input(data);
    while !inp.0.is_empty() {
        let mem = llama_get_memory(c);
        let s = inp.i32_small() % (N_SEQ + 2);
        match inp.u8() % 10 {
            0 | 1 => decode(c, &mut inp),
            2 => {
                llama_memory_seq_rm(mem, s, inp.i32_small(), inp.i32_small());
            }
            3 => llama_memory_seq_cp(mem, s, inp.i32_small() % (N_SEQ + 2), inp.i32_small(), inp.i32_small()),
            4 => match inp.u8() % 3 {
                0 => llama_memory_seq_keep(mem, s),
                1 => llama_memory_seq_add(mem, s, inp.i32_small(), inp.i32_small(), inp.i32()),
                _ => llama_memory_seq_div(mem, s, inp.i32_small(), inp.i32_small(), inp.i32_small()),
            },
            5 => state(c, &mut inp),
            6 => sample(c, &mut inp),
            7 => {
                llama_get_logits_ith(c, inp.i32_small());
                llama_get_embeddings_ith(c, inp.i32_small());
                llama_memory_seq_pos_max(mem, s);
                llama_memory_seq_pos_min(mem, s);
            }
            8 => llama_memory_clear(mem, inp.u8() & 1 == 1),
            _ => {
                // SAFETY: freed once and replaced at once.
                unsafe { llama_free(c) };
                c = context();
            }
        }
    }
    // SAFETY: freed once.
    unsafe { llama_free(c) };
});
